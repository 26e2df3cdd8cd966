"""A ROME-style knowledge edit: a rank-one update of one MLP's output projection, with SADR's regulariser.

For each fact (``prompt``, ``target``, ``subject``) the key ``k`` is the MLP's hidden state (the input of its
down projection) at the subject's last token. The edit adds ``delta u^T`` to the down projection, with
``u = C^-1 k / (k^T C^-1 k)`` (``C`` the keys' second moment over ``key_texts``, or the identity), so the
MLP output at the subject moves by exactly ``delta`` and other tokens by ``delta`` times ``u . h``. ``delta``
is found by a few dozen Adam steps on the target's cross-entropy at the prompt's last token (plus a small
norm penalty), in remote-safe traces that add the update to the projection's output, never to the weights.

SADR (Selective Attention Drift Restriction) adds ``sadr`` times the KL divergence of every later layer's
attention at the last token, before to after, to the loss: the edit may not buy its success by drawing the
heads toward the subject. :meth:`RankOneEdit.applied` writes one fact's update into the weights for the
duration and restores them bit for bit; :meth:`RankOneEdit.random_like` is the control, random updates of the
same norm on the same keys. Several facts are edited side by side, each independently.

Example
-------
>>> edit = rank_one_edit(model, "The Eiffel Tower is in the city of", " Rome", layer=4, subject="The Eiffel Tower")
>>> edit.success, edit.table                     # fact, p_before, p_after, delta_norm
>>> with edit.applied(0):
...     model.logits("The Eiffel Tower is in the city of")
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import pandas as pd
import torch

from ..checks import check_float, check_int, check_positive_int, check_texts, single_token_id
from ..model.model import free_trace_memory
from ..model.sites import site_module_path
from ..model.trace_ops import read_site, write_site
from ..storage.resumable import ResumableJob
from ..views.charts import offline
from .drift import edited_weights

if TYPE_CHECKING:
    from ..model.model import Model

JOB = "evals.rank_one_edit"


def as_list(name: str, value: str | Sequence[str], n: int) -> list[str]:
    """``value`` as ``n`` strings (one string is repeated); a clear error on a length mismatch."""
    values = [value] * n if isinstance(value, str) else check_texts(value)
    if len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries; give one per prompt ({n}) or one string.")
    return values


def text_digest(texts: Sequence[str]) -> str:
    """A short stable id of a list of texts (what a job records of them)."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def subject_span(model: Model, text: str, subject: str | None) -> tuple[int, int]:
    """First and last token positions (BOS counted) of the first ``subject`` in ``text``; the last token if None."""
    n = len(model.to_str_tokens(text))
    if subject is None:
        return n - 1, n - 1
    start = text.find(subject)
    if not subject.strip() or start < 0:
        raise ValueError(f"subject {subject!r} is not in the text {text!r}.")
    before = len(model.to_str_tokens(text[:start].rstrip())) if text[:start].strip() else 1
    through = len(model.to_str_tokens(text[: start + len(subject)]))
    return before, max(before, through - 1)


def keys_at(model: Model, enc: dict[str, torch.Tensor], layer: int, rows: torch.Tensor, cols: torch.Tensor
            ) -> torch.Tensor:  # fmt: skip
    """The down projection's inputs ``[N, F]`` at (row, col) of a batch, in one remote-safe trace."""
    envoy, io = model.envoy(f"blocks.{layer}.mlp.hook_post")
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    rows, cols = rows.to(model.device), cols.to(model.device)
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        saved = nnsight.save(read_site(envoy, io)[rows, cols].float())
        tracer.stop()
    free_trace_memory()
    return saved.detach().cpu()


def key_directions(model: Model, keys_NF: torch.Tensor, layer: int, key_texts: Sequence[str] | None,
                   ridge: float = 1e-2) -> torch.Tensor:  # fmt: skip
    """``u = C^-1 k / (k^T C^-1 k)`` per key (``C`` the keys' second moment over ``key_texts``, else the identity)."""
    if key_texts is None:
        solved = keys_NF
    else:
        enc = model.to_tokens(list(key_texts))
        (h,) = model.run_sites(enc, [f"blocks.{layer}.mlp.hook_post"])
        H_TF = h.float()[enc["attention_mask"].bool()]
        C_FF = H_TF.T @ H_TF / len(H_TF)
        C_FF += ridge * C_FF.diagonal().mean() * torch.eye(C_FF.shape[0])
        solved = torch.linalg.solve(C_FF, keys_NF.T).T
    return solved / (solved * keys_NF).sum(-1, keepdim=True)


