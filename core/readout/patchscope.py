"""Patchscopes: decode a hidden state by patching it into a target prompt and reading what the model says.

:func:`patchscope` reads each chosen layer's residual stream (the block's output) at one position of a
text, writes it over the placeholder token of a target prompt at the same layer (or ``target_layer``),
and decodes: the next-token distribution at the target's last position and a few greedy tokens
(Ghandeharioun et al. 2024; the identity prompt ``"cat -> cat; 1135 -> 1135; hello -> hello; ? ->"``
asks the model to repeat what the placeholder holds). Every layer is one row of one batch, and each
greedy step is one trace, so it runs remotely too. The result shows as a ``LogitLens`` view: layers x
greedy steps, each cell the step's top token.

Example
-------
>>> scope = patchscope(model, "The Eiffel Tower is in Paris", position=-1)
>>> scope.generated[-4:]            # what the last layers' states decode to, a few tokens each
>>> scope.view.prob(" Paris")       # [layers, steps]
>>> scope                           # in a notebook: the LogitLens view
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch

from ..checks import check_int, check_texts, single_token_id
from ..memory.budget import check_memory
from ..model.model import free_trace_memory
from ..model.trace_ops import read_site, token_probs, write_site
from .lens import LensView, shown_as

if TYPE_CHECKING:
    from ..model.model import Model

#: The identity prompt of Patchscopes: the model repeats what the placeholder ``?`` holds.
IDENTITY_TARGET = "cat -> cat; 1135 -> 1135; hello -> hello; ? ->"
#: Builds the widget a result displays as; ``interplab.widgets`` sets it (the engine never imports widgets).
VIEWERS: list[Callable[[PatchscopeResult], Any]] = []


@dataclass
class PatchscopeResult:
    """What each layer's hidden state decodes to in the target prompt.

    ``logits`` [n_layers, vocab] (float32) are the target's next-token logits with that layer's state
    patched in; ``generated_ids`` [n_layers, n_tokens] the greedy continuation; ``view`` the same as a
    :class:`~interplab.core.readout.lens.LensView` (rows the layers, columns the greedy steps).
    """

    layers: list[int]
    source_tokens: list[str]
    position: int  # in the source text, non-negative
    target_tokens: list[str]
    placeholder: int  # the placeholder's index in the target's tokens
    logits: torch.Tensor
    generated_ids: np.ndarray
    generated: list[str]  # each layer's greedy continuation as text
    view: LensView

    def top(self, layer: int, k: int = 5) -> list[tuple[str, float]]:
        """The top next tokens (first step) of one layer's patch, with their probabilities.

        >>> scope.top(6)
        """
        if layer not in self.layers:
            raise ValueError(f"Layer {layer!r} was not patched; the layers are {self.layers}.")
        return self.view.top(self.layers.index(layer), 0)[:k]

    def __repr__(self) -> str:
        return (f"PatchscopeResult({len(self.layers)} layers, source token {self.source_tokens[self.position]!r} "
                f"at {self.position}, {self.generated_ids.shape[1]} greedy tokens)")  # fmt: skip

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return shown_as(self, VIEWERS, include, exclude)


def patchscope(
    model: Model, text: str, target: str = IDENTITY_TARGET, layers: Sequence[int] | None = None,
    position: int = -1, *, placeholder: str = "?", target_layer: int | None = None, n_tokens: int = 4,
    top_k: int = 10, tokens: Sequence[str | int] = (),
) -> PatchscopeResult:  # fmt: skip
    """Patch each layer's hidden state at ``position`` of ``text`` over the ``placeholder`` token of
    ``target`` and decode ``n_tokens`` greedy tokens (and the next-token distribution).

    ``layers`` are the source layers (default: all); each is written at the same layer of the target, or at
    ``target_layer`` for all. The placeholder is the last target token whose text (spaces stripped) is
    ``placeholder``. ``tokens`` are extra candidates whose probabilities the view keeps.

    >>> scope = ilab.patchscope(model, "Michael Jordan plays", position=2, layers=range(4, 12))
    >>> scope.generated
    """
    src_ids, tgt_ids, layers, position, ph = _check(model, text, target, layers, position, placeholder)
    if target_layer is not None:
        check_int("target_layer", target_layer, 0, model.n_layers - 1)
    check_int("n_tokens", n_tokens, minimum=1)
    check_int("top_k", top_k, minimum=1)
    asked = [single_token_id(model.tokenizer, t, "token") for t in tokens]
    vocab, rows = int(model.config.vocab_size), len(layers)
    length = int(tgt_ids.shape[1]) + n_tokens
    model.check_lengths([length], "target prompt with its greedy tokens")
    check_memory(f"patchscope of {rows} layers with {n_tokens} greedy tokens",
                 model.forward_bytes(rows, length, None) + 4 * rows * vocab * (n_tokens + 2),
                 "Give fewer layers or fewer n_tokens.")  # fmt: skip
    states_RD = _source_states(model, src_ids, layers, position)
    writes = [target_layer if target_layer is not None else layer for layer in layers]
    ids = tgt_ids.expand(rows, -1).clone()
    step_logits = []
    for _ in range(n_tokens):
        logits_RV = _patched_logits(model, ids, states_RD, writes, ph)
        step_logits.append(logits_RV)
        ids = torch.cat([ids, logits_RV.argmax(-1, keepdim=True)], 1)
    generated_ids = ids[:, tgt_ids.shape[1] :].numpy()
    view = _view(model, torch.stack(step_logits, 1), layers, top_k, asked)
    return PatchscopeResult(
        layers=layers, source_tokens=model.to_str_tokens(src_ids[0]), position=position,
        target_tokens=model.to_str_tokens(tgt_ids[0]), placeholder=ph, logits=step_logits[0],
        generated_ids=generated_ids, generated=[model.tokenizer.decode(row.tolist()) for row in generated_ids],
        view=view,
    )  # fmt: skip


def _check(
    model: Model, text: Any, target: Any, layers: Any, position: Any, placeholder: Any
) -> tuple[torch.Tensor, torch.Tensor, list[int], int, int]:
    """Tokenised source and target, the layers, the source position and the placeholder's index; before any pass."""
    (text,) = check_texts(text)
    (target,) = check_texts(target)
    if not isinstance(placeholder, str) or not placeholder.strip():
        raise ValueError(f"placeholder must be a non-empty string such as '?', got {placeholder!r}.")
    src_ids, tgt_ids = model.to_tokens(text)["input_ids"], model.to_tokens(target)["input_ids"]
    model.check_lengths([int(src_ids.shape[1])])
    n_src = int(src_ids.shape[1])
    check_int("position", position, -n_src, n_src - 1)
    pieces = [model.tokenizer.decode([int(i)]).strip() for i in tgt_ids[0]]
    hits = [i for i, piece in enumerate(pieces) if piece == placeholder.strip()]
    if not hits:
        raise ValueError(
            f"The target {target!r} has no placeholder token {placeholder!r} (its tokens: {pieces}); put the "
            f"placeholder where the hidden state goes, e.g. {IDENTITY_TARGET!r}, or pass placeholder=."
        )
    if hits[-1] == len(pieces) - 1:
        raise ValueError(f"The placeholder {placeholder!r} is the target's last token; the target must go on "
                         f"after it (e.g. {IDENTITY_TARGET!r}) so the model has something to decode.")  # fmt: skip
    chosen = list(range(model.n_layers)) if layers is None else _layers(layers, model.n_layers)
    return src_ids, tgt_ids, chosen, int(position) % n_src, hits[-1]


