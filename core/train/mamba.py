"""A tiny Mamba and a tiny GPT-2 over the same residual skeleton, with their named sites, and what the
Transformers-vs-Mambas notebook measures on them (induction accuracy by half, the off-by-one offset).

:class:`TinyMamba` is a Mamba-1 language model written out: each block is a pre-norm selective state-space
mixer (in_proj to ``x`` and the gate ``z``, a causal depthwise conv1d over ``x``, the input-dependent ``dt``,
``B`` and ``C``, a diagonal ``A``, the scan, ``D`` skip, the SiLU gate, out_proj), with no MLP, as in Mamba.
The scan is the reference recurrence, a loop over positions (quick for the short sequences trained here; a
long sequence wants the parallel or fused kernels of the ``mamba_ssm`` package).
:class:`TinyGPT` is a GPT-2 block stack (pre-norm causal attention and a GELU MLP, learned positions).
``MAMBA_SITES`` and ``GPT_SITES`` give them named sites with ``ilab.load_model(net, sites=...)``.

Example
-------
>>> net = TinyMamba(n_tokens=32)
>>> model = ilab.load_model(net, sites=MAMBA_SITES)
>>> model.collect(["1 2 3"], sites="attn_out")     # the mixer's output
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..checks import check_int
from ..model.trace_ops import read_site, write_site
from .nets import HeadsAttention

#: Named sites of :class:`TinyMamba` (``ilab.load_model(net, sites=MAMBA_SITES)``). A ``sites=`` table takes the
#: transformer site kinds, so the mixer's output (the sequence-mixing sublayer's output added to the residual
#: stream, in the place of attention's) is ``hook_attn_out``; ``hook_resid_pre`` is the stream its norm reads.
MAMBA_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.hook_attn_out": "blocks.{L}.mixer",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "final_norm": "ln_f",
    "unembed": "unembed",
}
#: Named sites of :class:`TinyGPT`.
GPT_SITES = {
    "hook_embed": "embed",
    "blocks.{L}.attn.hook_z": "blocks.{L}.attn.out:input",
    "blocks.{L}.hook_attn_out": "blocks.{L}.attn",
    "blocks.{L}.mlp.hook_post": "blocks.{L}.act",
    "blocks.{L}.hook_mlp_out": "blocks.{L}.down",
    "blocks.{L}.hook_resid_post": "blocks.{L}",
    "final_norm": "ln_f",
    "unembed": "unembed",
}


def selective_scan(u_BLEN: torch.Tensor, log_decay_BLEN: torch.Tensor, c_BLN: torch.Tensor) -> torch.Tensor:
    """``y[b, t, e] = sum_n C[b, t, n] * h[b, t, e, n]`` where ``h_t = exp(log_decay_t) * h_{t-1} + u_t``: the
    reference recurrence, one position at a time (memory of one state per row; quick for short sequences).

    >>> selective_scan(torch.ones(1, 3, 1, 1), torch.zeros(1, 3, 1, 1), torch.ones(1, 3, 1))[0, :, 0].tolist()
    [1.0, 2.0, 3.0]
    """
    state_BEN = torch.zeros_like(u_BLEN[:, 0])
    out = []
    # unbind once: indexing one position at a time makes backward fill a full-size gradient per position
    for decay_BEN, u_BEN, c_BN in zip(log_decay_BLEN.exp().unbind(1), u_BLEN.unbind(1), c_BLN.unbind(1)):
        state_BEN = decay_BEN * state_BEN + u_BEN
        out.append(torch.einsum("ben,bn->be", state_BEN, c_BN))
    return torch.stack(out, 1)


class MambaMixer(nn.Module):
    """A Mamba-1 selective state-space mixer: ``[B, L, d] -> [B, L, d]``."""

    def __init__(self, d: int, expand: int = 2, d_state: int = 8, d_conv: int = 4):
        super().__init__()
        inner, self.d_state = expand * d, d_state
        self.dt_rank = max(1, d // 16)
        self.in_proj = nn.Linear(d, 2 * inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, d_conv, groups=inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        # The init's exp and log run in float64 and round to float32: vectorised float32 exp/log differ in the last
        # bit between CPUs, and a job's recorded model fingerprint (taken of the initial weights) must not.
        log_N = torch.log(torch.arange(1, d_state + 1, dtype=torch.float64))
        self.A_log = nn.Parameter(log_N.float().repeat(inner, 1))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, d, bias=False)
        with torch.no_grad():  # Mamba's dt init: softplus(bias) log-uniform in [1e-3, 1e-1] (a long memory)
            u_E = torch.rand(inner).double()
            dt_E = torch.exp(u_E * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_proj.bias.copy_((dt_E + torch.log(-torch.expm1(-dt_E))).float())

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        n_pos = x_BLD.shape[1]
        x_BLE, gate_BLE = self.in_proj(x_BLD).chunk(2, -1)
        x_BLE = F.silu(self.conv(x_BLE.transpose(1, 2))[..., :n_pos].transpose(1, 2))
        dt_BLR, b_BLN, c_BLN = self.x_proj(x_BLE).split([self.dt_rank, self.d_state, self.d_state], -1)
        dt_BLE = F.softplus(self.dt_proj(dt_BLR))
        log_decay_BLEN = dt_BLE[..., None] * -self.A_log.exp()
        u_BLEN = (dt_BLE * x_BLE)[..., None] * b_BLN[:, :, None]
        y_BLE = selective_scan(u_BLEN, log_decay_BLEN, c_BLN) + self.D * x_BLE
        return self.out_proj(y_BLE * F.silu(gate_BLE))


class MambaBlock(nn.Module):
    """Pre-norm residual block around a :class:`MambaMixer`."""

    def __init__(self, d: int, d_state: int = 8):
        super().__init__()
        self.norm, self.mixer = nn.LayerNorm(d), MambaMixer(d, d_state=d_state)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        return x_BLD + self.mixer(self.norm(x_BLD))


class GPTBlock(nn.Module):
    """A GPT-2 block: pre-norm attention, then a GELU MLP four times as wide."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), HeadsAttention(d, n_heads, bias=True)
        self.ln2, self.up, self.act, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

    def forward(self, x_BLD: torch.Tensor) -> torch.Tensor:
        x_BLD = x_BLD + self.attn(self.ln1(x_BLD))
        return x_BLD + self.down(self.act(self.up(self.ln2(x_BLD))))


