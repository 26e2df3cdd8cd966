"""Named sites on any ``torch.nn.Module``: a site table built from module paths, a tokenizer over a vocabulary.

A module that maps token ids ``[batch, pos]`` to logits ``[batch, pos, vocab]`` (a tiny transformer, an MLP
over token embeddings, a model written in a notebook cell) gets the sites every capability takes when
:func:`interplab.load_model` is given ``sites=``: a dict from site names (``{L}`` for the block index) to
module paths. A site is the module's output; ``"path:input"`` takes its input instead (``":weights"``: the
second element of an attention module's output, the pattern). Besides sites, the dict may name the block
list (``"blocks"``), the final norm (``"final_norm"``) and the unembedding (``"unembed"``), which
``model.logits``, the logit lens and patching metrics read through.

The module's ``n_heads`` attribute (default 1) splits ``attn.hook_z`` into heads (``site="heads"`` patching);
its ``max_positions`` attribute (default none) is the longest input it takes.

Texts are token names separated by spaces (``"3 + 4 ="``), looked up in ``tokenizer=`` (a list of token
names; by default ``"0" .. str(vocab - 1)``) by :class:`VocabTokenizer`; a Hugging Face tokenizer works too.

Example
-------
>>> model = ilab.load_model(net, sites={
...     "hook_embed": "embed",
...     "blocks.{L}.hook_resid_post": "layers.{L}",
...     "blocks.{L}.mlp.hook_post": "layers.{L}.act",
...     "unembed": "unembed",
... })
>>> model.collect(["1 2 3"], sites="resid_post")
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import nnsight
import torch

from .sites import KINDS, Family, parse_site, resolve, site_name

#: Keys of ``sites=`` that name model parts rather than sites.
PARTS = ("blocks", "final_norm", "unembed")
_IOS = ("output", "input", "weights")
#: How many module names an error lists.
_LISTED = 40


class VocabTokenizer:
    """Texts of space-separated token names to ids over a fixed vocabulary (what a task-trained model reads).

    >>> tok = VocabTokenizer(["a", "b", "="])
    >>> tok(["a b =", "b"], return_tensors="pt", padding=True)["input_ids"].tolist()
    [[0, 1, 2], [1, 0, 0]]
    """

    pad_token_id = 0
    bos_token_id = None
    eos_token_id = None
    unk_token_id = None
    padding_side = "right"

    def __init__(self, vocab: Sequence[str]):
        vocab = list(vocab)
        bad = [t for t in vocab if not isinstance(t, str) or not t or any(c.isspace() for c in t)]
        if not vocab or bad:
            raise ValueError(
                f"A vocabulary is a non-empty list of token names without spaces; got {bad[:3] or vocab!r:.80}."
            )
        if len(set(vocab)) != len(vocab):
            twice = sorted({t for t in vocab if vocab.count(t) > 1})
            raise ValueError(f"The vocabulary names {twice[:5]} more than once; each token name must be unique.")
        self.vocab = vocab
        self.ids = {t: i for i, t in enumerate(vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text; an unknown token is refused, naming the vocabulary."""
        out = []
        for name in text.split():
            if name not in self.ids:
                close = difflib.get_close_matches(name, self.vocab, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise ValueError(
                    f"Token {name!r} in {text!r:.80} is not in the vocabulary of {len(self)} tokens "
                    f"({', '.join(self.vocab[:12])}{', ...' if len(self) > 12 else ''}).{hint}"
                )
            out.append(self.ids[name])
        if not out:
            raise ValueError(f"{text!r} holds no token: texts are token names separated by spaces.")
        return out

    def __call__(
        self, texts: str | Sequence[str], return_tensors: str | None = None, padding: bool = False,
        padding_side: str = "right", return_offsets_mapping: bool = False, **_: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """``input_ids`` and ``attention_mask`` of texts, padded with id 0 on ``padding_side`` when asked; with
        ``return_offsets_mapping`` (lists only) each token's ``(start, end)`` characters in its text."""
        single = isinstance(texts, str)
        texts = [texts] if isinstance(texts, str) else list(texts)
        rows = [self.encode(t) for t in texts]
        if return_tensors != "pt":
            ids = rows[0] if single else rows
            masks = [[1] * len(r) for r in rows]
            out: dict[str, Any] = {"input_ids": ids, "attention_mask": masks[0] if single else masks}
            if return_offsets_mapping:
                spans = [[m.span() for m in re.finditer(r"\S+", t)] for t in texts]
                out["offset_mapping"] = spans[0] if single else spans
            return out
        width = max(len(r) for r in rows)
        ids_BL = torch.zeros(len(rows), width, dtype=torch.long)
        mask_BL = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            cols = slice(width - len(r), width) if padding_side == "left" else slice(0, len(r))
            ids_BL[i, cols] = torch.tensor(r)
            mask_BL[i, cols] = 1
        return {"input_ids": ids_BL, "attention_mask": mask_BL}

    def decode(self, ids: Sequence[int] | torch.Tensor, **_: Any) -> str:
        """The token names of ``ids`` joined by spaces."""
        flat = torch.as_tensor(ids).flatten().tolist()
        return " ".join(self.vocab[i] for i in flat)

    def batch_decode(self, rows: Any, **kwargs: Any) -> list[str]:
        """:meth:`decode` of each row."""
        return [self.decode(r, **kwargs) for r in rows]


class SitedNNsight(nnsight.NNsight):
    """nnsight over a module that reads token ids: a trace given ``{"input_ids", "attention_mask"}`` calls
    ``module(input_ids)``, with ``attention_mask=`` when its ``forward`` takes one."""

    def _batch(self, invokes: list[tuple], fn: Any) -> tuple:
        args, kwargs = super()._batch(invokes, fn)
        if len(args) == 1 and isinstance(args[0], dict) and "input_ids" in args[0]:
            enc = args[0]
            forward = inspect.signature(self._module.forward).parameters
            if "attention_mask" in forward and "attention_mask" in enc:
                kwargs = {**kwargs, "attention_mask": enc["attention_mask"]}
            return (enc["input_ids"],), kwargs
        return args, kwargs

    def _batch_size(self, *inputs: Any, **kwargs: Any) -> int:
        if inputs and isinstance(inputs[0], dict) and "input_ids" in inputs[0]:
            return int(inputs[0]["input_ids"].shape[0])
        return super()._batch_size(*inputs, **kwargs)


def _module_names(module: torch.nn.Module) -> str:
    names = [n for n, _ in module.named_modules() if n]
    more = f", ... ({len(names) - _LISTED} more)" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more if names else "none (it has no submodules)"


def _check_path(module: torch.nn.Module, key: str, value: str, path: str) -> None:
    try:
        found = resolve(module, path)
    except (AttributeError, IndexError, TypeError):
        found = None
    if not isinstance(found, torch.nn.Module):
        raise ValueError(
            f"sites[{key!r}] = {value!r}: {path!r} names no module of {type(module).__name__}. "
            f"Its modules are: {_module_names(module)}."
        )


def _kind_of_key(key: str) -> str:
    """The site kind a ``sites=`` key names (``{L}`` for the layer); an error naming the valid keys."""
    probe = key.replace("{L}", "0")
    try:
        kind = parse_site(probe, n_layers=1).kind
    except ValueError:
        kind = None
    if kind is None or (kind != "embed" and "{L}" not in key):
        valid = [site_name(0, k).replace("blocks.0.", "blocks.{L}.") for k in KINDS if k != "embed"]
        raise ValueError(
            f"sites key {key!r} is not a site name with {{L}} for the block index, 'hook_embed', or a part "
            f"({', '.join(PARTS)}). Site keys are: hook_embed, {', '.join(valid)}."
        )
    return kind


def _split(key: str, value: Any) -> tuple[str, str]:
    if not isinstance(value, str) or not value:
        raise TypeError(f"sites[{key!r}] must be a module path such as 'layers.{{L}}.mlp', got {value!r}.")
    path, _, io = value.partition(":")
    io = io or "output"
    if io not in _IOS:
        raise ValueError(f"sites[{key!r}] = {value!r}: {io!r} is not one of {', '.join(_IOS)} (after the ':').")
    return path, io


def _block_list(module: torch.nn.Module, table: dict[str, tuple[str, str]], parts: dict[str, str]) -> str:
    """The block list's path: ``sites["blocks"]``, else the prefix of the first ``{L}`` path."""
    if "blocks" in parts:
        return parts["blocks"]
    for path, _ in table.values():
        if ".{L}" in path:
            return path.split(".{L}")[0]
    raise ValueError(
        f"sites names no block list: give 'blocks' (e.g. 'layers') or a site at a path with {{L}}; got keys "
        f"{sorted(table) + sorted(parts)}. Its modules are: {_module_names(module)}."
    )


def custom_family(module: torch.nn.Module, sites: dict[str, str]) -> Family:
    """The site table that ``sites`` describes for ``module``; every path checked against its modules.

    >>> custom_family(net, {"blocks.{L}.hook_resid_post": "layers.{L}"}).layers
    'layers'
    """
    if not isinstance(sites, dict) or not sites:
        raise TypeError(f"sites must be a non-empty dict from site names to module paths, got {sites!r:.80}.")
    parts = {k: _split(k, v)[0] for k, v in sites.items() if k in PARTS}
    table = {k: _split(k, v) for k, v in sites.items() if k not in PARTS}
    kinds = {_kind_of_key(k): k for k in table}
    layers = _block_list(module, table, parts)
    _check_path(module, "blocks", layers, layers)
    blocks = resolve(module, layers)
    if not isinstance(blocks, (torch.nn.ModuleList, torch.nn.Sequential)) or len(blocks) == 0:
        raise ValueError(f"{layers!r} is the block list, but it is a {type(blocks).__name__}, not a non-empty "
                         f"ModuleList or Sequential. Its modules are: {_module_names(module)}.")  # fmt: skip
    for key, value in sites.items():
        path = parts[key] if key in parts else table[key][0]
        for layer in range(len(blocks)):
            _check_path(module, key, value, path.replace("{L}", str(layer)))
    paths = tuple((kind, *table[key]) for kind, key in kinds.items())
    if "resid_pre" not in kinds and "resid_post" in kinds and table[kinds["resid_post"]][0] == f"{layers}.{{L}}":
        paths += (("resid_pre", f"{layers}.{{L}}", "input"),)
    own = tuple(k for k in KINDS if k in {p[0] for p in paths})
    return Family(
        "custom", layers, "", "", "", parts.get("final_norm", ""), embed="", attn="", mlp_norm="", down_proj="",
        unembed=parts.get("unembed", ""), kinds=own, paths=paths,
        why_missing="this module's sites are the ones given to load_model(sites=...): " + ", ".join(own),
    )  # fmt: skip


def _widths(module: torch.nn.Module, family: Family, n_layers: int, vocab: int) -> dict[str, int]:
    """The width of each mapped kind at layer 0, from one forward pass of two tokens under forward hooks."""
    seen: dict[str, int] = {}
    handles = []
    for kind, template, io in family.paths:
        target = resolve(module, template.replace("{L}", "0"))

        def hook(mod: Any, args: Any, output: Any, kind: str = kind, io: str = io) -> None:
            value = args[0] if io == "input" else output[1] if io == "weights" else output
            value = value[0] if isinstance(value, tuple) else value
            if isinstance(value, torch.Tensor) and kind not in seen:
                seen[kind] = int(value.shape[-1])

        handles.append(target.register_forward_hook(hook))
    device = next(iter(module.parameters()), torch.empty(0)).device
    try:
        with torch.no_grad():
            module(torch.zeros(1, 2, dtype=torch.long, device=device).clamp(max=max(vocab - 1, 0)))
    finally:
        for h in handles:
            h.remove()
    return seen


def custom_config(module: torch.nn.Module, family: Family, vocab: int, max_positions: int | None) -> SimpleNamespace:
    """A config for :class:`~interplab.core.model.model.Model`: block count and widths measured on the module."""
    n_layers = len(resolve(module, family.layers))
    widths = _widths(module, family, n_layers, vocab)
    in_stream = ("embed", "resid_pre", "resid_post", "resid_mid", "attn_out", "mlp_out")
    stream = {widths[k] for k in in_stream if k in widths}
    if len(stream) > 1:
        raise ValueError(f"The residual-stream sites have different widths {sorted(stream)} ({widths}); map each "
                         "to a module of the stream's width.")  # fmt: skip
    d_model = stream.pop() if stream else widths.get("mlp_in", 0)
    z = widths.get("hook_z", d_model)
    heads = getattr(module, "n_heads", 1)
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1 or z % heads:
        raise ValueError(f"{type(module).__name__}.n_heads = {heads!r} does not divide attn.hook_z's width {z}: give "
                         "the module an n_heads attribute that does (or none: one head).")  # fmt: skip
    return SimpleNamespace(
        model_type="custom", num_hidden_layers=n_layers, hidden_size=d_model, intermediate_size=widths.get("mlp_post"),
        num_attention_heads=heads, head_dim=z // heads, vocab_size=vocab, max_position_embeddings=max_positions,
    )  # fmt: skip


def vocab_size(module: torch.nn.Module, family: Family) -> int:
    """The vocabulary: the unembedding's output width, else the first embedding's rows."""
    if family.unembed:
        head = resolve(module, family.unembed)
        if isinstance(getattr(head, "out_features", None), int):
            return int(head.out_features)
    for sub in module.modules():
        if isinstance(sub, torch.nn.Embedding):
            return int(sub.num_embeddings)
    return 0


def sited_tokenizer(tokenizer: Any, vocab: int) -> Any:
    """``tokenizer`` as given (a Hugging Face tokenizer), a :class:`VocabTokenizer` over a list of names, or
    ``"0" .. str(vocab - 1)`` when None."""
    if tokenizer is None:
        if vocab <= 0:
            raise ValueError("The module has no embedding or unembedding to size a vocabulary: give tokenizer= "
                             "(a list of token names, or a Hugging Face tokenizer).")  # fmt: skip
        return VocabTokenizer([str(i) for i in range(vocab)])
    if isinstance(tokenizer, (list, tuple)):
        tok = VocabTokenizer(tokenizer)
        if vocab and len(tok) > vocab:
            raise ValueError(f"tokenizer names {len(tok)} tokens, but the module's vocabulary has {vocab}.")
        return tok
    return tokenizer
