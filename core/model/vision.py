"""Vision transformers in the engine: a CLIP or ViT image tower as a :class:`Model` whose inputs are images.

:func:`interplab.load_model` gives a transformers ``CLIPModel`` (or ``CLIPVisionModel(WithProjection)``) or a
``ViTModel`` / ``ViTForImageClassification`` a :class:`VisionModel`: the sites of its vision tower, one position per
token of the image (position 0 the class token, then the patches row by row), and image batches wherever a text
model takes texts (``collect``, ``probes.train``). An image batch is a float ``[batch, channels, height, width]``
tensor of pixel values as the model's processor makes them; with a processor (``tokenizer=`` of ``load_model``),
lists of PIL images or arrays are turned into one.

Example
-------
>>> clip = transformers.CLIPModel(config)
>>> model = ilab.load_model(clip)                           # or load_model(clip, tokenizer=processor)
>>> acts = model.collect(torch.rand(4, 3, 32, 32), sites="blocks.1.mlp.hook_post")
>>> acts["blocks.1.mlp.hook_post"].shape                    # [images, 1 + patches, d_mlp]
torch.Size([4, 17, 64])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import nnsight
import torch

from .activations import Activations
from .model import Model
from .sites import KINDS, Family

#: ``config.model_type`` of the transformers models read as vision towers.
VISION_TYPES = ("clip", "clip_vision_model", "vit")


@dataclasses.dataclass(frozen=True)
class TowerParts:
    """Module paths (from the transformers model) of one vision tower's pieces; block paths are relative to a block."""

    tower: str  # the vision transformer: embeddings, blocks, final norm
    layers: str
    final_norm: str
    attn: str
    o_proj: str
    ln1: str
    ln2: str
    projection: str = ""  # CLIP's visual projection into the joint text-image space
    pooled: bool = False  # whether the tower's pooler output is the final-normed class token (CLIP)


_CLIP = TowerParts("vision_model", "vision_model.encoder.layers", "vision_model.post_layernorm", "self_attn",
                   "self_attn.out_proj", "layer_norm1", "layer_norm2", "visual_projection", True)  # fmt: skip
_VIT = TowerParts("", "layers", "layernorm", "attention", "attention.o_proj", "layernorm_before", "layernorm_after")


def tower_parts(hf_model: torch.nn.Module) -> TowerParts:
    """Where the vision tower's pieces are in ``hf_model``; an error naming the supported types otherwise."""
    kind = getattr(getattr(hf_model, "config", None), "model_type", None)
    if kind in ("clip", "clip_vision_model"):
        has_projection = hasattr(hf_model, "visual_projection")
        return _CLIP if has_projection else dataclasses.replace(_CLIP, projection="")
    if kind == "vit":
        tower = "vit" if hasattr(hf_model, "vit") else ""
        return dataclasses.replace(_VIT, tower=tower, layers=_join(tower, _VIT.layers),
                                   final_norm=_join(tower, _VIT.final_norm))  # fmt: skip
    raise ValueError(f"A vision model is a transformers CLIP or ViT model (model_type one of {VISION_TYPES}); got "
                     f"{type(hf_model).__name__} with model_type {kind!r}.")  # fmt: skip


def _join(*paths: str) -> str:
    return ".".join(p for p in paths if p)


def _at(root: torch.nn.Module, path: str) -> Any:
    node: Any = root
    for part in filter(None, path.split(".")):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


class ImageTower(torch.nn.Module):
    """The vision half of a transformers CLIP or ViT model: pixel values ``[B, C, H, W]`` to the image embedding
    (CLIP: the projected class token; ViT: the final-normed class token) ``[B, E]``."""

    def __init__(self, hf_model: torch.nn.Module):
        super().__init__()
        self.hf: Any = hf_model
        self.parts = tower_parts(hf_model)
        self.config = hf_model.config

    def set_attn_implementation(self, name: str) -> None:
        """Switch the attention implementation of the wrapped model (eager attention gives patterns)."""
        self.hf.set_attn_implementation(name)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = _at(self.hf, self.parts.tower)(pixel_values=pixel_values)
        # CLIP's pooler output is the final-normed class token; ViT's last hidden state is final-normed already
        pooled_BD = out.pooler_output if self.parts.pooled else out.last_hidden_state[:, 0]
        return _at(self.hf, self.parts.projection)(pooled_BD) if self.parts.projection else pooled_BD


