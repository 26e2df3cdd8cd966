"""Training a cross-layer transcoder from one activation pass per batch, resumable (ARCHITECTURE.md's job contract).

Each step reads one batch of rows ([BOS] + a piece of one text, :func:`~interplab.core.data.rows.text_batches`),
runs the model once saving every layer's MLP input and output (``2 L`` sites, BOS and padding dropped), and takes
one Adam step on the CLT. Each layer's input and output are divided by their RMS norms (measured on the first
batch and kept; the decoder biases start at the first batch's mean output), so every layer counts alike, and
the finished CLT has them folded into its weights (it reads and writes raw activations). The loss is the squared
error summed over layers, plus for a ReLU CLT an L1 penalty on the
activations weighted by each latent's decoder norm over the layers it writes to. Memory is one batch of
activations (``2 L x tokens x D`` floats) and the CLT with Adam's two moments. The data order is fixed and
nothing is drawn at random after the seeded initialisation, so a run killed and resumed ends with the weights of
one uninterrupted run. With ``path`` the run commits the weights, optimizer and history every
``checkpoint_every`` steps; a finished run is found and returned at once.

Example
-------
>>> res = train_clt(model, texts, d_sae=512, k=16, n_tokens=200_000, path="clt-run/")
>>> res.clt, res.history["loss"][-1], res.tokens_per_second
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..checks import check_int, check_number, check_texts
from ..data.rows import text_batches
from ..memory.budget import check_memory
from ..storage.checkpoint import load_optimizer_state, optimizer_state
from ..storage.resumable import ResumableJob
from .clt import CrossLayerTranscoder, mlp_in_site, mlp_out_site

JOB = "saes.train_clt"


@dataclass
class CLTTraining:
    """The trained ``clt``, its ``history`` (``step``, ``tokens``, ``loss``, ``fvu`` per layer averaged, ``l0``)
    and the training speed of this call (``tokens_per_second``, 0 when the run was already finished)."""

    clt: CrossLayerTranscoder
    history: dict[str, list[float]] = field(default_factory=dict)
    tokens_per_second: float = 0.0


def clt_loss(
    clt: CrossLayerTranscoder, x_LND: torch.Tensor, y_LND: torch.Tensor, scale_L: torch.Tensor, l1: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """The training loss on one batch of MLP inputs and outputs, and its parts (``fvu``: the layers' mean
    fraction of variance unexplained against ``scale_L``; ``l0``: active latents per token and layer)."""
    acts = [clt.encode_layer(x_LND[layer], layer) for layer in range(clt.n_layers)]
    err = x_LND.new_zeros(())
    for m in range(clt.n_layers):
        pred = clt.decode_layer(acts, m) + clt.skip_out(x_LND[m], m)
        err = err + (pred - y_LND[m]).pow(2).sum(-1).mean() / scale_L[m]
    fvu = err / clt.n_layers
    loss = err
    if l1:
        for layer, a in enumerate(acts):
            loss = loss + l1 * (a * clt.W_dec[layer].norm(dim=(1, 2))).sum(-1).mean()
    l0 = sum(float((a != 0).sum(-1).float().mean()) for a in acts) / clt.n_layers
    return loss, {"fvu": float(fvu.detach()), "l0": l0}


def _activations(model: Any, inputs: dict[str, torch.Tensor], valid_BL: torch.Tensor, n_layers: int) -> Any:
    sites = [s for layer in range(n_layers) for s in (mlp_in_site(layer), mlp_out_site(layer))]
    values = model.run_sites(inputs, sites)
    x = torch.stack([values[2 * layer][valid_BL] for layer in range(n_layers)]).float()
    y = torch.stack([values[2 * layer + 1][valid_BL] for layer in range(n_layers)]).float()
    return x, y


def _settings(d_sae: int, activation: str, k: int | None, l1_coefficient: float, lr: float, seq_len: int,
              batch_size: int) -> tuple[int | None, float]:  # fmt: skip
    check_int("d_sae", d_sae, 1)
    check_int("seq_len", seq_len, 2)
    check_int("batch_size", batch_size, 1)
    check_number(lr, "lr")
    if activation not in ("topk", "relu"):
        raise ValueError(f"train_clt trains activation='topk' or 'relu', got {activation!r} (a JumpReLU CLT is "
                         "loaded from a release: ilab.circuits.load_clt).")  # fmt: skip
    l1 = float(check_number(l1_coefficient, "l1_coefficient"))
    return (k if activation == "topk" else None), (l1 if activation == "relu" else 0.0)


def train_clt(
    model: Any, texts: Any, d_sae: int, *, activation: str = "topk", k: int | None = 16, l1_coefficient: float = 1e-3,
    skip: bool = False, n_tokens: int | None = None, seq_len: int = 64, batch_size: int = 8, lr: float = 1e-3,
    seed: int = 0, path: str | os.PathLike[str] | None = None, checkpoint_every: int = 50, progress: Any = True,
) -> CLTTraining:  # fmt: skip
    """Train a cross-layer transcoder on ``model``'s MLPs over ``texts`` (see the module doc).

    >>> res = ilab.circuits.train_clt(model, texts, d_sae=256, k=8, n_tokens=50_000, path="clt-run/")
    """
    texts = check_texts(texts)
    k, l1 = _settings(d_sae, activation, k, l1_coefficient, lr, seq_len, batch_size)
    if n_tokens is not None:
        check_int("n_tokens", n_tokens, 1)
    checkpoint_every = check_int("checkpoint_every", checkpoint_every, 1)
    n_layers, d_model = model.n_layers, model.site_dim(mlp_in_site(0))
    check_memory(f"train_clt(d_sae={d_sae})", 3 * CrossLayerTranscoder.estimate_bytes(n_layers, d_model, d_sae,
                                                                                    skip=skip)
                 + 2 * n_layers * batch_size * seq_len * d_model * 4 * 4)  # fmt: skip
    clt = CrossLayerTranscoder(n_layers, d_model, d_sae, activation, k=k, skip=skip)
    clt.init_weights(seed)
    inputs = {"model": model.fingerprint(), "d_sae": d_sae, "activation": activation, "k": k, "l1": l1,
              "skip": skip, "n_tokens": n_tokens, "seq_len": seq_len, "batch_size": batch_size, "lr": lr,
              "seed": seed}  # fmt: skip
    job = ResumableJob(JOB, path, inputs)
    opt = torch.optim.Adam([p for p in clt.parameters() if p.requires_grad], lr=lr)
    state = job.start()
    step, tokens = 0, 0
    history: dict[str, list[float]] = {"step": [], "tokens": [], "loss": [], "fvu": [], "l0": []}
    scale = None
    if state is not None:
        clt.load_state_dict(state["weights"])
        step, tokens, scale = int(state["step"]), int(state["tokens"]), state["scale"]
        history = {key: [float(v) for v in state["history"][key]] for key in history}
        if state["finished"]:
            return CLTTraining(folded(clt, scale), history)
        load_optimizer_state(opt, state["optimizer"])
    recorded = state["corpus"] if state else None
    batches = text_batches(model, texts, seq_len, batch_size, n_tokens, skip_rows=step * batch_size,
                           digest=job.digest, after_skip=lambda: job.check_corpus(recorded))  # fmt: skip
    start, new_tokens = time.perf_counter(), 0
    ones = torch.ones(n_layers)
    with job.progress(n_tokens, tokens, "train CLT", progress, unit="tok") as bar:
        for batch, enc in batches:
            x, y = _activations(model, enc, batch.valid_BL, n_layers)
            if scale is None:  # each layer's RMS norm of input and output, from the first batch; b_dec the mean
                scale = torch.stack([x.pow(2).sum(-1).mean(-1).sqrt(), y.pow(2).sum(-1).mean(-1).sqrt()]).clamp_min(
                    1e-6
                )
                with torch.no_grad():
                    clt.b_dec.copy_(y.mean(1) / scale[1][:, None])
            loss, parts = clt_loss(clt, x / scale[0][:, None, None], y / scale[1][:, None, None], ones, l1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step, tokens, new_tokens = step + 1, tokens + x.shape[1], new_tokens + x.shape[1]
            bar.update(x.shape[1])
            for key, value in (("step", step), ("tokens", tokens), ("loss", float(loss.detach())), *parts.items()):
                history[key].append(float(value))
            if job.keeps_state and step % checkpoint_every == 0:
                job.commit(_state(clt, opt, step, tokens, scale, history, job, finished=False))
    job.commit(_state(clt, opt, step, tokens, scale, history, job, finished=True))
    seconds = time.perf_counter() - start
    return CLTTraining(folded(clt, scale), history, new_tokens / seconds if seconds > 0 else 0.0)


def folded(clt: CrossLayerTranscoder, scale_2L: torch.Tensor | None) -> CrossLayerTranscoder:
    """``clt`` (trained on each layer's input and output divided by their RMS norms ``scale_2L``) made to read and
    write raw activations: the same latents, the same predictions times the output scale."""
    if scale_2L is None:
        return clt.eval()
    sx, sy = scale_2L[0].float(), scale_2L[1].float()
    with torch.no_grad():
        for layer in range(clt.n_layers):
            clt.W_enc[layer].div_(sx[layer])
            clt.W_dec[layer].mul_(sy[layer:, None])
            if clt.W_skip is not None:
                clt.W_skip[layer].mul_(sy[layer] / sx[layer])
        clt.b_dec.mul_(sy[:, None])
    return clt.eval()


def _state(clt: CrossLayerTranscoder, opt: torch.optim.Optimizer, step: int, tokens: int, scale: Any,
           history: dict[str, list[float]], job: ResumableJob, finished: bool) -> dict[str, Any]:  # fmt: skip
    return {"step": step, "tokens": tokens, "weights": clt.state_dict(), "scale": scale,
            "optimizer": {} if finished else optimizer_state(opt), "history": history, "finished": finished,
            "corpus": job.digest.record()}  # fmt: skip
