"""Training SAEs from an activation store or straight from a model, several at once.

One activation stream feeds every SAE given (different widths, k values, architectures or
sites). Inputs are scaled so that E||x|| = sqrt(d_in) while training; the scale is folded into
the weights at the end, so the returned SAEs read raw activations.

The source is an :class:`~interplab.core.data.sources.ActivationSource` (a store, or a model over a
corpus). With ``checkpoint_dir`` training is a :class:`~interplab.core.storage.resumable.ResumableJob`:
the state is saved every ``checkpoint_every`` steps as one file, with the inputs it depends on (the
source's identity, the specs and every setting); the same call resumes from it and ends with the same
weights as an uninterrupted run, and a call with other inputs or another corpus is refused. A loss or
weights that stop being finite stop training, the last good checkpoint kept.

Example
-------
>>> store = model.cache("default", "blocks.6.hook_resid_post", "acts/", n_tokens=500_000)
>>> sae = train_saes(store, [dict(arch="batchtopk", width=4096, k=32)], n_tokens=500_000)[0]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ...checks import check_int
from ...data.sources import activation_source
from ...data.streams import BUFFER_BATCHES as BUFFER_BATCHES
from ...data.streams import ModelStream
from ...data.streams import buffer_sizes as buffer_sizes
from ...storage.checkpoint import read_state_file, save_state
from ...storage.readers import Fields, FileError
from ...storage.resumable import ResumableJob
from ..base import SAE
from ..quality import warn_quality
from .specs import check_settings, create_sae, plan_training

logger = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.safetensors"
JOB = "SAE training"
DEFAULT_LR = 4e-4


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


def _model_stream(
    model: Any, corpus: Any, sites: list[str], batch_size: int, seed: int, start_step: int = 0,
    context_size: int = 128, n_steps: int | None = None, on_tokens: Callable[[int], None] | None = None,
) -> ModelStream:  # fmt: skip
    """The training batches of ``model`` over ``corpus`` from batch ``start_step`` on (a :class:`ModelStream`)."""
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
    gen = torch.Generator().manual_seed(seed)  # drawn on the CPU: the same picks on any device
    weights = (err / err.sum()).cpu()
    picks = torch.multinomial(weights, len(idx), replacement=len(idx) > len(x), generator=gen).to(x.device)
    directions = y[picks] - sae.b_dec
    directions /= directions.norm(dim=1, keepdim=True).clamp_min(1e-8)
    reads = directions if target is None else x[picks] / x[picks].norm(dim=1, keepdim=True).clamp_min(1e-8)
    alive = ~dead
    enc_norm = sae.W_enc[:, alive].norm(dim=0).mean() if bool(alive.any()) else torch.tensor(1.0, device=x.device)
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


def train_saes(
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
    device: str | torch.device | None = None,
) -> list[SAE]:
    """Train one SAE per spec from one activation stream; :func:`~.single.train_sae` trains one.

    ``source``: an :class:`~interplab.core.data.store.ActivationStore` (or its path), or a model read over
    ``corpus`` at ``site`` (and the sites the specs name). ``device``: where the SAEs are trained and returned
    (default: the source's device, the model's for a model and the CPU for a store); batches are moved there.

    >>> saes = train_saes(store, [dict(arch="topk", k=32), dict(arch="batchtopk", k=32)], n_tokens=500_000)
    """
    check_settings(specs, batch_size, checkpoint_every, seed, dead_tokens, resample_every)
    source = activation_source(source, corpus)
    specs, sites, dims = plan_training(source, specs, site, n_tokens, batch_size)
    n_steps = n_tokens // batch_size
    dead_tokens = dead_tokens or max(batch_size, min(10_000_000, n_tokens // 4))
    resample_every = resample_every or max(1, n_steps // 5)
    inputs = {"source": source.identity(), "specs": specs, "n_tokens": n_tokens, "batch_size": batch_size,
              "seed": seed, "dead_tokens": dead_tokens, "resample_every": resample_every}  # fmt: skip
    device = torch.device(device) if device is not None else getattr(source, "device", torch.device("cpu"))
    run = _Training(specs, dims, source.model_name, seed, n_steps, dead_tokens, resample_every, device)
    job = ResumableJob(JOB, checkpoint_dir, inputs, write=_save_checkpoint)
    state = job.start()
    if state is not None:
        run.restore(job.where, state)
        logger.warning("Resuming training from %s at step %d of %d.", job.where, run.step, n_steps)
    feed = tqdm(desc="activations from the model", unit="tok", unit_scale=True,
                disable=not (progress and source.reads_corpus))  # fmt: skip
    try:
        batches = source.training_batches(sites, batch_size, seed, start_step=run.step, n_steps=n_steps,
                                          digest=job.digest, on_tokens=feed.update)  # fmt: skip
        job.check_corpus(state.get("corpus") if state is not None else None)
        with job.progress(n_steps * batch_size, run.step * batch_size, "train SAE", progress, unit="tok",
                          unit_scale=True) as bar:  # fmt: skip
            while run.step < n_steps:
                postfix = run.train_on(next(batches))
                bar.update(batch_size)
                bar.set_postfix(postfix, refresh=False)
                if job.due(run.step, checkpoint_every, n_steps):
                    run.check_finite()
                    job.commit(run.state(batches.record(run.step)))
    finally:
        feed.close()
    return run.finish(batch_size)


class _Training:
    """The SAEs of one training run with their optimisers and running numbers: one step at a time, a state to
    checkpoint, and the finished SAEs."""

    def __init__(
        self, specs: list[dict[str, Any]], dims: dict[str, int], model_name: str, seed: int, n_steps: int,
        dead_tokens: int, resample_every: int, device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        self.specs, self.seed, self.n_steps, self.device = specs, seed, n_steps, torch.device(device)
        self.dead_tokens, self.resample_every = dead_tokens, resample_every
        # initialised on the CPU (the same weights for a seed on any device), then moved
        self.saes = [create_sae(spec, dims, model_name, seed + i).to(device) for i, spec in enumerate(specs)]
        self.opts = [
            torch.optim.Adam(s.parameters(), lr=spec.get("lr", DEFAULT_LR), betas=(0.9, 0.999))
            for s, spec in zip(self.saes, specs)
        ]
        self.since_fired = [torch.zeros(s.d_sae, dtype=torch.long, device=device) for s in self.saes]
        self.scales: dict[str, float] = {}
        self.step = 0
        self.tail_start = n_steps - max(1, n_steps // 10)  # explained variance is measured on the last 10% of steps
        self.tail = [[0.0, 0.0] for _ in self.saes]  # per SAE: summed squared error and variance over the tail

    def restore(self, where: Any, state: dict[str, Any]) -> None:
        _check_state(Path(where), state, self.saes, self.n_steps)
        _restore(Path(where), state, self.saes, self.opts)
        self.since_fired = [t.to(self.device) for t in state["since_fired"]]
        self.scales = dict(state["scales"])
        self.step, self.tail = int(state["step"]), [list(map(float, t)) for t in state["tail"]]

    def state(self, corpus: Mapping[str, Any] | None) -> dict[str, Any]:
        """What a checkpoint keeps; ``corpus``: the record of the tokens a resume from here skips."""
        return {"saes": [s.state_dict() for s in self.saes], "opts": [o.state_dict() for o in self.opts],
                "since_fired": self.since_fired, "scales": self.scales, "step": self.step, "corpus": corpus,
                "tail": self.tail}  # fmt: skip

    def check_finite(self) -> None:
        _check_finite(self.saes, self.specs, self.step)

    def train_on(self, batch: dict[str, torch.Tensor]) -> dict[str, str]:
        """One step of every SAE on ``batch`` ``{site: [B, d]}``; the first SAE's numbers for the progress bar."""
        batch = {s: x.to(self.device) for s, x in batch.items()}
        for s, x in batch.items():
            if not torch.isfinite(x).all():
                row = int((~torch.isfinite(x)).any(-1).nonzero()[0])
                raise ValueError(
                    f"Activations at {s} hold NaN or inf (batch {self.step}, row {row}); training stopped."
                )
            if s not in self.scales:
                self.scales[s] = math.sqrt(x.shape[-1]) / float(x.norm(dim=-1).mean())
        factor = _lr_factor(self.step, self.n_steps)
        numbers = [self._train_one(i, batch, factor) for i in range(len(self.saes))]
        self.step += 1
        mse, var, dead, l0 = numbers[0]
        return {"mse": f"{mse:.3g}", "fvu": f"{mse / var:.3f}", "L0": f"{l0:.1f}", "dead": f"{dead:.2%}"}

    def _train_one(self, i: int, batch: dict[str, torch.Tensor], factor: float) -> tuple[Any, float, float, Any]:
        """One step of SAE ``i``: its mse, the variance of what it reconstructs, its dead fraction and L0."""
        sae, opt, step = self.saes[i], self.opts[i], self.step
        x = batch[sae.site].float() * self.scales[sae.site]
        y = batch[sae.site_out].float() * self.scales[sae.site_out] if sae.site_out else None
        if step == 0 and sae.b_dec.abs().sum() == 0:
            with torch.no_grad():
                sae.b_dec.copy_((x if y is None else y).mean(0))
        for group in opt.param_groups:
            group["lr"] = self.specs[i].get("lr", DEFAULT_LR) * factor
        dead = self.since_fired[i] > self.dead_tokens
        try:
            info = train_step(sae, opt, x, dead, self.since_fired[i], target=y)
        except FloatingPointError as err:
            raise ValueError(
                f"Training diverged at step {step} of {self.n_steps}: {err} (spec {i}: {self.specs[i]}). Training "
                "stopped; the last checkpoint (if any) is kept. Lower lr or the sparsity coefficient."
            ) from None
        if type(sae).resample_dead and step and step % self.resample_every == 0 and step < 0.8 * self.n_steps:
            extra = {} if y is None else {"target": y}  # an SAE's resampling is called as before
            _resample(sae, opt, self.since_fired[i] > self.dead_tokens, x, info["recon"].detach(),
                      self.seed * 1_000_003 + step * 101 + i, **extra)  # fmt: skip
        out = x if y is None else y
        var = float((out - out.mean(0)).pow(2).sum(-1).mean())
        if step >= self.tail_start:
            self.tail[i][0] += float(info["mse"])
            self.tail[i][1] += var
        return info["mse"], var, float(dead.float().mean()), info["l0"]

    def finish(self, batch_size: int) -> list[SAE]:
        """The trained SAEs, reading raw activations (the input scales folded in), with their training numbers."""
        _check_finite(self.saes, self.specs, self.step)
        for sae, fired, (err, var) in zip(self.saes, self.since_fired, self.tail, strict=True):
            if sae.site_out:  # a transcoder: its output was scaled by its own site's scale
                sae.fold_input_scale(self.scales[sae.site], self.scales[sae.site_out])
            else:
                sae.fold_input_scale(self.scales[sae.site])
            dead_fraction = float((fired > self.dead_tokens).float().mean())
            explained = 1.0 - err / var if var > 0 else None
            sae.cfg.metadata.update({
                "training_tokens": self.n_steps * batch_size,
                "input_scale": self.scales[sae.site],
                **({"output_scale": self.scales[sae.site_out]} if sae.site_out else {}),
                "dead_fraction": dead_fraction,
                "explained_variance": explained,
            })  # fmt: skip
            sae.eval()
            warn_quality(sae, explained, dead_fraction, self.n_steps * batch_size)
        return self.saes


