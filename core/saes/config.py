"""What an SAE is (:class:`SAEConfig`: architecture, sizes, sites, hyper-parameters) and the checks every
config passes before anything is allocated (:func:`check_config`).

Example
-------
>>> cfg = SAEConfig(arch="topk", d_in=640, d_sae=4096, k=32, site="blocks.6.hook_resid_post")
>>> check_config(cfg)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..checks import check_int, check_number


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
    site_out: str = ""  # a transcoder's output site ("" for an SAE, which reconstructs its input)
    d_out: int | None = None  # a transcoder's output width (None: d_in)
    skip: bool = False  # a transcoder's affine skip connection x @ W_skip
    matryoshka_widths: list[int] | None = None  # matryoshka: nested prefix widths, the last = d_sae
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_config(cfg: SAEConfig) -> None:
    """Clear errors for an impossible config, whatever its architecture (each architecture adds its own checks).

    >>> check_config(SAEConfig(arch="topk", d_in=640, d_sae=0))
    Traceback (most recent call last):
    ValueError: width must be a positive integer, got 0.
    """
    check_int("d_in", cfg.d_in, minimum=1)
    check_int("width", cfg.d_sae, minimum=1)
    for name in ("l1_coefficient", "l0_coefficient"):
        value = getattr(cfg, name)
        if value is not None and check_number(value, name) < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
    if check_number(cfg.bandwidth, "bandwidth") <= 0:
        raise ValueError(f"bandwidth must be a positive number, got {cfg.bandwidth!r}.")
    if not isinstance(cfg.apply_b_dec_to_input, bool):
        raise TypeError(f"apply_b_dec_to_input must be True or False, got {cfg.apply_b_dec_to_input!r}.")
    for name in ("site", "model_name", "site_out"):
        if not isinstance(getattr(cfg, name), str):
            raise TypeError(f"{name} must be a string, got {getattr(cfg, name)!r}.")
    if cfg.d_out is not None:
        check_int("d_out", cfg.d_out, minimum=1)
    if not isinstance(cfg.skip, bool):
        raise TypeError(f"skip must be True or False, got {cfg.skip!r}.")
    transcoder = bool(cfg.site_out) or cfg.d_out is not None
    if cfg.skip and not transcoder:
        raise ValueError("skip=True is for transcoders: give site_out= (the site the transcoder predicts).")
    if transcoder and cfg.apply_b_dec_to_input:
        raise ValueError(
            "A transcoder's b_dec lives at its output site, so apply_b_dec_to_input must be False "
            f"(site={cfg.site!r}, site_out={cfg.site_out!r})."
        )
