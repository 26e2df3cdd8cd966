"""The SAE base class: parameters, encode/decode, the site it reads, and the architecture registry.

Every architecture stores ``W_enc`` [d_in, d_sae], ``b_enc`` [d_sae], ``W_dec`` [d_sae, d_in]
and ``b_dec`` [d_in] (the SAELens layout), computes ``pre = (x - b_dec) @ W_enc + b_enc``
(``b_dec`` subtracted when ``apply_b_dec_to_input``), and decodes ``acts @ W_dec + b_dec``.

Example
-------
>>> sae = SAE.create("topk", d_in=640, d_sae=4096, k=32, site="blocks.6.hook_resid_post")
>>> latents_BM = sae.encode(x_BD); recon_BD = sae.decode(latents_BM)
>>> sae.direction(123)      # decoder row of latent 123, [d_in]
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

REGISTRY: dict[str, type[SAE]] = {}


class _ClassOrInstance:
    """``SAE.train(source, ...)`` trains a new SAE; ``sae.train(mode)`` is torch's train/eval switch."""

    def __init__(self, on_class: str, on_instance: str):
        self.on_class, self.on_instance = on_class, on_instance

    def __get__(self, obj: Any, cls: type) -> Any:
        if obj is None:
            return getattr(cls, self.on_class)
        return getattr(nn.Module, self.on_instance).__get__(obj, cls)


@dataclass
class SAEConfig:
    """What an SAE is: its architecture, sizes, the site it reads and its hyper-parameters."""

    arch: str
    d_in: int
    d_sae: int
    site: str = ""
    model_name: str = ""
    apply_b_dec_to_input: bool = True
    k: int | None = None  # topk / batchtopk
    l1_coefficient: float | None = None  # standard / gated
    l0_coefficient: float | None = None  # jumprelu
    bandwidth: float = 0.001  # jumprelu straight-through estimator
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_latent(i: Any, d_sae: int) -> int:
    """``i`` as a latent index of an SAE with ``d_sae`` latents, or a clear TypeError / IndexError."""
    try:
        index = operator.index(i)
    except TypeError:
        raise TypeError(f"A latent id is an integer, got {type(i).__name__}: {i!r}.") from None
    if not 0 <= index < d_sae:
        raise IndexError(f"Latent {i!r} is out of range: this SAE has latents 0..{d_sae - 1}.")
    return index


def check_sizes(arch: str, d_in: int, d_sae: int, k: int | None) -> None:
    """Clear errors for impossible sizes, before any work."""
    for name, value in (("d_in", d_in), ("width", d_sae)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if arch in ("topk", "batchtopk") and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= d_sae):
        raise ValueError(f"k must be an integer in 1..width={d_sae} for a {arch} SAE, got {k!r}.")


