"""The SAE base class: parameters, encode/decode, the site it reads, and the architecture registry.

Each architecture is one file with one subclass that knows itself: its name, how SAELens saves
it, its default settings, how its config is checked, whether dead latents are resampled, its
loss and its extra tensors. Nothing outside those files names an architecture. Training and
loading are functions above this module (:func:`~interplab.core.saes.training.train_sae`,
:func:`~interplab.core.saes.loader.load_sae`); ``sae.save`` calls the writer in ``writer.py``.

Every architecture stores ``W_enc`` [d_in, d_sae], ``b_enc`` [d_sae], ``W_dec`` [d_sae, d_in]
and ``b_dec`` [d_in] (the SAELens layout), computes ``pre = (x - b_dec) @ W_enc + b_enc``
(``b_dec`` subtracted when ``apply_b_dec_to_input``), and decodes ``acts @ W_dec + b_dec``.

Every architecture is also a **transcoder** when its config names an output site (``site_out``):
it reads ``site`` (e.g. the MLP input ``blocks.6.hook_mlp_in``) and predicts ``site_out`` (the MLP
output ``blocks.6.hook_mlp_out``), so ``W_dec`` is [d_sae, d_out], ``b_dec`` [d_out], ``b_dec`` is
never subtracted from the input, and with ``skip=True`` an affine skip ``x @ W_skip`` ([d_in, d_out])
is added to the output. The activation rule and the loss are the architecture's own.

Example
-------
>>> sae = SAE.create("topk", d_in=640, d_sae=4096, k=32, site="blocks.6.hook_resid_post")
>>> latents_BM = sae.encode(x_BD); recon_BD = sae.decode(latents_BM)
>>> sae.direction(123)      # decoder row of latent 123, [d_in]
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..checks import check_latent
from ..memory.budget import check_memory
from .config import SAEConfig, check_config
from .writer import save_saelens

REGISTRY: dict[str, type[SAE]] = {}


def _keeps_graph(x: torch.Tensor) -> bool:
    """Whether work on ``x`` records an autograd graph: grad mode is on and ``x`` itself requires grad."""
    return torch.is_grad_enabled() and isinstance(x, torch.Tensor) and x.requires_grad


class SAE(nn.Module):
    """A sparse autoencoder over one site's activations. Subclasses implement ``encode`` and the loss."""

    arch: ClassVar[str] = ""
    saelens_arch: ClassVar[str] = ""  # the architecture name SAELens saves it under
    #: The SAELens transcoder class it saves as ("" where SAELens has none: saved as ``<arch>_transcoder``).
    saelens_transcoder_arch: ClassVar[str] = ""
    #: Settings filled in when a spec leaves them out (e.g. ``{"k": 32}``); see :meth:`with_defaults`.
    defaults: ClassVar[dict[str, Any]] = {}
    #: Whether the trainer re-initialises dead latents (Bricken et al.); TopK-style SAEs use AuxK instead.
    resample_dead: ClassVar[bool] = False
    #: Whether its per-latent :attr:`threshold` is saved beside the weights (as ``threshold`` [d_sae]).
    saves_threshold: ClassVar[bool] = False
    #: The folder it was loaded from, when known (labels and dashboards are kept beside it).
    source_path: Path | None = None
    #: Fraction of tokens each latent fires on [d_sae], when its files say (SAELens's ``sparsity.safetensors``);
    #: None when unknown. ``save`` writes it back.
    firing_rates: torch.Tensor | None = None

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        type(self).validate(cfg)
        self.cfg = cfg
        self.W_enc = nn.Parameter(torch.zeros(cfg.d_in, cfg.d_sae))
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))
        d_out = cfg.d_out or cfg.d_in
        self.W_dec = nn.Parameter(torch.zeros(cfg.d_sae, d_out))
        self.b_dec = nn.Parameter(torch.zeros(d_out))
        if cfg.skip:
            self.W_skip = nn.Parameter(torch.zeros(cfg.d_in, d_out))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.arch:
            return
        known = REGISTRY.get(cls.arch)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(
                f"Two SAE architectures are named {cls.arch!r}: {known.__module__}.{known.__qualname__} and "
                f"{cls.__module__}.{cls.__qualname__}. Give the new one another arch name."
            )
        REGISTRY[cls.arch] = cls

    # -------------------------------------------------------- architecture
    @classmethod
    def validate(cls, cfg: SAEConfig) -> None:
        """Clear errors for an impossible config, before any allocation (subclasses add their own checks)."""
        check_config(cfg)
        n = sum(math.prod(shape) for shape in cls.file_shapes(cfg).values())
        check_memory(f"A {cls.arch or 'SAE'} SAE with d_in={cfg.d_in:,} and width={cfg.d_sae:,}", 4 * n,
                     "Give a smaller width.")  # fmt: skip

    @classmethod
    def tensor_shapes(cls, d_in: int, d_sae: int) -> dict[str, tuple[int, ...]]:
        """The tensors a saved SAE of this architecture holds, by their SAELens name, with their shapes."""
        shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        return {**shapes, "threshold": (d_sae,)} if cls.saves_threshold else shapes

    @classmethod
    def file_shapes(cls, cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
        """:meth:`tensor_shapes` for this config: a transcoder's decoder at ``d_out``, its ``W_skip`` [d_out, d_in]
        (the SAELens layout of files; the module holds it transposed)."""
        shapes = cls.tensor_shapes(cfg.d_in, cfg.d_sae)
        d_out = cfg.d_out or cfg.d_in
        if d_out != cfg.d_in:
            shapes = {**shapes, "W_dec": (cfg.d_sae, d_out), "b_dec": (d_out,)}
        if cfg.skip:
            shapes = {**shapes, "W_skip": (d_out, cfg.d_in)}
        return shapes

    @classmethod
    def with_defaults(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """``settings`` with this architecture's defaults filled in where missing."""
        return {**cls.defaults, **{k: v for k, v in settings.items() if v is not None}}

    def load_extra(self, tensors: dict[str, torch.Tensor]) -> None:
        """Take the tensors beyond the four shared ones from a loaded file (inverse of :meth:`extra_state`)."""

    # ------------------------------------------------------------ factory
    @staticmethod
    def create(arch: str, d_in: int, d_sae: int, **kwargs: Any) -> SAE:
        """A freshly initialised SAE of a registered architecture (decoder rows unit norm, tied encoder).

        Every setting is explicit here (``k`` for TopK); :meth:`with_defaults` fills them in for training specs.
        """
        cls = arch_class(arch)
        if kwargs.get("site_out") or kwargs.get("d_out") is not None:
            kwargs.setdefault("apply_b_dec_to_input", False)  # a transcoder's b_dec is at its output
        sae = cls(SAEConfig(arch=arch, d_in=d_in, d_sae=d_sae, **kwargs))
        sae.init_weights()
        return sae

    def init_weights(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        W = torch.randn(self.cfg.d_sae, self.cfg.d_in, generator=gen)
        W /= W.norm(dim=1, keepdim=True)
        with torch.no_grad():
            if self.d_out == self.d_in:
                self.W_dec.copy_(W)
            else:  # a transcoder into another width: its own random unit rows
                W_out = torch.randn(self.cfg.d_sae, self.d_out, generator=gen)
                self.W_dec.copy_(W_out / W_out.norm(dim=1, keepdim=True))
            # a transcoder's encoder starts small: its output starts near b_dec (the mean), not at a random map
            self.W_enc.copy_(W.T * (0.1 if self.is_transcoder else 1.0))
            if self.cfg.skip:
                self.W_skip.zero_()
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
    def d_out(self) -> int:
        """The width of what it writes: ``d_in`` for an SAE, the output site's for a transcoder."""
        return self.cfg.d_out or self.cfg.d_in

    @property
    def site_out(self) -> str:
        """The site a transcoder predicts ("" for an SAE)."""
        return self.cfg.site_out

    @property
    def is_transcoder(self) -> bool:
        """Whether it predicts another site (a transcoder) rather than reconstructing its input."""
        return bool(self.cfg.site_out) or self.cfg.d_out is not None

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
        return x.to(self.W_enc.device, self.W_enc.dtype)  # activations meet the weights on their device

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        x = self._check_input(x)
        if self.cfg.apply_b_dec_to_input:
            x = x - self.b_dec
        return x @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latent activations [..., d_sae] (dense; zeros where a latent does not fire).

        Plain activations give a plain tensor (no autograd graph); activations that require grad keep
        theirs, for gradients with respect to the activations (attribution). The weights get their
        gradients from :meth:`training_loss`, which the trainers call.

        >>> sae.encode(x_BD).requires_grad
        False
        """
        with torch.set_grad_enabled(_keeps_graph(x)):
            return self._encode(x)

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        """The activation rule. Here: the pre-activations above :attr:`threshold` (JumpReLU inference, also
        BatchTopK's); architectures without a threshold override it."""
        threshold = self.threshold
        if threshold is None:
            raise NotImplementedError(f"{type(self).__name__} must define encode (it has no threshold).")
        pre = self.pre_acts(x)
        return pre * (pre > threshold)

    def skip_out(self, x: torch.Tensor) -> torch.Tensor | float:
        """A transcoder's affine skip term ``x @ W_skip`` [..., d_out] (0 without one)."""
        return x.to(self.W_skip.device, self.W_skip.dtype) @ self.W_skip if self.cfg.skip else 0.0

    def target_of(self, x: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
        """What the loss compares the output with: ``x`` for an SAE, the checked ``target`` for a transcoder."""
        if target is None:
            if self.is_transcoder:
                raise ValueError(f"A transcoder's loss needs target= (the {self.site_out or 'output'} activations).")
            return x
        if target.shape[-1] != self.d_out or target.shape[:-1] != x.shape[:-1]:
            raise ValueError(
                f"target must have shape {[*x.shape[:-1], self.d_out]} (the rows of x, d_out={self.d_out}); "
                f"got {list(target.shape)}."
            )
        return target.to(self.W_dec.device, self.W_dec.dtype)

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        """Reconstruction [..., d_out] from latent activations (a transcoder's skip term is added by forward)."""
        if acts.shape[-1] != self.d_sae:
            raise ValueError(f"This SAE has {self.d_sae} latents; decode got activations of last dim {acts.shape[-1]}.")
        with torch.set_grad_enabled(_keeps_graph(acts)):  # a graph only when the latents carry one, as encode
            return acts.to(self.W_dec.device) @ self.W_dec + self.b_dec

    #: Whether one latent's activation depends only on its own weights (False for TopK: on all of them).
    per_latent: ClassVar[bool] = True
    #: The axis of the latents in each tensor of :meth:`trace_tensors` that has one.
    LATENT_AXIS: ClassVar[dict[str, int]] = {"W_enc": 1, "b_enc": 0, "threshold": 0, "W_mag": 1, "b_mag": 0}

    def trace_tensors(self) -> dict[str, Any]:
        """This SAE's rule as plain tensors (see :mod:`interplab.core.model.trace_ops`); subclasses add their keys."""
        with torch.no_grad():
            b_in = self.b_dec if self.cfg.apply_b_dec_to_input else self.W_enc.new_zeros(self.d_in)
            named = {"W_enc": self.W_enc, "b_enc": self.b_enc, "b_in": b_in, "W_dec": self.W_dec, "b_dec": self.b_dec}
            p: dict[str, Any] = {k: v.detach().clone() for k, v in named.items()}
            threshold = self.threshold
            if threshold is not None:
                p["threshold"] = threshold.detach().clone()
        return p

    def trace_params(self, latents: Sequence[int] | None = None) -> dict[str, Any]:
        """This SAE as plain tensors for :func:`interplab.core.model.trace_ops.sae_encode` / ``sae_decode``.

        What a trace body uses instead of the SAE itself (a server has no interplab). With
        ``latents``, only what encoding those latents needs (no decoder; for a per-latent rule only
        their columns, in that order), so a request carries kilobytes instead of the whole SAE.
        """
        if latents is not None:
            if isinstance(latents, (str, bytes)) or not isinstance(latents, Sequence):
                raise TypeError(f"latents must be a list of latent ids or None, got {type(latents).__name__}.")
            ids = [check_latent(i, self.d_sae) for i in latents]
        p = self.trace_tensors()
        if latents is None:
            return p
        p.pop("W_dec"), p.pop("b_dec")
        if self.per_latent:
            idx = torch.as_tensor(ids, device=self.W_enc.device)
            for key, axis in self.LATENT_AXIS.items():
                if key in p:
                    p[key] = p[key].index_select(axis, idx).contiguous()
        return p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction of ``x`` (an SAE) or the prediction of the output site (a transcoder); an
        autograd graph only when ``x`` requires grad, as :meth:`encode`."""
        with torch.set_grad_enabled(_keeps_graph(x)):
            return self.decode(self._encode(x)) + self.skip_out(x)

    # ----------------------------------------------------------- training
    def training_loss(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, target: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Loss for one batch and a dict with ``recon`` [B, d_out], ``mse`` and ``l0`` (floats), ``fired`` [d_sae]
        bool. ``dead`` [d_sae] bool marks latents that have not fired for a while (TopK's AuxK uses it);
        ``target`` [B, d_out] is what a transcoder predicts (an SAE reconstructs ``x``)."""
        raise NotImplementedError

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Keep decoder rows at unit norm (called after each optimiser step)."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8))

    @torch.no_grad()
    def remove_parallel_grad(self) -> None:
        """Drop the decoder gradient along each row, so the unit-norm step does not fight the optimiser."""
        if self.W_dec.grad is not None:
            W = self.W_dec
            self.W_dec.grad -= (self.W_dec.grad * W).sum(1, keepdim=True) * W

    @torch.no_grad()
    def fold_input_scale(self, scale: float, out_scale: float | None = None) -> None:
        """Make an SAE trained on ``x * scale`` read raw ``x`` (weights change, behaviour on x does not).

        A transcoder trained to predict ``y * out_scale`` then predicts raw ``y``."""
        out_scale = scale if out_scale is None else out_scale
        self.W_enc.mul_(scale)
        self.W_dec.div_(out_scale)
        self.b_dec.div_(out_scale)
        if self.cfg.skip:
            self.W_skip.mul_(scale / out_scale)

    def extra_state(self) -> dict[str, torch.Tensor]:
        """Tensors beyond the four shared ones, keyed by their SAELens name."""
        threshold = self.threshold
        return {"threshold": threshold.detach().clone()} if self.saves_threshold and threshold is not None else {}

    def check_fits(self, model: Any, site: str | None = None) -> str:
        """The site this SAE reads on ``model``; a clear error if its site or width does not fit."""
        if self.site_out:
            if self.site_out not in model.sites:
                raise ValueError(f"This transcoder writes {self.site_out!r}, which {model.name!r} does not have.")
            if model.site_dim(self.site_out) != self.d_out:
                raise ValueError(f"This transcoder writes d_out={self.d_out}, but {self.site_out} of {model.name!r} "
                                 f"has width {model.site_dim(self.site_out)}.")  # fmt: skip
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

    # --------------------------------------------------------------- files
    def save(self, path: str | Path, dtype: torch.dtype = torch.float32) -> Path:
        """Write this SAE as a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``), atomically.

        >>> sae.save("my_sae/")      # ilab.load_sae("my_sae/") reads it back
        """
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch dtype such as torch.float32, got {dtype!r}.")
        rates = self.firing_rates
        sparsity = None if rates is None else rates.float().clamp_min(1e-10).log10()  # SAELens: log10 of the rate
        return save_saelens(self, path, dtype=dtype, sparsity=sparsity)

    def fingerprint(self) -> str:
        """A stable id of this SAE's weights and site (16 hex digits): the same SAE finds its labels again."""
        return sae_fingerprint(self)

    def __repr__(self) -> str:
        k = f", k={self.cfg.k}" if self.cfg.k else ""
        site = f", site={self.site!r}" if self.site else ""
        if self.is_transcoder:
            site += f", site_out={self.site_out!r}, d_out={self.d_out}" + (", skip=True" if self.cfg.skip else "")
            return f"{type(self).__name__}Transcoder(d_in={self.d_in}, d_sae={self.d_sae}{k}{site})"
        return f"{type(self).__name__}(d_in={self.d_in}, d_sae={self.d_sae}{k}{site})"


def sae_fingerprint(sae: SAE) -> str:
    """A stable id of an SAE's weights and site (16 hex digits)."""
    h = hashlib.sha256(f"{sae.site}|{sae.d_in}|{sae.d_sae}|{type(sae).__name__}".encode())
    if sae.is_transcoder:
        h.update(f"|{sae.site_out}|{sae.d_out}|{sae.cfg.skip}".encode())
    for t in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec, *([sae.W_skip] if sae.cfg.skip else [])):
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def arch_class(arch: str) -> type[SAE]:
    """The class registered for an architecture name; a clear error listing the choices."""
    try:
        return REGISTRY[arch]
    except KeyError:
        raise ValueError(f"Unknown SAE architecture {arch!r}; choose one of {sorted(REGISTRY)}.") from None
