"""Evaluate an SAE on a model: reconstruction, sparsity, and what splicing it in costs the model.

Three traces per batch, each remote-safe (only tensors cross the trace boundary): the clean
run saves the site's activations and the logits; the spliced run replaces the site with the
SAE's reconstruction; the ablated run replaces it with zeros. BOS positions are left as they
are (SAEs are trained without them) and excluded from every statistic.

Example
-------
>>> result = ilab.evaluate(sae, model, texts)
>>> result.explained_variance, result.l0, result.ce_loss_recovered
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_fraction, check_positive_int, check_texts
from ..model.model import free_trace_memory
from ..model.trace_ops import next_token_scores, read_site, write_site
from .tidy import check_sae

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


@dataclass(repr=False)
class SAEEvaluation:
    """Reconstruction, sparsity and downstream metrics of one SAE on some texts."""

    n_tokens: int
    mse: float  # mean squared error per token, summed over dimensions
    explained_variance: float
    l0: float  # mean active latents per token
    dead_fraction: float  # latents that never fired on these tokens
    dense_fraction: float  # latents firing on more than dense_threshold of tokens
    ce_clean: float
    ce_spliced: float
    ce_zero_ablation: float
    ce_loss_recovered: float  # (zero - spliced) / (zero - clean): 1 is perfect
    kl_spliced: float  # mean KL(clean || spliced) per token, nats
    density: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per-latent firing rate

    def density_histogram(self, bins: int = 30) -> tuple[np.ndarray, np.ndarray]:
        """Counts and edges of log10 firing rate over latents that fired at least once."""
        alive = self.density[self.density > 0]
        if alive.size == 0:
            return np.zeros(bins, dtype=np.int64), np.linspace(-6, 0, bins + 1)
        return np.histogram(np.log10(alive), bins=bins, range=(min(-6.0, float(np.log10(alive.min()))), 0.0))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("density")
        return d

    def __repr__(self) -> str:
        rows = "\n".join(
            f"  {k:20s} {v:.4g}" if isinstance(v, float) else f"  {k:20s} {v}" for k, v in self.to_dict().items()
        )
        return f"SAEEvaluation(\n{rows}\n)"


SCORED_ROWS = 16  # (text, position) rows unembedded at once inside evaluate's traces


def evaluate(
    sae: SAE,
    model: Model,
    texts: str | Sequence[str],
    batch_size: int = 4,
    site: str | None = None,
    dense_threshold: float = 0.1,
) -> SAEEvaluation:
    """Measure an SAE on ``texts``: MSE, explained variance, L0, dead and dense latents,
    cross-entropy with the reconstruction spliced in (as loss recovered relative to zero
    ablation) and KL to the clean model.
    """
    check_sae(sae)
    texts = check_texts(texts)
    check_positive_int("batch_size", batch_size)
    check_fraction("dense_threshold", dense_threshold, "[", "]", "a fraction of tokens, so")
    site = sae.check_fits(model, site)
    skip = 1 if model.tokenizer.bos_token_id is not None else 0
    sums = {"sq_err": 0.0, "l0": 0.0, "ce_clean": 0.0, "ce_spliced": 0.0, "ce_zero": 0.0, "kl": 0.0}
    fired = torch.zeros(sae.d_sae, dtype=torch.float64)
    acts_all, n_tok, n_pred = [], 0, 0
    sae.eval()
    for start in tqdm(range(0, len(texts), batch_size), desc="evaluate", leave=False, disable=len(texts) <= batch_size):
        enc = model.to_tokens(texts[start : start + batch_size])
        mask = enc["attention_mask"].bool()
        keep = mask.clone()
        keep[:, :skip] = False
        pred = torch.zeros_like(mask)
        pred[:, :-1] = mask[:, 1:] & mask[:, :-1]
        x_kept, latents = score_batch(sae, model, site, enc, keep, pred, sums)
        active = latents > 0
        sums["l0"] += float(active.sum())
        fired += active.sum(0).double()
        acts_all.append(x_kept)
        n_tok += int(keep.sum())
        n_pred += int(pred.sum())
    if n_tok == 0:
        raise ValueError("The texts hold no tokens besides BOS; give longer texts.")
    return summary(sums, fired, torch.cat(acts_all), n_tok, n_pred, dense_threshold)


def score_batch(
    sae: SAE,
    model: Model,
    site: str,
    enc: dict[str, torch.Tensor],
    keep: torch.Tensor,
    pred: torch.Tensor,
    sums: dict[str, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The three traces of one batch: add its squared error and next-token losses (clean, spliced, zero-ablated)
    and KL to ``sums``; return the site's activations at the ``keep`` positions [T, D] and their latents [T, M].

    ``pred`` marks the positions whose next token is scored. Scores are computed inside the traces a few positions
    at a time (next_token_scores): the clean run leaves only its last hidden states, and no [batch, pos, vocab]
    logits are kept.
    """
    envoy, io = model.envoy(site)
    last, readout = model.block(model.n_layers - 1), model.readout
    kw = model.trace_kwargs
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    ids = enc["input_ids"]
    targets = torch.cat([ids[:, 1:], ids[:, :1]], 1).to(model.device)  # the last column is never scored
    step = max(1, SCORED_ROWS // ids.shape[0])
    with torch.no_grad(), model.nn.trace(inputs, **kw) as tracer:
        x = nnsight.save(read_site(envoy, io))
        clean_hidden = nnsight.save(read_site(last, "output"))
        tracer.stop()  # the model's own unembedding would be a [batch, pos, vocab] tensor
    free_trace_memory()
    x = x.detach().float().cpu()
    with torch.no_grad():
        latents = sae.encode(x[keep])
        recon = x.clone()
        recon[keep] = sae.decode(latents).to(recon.device, recon.dtype)
    zeros = x.clone()
    zeros[keep] = 0.0
    for name, replacement, clean in (("spliced", recon, clean_hidden), ("zero", zeros, None)):
        replacement = replacement.to(model.device, model.dtype)  # the body holds no Model
        with torch.no_grad(), model.nn.trace(inputs, **kw) as tracer:
            write_site(envoy, io, replacement)
            scores = nnsight.save(next_token_scores(readout, read_site(last, "output"), targets, clean, step))
            tracer.stop()
        free_trace_memory()
        nll, clean_nll, kl = scores  # the last two are None without the clean run's hidden states
        sums[f"ce_{name}"] += float(nll.detach().cpu()[pred].sum())
        if clean is not None:
            sums["ce_clean"] += float(clean_nll.detach().cpu()[pred].sum())
            sums["kl"] += float(kl.detach().cpu()[pred].sum())
    sums["sq_err"] += float((recon[keep] - x[keep]).pow(2).sum())
    return x[keep], latents


def summary(
    sums: dict[str, float], fired: torch.Tensor, flat: torch.Tensor, n_tok: int, n_pred: int, dense_threshold: float
) -> SAEEvaluation:
    """The evaluation from the sums over every batch, the firing counts per latent [M] and the activations [T, D]."""
    total_var = float((flat - flat.mean(0)).pow(2).sum())
    density = (fired / n_tok).numpy()
    ce = {k: sums[k] / max(1, n_pred) for k in ("ce_clean", "ce_spliced", "ce_zero")}
    gap = ce["ce_zero"] - ce["ce_clean"]
    return SAEEvaluation(
        n_tokens=n_tok,
        mse=sums["sq_err"] / n_tok,
        explained_variance=1.0 - sums["sq_err"] / max(total_var, 1e-12),
        l0=sums["l0"] / n_tok,
        dead_fraction=float((density == 0).mean()),
        dense_fraction=float((density > dense_threshold).mean()),
        ce_clean=ce["ce_clean"],
        ce_spliced=ce["ce_spliced"],
        ce_zero_ablation=ce["ce_zero"],
        ce_loss_recovered=(ce["ce_zero"] - ce["ce_spliced"]) / gap if abs(gap) > 1e-9 else float("nan"),
        kl_spliced=sums["kl"] / max(1, n_pred),
        density=density,
    )