class _TokenLM(nn.Module):
    """Embedding, a list of blocks, a final norm and the unembedding: ids ``[B, L]`` to logits ``[B, L, V]``."""

    def __init__(self, n_tokens: int, d: int, blocks: Sequence[nn.Module], n_positions: int | None):
        super().__init__()
        self.embed = nn.Embedding(n_tokens, d)
        self.pos = nn.Parameter(torch.randn(n_positions, d) * 0.02) if n_positions else None
        self.max_positions = n_positions
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, n_tokens, bias=False)

    def forward(self, ids_BL: torch.Tensor) -> torch.Tensor:
        x_BLD = self.embed(ids_BL)
        if self.pos is not None:
            x_BLD = x_BLD + self.pos[: ids_BL.shape[1]]
        for block in self.blocks:
            x_BLD = block(x_BLD)
        return self.unembed(self.ln_f(x_BLD))


class TinyMamba(_TokenLM):
    """A Mamba-1 language model of ``n_layers`` :class:`MambaBlock` (no positions: the scan orders tokens).

    >>> TinyMamba(n_tokens=16, d=32, n_layers=2)(torch.zeros(1, 5, dtype=torch.long)).shape
    torch.Size([1, 5, 16])
    """

    def __init__(self, n_tokens: int, d: int = 32, n_layers: int = 2, d_state: int = 8):
        check_int("n_tokens", n_tokens, 2)
        super().__init__(n_tokens, d, [MambaBlock(d, d_state) for _ in range(check_int("n_layers", n_layers, 1))],
                         None)  # fmt: skip


class TinyGPT(_TokenLM):
    """A GPT-2 language model of ``n_layers`` :class:`GPTBlock` with learned positions.

    >>> TinyGPT(n_tokens=16, d=32, n_layers=2)(torch.zeros(1, 5, dtype=torch.long)).shape
    torch.Size([1, 5, 16])
    """

    def __init__(self, n_tokens: int, d: int = 32, n_layers: int = 2, n_heads: int = 2, n_positions: int = 64):
        check_int("n_tokens", n_tokens, 2)
        blocks = [GPTBlock(d, n_heads) for _ in range(check_int("n_layers", n_layers, 1))]
        super().__init__(n_tokens, d, blocks, check_int("n_positions", n_positions, 1))
        self.n_heads = n_heads


def halves_accuracy(module: nn.Module, ids_NL: torch.Tensor) -> dict[str, Any]:
    """Next-token accuracy of ``module`` on sequences repeated once (``[N, 2 * half]``), on each half.

    The first half's tokens are random (chance ``1 / vocab``); on the second half a model that does induction
    predicts the token that followed the current one's earlier copy.
    """
    half = ids_NL.shape[1] // 2
    with torch.no_grad():
        out = module(ids_NL)
        predicted_NL = getattr(out, "logits", out).argmax(-1)[:, :-1]
    right_NL = (predicted_NL == ids_NL[:, 1:]).float()
    return {"first_half": float(right_NL[:, : half - 1].mean()), "second_half": float(right_NL[:, half:].mean())}


