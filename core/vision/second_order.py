"""The second-order lens of a vision-tower neuron: its effect through each later attention head to the image embedding.

A neuron ``n`` of block ``l`` writes ``a_n(i) * w_n`` into the residual stream at every image token ``i``
(``w_n``: its column of the MLP's down projection). Each attention head of a later block reads that write
through its norm and value projection and moves it to the class token, which the final norm and (CLIP) the
visual projection turn into the image embedding. With attention patterns and the norms' scales frozen at the
image's own values (as the circuits code linearises them), the path is linear in the write::

    effect(I) = P . LN_final' ( sum_{j > l} sum_h sum_i A^{j,h}[CLS, i] W_O^{j,h} W_V^{j,h} LN_j' (a_n(i) w_n) )

where ``LN'`` is a norm's linear part (centre, divide by the frozen scale, multiply by its weight). Gandelsman et al.
(ICLR 2025, "Interpreting the second-order effects of neurons in CLIP") find these effects sparse over images,
close to one direction of the joint space, and described by a few text embeddings: :class:`SecondOrder` gives all
three (:attr:`~SecondOrder.share_significant`, :meth:`~SecondOrder.rank1`, :meth:`~SecondOrder.describe`).

Example
-------
>>> so = ilab.vision.second_order(model, (1, 17), images)      # neuron 17 of block 1
>>> so.share_significant, so.rank1().explained
>>> so.describe(["red", "green", "blue", "circle", "square"], k=2).terms
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_fraction, check_int, check_number
from ..model.vision import VisionModel

#: Images per forward pass.
_CHUNK = 64


@dataclass
class Rank1:
    """The best single direction of the effects: ``effects_NE ~ scores_N[:, None] * direction_E``."""

    direction_E: torch.Tensor
    scores_N: torch.Tensor
    #: Share of the effects' squared norm (summed over images) the direction holds.
    explained: float


@dataclass
class Decomposition:
    """A direction of the joint space as a sparse sum of (normalised, centred) text embeddings."""

    terms: list[tuple[str, float]]
    #: Cosine similarity between the direction and its reconstruction from the terms.
    cosine: float

    def __repr__(self) -> str:
        parts = ", ".join(f"{c:+.2f} {t!r}" for t, c in self.terms)
        return f"Decomposition({parts}; cosine {self.cosine:.2f})"


@dataclass
class SecondOrder:
    """The second-order effects of one neuron on a batch of images (see the module doc)."""

    neuron: tuple[int, int]
    #: Per image, per later block (``layers``), per head: what it carries to the image embedding [N, J, H, E].
    per_head_NJHE: torch.Tensor
    layers: list[int]
    #: The typical (median) norm of the images' embeddings, the scale effects are measured against.
    embedding_norm: float
    #: The neuron's activation at each image token [N, T] (position 0 the class token).
    activations_NT: torch.Tensor
    model: Any = field(default=None, repr=False)

    @property
    def effects_NE(self) -> torch.Tensor:
        """The neuron's whole second-order effect on each image's embedding [N, E]."""
        return self.per_head_NJHE.sum((1, 2))

    @property
    def norms_N(self) -> torch.Tensor:
        """The norm of each image's effect, relative to the typical image-embedding norm [N]."""
        return self.effects_NE.norm(dim=-1) / self.embedding_norm

    def significant(self, threshold: float = 0.05) -> torch.Tensor:
        """Images whose effect norm is at least ``threshold`` of the typical embedding norm (bool [N])."""
        if check_number(threshold, "threshold") < 0:
            raise ValueError(f"threshold is a share of the typical embedding norm, at least 0; got {threshold}.")
        return self.norms_N >= threshold

    @property
    def share_significant(self) -> float:
        """Share of images with a significant effect (:meth:`significant` at its default threshold)."""
        return float(self.significant().float().mean())

    def top_share(self, fraction: float = 0.02) -> float:
        """Share of the effects' summed squared norm carried by the top ``fraction`` of images."""
        fraction = check_fraction("fraction", fraction, "(", "]", "the share of images counted as the top")
        energy = self.norms_N.square().sort(descending=True).values
        top = max(1, round(fraction * len(energy)))
        return float(energy[:top].sum() / energy.sum().clamp_min(1e-30))

    def rank1(self) -> Rank1:
        """The top singular direction of the effects (signed so that images' scores are mostly positive)."""
        _, s, vh = torch.linalg.svd(self.effects_NE.double(), full_matrices=False)
        direction = vh[0] * torch.sign((self.effects_NE.double() @ vh[0]).sum()).clamp_min(0).mul(2).sub(1)
        scores = self.effects_NE.double() @ direction
        explained = float(s[0].square() / s.square().sum().clamp_min(1e-30))
        return Rank1(direction.float(), scores.float(), explained)

    def describe(self, texts: list[str], k: int = 3, center: bool = True) -> Decomposition:
        """The rank-1 direction as a sparse sum of ``k`` text embeddings of ``texts`` (greedy orthogonal matching
        pursuit over the normalised, by default mean-centred, embeddings; needs CLIP's text tower).

        >>> so.describe(["red", "green", "blue"], k=1).terms
        [('red', 0.93)]
        """
        _check_terms(k, texts)
        return sparse_decomposition(self.rank1().direction_E, self.model.text_embeddings(texts), texts, k, center)


