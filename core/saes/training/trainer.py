"""Training SAEs from an activation store or straight from a model, several at once.

One activation stream feeds every SAE given (different widths, k values, architectures or
sites). Inputs are scaled so that E||x|| = sqrt(d_in) while training; the scale is folded into
the weights at the end, so the returned SAEs read raw activations.

With ``checkpoint_dir`` training follows the crash-safety contract (:mod:`interplab.core.storage.checkpoint`):
the state is saved every ``checkpoint_every`` steps as one file, with the inputs it depends on (the
store, or the model's weights and the corpus's tokens, the specs and every setting); the same call
resumes from it and ends with the same weights as an uninterrupted run, and a call with other inputs
is refused. A loss or weights that stop being finite stop training, the last good checkpoint kept.

Example
-------
>>> store = model.cache("default", "blocks.6.hook_resid_post", "acts/", n_tokens=500_000)
>>> sae = train_saes(store, [dict(arch="batchtopk", width=4096, k=32)], n_tokens=500_000)[0]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ...checks import check_int, check_number, check_positive_int
from ...data.corpus import CorpusCount, describe_corpus, token_windows
from ...data.store import ActivationStore
from ...memory.budget import check_memory
from ...model.model import Model
from ...storage.checkpoint import TokenDigest, begin, check_tokens, load_state, save_state
from ...storage.readers import FileError
from ..base import SAE, SAEConfig, arch_class
from ..quality import warn_quality

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.safetensors"
JOB = "SAE training"
DEFAULT_LR = 4e-4
_SPEC_KEYS = {
    "arch",
    "width",
    "k",
    "l1_coefficient",
    "l0_coefficient",
    "site",
    "lr",
    "apply_b_dec_to_input",
    "site_out",
    "skip",
    "matryoshka_widths",
}


def _check_spec(spec: dict[str, Any], default_site: str | None, sites: Sequence[str]) -> dict[str, Any]:
    unknown = set(spec) - _SPEC_KEYS
    if unknown:
        raise ValueError(f"Unknown SAE settings {sorted(unknown)}; valid ones are {sorted(_SPEC_KEYS)}.")
    arch = spec.get("arch", "batchtopk")
    cls = arch_class(arch)
    spec = cls.with_defaults({**spec, "arch": arch})
    spec.setdefault("width", 4096)
    spec.setdefault("site", default_site)
    if spec["site"] not in sites:
        raise ValueError(f"site={spec['site']!r} is not available from this source; it has {list(sites)}.")
    if spec.get("site_out") is not None and spec["site_out"] not in sites:
        raise ValueError(f"site_out={spec['site_out']!r} is not available from this source; it has {list(sites)}.")
    settings = {
        k: spec[k]
        for k in ("k", "l1_coefficient", "l0_coefficient", "site_out", "skip", "matryoshka_widths")
        if k in spec
    }
    if spec.get("site_out"):
        settings["apply_b_dec_to_input"] = spec.get("apply_b_dec_to_input", False)
    cls.validate(SAEConfig(arch=arch, d_in=1, d_sae=spec["width"], **settings))
    if "lr" in spec:
        lr = check_number(spec["lr"], "lr")
        if lr <= 0:
            raise ValueError(f"lr must be a positive number, got {spec['lr']!r}.")
    return spec


def train_step(
    sae: SAE,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    dead: torch.Tensor,
    since_fired: torch.Tensor,
    target: torch.Tensor | None = None,
) -> dict[str, Any]:
    """One optimiser step: loss, backward, unit-norm-preserving update; updates ``since_fired`` in place.

    ``target`` is what a transcoder predicts (its output site's activations, same rows as ``x``)."""
    extra = {} if target is None else {"target": target}  # an SAE's loss is called as before
    loss, info = sae.training_loss(x, dead=dead, **extra)
    if not bool(torch.isfinite(loss.detach())):
        raise FloatingPointError(f"the training loss of {sae!r} is {float(loss.detach())}")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    sae.remove_parallel_grad()
    torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
    opt.step()
    sae.normalize_decoder()
    since_fired += len(x)
    since_fired[info["fired"]] = 0
    return info


def _lr_factor(step: int, n_steps: int, warmup: float = 0.05, decay: float = 0.2) -> float:
    """Linear warm-up over the first 5% of steps, linear decay to zero over the last 20%."""
    warm = max(1, int(n_steps * warmup))
    if step < warm:
        return (step + 1) / warm
    start = int(n_steps * (1 - decay))
    return 1.0 if step < start else max(0.0, (n_steps - step) / max(1, n_steps - start))


def _store_stream(store: ActivationStore, sites: list[str], batch_size: int, seed: int) -> Iterator[dict[str, Any]]:
    """Batches for every site, aligned (same shuffle), cycling through the store as often as needed."""
    epoch = 0
    while True:
        iters = [store.batches(batch_size, site=s, seed=seed + epoch) for s in sites]
        got = False
        for parts in zip(*iters):
            if len(parts[0]) < batch_size:
                break
            got = True
            yield dict(zip(sites, parts))
        if not got:
            raise ValueError(f"The store holds {store.n_tokens} tokens, fewer than one batch of {batch_size}.")
        epoch += 1


#: A model stream shuffles tokens within buffers of at most this many batches.
BUFFER_BATCHES = 8


def buffer_sizes(n_steps: int | None = None) -> Iterator[int]:
    """Batches per shuffle buffer of a model stream: 1, 2, 4, then ``BUFFER_BATCHES``, never past ``n_steps``.

    The first buffer is one batch, so training starts after one batch of forward passes (not eight);
    the schedule depends only on ``n_steps``, so a resumed run meets the same buffers.

    >>> list(buffer_sizes(20))
    [1, 2, 4, 8, 5]
    """
    index, done = 0, 0
    while n_steps is None or done < n_steps:
        size = min(2**index, BUFFER_BATCHES)
        if n_steps is not None:
            size = min(size, n_steps - done)
        yield size
        index, done = index + 1, done + size


class ModelStream:
    """Batches straight from the model, shuffled within buffers sized by :func:`buffer_sizes`.

    The corpus's windows (BOS dropped) make one stream of tokens; each buffer takes the next
    ``size * batch_size`` of them, running only the windows they lie in (a window split between two
    buffers runs twice), and is shuffled by its own seed. So the stream from ``start_step`` on is the
    same as an uninterrupted one: the windows of earlier buffers are skipped (tokenised, not run, when
    the stream is built) and the batches already used from the current buffer are dropped.
    ``on_tokens(n)`` is called after each forward pass with the tokens it gave (for a progress bar).
    A :class:`~interplab.core.storage.checkpoint.TokenDigest` of the windows read is kept at each buffer's start,
    so a resume can check that the corpus starts with the tokens the interrupted run used.
    """

    def __init__(
        self, model: Model, corpus: Any, sites: list[str], batch_size: int, seed: int, start_step: int = 0,
        context_size: int = 128, n_steps: int | None = None, on_tokens: Callable[[int], None] | None = None,
    ) -> None:  # fmt: skip
        self.model, self.sites, self.batch_size, self.seed = model, sites, batch_size, seed
        self.parsed = model.parse_sites(sites)
        self.skip = 1 if model.tokenizer.bos_token_id is not None else 0
        self.body = context_size - self.skip
        self.context_size, self.on_tokens, self.start_step = context_size, on_tokens, start_step
        self.count = CorpusCount()
        self.windows = token_windows(model.tokenizer, corpus, context_size, self.count)
        self.digest = TokenDigest()
        self.last: list[int] = []  # the last window read: the next buffer may start inside it
        self.n_read = 0  # windows read so far
        self.buffers = enumerate(buffer_sizes(n_steps))
        self.sizes: dict[int, int] = {}  # buffer index -> its batches
        self.starts: dict[int, int] = {}  # buffer index -> its first step
        self.prefix: dict[int, dict[str, Any]] = {}  # buffer index -> digest of the windows read before it
        self.current = self._next_buffer()
        while self.current is not None and self.current[1] + self.current[2] <= start_step:
            self._read(*self.current[1:], keep=False)  # used before the resume: skipped without running it
            self.current = self._next_buffer()
        self._batches = self._generate()

    def _next_buffer(self) -> tuple[int, int, int] | None:
        """(index, first step, size) of the next buffer, recording where it starts and what was read before it."""
        step = sum(self.sizes.values())
        nxt = next(self.buffers, None)
        if nxt is None:
            return None
        index, size = nxt
        self.sizes[index] = size
        self.starts[index] = step
        self.prefix = {i: d for i, d in self.prefix.items() if i >= index - 1}
        self.prefix[index] = self.digest.record()
        return index, step, size

    def _read(self, step: int, size: int, keep: bool) -> tuple[list[list[int]], int, int, int]:
        """Read the windows of the buffer covering steps ``step .. step + size`` (kept only when ``keep``)."""
        first, end = step * self.batch_size, (step + size) * self.batch_size  # its range of the token stream
        w0, w1 = first // self.body, -(-end // self.body)  # the windows it lies in; w0 is n_read or n_read - 1
        chunk = [self.last] if keep and w0 < self.n_read else []
        for window in islice(self.windows, w1 - self.n_read):
            self.n_read, self.last = self.n_read + 1, window
            self.digest.update(window)
            if keep:
                chunk.append(window)
        if self.n_read < w1:
            raise ValueError(
                f"The corpus ran out: it holds {self.count.describe(self.context_size)}; training used {first:,} "
                f"tokens before this buffer, which needs {end - first:,} more. Give a larger corpus or fewer n_tokens."
            )
        return chunk, first, end, w0

    def prefix_for(self, step: int) -> dict[str, Any]:
        """The digest of the windows read before the buffer that holds batch ``step`` (what a resume there skips)."""
        index = max(i for i, start in self.starts.items() if start <= step)
        if step >= self.starts[index] + self.sizes[index]:  # it starts the next buffer: all read so far precedes it
            return self.digest.record()
        return self.prefix[index]

    def __iter__(self) -> ModelStream:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return next(self._batches)

    def _generate(self) -> Iterator[dict[str, torch.Tensor]]:
        while self.current is not None:
            index, step, size = self.current
            chunk, first, end, w0 = self._read(step, size, keep=True)
            parts: dict[str, list[torch.Tensor]] = {s: [] for s in self.sites}
            for start in range(0, len(chunk), 8):
                ids = torch.tensor(chunk[start : start + 8])
                values = self.model.run_sites({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, self.parsed)
                for s, v in zip(self.sites, values, strict=True):
                    parts[s].append(v[:, self.skip :].reshape(-1, v.shape[-1]).float())
                if self.on_tokens is not None:
                    self.on_tokens(len(ids) * self.body)
            offset = first - w0 * self.body
            pool = {s: torch.cat(v)[offset : offset + end - first] for s, v in parts.items()}
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            perm = torch.randperm(end - first, generator=gen)
            for j in range(max(0, self.start_step - step), size):
                idx = perm[j * self.batch_size : (j + 1) * self.batch_size]
                yield {s: p[idx] for s, p in pool.items()}
            self.current = self._next_buffer()


def _model_stream(
    model: Model, corpus: Any, sites: list[str], batch_size: int, seed: int, start_step: int = 0,
    context_size: int = 128, n_steps: int | None = None, on_tokens: Callable[[int], None] | None = None,
) -> ModelStream:  # fmt: skip
    """The batches of a :class:`ModelStream` (kept under this name for callers of the generator)."""
    return ModelStream(model, corpus, sites, batch_size, seed, start_step, context_size, n_steps, on_tokens)


@torch.no_grad()
def _resample(
    sae: SAE,
    opt: torch.optim.Optimizer,
    dead: torch.Tensor,
    x: torch.Tensor,
    recon: torch.Tensor,
    seed: int,
    target: torch.Tensor | None = None,
) -> int:
    """Re-initialise dead latents towards inputs the SAE reconstructs worst (Bricken et al.).

    For a transcoder the decoder rows point at the missed output (``target``), the encoder at its input."""
    idx = dead.nonzero().flatten()
    if len(idx) == 0:
        return 0
    y = x if target is None else target
    err = (y - recon).pow(2).sum(-1)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.multinomial(err / err.sum(), len(idx), replacement=len(idx) > len(x), generator=gen)
    directions = y[picks] - sae.b_dec
    directions /= directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
    reads = directions if target is None else x[picks] / x[picks].norm(dim=1, keepdim=True).clamp_min(1e-8)
    alive = ~dead
    enc_norm = sae.W_enc[:, alive].norm(dim=0).mean() if bool(alive.any()) else torch.tensor(1.0)
    sae.W_dec[idx] = directions
    sae.W_enc[:, idx] = reads.T * enc_norm * 0.2
    sae.b_enc[idx] = 0.0
    for p in (sae.W_enc, sae.b_enc, sae.W_dec):
        state = opt.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                if p is sae.W_enc:
                    state[key][:, idx] = 0.0
                else:
                    state[key][idx] = 0.0
    return len(idx)


def train_saes(  # noqa: C901  (split by the resumable-job step)
    source: Any,
    specs: Sequence[dict[str, Any]],
    *,
    n_tokens: int = 1_000_000,
    batch_size: int = 4096,
    site: str | None = None,
    corpus: Any = "default",
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 50,
    dead_tokens: int | None = None,
    resample_every: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> list[SAE]:
    """Train one SAE per spec from one activation stream; :func:`~.single.train_sae` trains one."""
    check_positive_int("batch_size", batch_size)
    check_positive_int("checkpoint_every", checkpoint_every)
    check_int("seed", seed, minimum=0)
    for name, value in (("dead_tokens", dead_tokens), ("resample_every", resample_every)):
        if value is not None:
            check_positive_int(name, value)
    if isinstance(specs, dict) or not isinstance(specs, Sequence) or not all(isinstance(x, dict) for x in specs):
        raise TypeError(f"specs must be a list of dicts, e.g. [dict(arch='topk', k=32)], got {specs!r:.100}.")
    if isinstance(source, (str, Path)):
        source = ActivationStore(source)
    if isinstance(source, ActivationStore):
        available, model_name = source.sites, source.model_name
        dims = {s: source.d(s) for s in available}
    elif isinstance(source, Model):
        if site is None and not any("site" in s for s in specs):
            raise ValueError("Training from a model needs site=, e.g. 'blocks.6.hook_resid_post'.")
        wanted = [site] if site else []
        wanted += [s["site"] for s in specs if s.get("site")] + [s["site_out"] for s in specs if s.get("site_out")]
        available = [p.name for p in source.parse_sites(wanted)]
        model_name, dims = source.name, {s: source.site_dim(s) for s in available}
    else:
        raise TypeError(f"source must be an ActivationStore, a store path or a Model, got {type(source).__name__}.")
    default_site = site or (available[0] if len(available) == 1 else None)
    if default_site is None and any("site" not in spec for spec in specs):
        raise ValueError(f"This source holds several sites; pass site= (or a site per spec), one of {available}.")
    if not specs:
        raise ValueError("Give at least one SAE spec, e.g. dict(arch='batchtopk', width=4096, k=32).")
    specs = [_check_spec(s, default_site, available) for s in specs]
    # after the specs: a wrong architecture or k is the error to see first
    check_int(f"n_tokens (at least one batch: >= batch_size={batch_size})", n_tokens, minimum=batch_size)
    if isinstance(source, ActivationStore) and source.n_tokens < batch_size:
        raise ValueError(f"The store holds {source.n_tokens} tokens, fewer than one batch of {batch_size}.")
    check_memory(f"Training {len(specs)} SAE(s)", sum(
        4 * (4 * (2 * dims[sp["site"]] + 3) * sp["width"] + 3 * batch_size * (sp["width"] + dims[sp["site"]]))
        for sp in specs), "Train fewer or narrower SAEs at once, or use a smaller batch_size.")  # fmt: skip
    outs = {s["site_out"] for s in specs if s.get("site_out")}  # a transcoder's output: from the same pass
    sites = sorted({s["site"] for s in specs} | outs, key=available.index)
    n_steps = n_tokens // batch_size
    dead_tokens = dead_tokens or max(batch_size, min(10_000_000, n_tokens // 4))
    resample_every = resample_every or max(1, n_steps // 5)
    inputs = {
        "source": source.identity() if isinstance(source, ActivationStore) else {
            "model": model_name, "model_sha": source.fingerprint(), "corpus": describe_corpus(corpus),
            "context_size": 128},
        "specs": specs, "n_tokens": n_tokens, "batch_size": batch_size, "seed": seed, "dead_tokens": dead_tokens,
        "resample_every": resample_every,
    }  # fmt: skip

    saes = []
    for i, spec in enumerate(specs):
        extra = {
            k: spec[k]
            for k in ("k", "l1_coefficient", "l0_coefficient", "apply_b_dec_to_input", "skip", "matryoshka_widths")
            if k in spec
        }
        if spec.get("site_out"):
            extra.update(site_out=spec["site_out"], d_out=dims[spec["site_out"]])
        sae = SAE.create(
            spec["arch"],
            d_in=dims[spec["site"]],
            d_sae=spec["width"],
            site=spec["site"],
            model_name=model_name,
            **extra,
        )
        sae.init_weights(seed + i)
        saes.append(sae)
    opts = [
        torch.optim.Adam(s.parameters(), lr=spec.get("lr", DEFAULT_LR), betas=(0.9, 0.999))
        for s, spec in zip(saes, specs)
    ]
    since_fired = [torch.zeros(s.d_sae, dtype=torch.long) for s in saes]
    scales: dict[str, float] = {}
    step = 0
    ckpt = Path(checkpoint_dir) / CHECKPOINT if checkpoint_dir is not None else None
    state = None
    if ckpt is not None:
        begin(ckpt.parent)
        state = load_state(ckpt, JOB, inputs)
    if state is not None:
        _restore(ckpt, state, saes, opts)
        since_fired, scales, step = list(state["since_fired"]), dict(state["scales"]), int(state["step"])
        logger.warning("Resuming training from %s at step %d of %d.", ckpt, step, n_steps)

    if isinstance(source, ActivationStore):
        stream: Iterator[dict[str, Any]] = _store_stream(source, sites, batch_size, seed)
        for _ in range(step):
            next(stream)
    else:
        # the model's forward passes, counted as they run: progress shows from the first second
        feed = tqdm(desc="activations from the model", unit="tok", unit_scale=True, disable=not progress)
        stream = ModelStream(source, corpus, sites, batch_size, seed, start_step=step, n_steps=n_steps,
                             on_tokens=feed.update)  # fmt: skip
        if state is not None:
            check_tokens(state.get("corpus"), stream.digest, ckpt)

    def save(at: int) -> None:
        assert ckpt is not None
        _check_finite(saes, specs, at)
        corpus_record = stream.prefix_for(at) if isinstance(stream, ModelStream) else None
        _save_checkpoint(ckpt, inputs, {
            "saes": [s.state_dict() for s in saes], "opts": [o.state_dict() for o in opts],
            "since_fired": since_fired, "scales": scales, "step": at, "corpus": corpus_record,
            "tail": tail,  # per SAE: summed squared error and variance over the last 10% of steps
        })  # fmt: skip

    bar = tqdm(
        total=n_steps * batch_size,
        initial=step * batch_size,
        desc="train SAE",
        unit="tok",
        unit_scale=True,
        disable=not progress,
    )
    tail_start = n_steps - max(1, n_steps // 10)  # explained variance is measured on the last 10% of steps
    tail = [[0.0, 0.0] for _ in saes] if state is None else [list(map(float, t)) for t in state["tail"]]
    try:
        while step < n_steps:
            batch = next(stream)
            for s, x in batch.items():
                if not torch.isfinite(x).all():
                    row = int((~torch.isfinite(x)).any(-1).nonzero()[0])
                    raise ValueError(f"Activations at {s} hold NaN or inf (batch {step}, row {row}); training stopped.")
                if s not in scales:
                    scales[s] = math.sqrt(x.shape[-1]) / float(x.norm(dim=-1).mean())
            factor = _lr_factor(step, n_steps)
            postfix = {}
            for i, (sae, opt) in enumerate(zip(saes, opts)):
                x = batch[sae.site].float() * scales[sae.site]
                y = batch[sae.site_out].float() * scales[sae.site_out] if sae.site_out else None
                if step == 0 and sae.b_dec.abs().sum() == 0:
                    with torch.no_grad():
                        sae.b_dec.copy_((x if y is None else y).mean(0))
                for group in opt.param_groups:
                    group["lr"] = specs[i].get("lr", DEFAULT_LR) * factor
                dead = since_fired[i] > dead_tokens
                try:
                    info = train_step(sae, opt, x, dead, since_fired[i], target=y)
                except FloatingPointError as err:
                    raise ValueError(
                        f"Training diverged at step {step} of {n_steps}: {err} (spec {i}: {specs[i]}). Training "
                        "stopped; the last checkpoint (if any) is kept. Lower lr or the sparsity coefficient."
                    ) from None
                if type(sae).resample_dead and step and step % resample_every == 0 and step < 0.8 * n_steps:
                    extra = {} if y is None else {"target": y}  # an SAE's resampling is called as before
                    _resample(
                        sae,
                        opt,
                        since_fired[i] > dead_tokens,
                        x,
                        info["recon"].detach(),
                        seed * 1_000_003 + step * 101 + i,
                        **extra,
                    )
                out = x if y is None else y
                var = float((out - out.mean(0)).pow(2).sum(-1).mean())
                if step >= tail_start:
                    tail[i][0] += float(info["mse"])
                    tail[i][1] += var
                if i == 0:
                    postfix = {
                        "mse": f"{info['mse']:.3g}",
                        "fvu": f"{info['mse'] / var:.3f}",
                        "L0": f"{info['l0']:.1f}",
                        "dead": f"{float(dead.float().mean()):.2%}",
                    }
            step += 1
            bar.update(batch_size)
            bar.set_postfix(postfix, refresh=False)
            if ckpt is not None and (step % checkpoint_every == 0 or step == n_steps):
                save(step)
    finally:
        bar.close()
        if not isinstance(source, ActivationStore):
            feed.close()
    _check_finite(saes, specs, step)
    for sae, fired, (err, var) in zip(saes, since_fired, tail, strict=True):
        if sae.site_out:  # a transcoder: its output was scaled by its own site's scale
            sae.fold_input_scale(scales[sae.site], scales[sae.site_out])
        else:
            sae.fold_input_scale(scales[sae.site])
        dead_fraction = float((fired > dead_tokens).float().mean())
        explained = 1.0 - err / var if var > 0 else None
        sae.cfg.metadata.update(
            {
                "training_tokens": n_steps * batch_size,
                "input_scale": scales[sae.site],
                **({"output_scale": scales[sae.site_out]} if sae.site_out else {}),
                "dead_fraction": dead_fraction,
                "explained_variance": explained,
            }
        )
        sae.eval()
        warn_quality(sae, explained, dead_fraction, n_steps * batch_size)
    return saes


def _save_checkpoint(path: Path, inputs: dict[str, Any], state: dict[str, Any]) -> None:
    """One checkpoint of a training run, through the contract's single writer (one file, atomic)."""
    save_state(path, JOB, inputs, state)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state saved in a training checkpoint file (validated; e.g. ``read_checkpoint(p)["step"]``)."""
    from ...storage.checkpoint import read_state_file

    return read_state_file(path, JOB)[1]


def _check_finite(saes: list[SAE], specs: list[dict[str, Any]], step: int) -> None:
    """Stop with a clear error when any weight stopped being finite (nothing of it is saved)."""
    for i, sae in enumerate(saes):
        for name, p in sae.named_parameters():
            if not bool(torch.isfinite(p).all()):
                raise ValueError(
                    f"The weights of {sae!r} (spec {i}: {specs[i]}) hold NaN or inf in {name} after step {step}; "
                    "training stopped and nothing of them was saved. Lower lr or the sparsity coefficient."
                )


def _restore(ckpt: Path, state: dict[str, Any], saes: list[SAE], opts: list[Any]) -> None:
    """Load a checkpoint's weights and optimiser states; a file that does not fit them names what is wrong."""
    try:
        if len(state["saes"]) != len(saes) or len(state["opts"]) != len(opts):
            raise ValueError(f"it holds {len(state['saes'])} SAEs, the call trains {len(saes)}")
        for sae, opt, sd, od in zip(saes, opts, state["saes"], state["opts"], strict=True):
            sae.load_state_dict(sd)
            opt.load_state_dict(od)
        for t in state["since_fired"]:
            if not isinstance(t, torch.Tensor):
                raise ValueError("since_fired is not a list of tensors")
        check_int("step", state["step"], minimum=0)
        if len(state["tail"]) != len(saes) or any(len(t) != 2 for t in state["tail"]):
            raise ValueError("tail does not hold two sums per SAE")
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise FileError(ckpt, "state", f"does not fit this training run ({err})") from None