#: The induction claim's least second-half accuracy, and its least margin over the first half and the control.
INDUCTION_ACCURACY, INDUCTION_MARGIN = 0.5, 0.3


def induction_claim(trained: dict[str, float], control: dict[str, float]) -> dict[str, Any]:
    """The induction claim as plain checks with ``holds``: ``trained`` (:func:`halves_accuracy` of the trained
    model) predicts the repeat (second-half accuracy at least ``INDUCTION_ACCURACY``), far better than the random
    first half and than ``control`` (an untrained model of the same shape) on the repeat.

    >>> induction_claim({"first_half": 0.03, "second_half": 0.98}, {"first_half": 0.03, "second_half": 0.03})["holds"]
    True
    """
    checks = {
        "repeat_predicted": trained["second_half"] >= INDUCTION_ACCURACY,
        "above_first_half": trained["second_half"] >= trained["first_half"] + INDUCTION_MARGIN,
        "above_control": trained["second_half"] >= control["second_half"] + INDUCTION_MARGIN,
    }
    return {**checks, "holds": all(checks.values()), "trained": trained, "control": control}


def induction_pairs(task: Any, rows_N: torch.Tensor, earlier: int) -> tuple[list[str], list[str], torch.Tensor]:
    """Clean and corrupted prompts for the off-by-one measure, and the answer of each.

    Each clean prompt is a repeated row of ``task`` (:func:`~interplab.core.train.tasks.repeated_tokens`) cut
    right after the second copy of the token at position ``earlier`` (the answer: the token that followed its
    first copy). The corrupted prompt replaces the first copy (position ``earlier``) by a token absent from the
    row, so the model cannot find what followed it. Rows whose token at ``earlier`` occurs elsewhere in the
    first half are left out (its earlier copy would be ambiguous).
    """
    half = task.inputs_NL.shape[1] // 2
    earlier = check_int("earlier", earlier, 0, half - 2)
    clean, corrupt, answers = [], [], []
    for row in task.inputs_NL[rows_N].tolist():
        first = row[:half]
        absent = [t for t in range(len(task.vocab)) if t not in first]
        if first.count(first[earlier]) > 1 or not absent:
            continue
        prompt = row[: half + earlier + 1]
        clean.append(" ".join(task.vocab[t] for t in prompt))
        corrupt.append(" ".join(task.vocab[t] for t in [*prompt[:earlier], absent[0], *prompt[earlier + 1 :]]))
        answers.append(first[earlier + 1])
    return clean, corrupt, torch.tensor(answers)


def _position_edit(envoy: Any, io: str, source_NLD: torch.Tensor, pos: int) -> Any:
    """An ``edit`` that writes ``source_NLD``'s values at position ``pos`` into the site (``envoy``, ``io``)."""

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        value = read_site(envoy, io).clone()
        value[:, pos] = source_NLD[:, pos].to(value.dtype)
        write_site(envoy, io, value)

    return edit


def _answer_logprob(logits_NV: torch.Tensor, answers_N: torch.Tensor) -> float:
    return float(logits_NV.float().log_softmax(-1).gather(1, answers_N[:, None]).mean())


def position_patching(model: Any, site: str, clean: list[str], corrupt: list[str], answers_N: torch.Tensor) -> Any:
    """Share of the answer's log-probability restored by patching ``site`` (one per layer, ``{L}`` in its name)
    from the clean run into the corrupted one at one position at a time: a ``[layer, position]`` DataFrame.

    0 is the corrupted run, 1 the clean one. Every prompt has the same length (positions align).

    >>> position_patching(model, "blocks.{L}.hook_attn_out", *induction_pairs(task, rows, 6))
    """
    import pandas as pd

    n = len(clean)
    clean_lp = _answer_logprob(model.logits(clean, batch_size=n)[:, -1], answers_N)
    corrupt_lp = _answer_logprob(model.logits(corrupt, batch_size=n)[:, -1], answers_N)
    names = [site.format(L=layer) for layer in range(model.n_layers)]
    acts = model.collect(clean, sites=names, batch_size=n)
    n_pos = acts[names[0]].shape[1]
    table = {}
    for name in names:
        envoy, io = model.envoy(name)
        source_NLD = acts[name]
        row = []
        for pos in range(n_pos):
            edit = _position_edit(envoy, io, source_NLD, pos)
            patched = _answer_logprob(model.logits(corrupt, batch_size=n, edit=edit)[:, -1], answers_N)
            row.append((patched - corrupt_lp) / (clean_lp - corrupt_lp))
        table[name] = row
    return pd.DataFrame(table).T.rename_axis(index="site", columns="position")