def _layers(layers: Any, n_layers: int) -> list[int]:
    items = [layers] if isinstance(layers, int) else list(layers)
    if not items:
        raise ValueError(f"layers is empty; give layers in 0..{n_layers - 1} or None for all.")
    for layer in items:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < n_layers:
            raise ValueError(f"Layer {layer!r} is out of range: the model has layers 0..{n_layers - 1}.")
    return [int(layer) for layer in items]


def _source_states(model: Model, ids: torch.Tensor, layers: list[int], position: int) -> torch.Tensor:
    """[n_layers, D]: each layer's block output at ``position`` of the source text, in one trace."""
    blocks = [model.block(layer) for layer in sorted(set(layers))]
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        saved = nnsight.save([read_site(block, "output")[0, position] for block in blocks])
        tracer.stop()
    free_trace_memory()
    by_layer = dict(zip(sorted(set(layers)), saved, strict=True))
    return torch.stack([by_layer[layer].detach() for layer in layers])


def _patched_logits(
    model: Model, ids: torch.Tensor, states_RD: torch.Tensor, writes: list[int], placeholder: int
) -> torch.Tensor:
    """[rows, vocab] float32: the last position's logits, row ``r`` with ``states_RD[r]`` at layer ``writes[r]``."""
    plan = [(layer, torch.tensor([r for r, w in enumerate(writes) if w == layer]))
            for layer in sorted(set(writes))]  # fmt: skip
    envoys = [(model.block(layer), rows.to(model.device)) for layer, rows in plan]
    values = [states_RD[rows].to(model.device) for _, rows in plan]
    last, readout = model.block(model.n_layers - 1), model.readout
    inputs = {"input_ids": ids.to(model.device), "attention_mask": torch.ones_like(ids).to(model.device)}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        for (block, rows), value in zip(envoys, values, strict=True):
            hidden = read_site(block, "output").clone()
            hidden[rows, placeholder] = value.to(hidden.dtype)
            write_site(block, "output", hidden)
        logits = nnsight.save(readout(read_site(last, "output")[:, -1]).float())
        tracer.stop()
    free_trace_memory()
    return logits.detach().cpu()


def _view(model: Model, logits_RSV: torch.Tensor, layers: list[int], top_k: int, asked: list[int]) -> LensView:
    """The steps as a lens view: rows the layers, columns the greedy steps."""
    probs = token_probs(logits_RSV)
    best = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    candidates = torch.unique(torch.cat([best.indices.flatten(), torch.tensor(asked, dtype=torch.long)]))
    return LensView(
        tokens=[f"+{step + 1}" for step in range(logits_RSV.shape[1])],
        top_ids=best.indices.numpy().astype(np.int64),
        top_probs=best.values.numpy().astype(np.float32),
        candidates=candidates.numpy().astype(np.int64),
        candidate_tokens=[model.tokenizer.decode([int(i)]) for i in candidates],
        candidate_probs=probs[:, :, candidates].numpy().astype(np.float32),
        layers=list(layers),
    )