def sparse_decomposition(direction_E: torch.Tensor, text_VE: torch.Tensor, texts: list[str], k: int = 3,
                         center: bool = True) -> Decomposition:  # fmt: skip
    """``direction_E`` as ``k`` terms of the rows of ``text_VE`` (greedy orthogonal matching pursuit).

    >>> sparse_decomposition(torch.tensor([1.0, 0.1]), torch.eye(2), ["x", "y"], k=1, center=False).terms
    [('x', 1.0)]
    """
    _check_terms(k, texts)
    atoms_VE = text_VE.double() - text_VE.double().mean(0) if center else text_VE.double()
    atoms_VE = atoms_VE / atoms_VE.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    target_E = direction_E.double() / direction_E.double().norm().clamp_min(1e-12)
    chosen: list[int] = []
    coef = torch.zeros(0, dtype=torch.float64)
    residual = target_E
    for _ in range(k):
        scores = (atoms_VE @ residual).abs()
        scores[chosen] = -1.0
        chosen.append(int(scores.argmax()))
        basis = atoms_VE[chosen].T
        coef = torch.linalg.lstsq(basis, target_E[:, None]).solution[:, 0]
        residual = target_E - basis @ coef
    fit = atoms_VE[chosen].T @ coef
    cosine = float(fit @ target_E / fit.norm().clamp_min(1e-12))
    order = coef.abs().argsort(descending=True).tolist()
    return Decomposition([(texts[chosen[i]], float(coef[i])) for i in order], cosine)


def _check_terms(k: int, texts: list[str]) -> None:
    check_int("k", k)
    if not 1 <= k <= len(texts):
        raise ValueError(f"k={k} terms need 1 <= k <= {len(texts)} (the number of texts).")


def check_neuron(model: Any, neuron: Any) -> tuple[int, int]:
    """``(layer, index)`` of an MLP neuron of a vision model with a later block; a clear error otherwise."""
    if not isinstance(model, VisionModel):
        raise TypeError(f"second_order reads a vision model (a CLIP or ViT loaded with ilab.load_model); got "
                        f"{type(model).__name__} {getattr(model, 'name', '')!r}.")  # fmt: skip
    ok = isinstance(neuron, tuple) and len(neuron) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 for v in neuron)  # fmt: skip
    if not ok:
        raise TypeError(f"neuron is a (layer, index) pair of ints, got {neuron!r:.60}.")
    layer, index = neuron
    if not 0 <= layer < model.n_layers - 1:
        raise ValueError(f"neuron layer {layer} is out of range: a neuron with later attention heads is in blocks "
                         f"0..{model.n_layers - 2} of {model.name}'s {model.n_layers}.")  # fmt: skip
    if not 0 <= index < model.d_mlp:
        raise ValueError(f"neuron index {index} is out of range: block {layer} has neurons 0..{model.d_mlp - 1}.")
    return layer, index


