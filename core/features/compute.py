"""Feature dashboard data: what each SAE latent responds to and what it promotes, from one streaming pass.

For every latent: top-activating contexts, examples across its activation quantiles, firing
density, mean and max activation, an activation histogram (all from one pass over a corpus with
bounded memory, see :mod:`.stats`), and from the weights alone its logit effects and
nearest latents. Plain data (numpy arrays, a pandas table); the FeatureDashboard widget renders it.

Example
-------
>>> sae = ilab.load_sae("embedded", layer=6)
>>> data = ilab.feature_data(sae, model, ilab.default_corpus(), n_tokens=200_000, path="dash6/")
>>> data.table().sort_values("density").head()
>>> data.latent(123)["top"][0]["tokens"]      # the strings around its strongest example
>>> data = ilab.FeatureData.load("dash6/")     # no recomputation

The pass reads an :class:`~interplab.core.data.sources.ActivationSource` (a model over texts, or a store).
With ``path=`` it is a :class:`~interplab.core.storage.resumable.ResumableJob`: its state is one file in that
folder (``.checkpoint.safetensors``) with the inputs it depends on (SAE, model weights, corpus, settings) and
a digest of the rows scanned; a resume refuses other inputs and another corpus; the finished result replaces
the folder in one swap (finished by :func:`interplab.core.storage.atomic.recover` if a kill splits it), so
nothing is lost at any instruction.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..checks import check_float, check_int, check_texts
from ..data.sources import ActivationSource, Rows, activation_source
from ..data.store import ActivationStore
from ..memory.budget import check_memory
from ..model.model import Model
from ..saes.base import sae_fingerprint
from ..storage.atomic import recover
from ..storage.readers import FileError
from ..storage.resumable import ResumableJob
from .data import FeatureData
from .folder_format import CHECKPOINT, check_target
from .labels import labels_path, load_labels
from .search import all_neighbours, logit_effects
from .stats import FeatureAccumulator, fine_bins

if TYPE_CHECKING:
    from ..saes.base import SAE

logger = logging.getLogger(__name__)

JOB = "feature data"
_NO_TEXTS = ("Give texts to scan: a list of strings, 'default' (the default corpus), a .txt/.jsonl file or folder, "
             "or a datasets.Dataset.")  # fmt: skip
_STORE_TEXTS = "texts= is for a Model source; a store already holds its tokens (pass model= only)."


def accumulator_bytes(d_sae: int, n_top: int, n_quantile: int, context: int, n_bins: int) -> int:
    """The memory a :class:`FeatureAccumulator` of these sizes holds (its slots dominate)."""
    slots = (n_top + 4 * n_quantile) * d_sae
    return int(slots * (context * 8 + 4 + 8 + 16) + d_sae * (fine_bins(n_bins) * 8 + 40))


# ------------------------------------------------------------------- the pass
def feature_data(
    sae: SAE,
    source: Model | ActivationStore | str | Path,
    texts: Any = None,
    *,
    model: Model | None = None,
    n_tokens: int | None = None,
    n_top: int = 20,
    n_quantile: int = 10,
    context: int = 24,
    lead: int | None = None,
    n_bins: int = 32,
    n_logit: int = 10,
    seq_len: int = 128,
    batch_size: int = 16,
    path: str | Path | None = None,
    progress: Any = True,
    max_batches: int | None = None,
    checkpoint_every: float = 60.0,
) -> FeatureData:
    """Dashboard data for every latent of ``sae`` from one streaming pass over a corpus.

    ``source`` is a :class:`Model` (then ``texts``: a list of strings, ``"default"``, a file or a
    dataset) or an :class:`ActivationStore` from ``Model.cache`` (then pass ``model=`` for token
    strings and logit effects). Texts are cut into rows of ``seq_len`` tokens ([BOS] + piece); BOS
    is never counted. ``n_tokens`` caps the tokens scanned (default: all). Examples are windows of
    ``context`` tokens with the max at index ``lead`` (default ``2 * context // 3``).

    With ``path``, the running state is checkpointed there every ``checkpoint_every`` seconds and
    the result is saved there at the end; the same call resumes an interrupted pass, and returns the
    saved result without recomputing once complete. ``max_batches`` stops after that many batches
    in this call (a partial result, ``complete=False``; run again with the same ``path`` to go on).
    ``progress``: a bar over the tokens scanned, then one over the logit effects' vocabulary slices (the
    slow part of a large SAE's finish); False for none; a background job's bar counts the tokens.

    >>> data = feature_data(sae, model, ilab.default_corpus(), n_tokens=100_000)
    """
    lead = _check_settings(sae, n_tokens, n_top, n_quantile, context, lead, n_bins, n_logit, seq_len, batch_size,
                           max_batches, checkpoint_every)  # fmt: skip
    activations, model, site = _open(sae, source, texts, model, seq_len)
    _check_n_logit(model, n_logit)
    config = {
        "sae": sae_fingerprint(sae), "model": model.name, "model_sha": model.fingerprint(), "site": site,
        "corpus": activations.corpus_identity(), "n_tokens": n_tokens, "n_top": n_top, "n_quantile": n_quantile,
        "context": context, "lead": lead, "n_bins": n_bins, "n_logit": n_logit, "seq_len": seq_len,
    }  # fmt: skip
    job = ResumableJob(JOB, path, config, state_file=CHECKPOINT)
    done = _finished(job)
    if done is not None:
        return done
    scan = _Scan(FeatureAccumulator(sae.d_sae, n_top, n_quantile, context, lead, n_bins))
    recorded = scan.restore(job)
    rows = activations.rows(site, seq_len, batch_size, n_tokens, scan.rows_done, job.digest,
                       after_skip=lambda: job.check_corpus(recorded))  # fmt: skip
    total = n_tokens if n_tokens is not None else activations.n_tokens
    with job.progress(total, scan.acc.n_tokens, "features", progress, unit="tok", unit_scale=True) as bar:
        stopped = scan.run(job, sae, site, rows, bar, max_batches, checkpoint_every)
    if scan.acc.n_tokens == 0:
        raise ValueError("The corpus gave no tokens to scan (every text was empty).")
    if stopped:
        job.commit(scan.state(rows))
    # a background job's bar counts tokens: the logit effects show a bar of their own only when asked with True
    data = _result(sae, model, site, scan, n_logit, complete=not stopped, config=config, progress=progress is True)
    if job.folder is not None and not stopped:
        data.save(job.folder)
    return data


def _check_settings(
    sae: Any, n_tokens: int | None, n_top: int, n_quantile: int, context: int, lead: int | None, n_bins: int,
    n_logit: int, seq_len: int, batch_size: int, max_batches: int | None, checkpoint_every: float,
) -> int:  # fmt: skip
    """Every setting checked before any work, and the SAE's accumulator against the memory budget; the ``lead``."""
    for name, value, low in (
        ("n_top", n_top, 1),
        ("n_quantile", n_quantile, 1),
        ("context", context, 1),
        ("n_bins", n_bins, 1),
        ("n_logit", n_logit, 1),
        ("seq_len", seq_len, 2),
        ("batch_size", batch_size, 1),
    ):
        check_int(name, value, minimum=low)
    lead = 2 * context // 3 if lead is None else lead
    check_int("lead (an index into the context window)", lead, 0, context - 1)
    if n_tokens is not None:
        check_int("n_tokens", n_tokens, minimum=1)
    if max_batches is not None:
        check_int("max_batches", max_batches, minimum=1)
    check_float("checkpoint_every (seconds)", checkpoint_every, minimum=0)
    if not hasattr(sae, "encode") or not hasattr(sae, "d_sae"):
        raise TypeError(f"sae must be an interplab SAE, got {type(sae).__name__}.")
    check_memory(f"feature_data with n_top={n_top}, n_quantile={n_quantile}, context={context} for {sae.d_sae} "
                 "latents", accumulator_bytes(sae.d_sae, n_top, n_quantile, context, n_bins),
                 "Use smaller n_top, n_quantile or context.")  # fmt: skip
    return lead


def _open(sae: SAE, source: Any, texts: Any, model: Model | None, seq_len: int) -> tuple[ActivationSource, Model, str]:
    """The activation source, the model (for token strings and logits) and the SAE's site; refusals before work."""
    if isinstance(texts, (list, tuple)):
        texts = check_texts(list(texts))
    opened = activation_source(source, texts, model=model)
    if not isinstance(opened.model, Model):
        raise ValueError("Reading an ActivationStore needs model= (the Model it came from) for tokens and logits.")
    if (texts is None) == opened.reads_corpus:
        raise ValueError(_NO_TEXTS if opened.reads_corpus else _STORE_TEXTS)
    if opened.model_name != opened.model.name:
        raise ValueError(f"The store holds activations of {opened.model_name!r}, but model= is {opened.model.name!r}.")
    site = sae.check_fits(opened.model)
    opened.check_rows(site, seq_len)
    return opened, opened.model, site


def _check_n_logit(model: Model, n_logit: int) -> None:
    """``n_logit`` within the vocabulary (more tokens than it has is a request for nothing, slowly)."""
    check_int("n_logit (tokens per latent, within the vocabulary)", n_logit, 1, len(model.tokenizer))


def _finished(job: ResumableJob) -> FeatureData | None:
    """The result a finished pass saved in the job's folder (made with this call's inputs, else refused), if any."""
    if job.folder is None:
        return None
    recover(job.folder)  # a kill between the final renames: the finished result is put in place
    check_target(job.folder)
    if not (job.folder / "meta.json").exists():
        return None
    done = FeatureData.load(job.folder)
    job.check_inputs(done.config, where=job.folder)
    return done


class _Scan:
    """The running statistics of one pass, the rows it has scanned and where its time went."""

    def __init__(self, acc: FeatureAccumulator) -> None:
        self.acc, self.rows_done = acc, 0
        self.timings = {"forward_encode": 0.0, "update": 0.0}

    def restore(self, job: ResumableJob) -> dict[str, Any] | None:
        """Begin the job and load its checkpoint; what it recorded of the corpus (None the first time)."""
        state = job.start()
        if state is None:
            return None
        try:
            self.rows_done = check_int("rows_done", state.pop("rows_done"), minimum=0)
            recorded = state.pop("corpus", None)
            self.acc.load_state(state)
        except (KeyError, TypeError, ValueError) as err:
            raise FileError(Path(job.where), "state", f"does not fit this pass ({err})") from None
        logger.info("Resuming from %s: %d tokens done.", job.where, self.acc.n_tokens)
        return recorded

    def state(self, rows: Rows) -> dict[str, Any]:
        return {**self.acc.state(), "rows_done": self.rows_done, "corpus": rows.record()}

    def run(
        self, job: ResumableJob, sae: SAE, site: str, rows: Rows, bar: Any, max_batches: int | None,
        checkpoint_every: float,
    ) -> bool:  # fmt: skip
        """Scan ``rows``, committing every ``checkpoint_every`` seconds; whether it stopped at ``max_batches``."""
        last_save, n_batches, consistent = time.monotonic(), 0, True
        try:
            t0 = time.perf_counter()  # forward_encode: reading the next rows (a model runs there) and encoding them
            for batch, x_BLD in rows:
                with torch.no_grad():
                    x_TD = x_BLD[batch.valid_BL]
                    if not bool(torch.isfinite(x_TD).all()):
                        raise ValueError(
                            f"NaN or inf activations at {site} in documents {sorted(set(batch.doc_B.tolist()))[:5]}."
                        )
                    acts_TM = sae.encode(x_TD).to("cpu")  # encoded on the SAE's device, counted on the CPU
                t1 = time.perf_counter()
                consistent = False
                self.acc.update(acts_TM, batch)
                self.rows_done += batch.ids_BL.shape[0]
                consistent = True
                self.timings["forward_encode"] += t1 - t0
                self.timings["update"] += time.perf_counter() - t1
                n_batches += 1
                bar.update(int(acts_TM.shape[0]))
                if max_batches is not None and n_batches >= max_batches:
                    return True
                if job.keeps_state and time.monotonic() - last_save > checkpoint_every:
                    job.commit(self.state(rows))
                    last_save = time.monotonic()
                t0 = time.perf_counter()
        except KeyboardInterrupt:
            if consistent:  # between batches; an interrupt inside an update keeps the last periodic checkpoint
                job.commit(self.state(rows))
            raise
        return False


def _result(
    sae: SAE,
    model: Model,
    site: str,
    scan: _Scan,
    n_logit: int,
    complete: bool,
    config: dict[str, Any],
    progress: bool = False,
) -> FeatureData:
    """The pass's :class:`FeatureData`: its statistics finished, logit effects (with a bar of their own when
    ``progress``) and neighbours from the weights."""
    t0 = time.perf_counter()
    arrays: dict[str, Any] = scan.acc.finish()
    t1 = time.perf_counter()
    arrays.update(logit_effects(sae, model, n_logit, progress=progress))
    t2 = time.perf_counter()
    arrays["neighbour_ids"], arrays["neighbour_sims"] = all_neighbours(sae)
    timings = {**scan.timings, "finish": t1 - t0, "logit_effects": t2 - t1, "neighbours": time.perf_counter() - t2}
    shown = ("top_tokens", "quantile_tokens", "logit_top_ids", "logit_bottom_ids")
    ids = np.unique(np.concatenate([arrays[k].ravel() for k in shown]))
    strings = {int(i): model.tokenizer.decode([int(i)]) for i in ids if i >= 0}
    data = FeatureData(site=site, d_sae=sae.d_sae, n_tokens=scan.acc.n_tokens, context=scan.acc.context,
                       lead=scan.acc.lead, **arrays, token_strings=strings, labels=load_labels(sae),
                       model_name=model.name, labels_path=str(labels_path(sae)), complete=complete,
                       config=config)  # fmt: skip
    data.timings = timings
    return data
