"""How good a freshly trained SAE is, said at the end of training: a warning when it explains little or lost latents.

Example
-------
>>> warn_quality(sae, explained=0.14, dead_fraction=0.54, n_tokens=49_152)   # a UserWarning saying what helps
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import SAE

#: Below this explained variance, or above this fraction of dead latents, training ends with a warning.
MIN_EXPLAINED_VARIANCE, MAX_DEAD_FRACTION = 0.5, 0.5


def warn_quality(sae: SAE, explained: float | None, dead_fraction: float, n_tokens: int) -> None:
    """Warn (a UserWarning) when a trained SAE explains under half the variance or lost over half its latents.

    ``explained`` is measured on the training batches of the last 10% of steps.
    """
    problems, advice = [], []
    if explained is not None and explained < MIN_EXPLAINED_VARIANCE:
        problems.append(f"explains {explained:.2f} of the variance (under {MIN_EXPLAINED_VARIANCE})")
        advice.append("more training tokens (SAEs usually see millions)")
        if sae.cfg.k is not None:
            advice.append(f"a larger k than {sae.cfg.k}")
        elif sae.cfg.l1_coefficient is not None or sae.cfg.l0_coefficient is not None:
            advice.append("a smaller sparsity coefficient")
    if dead_fraction > MAX_DEAD_FRACTION:
        problems.append(f"{dead_fraction:.0%} of its {sae.d_sae} latents never fired in the last stretch")
        advice.append(f"more training tokens, a smaller width than {sae.d_sae} or a lower lr")
        if not type(sae).resample_dead and sae.cfg.k is None:
            advice.append("arch='topk' or 'batchtopk', whose auxiliary loss revives dead latents")
    if problems:
        warnings.warn(
            f"The {sae.cfg.arch} SAE at {sae.site}, trained on {n_tokens:,} tokens, {' and '.join(problems)}. "
            f"What usually helps: {'; '.join(dict.fromkeys(advice))}.",
            UserWarning,
            stacklevel=3,
        )
