"""The logit lens: read each layer's residual stream through the final norm and unembedding.

:func:`logit_lens` returns a :class:`LogitLensResult`: the logits tensor (index it, compare it, do maths
with it as before) that also knows its model and texts, so a notebook shows it as a layers x positions
view (``ilab.widgets.LogitLens``): each cell the top next token and its probability, coloured by the
probability of a chosen token. :func:`lens_view` prepares that view's data, in one trace.

Example
-------
>>> lens = logit_lens(model, "When Mary and John went to the store, John gave a drink to")
>>> lens.shape                       # [batch, n_layers, vocab] at the last position
>>> (lens[0, :, mary] - lens[0, :, john])   # when the answer appears, layer by layer
>>> lens                             # in a notebook: the LogitLens view of the first text
>>> logit_lens(model, texts, positions=None).shape   # [batch, n_layers, n_positions, vocab]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import nnsight
import numpy as np
import torch

from ..checks import check_int, check_texts, single_token_id
from ..memory.budget import check_memory
from ..model.model import free_trace_memory, position_columns
from ..model.trace_ops import log_normaliser, read_site

if TYPE_CHECKING:
    from ..model.model import Model

#: Builds the widget a result displays as; ``interplab.widgets`` sets it (the engine never imports widgets).
VIEWERS: list[Callable[[LogitLensResult], Any]] = []


def shown_as(result: Any, viewers: Sequence[Callable[[Any], Any]], include: Any = None, exclude: Any = None) -> Any:
    """``result``'s Jupyter display: the last registered viewer's widget, with ``repr(result)`` as its plain text
    (only the plain text when no viewer is registered, i.e. ``interplab.widgets`` was not imported)."""
    if not viewers:
        return {"text/plain": repr(result)}
    data = viewers[-1](result)._repr_mimebundle_(include=include, exclude=exclude)
    data = data[0] if isinstance(data, tuple) else data
    return {**data, "text/plain": repr(result)}


def logit_lens(model: Model, texts: str | Sequence[str], positions: int | Sequence[int] | None = -1) -> LogitLensResult:
    """Logits read from every block's output, at ``positions`` of each text (like :meth:`Model.logits`).

    ``positions=-1`` (one position, the default) gives [batch, n_layers, vocab]; a list of positions or
    ``None`` (every position, padded) gives [batch, n_layers, n_positions, vocab]. The last layer's logits
    equal ``model.logits``; they are float32 whatever the model's dtype. Runs inside one trace, so it works
    remotely too.

    >>> lens = ilab.logit_lens(model, "The capital of France is")
    >>> lens[0, -1].argmax()          # the model's own prediction
    """
    texts = check_texts(texts)
    model.readout  # noqa: B018 - the final norm and unembedding: a clear error when they are not found
    pos_list, longest, n_pos = model.position_plan(texts, positions)
    per_text = model.n_layers * n_pos * _vocab(model)  # logits returned per text
    batch = model.fit_batch(
        len(texts), longest, "logit_lens", n_logits=0, output=4 * len(texts) * per_text,
        per_row=(2 * model.dtype.itemsize + 4) * per_text,  # each layer's logits, the softcap's, the float32 copy
        hint="Give fewer texts at a time, or fewer positions (positions=-1 reads only each text's last token).",
        copies=1,  # each batch is written into the result
    )  # fmt: skip
    logits = torch.zeros(len(texts), model.n_layers, n_pos, _vocab(model))
    start = 0
    for chunk in model.batches(texts, batch, "logit_lens"):
        _lens_batch(model, model.to_tokens(chunk), pos_list, logits[start : start + len(chunk)])
        start += len(chunk)
    if isinstance(positions, int):
        logits = logits[:, :, 0]
    return LogitLensResult.wrap(logits, model, texts, pos_list)


def _lens_batch(model: Model, enc: dict[str, torch.Tensor], pos_list: list[int] | None, out: torch.Tensor) -> None:
    """The lens logits of one batch, in one trace, written into ``out`` [batch, n_layers, n_positions, vocab]."""
    readout = model.readout
    lengths = enc["attention_mask"].sum(1)
    if pos_list is None:
        cols = torch.arange(enc["input_ids"].shape[1]).expand(len(lengths), -1)
    else:
        cols = position_columns(lengths, pos_list)  # [batch, n_pos]
    rows = torch.arange(len(lengths))[:, None].expand_as(cols)
    blocks = [model.block(layer) for layer in range(model.n_layers)]
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        per_layer = []
        for block in blocks:
            per_layer.append(readout(read_site(block, "output")[rows, cols]))
        per_layer = nnsight.save(per_layer)
        tracer.stop()
    free_trace_memory()
    for layer, logits in enumerate(per_layer):  # [batch, n_pos of the batch, vocab], copied as float32
        out[:, layer, : logits.shape[1]] = logits.detach()


def _vocab(model: Model) -> int:
    return int(getattr(model.config, "vocab_size", 0) or 0)


class LogitLensResult(torch.Tensor):
    """The logit-lens logits (a tensor) with their model and texts, shown as a ``LogitLens`` view in a notebook.

    Indexing and torch operations give plain tensors; :meth:`view_data` prepares the view of one text.
    """

    model: Model
    texts: list[str]
    positions: list[int] | None
    _views: dict[tuple[int, int, tuple[str | int, ...]], LensView]  # view_data's results by its arguments

    @staticmethod
    def wrap(logits: torch.Tensor, model: Model, texts: list[str], positions: list[int] | None) -> LogitLensResult:
        out = torch.Tensor._make_subclass(LogitLensResult, logits)
        out.model, out.texts, out.positions = model, texts, positions
        out._views = {}
        return out

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))  # results are plain tensors (a slice is not a lens)

    def tensor(self) -> torch.Tensor:
        """The logits as a plain tensor."""
        return self.as_subclass(torch.Tensor)

    def view_data(self, text: int = 0, top_k: int = 10, tokens: Sequence[str | int] = ()) -> LensView:
        """The data of the layers x positions view of one text (computed once, in one trace; see :func:`lens_view`).

        >>> lens.view_data(0, tokens=[" Mary"]).prob(" Mary")
        """
        check_int("text", text, 0, len(self.texts) - 1)
        key = (text, top_k, tuple(tokens))
        if key not in self._views:
            self._views[key] = lens_view(self.model, self.texts[text], top_k=top_k, tokens=tokens)
        return self._views[key]

    # mypy reads Tensor.__repr__'s keyword-only argument without its name, so no override can match it
    def __repr__(self) -> str:  # type: ignore[override]
        where = "every position" if self.positions is None else f"positions {self.positions}"
        return (f"LogitLensResult({len(self.texts)} text(s), {self.model.n_layers} layers, {where}; "
                f"logits {list(self.shape)})")  # fmt: skip

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        return shown_as(self, VIEWERS, include, exclude)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return torch.Tensor.__reduce_ex__(self.tensor(), protocol)  # pickles as the plain tensor

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.Tensor:
        return self.tensor().clone()  # a copy is the plain tensor (not a second model)


@dataclass
class LensView:
    """One text through the lens: the top next tokens of every layer x position and the probabilities of candidates.

    ``candidates`` are the token ids in any cell's top-k (plus any asked for), ``candidate_probs`` their
    probability in every cell [n_layers, n_positions, n_candidates]; ``top_ids`` / ``top_probs`` are
    [n_layers, n_positions, k]. Layer ``L`` is block ``L``'s output (the last equals the model's logits).
    """

    tokens: list[str]
    top_ids: np.ndarray
    top_probs: np.ndarray
    candidates: np.ndarray
    candidate_tokens: list[str]
    candidate_probs: np.ndarray
    layers: list[int] = field(default_factory=list)

    def prob(self, token: str | int, tokenizer: Any = None) -> np.ndarray:
        """The probability [n_layers, n_positions] of one candidate (its id, or its text as in ``candidate_tokens``)."""
        if isinstance(token, str):
            if token not in self.candidate_tokens:
                raise ValueError(f"{token!r} is not a candidate of this view; candidates: {self.candidate_tokens[:20]}")
            index = self.candidate_tokens.index(token)
        else:
            hits = np.nonzero(self.candidates == token)[0]
            if not len(hits):
                raise ValueError(f"Token id {token} is not a candidate of this view; ask for it with tokens=[...].")
            index = int(hits[0])
        return self.candidate_probs[:, :, index]

    def top(self, layer: int, position: int) -> list[tuple[str, float]]:
        """The top next tokens of one cell with their probabilities."""
        vocab = dict(zip(self.candidates.tolist(), self.candidate_tokens, strict=True))
        ids, probs = self.top_ids[layer, position], self.top_probs[layer, position]
        return [(vocab[int(i)], float(p)) for i, p in zip(ids, probs, strict=True)]


def lens_view(model: Model, text: str, top_k: int = 10, tokens: Sequence[str | int] = ()) -> LensView:
    """Every layer x position of one text through the lens, in one trace (remote-safe).

    Each block's output is normalised and unembedded once (the logits of :func:`logit_lens`, in the model's
    dtype); the top ``top_k`` tokens and the log-normaliser of each cell are kept, then the
    probability of every candidate (any cell's top tokens, plus ``tokens``) in every cell is computed from the
    normalised states and the candidates' unembedding rows. Probabilities are normalised in float32 only.

    >>> view = lens_view(model, "When Mary and John went to the store, John gave a drink to", tokens=[" Mary"])
    >>> view.prob(" Mary")[:, -1]      # P(" Mary") at the last position, layer by layer
    """
    (text,) = check_texts(text)
    check_int("top_k", top_k, minimum=1)
    model.readout_parts  # noqa: B018 - the final norm and unembedding: a clear error when they are not found
    asked = torch.tensor([single_token_id(model.tokenizer, t, "token") for t in tokens], dtype=torch.long)
    enc = model.to_tokens(text)
    n_pos, vocab = int(enc["input_ids"].shape[1]), _vocab(model)
    n_candidates = min(vocab, model.n_layers * n_pos * top_k + len(asked))
    check_memory(f"lens_view of {n_pos:,} tokens with top_k={top_k:,}",  # one layer's logits, every candidate's
                 model.forward_bytes(1, n_pos, None) + 3 * 4 * model.n_layers * n_pos * (n_candidates + top_k),
                 "Use a shorter text or a smaller top_k.")  # fmt: skip
    blocks = [model.block(layer) for layer in range(model.n_layers)]
    norm, unembed, cap = model.readout_parts
    inputs = {k: v.to(model.device) for k, v in enc.items()}
    with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
        states, norms, top_ids, top_logits = [], [], [], []
        for block in blocks:
            h = norm(read_site(block, "output")[0])  # [P, D]
            logits = unembed(h)
            if cap:
                logits = torch.tanh(logits / cap) * cap
            states.append(h)
            norms.append(log_normaliser(logits))  # in float32, its copy freed inside the function
            best = logits.topk(top_k, dim=-1)  # the logits of logit_lens; float32 holds them exactly
            top_ids.append(best.indices)
            top_logits.append(best.values.float())
        ids = torch.stack(top_ids)  # [L, P, k]
        lse = torch.stack(norms)  # [L, P]
        candidates = torch.unique(torch.cat([ids.flatten(), asked.to(ids.device)]))
        rows = unembed.weight[candidates]  # [C, D]
        cand = torch.stack(states) @ rows.T  # [L, P, C]
        if unembed.bias is not None:
            cand = cand + unembed.bias[candidates]
        if cap:
            cand = torch.tanh(cand / cap) * cap
        cand = cand.float()
        saved = nnsight.save([ids, (torch.stack(top_logits) - lse[..., None]).exp(), candidates,
                              (cand - lse[..., None]).exp()])  # fmt: skip
        tracer.stop()
    ids, probs, candidates, cand_probs = (t.detach().cpu() for t in saved)
    return LensView(
        tokens=model.to_str_tokens(enc["input_ids"][0]),
        top_ids=ids.numpy().astype(np.int64),
        top_probs=probs.float().numpy(),
        candidates=candidates.numpy().astype(np.int64),
        candidate_tokens=[model.tokenizer.decode([int(i)]) for i in candidates],
        candidate_probs=cand_probs.float().numpy(),
        layers=list(range(model.n_layers)),
    )