class ImageNNsight(nnsight.NNsight):
    """nnsight over an :class:`ImageTower`: a trace given ``{"pixel_values", "input_ids", "attention_mask"}``
    calls the tower on the pixel values (the ids only number the image's tokens)."""

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        args, kwargs = super()._batch(invokes, fn)
        if len(args) == 1 and isinstance(args[0], dict) and "pixel_values" in args[0]:
            return (args[0]["pixel_values"],), kwargs
        return args, kwargs

    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        if inputs and isinstance(inputs[0], dict) and "pixel_values" in inputs[0]:
            return int(inputs[0]["pixel_values"].shape[0])
        return super()._batch_size(*inputs, **kwargs)


class PatchTokenizer:
    """Names of an image's token positions (``"CLS"``, then ``"p0"``, ``"p1"``, ... row by row), so activations of
    images read like those of texts.

    >>> PatchTokenizer(4).decode([0, 3])
    'CLS p2'
    """

    pad_token_id = 0
    bos_token_id = None
    eos_token_id = None

    def __init__(self, n_patches: int, text_tokenizer: Any = None):
        self.names = ["CLS"] + [f"p{i}" for i in range(n_patches)]
        #: The tokenizer of the text tower (CLIP's), or None.
        self.text = text_tokenizer

    def __len__(self) -> int:
        return len(self.names)

    def decode(self, ids: Sequence[int] | torch.Tensor, **_: Any) -> str:
        """The position names of ``ids`` joined by spaces."""
        return " ".join(self.names[i] for i in torch.as_tensor(ids).flatten().tolist())


def vision_family(parts: TowerParts) -> Family:
    """The site table of a vision tower inside :class:`ImageTower` (paths from the wrapper, under ``hf``)."""
    return Family(
        "vision", f"hf.{parts.layers}", parts.attn, "mlp", parts.o_proj, f"hf.{parts.final_norm}",
        embed=_join("hf", parts.tower, "embeddings"), attn=parts.attn, mlp_norm=parts.ln2,
        down_proj="mlp.fc2", unembed="", kinds=KINDS,
        why_missing="a vision tower has the sites of its transformer blocks",
    )  # fmt: skip


def _vision_config(hf_model: torch.nn.Module) -> Any:
    config = hf_model.config
    return getattr(config, "vision_config", None) or config