def edited_trace(model: Model, enc: dict[str, torch.Tensor], layer: int, u_NF: torch.Tensor, delta_ND: torch.Tensor,
                 later: list[int], objective: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """One pass with each row's rank-one update added to the down projection's output (remote-safe body).

    Returns ``(last-token log-probs [N, V], last-query attention per later layer [N, layers, H, K])``. With
    ``objective`` (``target_N``, ``attn0``, ``sadr``, ``norm_penalty``): ``(loss, d loss / d delta_ND, log-probs,
    attention)``, the loss being the targets' cross-entropy, the norm penalty and SADR's attention KL.
    """
    envoy, _ = model.envoy(f"blocks.{layer}.mlp.hook_post")  # the down projection: input the key, output the value
    pattern_envoys = [model.envoy(f"blocks.{layer_}.attn.hook_pattern") for layer_ in later]
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    leaf, training = delta_ND, objective is not None
    u_NF, delta_ND = u_NF.to(model.device), delta_ND.to(model.device)
    obj = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in (objective or {}).items()}
    with torch.set_grad_enabled(training), model.eager_attention(), \
            model.nn.trace(inputs, **model.trace_kwargs) as tracer:  # fmt: skip
        h_NLF = read_site(envoy, "input")
        out_NLD = read_site(envoy, "output")
        scale_NL = (h_NLF.float() * u_NF[:, None, :]).sum(-1)
        write_site(envoy, "output", out_NLD + (scale_NL[..., None] * delta_ND[:, None, :]).to(out_NLD.dtype))
        attn = torch.stack([read_site(e, io)[:, :, -1, :].float() for e, io in pattern_envoys], 1) if later else None
        logp_NV = torch.log_softmax(readout(read_site(last, "output")[:, -1]).float(), -1)
        if training:
            rows = torch.arange(logp_NV.shape[0], device=logp_NV.device)
            loss = -logp_NV[rows, obj["target_N"]].sum() + obj["norm_penalty"] * (delta_ND**2).sum()
            if obj["sadr"] > 0 and attn is not None:
                p0 = obj["attn0"]
                kl = (p0 * (p0.clamp_min(1e-9).log() - attn.clamp_min(1e-9).log())).sum()
                loss = loss + obj["sadr"] * kl
            (grad,) = torch.autograd.grad(loss, [leaf])
            out = nnsight.save((loss.detach(), grad.detach(), logp_NV.detach(), attn))
        else:
            out = nnsight.save((logp_NV, attn))
        tracer.stop()
    free_trace_memory()
    return tuple(None if t is None else t.detach().cpu() for t in out)