def _save_checkpoint(path: Path, inputs: Mapping[str, Any], state: dict[str, Any]) -> None:
    """One checkpoint of a training run, through the contract's single writer (one file, atomic)."""
    save_state(path, JOB, inputs, state)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state saved in a training checkpoint file (validated; e.g. ``read_checkpoint(p)["step"]``)."""
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


def _check_state(ckpt: Path, state: Any, saes: list[SAE], n_steps: int) -> None:
    """A checkpoint's numbers through the readers' :class:`Fields`: ``step`` within the run, ``scales`` one
    finite positive number per site the SAEs read, ``tail`` two finite sums >= 0 per SAE, ``since_fired`` one
    integer tensor [d_sae] >= 0 per SAE."""
    f = Fields(ckpt, state, "state")
    step = f.int("step", minimum=0, maximum=n_steps)
    scales = f.obj("scales")
    sites = sorted({s for sae in saes for s in (sae.site, sae.site_out) if s})
    unknown = sorted(set(scales.data) - set(sites))
    if unknown:
        raise FileError(ckpt, "state.scales", f"names sites {unknown} this run does not read (it reads {sites})")
    for site in sites:
        if step or scales.has(site):  # every site has its scale from the first step on
            scales.float(site, positive=True)
    tails = f.list("tail")
    if len(tails) != len(saes):
        raise FileError(ckpt, "state.tail", f"holds {len(tails)} entries for {len(saes)} SAEs")
    for i, pair in enumerate(tails):
        if not (isinstance(pair, list) and len(pair) == 2 and all(_finite_sum(x) for x in pair)):
            raise FileError(ckpt, f"state.tail[{i}]", f"must be two finite sums >= 0, got {pair!r:.80}")
    fired = f.list("since_fired")
    if len(fired) != len(saes):
        raise FileError(ckpt, "state.since_fired", f"holds {len(fired)} entries for {len(saes)} SAEs")
    for i, (t, sae) in enumerate(zip(fired, saes, strict=True)):
        ok = isinstance(t, torch.Tensor) and t.shape == (sae.d_sae,) and not t.is_floating_point()
        if not ok or bool((t < 0).any()):
            raise FileError(ckpt, f"state.since_fired[{i}]", f"must be an integer tensor [{sae.d_sae}] >= 0")


def _finite_sum(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


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
