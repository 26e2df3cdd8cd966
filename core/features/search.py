"""Finding latents: which fire on a text, which promote a token, which point the same way.

Logit effects come from the weights alone: a latent's decoder row normalised to unit length (as
sae_vis and Neuronpedia do, so effects compare across latents and SAEs whatever the decoder's
scale), multiplied by the final norm's weight (Gemma's RMSNorm scales by ``1 + weight``; a
LayerNorm also centres), then through the unembedding. The per-token normalisation is a positive
scale and is left out, as is Gemma's final logit softcap (monotone: it would not change which
tokens rank first).

Example
-------
>>> active_latents(sae, model, "The cat sat on the mat").ids[2]     # top latents on the 3rd token
>>> latents_for_token(sae, model, " Paris").ids[:5]                  # latents promoting ' Paris'
>>> nearest_latents(sae, 123).ids
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import nnsight
import numpy as np
import torch

from ..checks import check_positive_int, check_texts, single_token_id
from ..memory.pages import release_pages
from ..memory.unembed import SLICE_ROWS
from ..model.remote import REQUEST_BYTES
from ..model.sites import resolve
from ..model.trace_ops import top_logits
from ..storage.progress import progress_bar
from .data import FeatureData
from .density import MAX_DENSITY, check_max_density, latent_density, top_latents
from .search_index import search_index

if TYPE_CHECKING:
    from ..model.model import Model
    from ..saes.base import SAE


class ActiveLatents(NamedTuple):
    """Per token of a text (BOS left out): its string, its top latent ids and their activations."""

    tokens: list[str]
    ids: np.ndarray  # [n_tok, top] int64
    values: np.ndarray  # [n_tok, top] float32 (0: a slot no latent fills)
    density_filter: str = "no density filter"  # which latents the lists leave out


class RankedLatents(NamedTuple):
    """Latent ids with a score each, best first."""

    ids: np.ndarray  # int64
    values: np.ndarray  # float32


def _unit_decoder(sae: SAE) -> torch.Tensor:
    W = sae.W_dec.detach().float()
    return W / W.norm(dim=1, keepdim=True).clamp_min(1e-12)


def decoder_through_norm(sae: SAE, model: Model) -> torch.Tensor:
    """Unit-norm decoder rows as the unembedding sees them [d_sae, d_model]: times the final norm's weight."""
    norm, _ = model.readout_modules()
    if sae.W_dec.shape[1] != model.d_model:
        raise ValueError(f"Logit effects need decoder rows of width d_model={model.d_model}; got {sae.W_dec.shape[1]}.")
    W_dec = _unit_decoder(sae)
    weight = getattr(norm, "weight", None)
    if "layernorm" in type(norm).__name__.lower() or isinstance(norm, torch.nn.LayerNorm):
        W_dec = W_dec - W_dec.mean(1, keepdim=True)  # a LayerNorm removes the mean before scaling
    if weight is not None:
        w = (_server_weight(model, model.check_mapped().final_norm) if weight.is_meta else weight).detach().float()
        if type(norm).__name__.startswith("Gemma"):
            w = 1.0 + w
        W_dec = W_dec * w
    return W_dec


def _unembed_row(model: Model, token: int) -> torch.Tensor:
    """Row ``token`` of the unembedding [d_model] (read from the server for a remote model)."""
    weight = model.readout_modules()[1].weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"The unembedding's weight is a {type(weight).__name__}, not a tensor.")
    return (_server_weight(model, model.check_mapped().unembed, token) if weight.is_meta else weight[token]).detach()