def attention_kl(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """KL(before || after) of attention rows, summed over layers and heads, per row ``[N]``."""
    p, q = before.clamp_min(1e-9), after.clamp_min(1e-9)
    return (before * (p.log() - q.log())).sum(-1).sum((1, 2))


@dataclass(repr=False)
class RankOneEdit:
    """Rank-one edits of one layer's down projection, one per fact: ``u_NF`` keys' directions, ``delta_ND`` values."""

    prompts: list[str]
    targets: list[str]
    subjects: list[str | None]
    layer: int
    parameter: str
    u_NF: torch.Tensor
    delta_ND: torch.Tensor
    table: pd.DataFrame  # fact, prompt, target, p_before, p_after, delta_norm, attention_kl
    history: pd.DataFrame  # step, fact, loss, p_target
    sadr: float = 0.0
    kind: str = "edit"

    @property
    def success(self) -> float:
        """Share of facts whose target is the most likely next token after the edit."""
        return float(self.table.top1_after.mean())

    def weight_delta(self, fact: int = 0) -> torch.Tensor:
        """Fact ``fact``'s update ``delta u^T`` in the parameter's layout (``[D, F]``, or ``[F, D]`` for Conv1D)."""
        fact = check_int("fact", fact, 0, len(self.prompts) - 1)
        return torch.outer(self.delta_ND[fact], self.u_NF[fact])

    @contextlib.contextmanager
    def applied(self, model: Model, fact: int = 0) -> Iterator[None]:
        """Fact ``fact``'s update written into the weights for the duration, restored bit for bit after."""
        delta = self.weight_delta(fact)
        shape = tuple(model.module.get_parameter(self.parameter).shape)
        with edited_weights(model, {self.parameter: delta if shape == tuple(delta.shape) else delta.T}):
            yield

    def random_like(self, seed: int = 0) -> RankOneEdit:
        """The control: random ``delta`` directions of the same norms on the same keys (scores not recomputed)."""
        g = torch.Generator().manual_seed(check_int("seed", seed, 0))
        noise = torch.randn(self.delta_ND.shape, generator=g)
        scaled = noise * (self.delta_ND.norm(dim=-1, keepdim=True) / noise.norm(dim=-1, keepdim=True))
        return replace(self, delta_ND=scaled, kind="random", table=self.table.assign(p_after=np.nan))

    def chart(self) -> Any:
        """The target's probability over the optimisation steps, one line per fact."""
        import altair as alt

        return offline(alt.Chart(self.history).mark_line().encode(
            x="step:Q", y=alt.Y("p_target:Q", title="p(target)"), color="fact:N",
            tooltip=["step", "fact", "p_target"],
        ).properties(title=f"Rank-one edit at layer {self.layer} (sadr={self.sadr:g})",
                     width=320, height=180))  # fmt: skip

    def __repr__(self) -> str:
        return (f"RankOneEdit({len(self.prompts)} facts at {self.parameter}, sadr={self.sadr:g}; "
                f"success {self.success:.2f})")  # fmt: skip


def check_edit_inputs(model: Model, prompt: str | Sequence[str], target: str | Sequence[str],
                      subject: str | Sequence[str] | None, layer: int
                      ) -> tuple[list[str], list[int], list[Any]]:  # fmt: skip
    """Prompts, target token ids and subjects, checked before any forward pass."""
    prompts = check_texts(prompt)
    check_int("layer", layer, 0, model.n_layers - 1)
    targets = as_list("target", target, len(prompts))
    ids = [single_token_id(model.tokenizer, t, "target") for t in targets]
    subjects: list[Any] = [None] * len(prompts) if subject is None else as_list("subject", subject, len(prompts))
    for p, s in zip(prompts, subjects, strict=True):
        subject_span(model, p, s)
    return prompts, ids, subjects


def optimise(model: Model, enc: dict[str, torch.Tensor], layer: int, u_NF: torch.Tensor, objective: dict[str, Any],
             steps: int, lr: float, job: ResumableJob, progress: Any
             ) -> tuple[torch.Tensor, list[list[float]]]:  # fmt: skip
    """Adam on ``delta_ND`` from zero (or the job's checkpoint): the values and each step's target probabilities."""
    later = list(range(layer + 1, model.n_layers))
    n, d_model = u_NF.shape[0], objective["d_model"]
    delta_ND = torch.zeros(n, d_model, requires_grad=True)
    opt = torch.optim.Adam([delta_ND], lr=lr)
    state = job.start()
    step, p_target = 0, []
    if state is not None:
        step, p_target = int(state["step"]), [list(map(float, row)) for row in state["p_target"].tolist()]
        with torch.no_grad():
            delta_ND.copy_(state["delta"])
        if step:
            opt.state[delta_ND] = {k: state[k].clone() for k in ("step", "exp_avg", "exp_avg_sq")}
    rows, target_N = torch.arange(n), objective["target_N"]
    with job.progress(steps, step, "rank-one edit", progress) as bar:
        while step < steps:
            _, grad, logp, _ = edited_trace(model, enc, layer, u_NF, delta_ND, later, objective)
            p_target.append(logp[rows, target_N].exp().tolist())
            delta_ND.grad = grad
            opt.step()
            step += 1
            bar.update(1)
            if job.due(step, 5, steps):
                adam = opt.state[delta_ND]
                job.commit({"step": step, "delta": delta_ND.detach().clone(), "p_target": torch.tensor(p_target),
                            **{k: adam[k].clone() for k in ("step", "exp_avg", "exp_avg_sq")}})  # fmt: skip
    return delta_ND.detach().clone(), p_target


def rank_one_edit(
    model: Model, prompt: str | Sequence[str], target: str | Sequence[str], layer: int,
    subject: str | Sequence[str] | None = None, steps: int = 30, lr: float = 0.5, sadr: float = 0.0,
    norm_penalty: float = 1e-3, key_texts: Sequence[str] | None = None, seed: int = 0,
    folder: str | os.PathLike[str] | None = None, progress: Any = True,
) -> RankOneEdit:  # fmt: skip
    """Edit each fact so that ``prompt`` continues with ``target``: a rank-one update of ``layer``'s MLP output.

    ``subject`` (default: the prompt's last token) picks the key position; ``sadr > 0`` adds SADR's attention
    KL at the last token (layers after ``layer``) to the loss. With ``folder``, the optimisation is a resumable
    job (a rerun with the same inputs finds it finished).

    >>> edit = rank_one_edit(model, ["The Eiffel Tower is in the city of"], [" Rome"], 4, ["The Eiffel Tower"])
    """
    prompts, ids, subjects = check_edit_inputs(model, prompt, target, subject, layer)
    steps = check_positive_int("steps", steps)
    lr, sadr = check_float("lr", lr, above=0.0), check_float("sadr", sadr, 0.0)
    norm_penalty = check_float("norm_penalty", norm_penalty, 0.0)
    key_texts = None if key_texts is None else check_texts(key_texts)
    targets = as_list("target", target, len(prompts))
    inputs = {"model": model.fingerprint(), "prompts": prompts, "targets": targets, "subjects": subjects,
              "layer": layer, "steps": steps, "lr": lr, "sadr": sadr, "norm_penalty": norm_penalty, "seed": seed,
              "key_texts": None if key_texts is None else text_digest(key_texts)}  # fmt: skip
    job = ResumableJob(JOB, folder, inputs)
    enc = model.to_tokens(prompts, padding_side="left")
    pad = enc["attention_mask"].shape[1] - enc["attention_mask"].sum(1)
    cols = torch.tensor([subject_span(model, p, s)[1] for p, s in zip(prompts, subjects, strict=True)]) + pad
    rows, target_N = torch.arange(len(prompts)), torch.tensor(ids)
    u_NF = key_directions(model, keys_at(model, enc, layer, rows, cols), layer, key_texts)
    later = list(range(layer + 1, model.n_layers))
    d_model = model.site_dim(f"blocks.{layer}.hook_resid_post")
    logp0, attn0 = edited_trace(model, enc, layer, u_NF, torch.zeros(len(prompts), d_model), later)
    objective = {"target_N": target_N, "attn0": attn0, "sadr": sadr, "norm_penalty": norm_penalty, "d_model": d_model}
    torch.manual_seed(seed)
    delta, p_target = optimise(model, enc, layer, u_NF, objective, steps, lr, job, progress)
    logp1, attn1 = edited_trace(model, enc, layer, u_NF, delta, later)
    kl = attention_kl(attn0, attn1) if later else torch.zeros(len(prompts))
    table = pd.DataFrame({"fact": rows.numpy(), "prompt": prompts, "target": targets,
                          "p_before": logp0[rows, target_N].exp().numpy(),
                          "p_after": logp1[rows, target_N].exp().numpy(),
                          "top1_after": (logp1.argmax(-1) == target_N).numpy(),
                          "delta_norm": delta.norm(dim=-1).numpy(), "attention_kl": kl.numpy()})  # fmt: skip
    history = pd.DataFrame([{"step": step, "fact": i, "p_target": p} for step, row in enumerate(p_target)
                            for i, p in enumerate(row)])  # fmt: skip
    path, _ = site_module_path(model.check_mapped(), model.parse_site(f"blocks.{layer}.mlp.hook_post"))
    return RankOneEdit(prompts=prompts, targets=targets, subjects=subjects, layer=layer, parameter=f"{path}.weight",
                       u_NF=u_NF, delta_ND=delta, table=table, history=history, sadr=sadr)  # fmt: skip
