"""Latents that track a per-token signal (surprisal, position, any array), ranked with confidence
intervals, and a causal check that ablates the top latents and measures the signal again.

The signal is one number per token, BOS left out: ``"surprisal"`` (-log p of each token given the
ones before it, from the model), ``"position"`` (1, 2, ...), or a list with one array per text of
its token count without BOS (checked before any forward pass). Each latent's Pearson correlation
with the signal over all tokens has a 95% interval from Fisher's z (``atanh r ± 1.96 / sqrt(n - 3)``).

:meth:`CorrelationResult.causal_check` ablates the top latents (their decoder contributions are
subtracted at the site, on every token) and measures surprisal again: a latent that tracks the
model's surprisal and also drives it moves it; ``n_random`` random live latents give the control.

Example
-------
>>> corr = correlate(sae, model, texts, "surprisal")
>>> corr.top(10)                       # latent, r, low, high, n
>>> corr.causal_check(model, texts, n_latents=5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import pandas as pd
import torch

from ..checks import check_positive_int, check_texts
from ..memory.freeing import release, scope
from ..model.model import free_trace_memory
from ..model.trace_ops import next_token_scores, read_site, write_site
from ..views.charts import offline
from .tidy import check_sae, encode_rows, tidy

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE

SIGNALS = ("surprisal", "position")
SCORED_ROWS = 16


def check_signal(signal: Any, lengths: list[int]) -> list[np.ndarray] | str:
    """A named signal, or one finite array per text of ``lengths[i]`` values; a clear error otherwise."""
    if isinstance(signal, str):
        if signal not in SIGNALS:
            raise ValueError(f"signal {signal!r} is not one of {list(SIGNALS)} (or give one array per text).")
        return signal
    if not isinstance(signal, (list, tuple)) or len(signal) != len(lengths):
        n = len(signal) if isinstance(signal, (list, tuple)) else type(signal).__name__
        raise ValueError(f"signal must be {list(SIGNALS)} or a list of one array per text ({len(lengths)}), got {n}.")
    out = []
    for i, (s, n) in enumerate(zip(signal, lengths, strict=True)):
        arr = np.asarray(s, dtype=np.float64).reshape(-1)
        if arr.shape[0] != n:
            raise ValueError(f"signal[{i}] has {arr.shape[0]} values, but text {i} has {n} tokens (BOS left out).")
        if not np.isfinite(arr).all():
            raise ValueError(f"signal[{i}] holds NaN or inf.")
        out.append(arr)
    return out


def token_surprisal(model: Model, enc: dict[str, torch.Tensor], site: str | None = None,
                    replace: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Surprisal ``[B, L]`` of each token given the ones before (position 0 is 0), in one remote-safe trace;
    with ``site`` and ``replace``, the site's tensor is replaced by ``replace`` first."""
    ids = enc["input_ids"]
    targets = torch.cat([ids[:, 1:], ids[:, :1]], 1).to(model.device)
    last, readout = model.block(model.n_layers - 1), model.readout
    envoy, io = model.envoy(site) if site is not None else (None, None)
    value = replace.to(model.device, model.dtype) if replace is not None else None
    step = max(1, SCORED_ROWS // ids.shape[0])
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        if envoy is not None and io is not None:
            write_site(envoy, io, value)
        scores = nnsight.save(next_token_scores(readout, read_site(last, "output"), targets, None, step))
        tracer.stop()
    free_trace_memory()
    nll = scores[0].detach().float().cpu()
    return torch.cat([torch.zeros(ids.shape[0], 1), nll[:, :-1]], 1)


def fisher_interval(r: np.ndarray, n: int, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """The 95% interval of Pearson correlations ``r`` over ``n`` pairs (Fisher's z)."""
    if n <= 3:
        return np.full_like(r, -1.0), np.full_like(r, 1.0)
    zr = np.arctanh(np.clip(r, -0.999999, 0.999999))
    half = z / np.sqrt(n - 3)
    return np.tanh(zr - half), np.tanh(zr + half)


def pearson(Z: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of ``Z [T, M]`` with ``s [T]`` (0 for a constant column)."""
    zc = Z - Z.mean(0)
    sc = s - s.mean()
    den = np.sqrt((zc**2).sum(0) * (sc**2).sum())
    return np.divide(zc.T @ sc, den, out=np.zeros(Z.shape[1]), where=den > 0)


@dataclass(repr=False)
class CorrelationResult:
    """Each latent's correlation with the signal: ``latents`` has latent, r, low, high (sorted by |r|)."""

    site: str
    signal: str
    n_tokens: int
    latents: pd.DataFrame
    causal: pd.DataFrame | None = None

    def top(self, n: int = 10) -> pd.DataFrame:
        """The ``n`` latents with the largest |r|."""
        return self.latents.head(check_positive_int("n", n))

    @property
    def table(self) -> pd.DataFrame:
        rows = [tidy("correlation", self.site, {"r": row.r, "low": row.low, "high": row.high},
                     group=f"{self.signal}:latent {int(row.latent)}") for row in self.top(10).itertuples()]  # fmt: skip
        if self.causal is not None:
            for row in self.causal.itertuples():
                rows.append(tidy("correlation", self.site, {"mean_change": row.mean_change},
                                 group=f"{self.signal}:ablate {row.which}"))  # fmt: skip
        return pd.concat(rows, ignore_index=True)

    def chart(self, n: int = 20) -> Any:
        """The top latents' correlations with their intervals."""
        import altair as alt

        df = self.top(check_positive_int("n", n)).assign(latent=lambda d: d.latent.astype(str))
        base = alt.Chart(df).encode(y=alt.Y("latent:N", sort=None))
        return offline((base.mark_rule().encode(x="low:Q", x2="high:Q") + base.mark_point(filled=True).encode(
            x=alt.X("r:Q", title=f"correlation with {self.signal}"), tooltip=["latent", "r", "low", "high"])
        ).properties(title=f"Latents tracking {self.signal} at {self.site}", width=300, height=14 * n))  # fmt: skip

    def causal_check(self, sae: SAE, model: Model, texts: str | Sequence[str], n_latents: int = 5,
                     n_random: int = 5, seed: int = 0, batch_size: int = 8) -> pd.DataFrame:  # fmt: skip
        """Ablate the ``n_latents`` most positively correlated latents (and, as a control, ``n_random`` random
        latents that fired) and measure the mean change of surprisal per token; stored in :attr:`causal`."""
        texts = check_texts(texts)
        check_positive_int("n_latents", n_latents)
        top = self.latents[self.latents.r > 0].head(n_latents).latent.astype(int).tolist()
        rng = np.random.default_rng(seed)
        alive = self.latents[self.latents.r != 0].latent.astype(int).to_numpy()
        control = rng.choice(np.setdiff1d(alive, top), size=min(n_random, max(0, len(alive) - len(top))),
                             replace=False).tolist()  # fmt: skip
        changes = ablation_changes(sae, model, texts, self.site, [top, control], batch_size)
        self.causal = pd.DataFrame({"which": ["top", "random"], "latents": [top, control], "mean_change": changes})
        release(0)
        return self.causal

    def __repr__(self) -> str:
        head = self.top(5)
        shown = ", ".join(f"{int(r.latent)}: {r.r:+.3f}" for r in head.itertuples())
        return f"CorrelationResult({self.site}, {self.signal}, {self.n_tokens} tokens; top {shown})"


def ablation_changes(sae: SAE, model: Model, texts: list[str], site: str, latent_sets: list[list[int]],
                     batch_size: int = 8) -> list[float]:  # fmt: skip
    """Mean change of per-token surprisal (BOS and padding left out) when each set of ``latents`` is ablated at
    ``site``; one clean pass per batch serves every set."""
    totals, n = [0.0] * len(latent_sets), 0
    Ws = [sae.W_dec.detach().float()[latents].cpu() for latents in latent_sets]  # with the CPU activations
    for chunk in model.batches(texts, batch_size, "ablate"):
        enc = model.to_tokens(chunk)
        (x,) = model.run_sites(enc, [site])
        x = x.float()
        keep = enc["attention_mask"].bool().clone()
        keep[:, 0] = False
        z_all = encode_rows(sae, x[keep])
        clean = token_surprisal(model, enc)
        for i, (latents, W) in enumerate(zip(latent_sets, Ws, strict=True)):
            edited = x.clone()
            edited[keep] = x[keep] - z_all[:, latents] @ W
            ablated = token_surprisal(model, enc, site, edited)
            totals[i] += float((ablated - clean)[keep].sum())
        n += int(keep.sum())
    return [t / max(1, n) for t in totals]


@scope()
def correlate(sae: SAE, model: Model, texts: str | Sequence[str], signal: Any = "surprisal",
              site: str | None = None, batch_size: int = 8) -> CorrelationResult:  # fmt: skip
    """Correlate every latent of ``sae`` with a per-token ``signal`` over ``texts`` (BOS left out).

    >>> correlate(sae, model, texts, "position").top(5)
    """
    check_sae(sae)
    texts = check_texts(texts)
    check_positive_int("batch_size", batch_size)
    site = sae.check_fits(model, site)
    lengths = [int(n) - 1 for n in model.to_tokens(texts)["attention_mask"].sum(1).tolist()]
    checked = check_signal(signal, lengths)
    zs, ss = [], []
    for b, chunk in enumerate(model.batches(texts, batch_size, "correlate")):
        enc = model.to_tokens(chunk)
        (x,) = model.run_sites(enc, [site])
        keep = enc["attention_mask"].bool().clone()
        keep[:, 0] = False
        zs.append(encode_rows(sae, x.float()[keep]).numpy())
        if not isinstance(checked, str):  # one array per text
            ss.extend(checked[b * batch_size : b * batch_size + len(chunk)])
        elif checked == "surprisal":
            ss.append(token_surprisal(model, enc)[keep].numpy())
        else:  # "position"
            ss.append(torch.arange(keep.shape[1]).expand_as(keep)[keep].numpy())
    Z, s = np.concatenate(zs).astype(np.float64), np.concatenate(ss).astype(np.float64)
    r = pearson(Z, s)
    low, high = fisher_interval(r, len(s))
    df = pd.DataFrame({"latent": np.arange(len(r)), "r": r, "low": low, "high": high})
    df = df.iloc[np.argsort(-np.abs(r), kind="stable")].reset_index(drop=True)
    name = signal if isinstance(signal, str) else "signal"
    return CorrelationResult(site=site, signal=name, n_tokens=len(s), latents=df)
