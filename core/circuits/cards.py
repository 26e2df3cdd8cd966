"""Feature cards for an attribution graph's features, from the graph's own transcoders: where each feature
fires most on the graph's prompt (or a few texts) and which tokens its decoder row promotes and suppresses
through the unembedding, as Neuronpedia's graph viewer shows beside a graph. A CircuitGraph shows the card
of a clicked feature. A cross-layer transcoder's feature writes to its own and every later layer's MLP
output; its logit effect is that of the sum of those decoder rows (what reaches the unembedding).

Example
-------
>>> cards = feature_cards(graph, model, transcoders)          # over the graph's prompt
>>> card = cards[f"{layer}_{latent}"]
>>> card["examples"][0]["tokens"], card["promotes"][:3]
>>> ilab.widgets.CircuitGraph(graph, cards=cards)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, cast

import torch

from ..checks import check_positive_int, check_texts
from ..features.search import decoder_through_norm, top_logits_paged
from ..model.model import Model
from ..saes.base import SAE
from .graph import Graph
from .replacers import CrossLayer, Replacer, replacer
from .view import visible_token


def feature_cards(
    graph: Graph, model: Model, transcoders: Any, texts: str | list[str] | None = None, *,
    n_logits: int = 6, n_examples: int = 3, context: int = 10,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """A card per feature of ``graph``, keyed ``"layer_latent"``: ``layer``, ``latent``, ``examples`` (the
    ``n_examples`` texts where it fires most, one window each: ``tokens`` shown with visible spaces, ``acts``,
    ``at`` the strongest token), ``density`` (the fraction of tokens where it fires), ``promotes`` and
    ``suppresses`` (``n_logits`` [token, logit effect] pairs of its unit decoder row through the final norm
    and the unembedding, as a FeatureDashboard computes them). ``texts`` default to the graph's prompt; the
    first token of each text (BOS) is left out, as the graph leaves it out.

    >>> feature_cards(graph, model, tcs, ["When Mary and John went out", "Mary gave John a book"])
    """
    rep = replacer(model, transcoders)
    texts = check_texts(graph.prompt if texts is None else texts)
    for name, value in (("n_logits", n_logits), ("n_examples", n_examples), ("context", context)):
        check_positive_int(name, value)
    wanted: dict[int, list[int]] = defaultdict(list)
    for layer, latent in sorted({(int(f[0]), int(f[2])) for f in graph.features}):
        wanted[layer].append(latent)
    cards = {f"{layer}_{latent}": {"layer": layer, "latent": latent, "examples": [], "density": 0.0}
             for layer, latents in wanted.items() for latent in latents}  # fmt: skip
    _top_examples(cards, wanted, rep, model, texts, n_examples, context)
    for layer, latents in wanted.items():
        _logit_effects(cards, layer, latents, _written_rows(rep, layer, latents), model, n_logits)
    return cards


@dataclass
class _Rows:
    """Decoder rows [n, D] in the shape :func:`decoder_through_norm` reads (an SAE's ``W_dec``)."""

    W_dec: torch.Tensor


def _written_rows(rep: Replacer, layer: int, latents: list[int]) -> SAE:
    """What each of ``latents`` writes per unit activation, summed over the MLP outputs it writes to: its decoder
    row (per-layer transcoders) or the sum of its rows to this and every later layer (a cross-layer transcoder)."""
    if not isinstance(rep, CrossLayer):
        return rep.tcs[layer]
    rows_NKD = rep.decoder_rows(layer, torch.tensor(latents, device=rep.clt.device))
    return cast(SAE, _Rows(rows_NKD.sum(1)))


def _layer_acts(rep: Replacer, layer: int, x_PD: torch.Tensor) -> torch.Tensor:
    """[P, S] the activations of ``layer``'s latents on its MLP inputs ``x_PD``."""
    if isinstance(rep, CrossLayer):
        return rep.encode(x_PD.to(rep.clt.device), layer)
    tc = rep.tcs[layer]
    with torch.no_grad():
        return tc.encode(x_PD.to(tc.W_dec.device, tc.W_dec.dtype)).float()


def _top_examples(cards: dict[str, dict[str, Any]], wanted: dict[int, list[int]], rep: Replacer, model: Model,
                  texts: list[str], n_examples: int, context: int) -> None:  # fmt: skip
    """Fill each card's ``examples`` (the texts where it fires most, strongest first) and ``density``."""
    layers = sorted(wanted)
    if not layers:
        return
    found: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    fired: dict[str, int] = defaultdict(int)
    n_tokens = 0
    for text in texts:
        enc = model.to_tokens(text)
        tokens = [visible_token(t) for t in model.to_str_tokens(enc["input_ids"][0])][1:]
        n_tokens += len(tokens)
        inputs = model.run_sites(enc, [f"blocks.{layer}.hook_mlp_in" for layer in layers])
        for layer, x_1PD in zip(layers, inputs, strict=True):
            acts_PM = _layer_acts(rep, layer, x_1PD[0, 1:])[:, wanted[layer]].cpu()
            for j, latent in enumerate(wanted[layer]):
                key, acts_P = f"{layer}_{latent}", acts_PM[:, j]
                fired[key] += int((acts_P > 0).sum())
                if len(acts_P) == 0 or float(acts_P.max()) <= 0:
                    continue
                at = int(acts_P.argmax())
                lo, hi = max(0, at - context), min(len(tokens), at + 3)
                found[key].append((float(acts_P[at]), {
                    "tokens": tokens[lo:hi], "acts": [round(float(a), 4) for a in acts_P[lo:hi]], "at": at - lo,
                    "max": float(acts_P[at])}))  # fmt: skip
    for key, card in cards.items():
        card["examples"] = [e for _, e in sorted(found[key], key=lambda f: -f[0])[:n_examples]]
        card["density"] = fired[key] / max(1, n_tokens)


def _logit_effects(cards: dict[str, dict[str, Any]], layer: int, latents: list[int], tc: SAE, model: Model,
                   n_logits: int) -> None:  # fmt: skip
    """Fill the ``promotes`` and ``suppresses`` lists of one layer's cards."""
    _, unembed = model.readout_modules()
    W_U = unembed.weight
    if not isinstance(W_U, torch.Tensor) or W_U.is_meta:
        raise ValueError("Feature cards read the unembedding's weight; this model holds none here (remote?).")
    d_MD = decoder_through_norm(tc, model)[latents if isinstance(tc, SAE) else slice(None)].to(W_U.device)
    top_v, top_i, bot_v, bot_i = top_logits_paged(d_MD, W_U.detach(), min(n_logits, W_U.shape[0]), 2048)
    decode = model.tokenizer.decode
    for j, latent in enumerate(latents):
        card = cards[f"{layer}_{latent}"]
        card["promotes"] = [[visible_token(decode([int(i)])), round(float(v), 4)] for i, v in zip(top_i[j], top_v[j])]
        card["suppresses"] = [[visible_token(decode([int(i)])), round(float(v), 4)]
                              for i, v in zip(bot_i[j], bot_v[j])]  # fmt: skip