class SAE(nn.Module):
    """A sparse autoencoder over one site's activations. Subclasses implement ``encode`` and the loss."""

    arch: ClassVar[str] = ""
    saelens_arch: ClassVar[str] = ""  # the architecture name SAELens saves it under

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        check_sizes(cfg.arch, cfg.d_in, cfg.d_sae, cfg.k)
        self.cfg = cfg
        self.W_enc = nn.Parameter(torch.zeros(cfg.d_in, cfg.d_sae))
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))
        self.W_dec = nn.Parameter(torch.zeros(cfg.d_sae, cfg.d_in))
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.arch:
            REGISTRY[cls.arch] = cls

    # ------------------------------------------------------------ factory
    @staticmethod
    def create(arch: str, d_in: int, d_sae: int, **kwargs: Any) -> SAE:
        """A freshly initialised SAE of a registered architecture (decoder rows unit norm, tied encoder)."""
        cls = arch_class(arch)
        sae = cls(SAEConfig(arch=arch, d_in=d_in, d_sae=d_sae, **kwargs))
        sae.init_weights()
        return sae

    def init_weights(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(self.cfg.d_sae, self.cfg.d_in, generator=gen)
        W /= W.norm(dim=1, keepdim=True)
        with torch.no_grad():
            self.W_dec.copy_(W)
            self.W_enc.copy_(W.T)
            self.b_enc.zero_()
            self.b_dec.zero_()

    # ------------------------------------------------------------- shapes
    @property
    def d_in(self) -> int:
        return self.cfg.d_in

    @property
    def d_sae(self) -> int:
        return self.cfg.d_sae

    @property
    def site(self) -> str:
        return self.cfg.site

    @property
    def threshold(self) -> torch.Tensor | None:
        """Per-latent firing threshold where the architecture has one (JumpReLU, BatchTopK)."""
        return None

    def direction(self, i: int) -> torch.Tensor:
        """Latent ``i``'s decoder direction [d_in] (a steering vector, a probe)."""
        return self.W_dec[check_latent(i, self.d_sae)].detach().clone()

    # ------------------------------------------------------------ forward
    def _check_input(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_in:
            raise ValueError(
                f"This SAE reads d_in={self.d_in} activations ({self.site or 'no site'}); got last dim {x.shape[-1]}."
            )
        return x.to(self.W_enc.dtype)

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        x = self._check_input(x)
        if self.cfg.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latent activations [..., d_sae] (dense; zeros where a latent does not fire)."""
        raise NotImplementedError

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        """Reconstruction [..., d_in] from latent activations."""
        return acts @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))

    # ----------------------------------------------------------- training
    def training_loss(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """Loss for one batch and a dict with ``recon`` [B, d_in], ``l0`` (float) and ``fired`` [d_sae] bool."""
        raise NotImplementedError

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Keep decoder rows at unit norm (called after each optimiser step)."""
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)

    @torch.no_grad()
    def remove_parallel_grad(self) -> None:
        """Drop the decoder gradient along each row, so the unit-norm step does not fight the optimiser."""
        if self.W_dec.grad is not None:
            W = self.W_dec
            self.W_dec.grad -= (self.W_dec.grad * W).sum(1, keepdim=True) * W

    @torch.no_grad()
    def fold_input_scale(self, scale: float) -> None:
        """Make an SAE trained on ``x * scale`` read raw ``x`` (weights change, behaviour on x does not)."""
        self.W_enc *= scale
        self.W_dec /= scale
        self.b_dec /= scale

    def extra_state(self) -> dict[str, torch.Tensor]:
        """Tensors beyond the four shared ones, keyed by their SAELens name."""
        return {}

    def check_fits(self, model: Any, site: str | None = None) -> str:
        """The site this SAE reads on ``model``; a clear error if its site or width does not fit."""
        site = site or self.site
        if not site:
            raise ValueError("This SAE does not say which site it reads; pass site=, e.g. 'blocks.6.hook_resid_post'.")
        if site not in model.sites:
            raise ValueError(
                f"This SAE reads {site!r}, which {model.name!r} does not have; its sites are "
                f"blocks.0..{model.n_layers - 1} (e.g. {model.sites[-1]!r})."
            )
        width = model.site_dim(site)
        if width != self.d_in:
            raise ValueError(f"This SAE reads d_in={self.d_in}, but {site} of {model.name!r} has width {width}.")
        return site

    # ------------------------------------------------------- entry points
    @staticmethod
    def _train_new(
        source: Any,
        arch: str = "batchtopk",
        width: int = 4096,
        k: int | None = None,
        l1: float | None = None,
        l0: float | None = None,
        **kwargs: Any,
    ) -> SAE:
        """Train one SAE on an activation store (or its path) or straight from a model.

        ``arch`` is one of standard, topk, batchtopk, jumprelu, gated; ``k`` is for the TopK
        family, ``l1`` the L1 coefficient (standard, gated), ``l0`` the L0 coefficient (jumprelu).
        Other keywords go to :func:`interplab.core.saes.train.train_saes` (``n_tokens``,
        ``batch_size``, ``site``, ``corpus``, ``checkpoint_dir``, ...).

        >>> sae = ilab.SAE.train(store, arch="topk", width=4096, k=32, n_tokens=200_000)
        """
        spec: dict[str, Any] = {"arch": arch, "width": width}
        for key, value in (("k", k), ("l1_coefficient", l1), ("l0_coefficient", l0), ("lr", kwargs.pop("lr", None))):
            if value is not None:
                spec[key] = value
        return SAE.train_many(source, [spec], **kwargs)[0]

    train = _ClassOrInstance("_train_new", "train")

    @staticmethod
    def train_many(source: Any, specs: list[dict[str, Any]], **kwargs: Any) -> list[SAE]:
        """Train several SAEs (widths, k values, architectures or sites) from one activation stream."""
        from .train import train_saes

        return train_saes(source, specs, **kwargs)

    @staticmethod
    def load(path: Any, layer: int | None = None, site: str | None = None) -> SAE:
        """Load an SAE: a SAELens folder, a Gemma Scope ``params.npz``, a dictionary_learning folder,
        or ``"embedded"`` with ``layer=`` for the suite trained on the embedded model."""
        if path == "embedded":
            from .pretrained import load_embedded

            return load_embedded(layer)
        from .io import load_sae

        sae = load_sae(path, site=site)
        sae.source_path = Path(path)  # labels and dashboards are kept beside it when the folder is writable
        return sae

    def save(self, path: Any, dtype: torch.dtype = torch.float32) -> Any:
        """Write this SAE as a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``)."""
        from .io import save_saelens

        return save_saelens(self, path, dtype=dtype)

    def __repr__(self) -> str:
        k = f", k={self.cfg.k}" if self.cfg.k else ""
        site = f", site={self.site!r}" if self.site else ""
        return f"{type(self).__name__}(d_in={self.d_in}, d_sae={self.d_sae}{k}{site})"


def arch_class(arch: str) -> type[SAE]:
    """The class registered for an architecture name; a clear error listing the choices."""
    try:
        return REGISTRY[arch]
    except KeyError:
        raise ValueError(f"Unknown SAE architecture {arch!r}; choose one of {sorted(REGISTRY)}.") from None