def _norm_linear(ln: Any, write_BTD: torch.Tensor, stream_BTD: torch.Tensor) -> torch.Tensor:
    """The LayerNorm's linear part applied to ``write``, its scale frozen at ``stream``'s."""
    scale_BT1 = (stream_BTD.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
    return (write_BTD - write_BTD.mean(-1, keepdim=True)) / scale_BT1 * ln.weight.detach().float().cpu()


def _chunk_effects(model: VisionModel, layer: int, index: int, pixels: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(per-head effects [n, J, H, E], neuron activations [n, T], embeddings [n, E]) of one chunk of images."""
    last = model.n_layers - 1
    later = list(range(layer + 1, model.n_layers))
    sites = [f"blocks.{layer}.mlp.hook_post", f"blocks.{last}.hook_resid_post"]
    sites += [f"blocks.{j}.{s}" for j in later for s in ("hook_resid_pre", "attn.hook_pattern")]
    acts = model.collect(pixels, sites=sites, batch_size=len(pixels))
    family = model.check_mapped()
    blocks: Any = model.module.get_submodule(family.layers)
    parts = model.parts
    a_BT = acts[f"blocks.{layer}.mlp.hook_post"][..., index]
    w_D = blocks[layer].get_submodule(family.down_proj).weight[:, index].detach().float().cpu()
    write_BTD = a_BT[..., None] * w_D
    heads, d_head = model.n_heads, model.d_model // model.n_heads
    per_layer = []
    for j in later:
        block = blocks[j]
        lin_BTD = _norm_linear(block.get_submodule(parts.ln1), write_BTD, acts[f"blocks.{j}.hook_resid_pre"])
        w_v = block.get_submodule(f"{parts.attn}.v_proj").weight.detach().float().cpu()
        v_BTHd = (lin_BTD @ w_v.T).unflatten(-1, (heads, d_head))
        cls_BHT = acts[f"blocks.{j}.attn.hook_pattern"][:, :, 0, :]
        z_BHd = torch.einsum("bht,bthd->bhd", cls_BHT, v_BTHd)
        w_o_DHd = block.get_submodule(parts.o_proj).weight.detach().float().cpu().unflatten(1, (heads, d_head))
        per_layer.append(torch.einsum("bhd,ehd->bhe", z_BHd, w_o_DHd))
    stream_cls_BD = acts[f"blocks.{last}.hook_resid_post"][:, 0]
    final = model.module.get_submodule(family.final_norm)
    out_BJHD = _norm_linear(final, torch.stack(per_layer, 1), stream_cls_BD[:, None, None])
    if parts.projection:
        out_BJHD = out_BJHD @ model.hf.get_submodule(parts.projection).weight.detach().float().cpu().T
    return out_BJHD, a_BT, model.image_embeddings(pixels)


@torch.no_grad()
def second_order(model: VisionModel, neuron: tuple[int, int], images: Any) -> SecondOrder:
    """The second-order effect of MLP neuron ``neuron = (layer, index)`` through every later attention head to the
    image embedding of each image (attention and norm scales frozen; see the module doc).

    >>> so = second_order(model, (0, 5), torch.rand(32, 3, 16, 16))
    >>> so.per_head_NJHE.shape        # images, later blocks, heads, embedding width
    torch.Size([32, 2, 4, 24])
    """
    layer, index = check_neuron(model, neuron)
    pixels = model.check_inputs(images)
    pieces = [_chunk_effects(model, layer, index, pixels[i : i + _CHUNK]) for i in range(0, len(pixels), _CHUNK)]
    per_head, acts, embeddings = (torch.cat([p[k] for p in pieces]) for k in range(3))
    return SecondOrder((layer, index), per_head, list(range(layer + 1, model.n_layers)),
                       float(embeddings.norm(dim=-1).median()), acts, model)  # fmt: skip