class VisionModel(Model):
    """A CLIP or ViT image tower traced by nnsight: image batches in place of texts, one position per image token.

    ``model.hf`` is the transformers model; :meth:`image_embeddings` and (CLIP) :meth:`text_embeddings` give the
    joint space's vectors.
    """

    def __init__(self, hf_model: Any, processor: Any = None, name: str = ""):
        vision = _vision_config(hf_model)
        self.image_size = int(vision.image_size)
        self.channels = int(getattr(vision, "num_channels", 3))
        n_patches = (self.image_size // int(vision.patch_size)) ** 2
        tower = ImageTower(hf_model.eval())
        nn = ImageNNsight(tower)
        nn.config = SimpleNamespace(
            model_type=f"{hf_model.config.model_type}_vision", num_hidden_layers=int(vision.num_hidden_layers),
            hidden_size=int(vision.hidden_size), intermediate_size=int(vision.intermediate_size),
            num_attention_heads=int(vision.num_attention_heads), vocab_size=0, max_position_embeddings=n_patches + 1,
            _attn_implementation=vision._attn_implementation,
        )  # fmt: skip
        self.hf = hf_model
        self.parts = tower.parts
        self.processor = processor
        text = getattr(processor, "tokenizer", processor)
        super().__init__(nn, PatchTokenizer(n_patches, text), name=name or type(hf_model).__name__,
                         family=vision_family(tower.parts))  # fmt: skip

    # ------------------------------------------------------------ images
    def check_inputs(self, images: Any) -> torch.Tensor:
        """Images as a float ``[batch, channels, height, width]`` tensor; a clear error naming the shape it needs."""
        want = f"[batch, {self.channels}, {self.image_size}, {self.image_size}]"
        if not isinstance(images, torch.Tensor) and self.processor is not None and isinstance(images, (list, tuple)):
            images = self.processor(images=list(images), return_tensors="pt")["pixel_values"]
        if not isinstance(images, torch.Tensor):
            raise TypeError(f"{self.name} takes images as a float tensor {want} (pixel values), got "
                            f"{type(images).__name__}; give load_model its processor to pass PIL images.")  # fmt: skip
        if images.dim() == 3:
            images = images[None]
        if not images.is_floating_point() or images.dim() != 4 or tuple(images.shape[1:]) != tuple(
            (self.channels, self.image_size, self.image_size)
        ) or images.shape[0] == 0:  # fmt: skip
            raise ValueError(f"An image batch for {self.name} is a float tensor {want}; got {images.dtype} "
                             f"{list(images.shape)}.")  # fmt: skip
        if not torch.isfinite(images).all():
            raise ValueError("The image batch holds NaN or infinite pixel values.")
        return images

    def to_tokens(self, images: Any, padding_side: str = "right") -> dict[str, torch.Tensor]:
        """``pixel_values`` and, per image, its token positions as ``input_ids`` with an all-ones ``attention_mask``."""
        pixels = self.check_inputs(images)
        ids_BT = torch.arange(len(self.tokenizer)).expand(pixels.shape[0], -1).clone()
        return {"pixel_values": pixels.to(self.dtype), "input_ids": ids_BT, "attention_mask": torch.ones_like(ids_BT)}

    def to_str_tokens(self, text: Any) -> list[str]:
        """The names of an image's token positions (``CLS``, ``p0``, ...)."""
        return list(self.tokenizer.names)

    def collect(self, texts: Any, sites: str | Sequence[str], batch_size: int = 8) -> Activations:
        """Activations of an image batch at ``sites``: one ``[images, 1 + patches, d]`` tensor per site."""
        acts = super().collect(self.check_inputs(texts), sites, batch_size)  # type: ignore[arg-type]
        return dataclasses.replace(acts, texts=[f"image {i}" for i in range(len(acts.tokens))])

    def logits(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """A vision tower has no vocabulary: use :meth:`image_embeddings`."""
        raise TypeError(f"{self.name} is a vision tower with no next-token logits; use model.image_embeddings(images).")

    @torch.no_grad()
    def image_embeddings(self, images: Any, batch_size: int = 64) -> torch.Tensor:
        """The image embeddings ``[N, E]`` (CLIP: in the joint text-image space, not normalised)."""
        pixels = self.check_inputs(images)
        with self.lock:
            rows = [self.module(pixels[i : i + batch_size].to(self.device, self.dtype)) for i in
                    range(0, len(pixels), batch_size)]  # fmt: skip
        return torch.cat(rows).float().cpu()

    @torch.no_grad()
    def text_embeddings(self, texts: str | Sequence[str]) -> torch.Tensor:
        """CLIP's text embeddings ``[N, E]`` of ``texts`` (not normalised); needs the text tower and a tokenizer."""
        from ..checks import check_texts

        texts = check_texts(texts)
        if not hasattr(self.hf, "get_text_features") or self.tokenizer.text is None:
            raise ValueError(f"{self.name} has no text tower with a tokenizer: load a CLIPModel with "
                             "tokenizer= (its processor or tokenizer) for text embeddings.")  # fmt: skip
        enc = self.tokenizer.text(texts, return_tensors="pt", padding=True)
        with self.lock:
            out = self.hf.get_text_features(input_ids=enc["input_ids"].to(self.device),
                                            attention_mask=enc["attention_mask"].to(self.device))  # fmt: skip
        out = getattr(out, "pooler_output", out)
        return out.float().cpu()
