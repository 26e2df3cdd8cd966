"""Feature dashboard data: what each SAE latent responds to and what it promotes, from one streaming pass.

For every latent: top-activating contexts, examples across its activation quantiles, firing
density, mean and max activation, an activation histogram (all from one pass over a corpus with
bounded memory, see :mod:`.feature_stats`), and from the weights alone its logit effects and
nearest latents. Plain data (numpy arrays, a pandas table); the FeatureDashboard widget renders it.

Example
-------
>>> sae = ilab.load_sae("embedded", layer=6)
>>> data = ilab.feature_data(sae, model, ilab.default_corpus(), n_tokens=200_000, path="dash6/")
>>> data.table().sort_values("density").head()
>>> data.latent(123)["top"][0]["tokens"]      # the strings around its strongest example
>>> data = ilab.FeatureData.load("dash6/")     # no recomputation

With ``path=`` the pass follows the crash-safety contract (:mod:`interplab.core.storage.checkpoint`): its
state is one file in that folder (``.checkpoint.safetensors``) with the inputs it depends on (SAE,
model weights, corpus, settings) and a digest of the rows scanned; a resume refuses other inputs and
another corpus; the finished result replaces the folder in one swap (finished by
:func:`interplab.core.storage.atomic.recover` if a kill splits it), so nothing is lost at any instruction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import check_int, check_texts
from ..data.corpus import describe_corpus, iter_texts
from ..data.store import ActivationStore
from ..memory.budget import check_memory
from ..model.model import Model
from ..saes.base import sae_fingerprint
from ..storage.atomic import recover
from ..storage.checkpoint import TokenDigest, begin, check_inputs, check_tokens, load_state, save_state
from ..storage.readers import FileError
from .data import CHECKPOINT, FeatureData, check_target
from .labels import labels_path, load_labels
from .rows import store_batches, text_batches
from .search import all_neighbours, logit_effects
from .stats import Batch, FeatureAccumulator, fine_bins

if TYPE_CHECKING:
    from ..saes.base import SAE

logger = logging.getLogger(__name__)

JOB = "feature data"


def _docs(texts: Any) -> tuple[Iterable[str], str]:
    """The documents to scan and a description of them (a missing path fails here, like everywhere)."""
    if texts is None:
        raise ValueError(
            "Give texts to scan: a list of strings, 'default' (the default corpus), a .txt/.jsonl file or folder, "
            "or a datasets.Dataset."
        )
    if isinstance(texts, (list, tuple)):
        docs = check_texts(list(texts))
        return docs, describe_corpus(docs)
    return iter_texts(texts), describe_corpus(texts)


def accumulator_bytes(d_sae: int, n_top: int, n_quantile: int, context: int, n_bins: int) -> int:
    """The memory a :class:`FeatureAccumulator` of these sizes holds (its slots dominate)."""
    slots = (n_top + 4 * n_quantile) * d_sae
    return int(slots * (context * 8 + 4 + 8 + 16) + d_sae * (fine_bins(n_bins) * 8 + 40))


# ------------------------------------------------------------------- the pass
def feature_data(  # noqa: C901  (split by the resumable-job step)
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

    >>> data = feature_data(sae, model, ilab.default_corpus(), n_tokens=100_000)
    """
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
    if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, (int, float)) or checkpoint_every < 0:
        raise ValueError(f"checkpoint_every must be a number of seconds >= 0, got {checkpoint_every!r}.")
    if not hasattr(sae, "encode") or not hasattr(sae, "d_sae"):
        raise TypeError(f"sae must be an interplab SAE, got {type(sae).__name__}.")
    check_memory(f"feature_data with n_top={n_top}, n_quantile={n_quantile}, context={context} for {sae.d_sae} "
                 "latents", accumulator_bytes(sae.d_sae, n_top, n_quantile, context, n_bins),
                 "Use smaller n_top, n_quantile or context.")  # fmt: skip
    if isinstance(source, (str, Path)):
        source = ActivationStore(source)
    if isinstance(source, Model):
        model = source
        site = sae.check_fits(model)
        model.check_lengths([seq_len], "seq_len")
        docs, corpus_id = _docs(texts)
        corpus: Any = corpus_id
    elif isinstance(source, ActivationStore):
        if model is None or not isinstance(model, Model):
            raise ValueError("Reading an ActivationStore needs model= (the Model it came from) for tokens and logits.")
        if texts is not None:
            raise ValueError("texts= is for a Model source; a store already holds its tokens (pass model= only).")
        if source.model_name != model.name:
            raise ValueError(f"The store holds activations of {source.model_name!r}, but model= is {model.name!r}.")
        site = sae.check_fits(model)
        if site not in source.sites:
            raise ValueError(f"This SAE reads {site!r}, which the store does not hold; it holds {source.sites}.")
        if source.n_tokens == 0:
            raise ValueError(f"The store at {str(source.path)!r} holds no tokens.")
        docs, corpus = None, source.identity()
    else:
        raise TypeError(f"source must be a Model or an ActivationStore, got {type(source).__name__}.")

    config = {
        "sae": sae_fingerprint(sae), "model": model.name, "model_sha": model.fingerprint(), "site": site,
        "corpus": corpus, "n_tokens": n_tokens, "n_top": n_top, "n_quantile": n_quantile, "context": context,
        "lead": lead, "n_bins": n_bins, "n_logit": n_logit, "seq_len": seq_len,
    }  # fmt: skip
    acc = FeatureAccumulator(sae.d_sae, n_top, n_quantile, context, lead, n_bins)
    rows_done = 0
    root = Path(path) if path is not None else None
    digest = TokenDigest()
    recorded_rows: dict[str, Any] | None = None
    if root is not None:
        recover(root)  # a kill between the final renames: the finished result is put in place
        check_target(root)
        if (root / "meta.json").exists():
            done = FeatureData.load(root)
            check_inputs(done.config, config, root, "feature data")
            return done
        begin(root)
        state = load_state(root / CHECKPOINT, JOB, config)
        if state is not None:
            rows_done, recorded_rows = _restore(root / CHECKPOINT, acc, state)
            logger.info("Resuming from %s: %d tokens done.", root / CHECKPOINT, acc.n_tokens)

    def save_checkpoint() -> None:
        if root is not None:
            state = {**acc.state(), "rows_done": rows_done, "corpus": digest.record() if docs is not None else None}
            save_state(root / CHECKPOINT, JOB, config, state)

    def after_skip() -> None:
        if root is not None:
            check_tokens(recorded_rows, digest, root / CHECKPOINT)

    if isinstance(source, Model):
        parsed = model.parse_sites(site)
        batches: Iterator[tuple[Batch, Any]] = text_batches(
            model, docs, seq_len, batch_size, n_tokens, rows_done, digest=digest, after_skip=after_skip
        )
    else:
        batches = store_batches(source, site, batch_size, n_tokens, rows_done)
    total = n_tokens if n_tokens is not None else (source.n_tokens if isinstance(source, ActivationStore) else None)
    own_bar = not hasattr(progress, "update")  # a tqdm bar given: a job's, shown where the job started
    bar = tqdm(total=total, initial=acc.n_tokens, desc="features", unit="tok", unit_scale=True,
               disable=not progress) if own_bar else progress  # fmt: skip
    if not own_bar:
        bar.reset(total=total)
        bar.update(acc.n_tokens)
    last_save, n_batches, stopped = time.monotonic(), 0, False
    timings = {"forward_encode": 0.0, "update": 0.0}
    consistent = True
    try:
        for batch, payload in batches:
            t0 = time.perf_counter()
            with torch.no_grad():
                x_BLD = model.run_sites(payload, parsed)[0] if isinstance(source, Model) else payload
                x_TD = x_BLD[batch.valid_BL]
                if not bool(torch.isfinite(x_TD).all()):
                    raise ValueError(
                        f"NaN or inf activations at {site} in documents {sorted(set(batch.doc_B.tolist()))[:5]}."
                    )
                acts_TM = sae.encode(x_TD)
            t1 = time.perf_counter()
            consistent = False
            acc.update(acts_TM, batch)
            rows_done += batch.ids_BL.shape[0]
            consistent = True
            timings["forward_encode"] += t1 - t0
            timings["update"] += time.perf_counter() - t1
            n_batches += 1
            bar.update(int(acts_TM.shape[0]))
            if max_batches is not None and n_batches >= max_batches:
                stopped = True
                break
            if root is not None and time.monotonic() - last_save > checkpoint_every:
                save_checkpoint()
                last_save = time.monotonic()
    except KeyboardInterrupt:
        if consistent:  # between batches; an interrupt inside an update keeps the last periodic checkpoint
            save_checkpoint()
        raise
    finally:
        if own_bar:
            bar.close()
    if acc.n_tokens == 0:
        raise ValueError("The corpus gave no tokens to scan (every text was empty).")
    if stopped:
        save_checkpoint()
    t0 = time.perf_counter()
    arrays = acc.finish()
    t1 = time.perf_counter()
    arrays.update(logit_effects(sae, model, n_logit))
    t2 = time.perf_counter()
    arrays["neighbour_ids"], arrays["neighbour_sims"] = all_neighbours(sae)
    timings.update(finish=t1 - t0, logit_effects=t2 - t1, neighbours=time.perf_counter() - t2)
    ids = np.unique(
        np.concatenate(
            [arrays[k].ravel() for k in ("top_tokens", "quantile_tokens", "logit_top_ids", "logit_bottom_ids")]
        )
    )
    strings = {int(i): model.tokenizer.decode([int(i)]) for i in ids if i >= 0}
    data = FeatureData(
        site=site,
        d_sae=sae.d_sae,
        n_tokens=acc.n_tokens,
        context=context,
        lead=lead,
        **arrays,
        token_strings=strings,
        labels=load_labels(sae),
        model_name=model.name,
        labels_path=str(labels_path(sae)),
        complete=not stopped,
        config=config,
    )
    data.timings = timings
    if root is not None and not stopped:
        data.save(root)
    return data


def _restore(file: Path, acc: FeatureAccumulator, state: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """Load a checkpoint's running statistics; a state that does not fit them names what is wrong."""
    try:
        rows_done = check_int("rows_done", state.pop("rows_done"), minimum=0)
        recorded = state.pop("corpus", None)
        acc.load_state(state)
    except (KeyError, TypeError, ValueError) as err:
        raise FileError(file, "state", f"does not fit this pass ({err})") from None
    return rows_done, recorded