def _server_weight(model: Model, path: str, row: int | None = None) -> torch.Tensor:
    """A module's weight (or one row of it) read from the server (a remote model has none here)."""
    envoy = resolve(model.nn, path)
    ids = torch.tensor([[model.tokenizer.bos_token_id or 0]])
    with torch.no_grad(), model.nn.trace({"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                         **model.trace_kwargs) as tracer:  # fmt: skip
        weight = nnsight.save((envoy.weight if row is None else envoy.weight[row]).detach().cpu())
        tracer.stop()
    return weight


def logit_effects(
    sae: SAE, model: Model, n: int = 10, chunk: int = 2048, progress: Any = False
) -> dict[str, np.ndarray]:
    """The ``n`` tokens each latent promotes and suppresses most, in vocabulary chunks (bounded memory).

    Returns ``logit_top_ids/values`` (largest first) and ``logit_bottom_ids/values`` (most negative first).
    For a remote model the products are taken on the server, a few hundred latents per request.
    ``progress``: a bar over the vocabulary slices (the requests, remotely).
    """
    d_MD = decoder_through_norm(sae, model)
    _, unembed = model.readout_modules()
    W_U = unembed.weight
    if not isinstance(W_U, torch.Tensor):
        raise TypeError(f"The unembedding's weight is a {type(W_U).__name__}, not a tensor.")
    n = min(check_positive_int("top", n), W_U.shape[0])
    local = not W_U.is_meta
    rows = max(1, REQUEST_BYTES // (4 * d_MD.shape[1]))  # latents per remote request
    steps = -(-W_U.shape[0] // SLICE_ROWS) if local else -(-d_MD.shape[0] // rows)
    with progress_bar(steps, desc="logit effects", show=progress, leave=False) as bar:
        if local:
            parts = [top_logits_paged(d_MD, W_U.detach(), n, chunk, bar)]
        else:
            parts = _remote_top_logits(model, d_MD, n, chunk, rows, bar)
    top_v, top_i, bot_v, bot_i = (torch.cat([p[k] for p in parts]) for k in range(4))
    return {
        "logit_top_ids": top_i.numpy().astype(np.int32),
        "logit_top_values": top_v.numpy().astype(np.float32),
        "logit_bottom_ids": bot_i.numpy().astype(np.int32),
        "logit_bottom_values": bot_v.numpy().astype(np.float32),
    }


def _remote_top_logits(
    model: Model, d_MD: torch.Tensor, n: int, chunk: int, rows: int, bar: Any
) -> list[tuple[torch.Tensor, ...]]:
    """:func:`top_logits` of ``rows`` latents per request, taken on the server; ``bar`` advances once per request."""
    envoy = resolve(model.nn, model.check_mapped().unembed)
    ids = torch.tensor([[model.tokenizer.bos_token_id or 0]])
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    parts = []
    for start in range(0, d_MD.shape[0], rows):
        d_chunk = d_MD[start : start + rows].clone()
        with torch.no_grad(), model.nn.trace(inputs, **model.trace_kwargs) as tracer:
            part = nnsight.save(top_logits(d_chunk, envoy.weight, n, chunk))
            tracer.stop()
        parts.append(part)
        bar.update(1)
    return parts


def top_logits_paged(
    d_MD: torch.Tensor, W_VD: torch.Tensor, n: int, chunk: int, bar: Any = None
) -> tuple[torch.Tensor, ...]:
    """:func:`top_logits` over vocabulary slices of a local weight, each slice's memory-mapped pages released after
    use (:mod:`interplab.core.memory.pages`): the whole unembedding is never resident at once. ``bar`` (a progress
    bar) advances once per slice."""
    found = []
    for a in range(0, W_VD.shape[0], SLICE_ROWS):
        W_slice = W_VD[a : a + SLICE_ROWS]
        tv, ti, bv, bi = top_logits(d_MD, W_slice, n, chunk)
        release_pages(W_slice)
        found.append((tv, ti + a, bv, bi + a))
        if bar is not None:
            bar.update(1)
    top_v, sel = torch.cat([f[0] for f in found], 1).topk(n, dim=1)
    top_i = torch.cat([f[1] for f in found], 1).gather(1, sel)
    bot_v, sel = torch.cat([f[2] for f in found], 1).topk(n, dim=1, largest=False)
    bot_i = torch.cat([f[3] for f in found], 1).gather(1, sel)
    return top_v, top_i, bot_v, bot_i


def all_neighbours(sae: SAE, n: int = 10, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """For every latent, the ``n`` others with the most similar decoder direction (cosine), [d_sae, n]."""
    W = _unit_decoder(sae)
    M = W.shape[0]
    n = min(n, M - 1)
    ids, sims = [], []
    with torch.no_grad():
        for start in range(0, M, chunk):
            cos = W[start : start + chunk] @ W.T
            rows = torch.arange(start, start + cos.shape[0])
            cos[torch.arange(cos.shape[0]), rows] = -float("inf")
            v, i = cos.topk(n, dim=1)
            ids.append(i)
            sims.append(v)
    return torch.cat(ids).numpy().astype(np.int32), torch.cat(sims).numpy().astype(np.float32)


def nearest_latents(sae: SAE, i: int, top: int = 10) -> RankedLatents:
    """The ``top`` latents whose decoder directions are closest to latent ``i``'s (cosine similarity)."""
    direction = sae.direction(i)  # validates i
    W = _unit_decoder(sae)
    cos = W @ (direction / direction.norm().clamp_min(1e-12))
    cos[i] = -float("inf")
    v, idx = cos.topk(min(check_positive_int("top", top), sae.d_sae - 1))
    return RankedLatents(idx.numpy().astype(np.int64), v.numpy().astype(np.float32))


def single_token(model: Model, token_str: str) -> int:
    """The id of a string that is exactly one token; a clear error showing its tokenisation otherwise."""
    if not isinstance(token_str, str):
        raise ValueError(f"Give a non-empty token string, got {token_str!r}.")
    return single_token_id(model.tokenizer, token_str, what="token")


def latents_for_token(data_or_sae: SAE | FeatureData, model: Model, token_str: str, top: int = 20) -> RankedLatents:
    """Latents ranked by how much their decoder direction raises ``token_str``'s logit.

    With an SAE the ranking is exact over every latent; with :class:`FeatureData` it uses the
    stored logit tables (latents whose top promoted tokens include it).
    """
    check_positive_int("top", top)
    token = single_token(model, token_str)
    if isinstance(data_or_sae, FeatureData):
        rows, cols = np.nonzero(data_or_sae.logit_top_ids == token)
        values = data_or_sae.logit_top_values[rows, cols]
        order = np.argsort(-values, kind="stable")[:top]
        return RankedLatents(rows[order].astype(np.int64), values[order].astype(np.float32))
    sae = data_or_sae
    effect = decoder_through_norm(sae, model) @ _unembed_row(model, token).float()
    v, idx = effect.topk(min(top, sae.d_sae))
    return RankedLatents(idx.numpy().astype(np.int64), v.numpy().astype(np.float32))


def active_latents(
    sae: SAE, model: Model, text: str, top: int = 5, *, max_density: float | None = MAX_DENSITY, density: Any = None
) -> ActiveLatents:
    """Which latents fire where on ``text``: for each token (BOS left out), its ``top`` latents.

    Latents firing on more than ``max_density`` of tokens are left out (None: keep them); the density is
    ``density`` (FeatureData or one fraction per latent) or the SAE's stored firing rates
    (:mod:`interplab.core.features.density`); unknown, nothing is left out. ``density_filter`` says which.

    >>> found = active_latents(sae, model, "Paris is in France"); found.tokens, found.ids[:, 0]
    """
    check_positive_int("top", top)
    max_density = check_max_density(max_density)
    dens = latent_density(sae, density)
    tokens, acts = latent_activations(sae, model, text)
    idx, v = top_latents(acts, top, dens.dense(max_density))
    return ActiveLatents(tokens, idx.astype(np.int64), v, dens.describe(max_density))


def latent_activations(sae: SAE, model: Model, text: str, latents: Any = None) -> tuple[list[str], np.ndarray]:
    """Token strings (BOS left out) and activations [n_tok, d_sae] (or the chosen latents) on one text."""
    if not isinstance(text, str):
        raise TypeError(f"Give one text (a string), got {type(text).__name__}.")
    site = sae.check_fits(model)
    enc = model.to_tokens(check_texts([text]))
    bos = model.tokenizer.bos_token_id
    start = 1 if bos is not None and int(enc["input_ids"][0, 0]) == bos else 0
    with torch.no_grad():
        acts = sae.encode(model.run_sites(enc, site)[0][0, start:])
    if latents is not None:
        acts = acts[:, [int(i) for i in latents]]
    return model.to_str_tokens(enc["input_ids"][0, start:]), acts.float().numpy()


def search_latents(data: FeatureData, query: str) -> np.ndarray:
    """Latents a dashboard search finds, by id: an id starting with the digits typed, a label containing the
    text, a token it fires on most (the token at the max of one of its top examples) or one of the tokens it
    promotes most (its strongest logit effects) containing it, case and spaces aside
    (:mod:`interplab.core.features.search_index`). The dashboard's search box applies the same rule in the
    browser (it works in exported HTML too).

    >>> search_latents(data, "Sunday")     # latents whose top tokens include ' Sunday'
    >>> search_latents(data, "evening")    # ... and those promoting ' evening'
    """
    if not isinstance(data, FeatureData):
        raise TypeError(f"data must be FeatureData (from ilab.feature_data), got {type(data).__name__}.")
    if not isinstance(query, str):
        raise TypeError(f"query is a string, got {type(query).__name__}: {query!r}.")
    return search_index(data).find(data, query)
