"""Attribution graphs: the direct effect of every active feature, error and token on every feature and logit.

One linearised forward pass of the prompt (:mod:`.replacement`) repeated up to ``batch_size`` times; each
backward pass injects one target per row (a feature's encoder direction at its MLP input, or a logit's
demeaned unembedding direction at the final norm's output) and reads the gradient at every source's
write point: a feature's edge is its activation times its decoder row dotted with that gradient, an
error node's is its error vector's, a token's its embedding's. Rows are computed for the logits, then for
features, all of them or, with ``max_feature_nodes``, those with the most influence on the logits first.

Example
-------
>>> g = attribute(model, transcoders, "When Mary and John went to the store, John gave a drink to")
>>> g.n_features, g.logit_tokens[:3], g.scores()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from ..checks import check_fraction, check_positive_int, check_texts
from ..memory.budget import check_memory
from ..memory.frozen import frozen_weights
from ..memory.pages import release_pages
from ..memory.unembed import SLICE_ROWS
from ..model.model import Model
from ..model.trace_ops import token_probs
from ..saes.base import SAE
from .graph import Graph
from .passes import rows_per_pass
from .prune import normalise_rows
from .replacement import ReplacementPass, check_family, replacement_pass
from .replacers import CrossLayer, PerLayer, Replacer, check_transcoders, replacer

__all__ = ["RowBuilder", "Sources", "attribute", "check_transcoders", "find_sources"]

logger = logging.getLogger(__name__)


@dataclass
class Sources:
    """The graph's source nodes from one replacement pass: active features, errors, token embeddings.

    Each layer's active features sit in ``padded[layer]`` [P, S, K*D] (activation times decoder row, position
    ``p``'s features in slots ``0..count_p-1``, zeros after), so a backward pass's edges to them are one batched
    matmul per layer; ``decoders`` holds the same rows per position as views (by layer, then position: the
    ids and an [n, K*D] block).
    """

    features: torch.Tensor  # [F, 3] layer, position, latent
    activations: torch.Tensor  # [F]
    decoders: list[list[tuple[torch.Tensor, torch.Tensor]]]  # [layer][pos] -> (node ids, act * W_dec rows [n, K*D])
    errors: torch.Tensor  # [layers, P, D]
    embeds: torch.Tensor  # [P, D]
    spans: list[int] = field(default_factory=list)  # per layer K: the MLP outputs its latents write (1, or L - l)
    padded: list[torch.Tensor] = field(default_factory=list)  # per layer [P, S, K*D]: the rows by position and slot
    slots: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)  # per layer (ids,
    # positions, slots) [n_l] each: where each active feature's row sits in ``padded``

    def span(self, layer: int) -> int:
        return self.spans[layer] if self.spans else 1


def _layer_rows(rep: Replacer, layer: int, a_PM: torch.Tensor, first_id: int) -> tuple[torch.Tensor, ...]:
    """One layer's active features (position-major, latents ascending) and their written rows, padded by
    position: (positions, latents, activations [n] each, written [n, K, D], padded [P, S, K*D], slots [n],
    node ids [n] from ``first_id``, features per position [P])."""
    pos_n, latent_n = a_PM.nonzero(as_tuple=True)
    vals_n = a_PM[pos_n, latent_n]
    written = vals_n[:, None, None] * rep.decoder_rows(layer, latent_n)  # [n, K, D]
    counts_P = torch.bincount(pos_n, minlength=a_PM.shape[0])
    starts_P = torch.cumsum(counts_P, 0) - counts_P
    slot_n = torch.arange(len(pos_n), device=pos_n.device) - starts_P[pos_n]
    padded = written.new_zeros(a_PM.shape[0], max(1, int(counts_P.max())), written.shape[1] * written.shape[2])
    padded[pos_n, slot_n] = written.flatten(1)
    ids_n = torch.arange(first_id, first_id + len(pos_n), device=pos_n.device)
    return pos_n, latent_n, vals_n, written, padded, slot_n, ids_n, counts_P


def find_sources(run: ReplacementPass, tcs: list[SAE] | Replacer, skip_bos: bool, bos_error: bool = True) -> Sources:
    """Active features per (layer, position) and each layer's error: the MLP output the features miss.

    ``tcs`` is one transcoder per layer or a :mod:`.replacers` replacer (a cross-layer transcoder's latents
    write to their own and every later layer's MLP output: its decoder rows hold ``K = L - l`` outputs).
    With ``skip_bos`` features at position 0 are not nodes: what they write stays in that position's error
    (``bos_error``) or, as circuit-tracer does, is a constant like a bias (position 0's error nodes are zero).
    """
    rep = PerLayer(tcs) if isinstance(tcs, list) else tcs
    n_layers, n_pos = rep.n_layers, run.embed_leaf.shape[1]
    feats, acts, decoders, spans, padded, slots = [], [], [], [], [], []
    recon = [rep.b_dec(layer).expand(n_pos, -1).clone() for layer in range(n_layers)]
    count = held = 0
    with torch.no_grad():
        for layer in range(n_layers):
            x = run.mlp_in[layer][0].detach().float()
            a = rep.encode(x, layer)  # [P, M]
            if skip_bos:
                a[0] = 0
            span, width = n_layers - layer if isinstance(rep, CrossLayer) else 1, x.shape[-1]
            n_pad = n_pos * int((a != 0).sum(1).max())
            held += n_pad * span * width * 4  # float32 rows: activation x decoder, per layer written, padded
            check_memory(f"The decoder rows of the active features through layer {layer}", held)
            recon[layer] = recon[layer] + rep.skip_out(x, layer)
            pos_n, latent_n, vals_n, written, pad, slot_n, ids_n, counts_P = _layer_rows(rep, layer, a, count)
            count += len(pos_n)
            for k in range(written.shape[1]):
                recon[layer + k].index_add_(0, pos_n, written[:, k])
            feats.append(torch.stack([torch.full_like(pos_n, layer), pos_n, latent_n], 1))
            acts.append(vals_n)
            decoders.append([(ids, pad[pos, : len(ids)]) for pos, ids in enumerate(ids_n.split(counts_P.tolist()))])
            padded.append(pad)
            slots.append((ids_n, pos_n, slot_n))
            spans.append(span)
        errors = []
        for layer in range(n_layers):
            error = run.mlp_out_leaf[layer][0].detach().float() - recon[layer]
            if skip_bos and not bos_error:
                error[0] = 0
            errors.append(error)
    return Sources(torch.cat(feats).long(), torch.cat(acts), decoders, torch.stack(errors),
                   run.embed_leaf[0].detach().float(), spans, padded, slots)  # fmt: skip


class RowBuilder:
    """Rows of the adjacency (direct effects on a batch of targets) from backward passes of one replacement pass."""

    def __init__(self, run: ReplacementPass, sources: Sources, readers: list[torch.Tensor], n_layers: int,
                 batch: int | None = None):  # fmt: skip
        self.run, self.src, self.readers, self.n_layers = run, sources, readers, n_layers
        self.rows_per_pass = run.embed_leaf.shape[0]  # the replacement pass's copies of the prompt
        self.batch = batch or self.rows_per_pass  # targets per call of ``rows`` (per influence re-ranking)
        self.n_pos = run.embed_leaf.shape[1]
        self.n_features = len(sources.features)
        self.n_sources = self.n_features + n_layers * self.n_pos + self.n_pos
        self.backward_passes = 0
        self._g: torch.Tensor | None = None

    def rows(self, targets: list[tuple[str, Any]]) -> torch.Tensor:
        """Direct effects [len(targets), n_sources] on ``("feature", node)`` / ``("logit", direction_D)`` targets.

        Targets run highest layer first, ``rows_per_pass`` per backward pass: a pass's backward stops below its
        highest target's layer, so grouping targets of nearby layers skips the layers none of them reads."""
        out = torch.zeros(len(targets), self.n_sources)
        layers = [self.n_layers if kind == "logit" else int(self.src.features[what][0]) for kind, what in targets]
        order = sorted(range(len(targets)), key=lambda i: -layers[i])
        for start in range(0, len(targets), self.rows_per_pass):
            idx = order[start : start + self.rows_per_pass]
            out[idx] = self._chunk([targets[i] for i in idx])
        return out

    def _chunk(self, chunk: list[tuple[str, Any]]) -> torch.Tensor:
        """One backward pass: each row's target direction seeded where it is read (a feature's reader at its MLP
        input and position, a logit's direction at the final norm's last position), as gradients of the outputs."""
        run, n = self.run, len(chunk)
        seeds: dict[int, torch.Tensor] = {}  # layer (-1: the final norm) -> [B, P, D] seed in the model's dtype
        for row, (kind, what) in enumerate(chunk):
            if kind == "feature":
                layer, pos, latent = (int(v) for v in self.src.features[what])
                if layer not in seeds:
                    seeds[layer] = torch.zeros_like(run.mlp_in[layer])
                seeds[layer][row, pos] = self.readers[layer][:, latent]
            else:
                if -1 not in seeds:
                    seeds[-1] = torch.zeros_like(run.final)
                seeds[-1][row, -1] = what
        outputs = [run.final if layer == -1 else run.mlp_in[layer] for layer in seeds]
        grads = torch.autograd.grad(outputs, run.leaves, grad_outputs=list(seeds.values()), retain_graph=True,
                                    allow_unused=True)  # fmt: skip
        self.backward_passes += 1
        return self._edges(grads, n).to("cpu")

    def _edges(self, grads: tuple[torch.Tensor | None, ...], n: int) -> torch.Tensor:
        """Direct effects [n, sources] from the gradients at the leaves: per layer one batched matmul of the
        gradients at each position with the padded rows of the features there, errors and tokens elementwise."""
        src, n_layers, p, f = self.src, self.n_layers, self.n_pos, self.n_features
        device = self.run.embed_leaf.device
        if self._g is None:  # float32, one buffer for every backward pass
            self._g = torch.zeros(p, self.rows_per_pass, n_layers, self.run.embed_leaf.shape[-1], device=device)
        g_PnLD = self._g[:, :n]
        for layer, gr in enumerate(grads[1:]):
            if gr is not None:
                g_PnLD[:, :, layer].copy_(gr[:n].transpose(0, 1))
            else:
                g_PnLD[:, :, layer].zero_()
        rows = torch.zeros(n, self.n_sources, device=device)
        for layer in range(n_layers):
            ids_n, pos_n, slot_n = src.slots[layer]
            if len(ids_n):
                span = src.span(layer)  # the MLP outputs this layer's latents write: gradients side by side
                g_PnK = g_PnLD[:, :, layer : layer + span].flatten(2)  # [P, n, K*D], a view
                out_PnS = torch.bmm(g_PnK, src.padded[layer].transpose(1, 2))
                rows[:, ids_n] = out_PnS[pos_n, :, slot_n].T
        rows[:, f : f + n_layers * p] = torch.einsum("pnld,lpd->nlp", g_PnLD, src.errors).flatten(1)
        if grads[0] is not None:
            rows[:, f + n_layers * p :] = (grads[0][:n].float() * src.embeds).sum(-1)
        return rows


def top_logits(
    logits_V: torch.Tensor, max_n_logits: int, desired_logit_prob: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The most likely next tokens until their probabilities add up to ``desired_logit_prob`` (at most
    ``max_n_logits``): (token ids, probabilities)."""
    probs = token_probs(logits_V)
    top_p, top_i = torch.topk(probs, max_n_logits)
    cut = int(torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(desired_logit_prob, device=top_p.device))) + 1
    cut = max(1, min(cut, max_n_logits))
    return top_i[:cut], top_p[:cut]


def attribute(
    model: Model,
    transcoders: Any,
    prompt: str,
    *,
    max_n_logits: int = 10,
    desired_logit_prob: float = 0.95,
    max_feature_nodes: int | None = None,
    batch_size: int = 32,
    skip_bos: bool = True,
    bos_error: bool = True,
    progress: bool = True,
) -> Graph:
    """The attribution graph of ``prompt`` for its most likely next tokens (see the module doc).

    ``transcoders`` holds one MLP transcoder per layer (a list or a dict by layer) or is one
    :class:`~interplab.core.saes.clt.CrossLayerTranscoder` (its features' edges then sum what each writes to
    every later MLP output). ``max_feature_nodes``
    caps the feature nodes (those with the most influence on the logits are kept); ``batch_size`` is the
    number of targets chosen together (the influence ranking is redone after each batch) and per backward pass
    (on the CPU at most :data:`.passes.CPU_ROWS_PER_PASS` per pass, targets of nearby layers together). With
    ``skip_bos`` position 0 has no feature nodes; ``bos_error`` keeps what its MLPs write as that position's
    error nodes (every row then adds up to its target less the decoder biases), ``False`` treats it as a
    constant, as circuit-tracer does (position 0 sees only itself, so its MLP outputs are the same for every
    prompt; they drop out of the graph like biases).

    >>> g = ilab.circuits.attribute(model, tcs, "The capital of France is", max_feature_nodes=500)
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be one string, got {type(prompt).__name__}.")
    prompt = check_texts(prompt)[0]
    check_family(model)
    rep = replacer(model, transcoders)
    check_settings(max_n_logits, desired_logit_prob, max_feature_nodes, batch_size, skip_bos, bos_error)
    ids_1P = model.to_tokens(prompt)["input_ids"][:1]
    model.check_lengths([ids_1P.shape[1]], "prompt")
    skips = rep.skips()
    # the weights frozen while the pass records its graph: the backward passes then find saved only what the
    # leaves' gradients need (not every layer's input for weight gradients never taken)
    with model.lock, frozen_weights(model.module), model.eager_attention(eager_replacement(model)):
        run = replacement_pass(model, ids_1P, skips, rows_per_pass(model, batch_size))
    src = find_sources(run, rep, skip_bos, bos_error)
    _, unembed = model.readout_modules()
    if not isinstance(unembed.weight, torch.Tensor):
        raise TypeError(f"The unembedding's weight is a {type(unembed.weight).__name__}, not a tensor.")
    W_U = unembed.weight.detach()  # [V, D] in the model's dtype: read in float32 chunks, never copied whole
    logits, mean_D = final_logits(model, W_U, run.final[0, -1])
    logit_ids, logit_probs = top_logits(logits, max_n_logits, desired_logit_prob)
    directions = W_U[logit_ids].float() - mean_D
    logit_ids, logit_probs = logit_ids.cpu(), logit_probs.cpu()  # rows are assembled on the CPU
    builder = RowBuilder(run, src, [rep.reader(layer) for layer in range(rep.n_layers)], model.n_layers, batch_size)
    wanted = builder.n_features if max_feature_nodes is None else min(builder.n_features, max_feature_nodes)
    bar = tqdm(total=len(logit_ids) + wanted, desc="attribution rows", unit="row", disable=not progress)
    logit_rows = builder.rows([("logit", d) for d in directions])
    bar.update(len(logit_ids))
    selected, selected_rows = feature_rows(builder, wanted, max_feature_nodes is not None, logit_rows, logit_probs,
                                           bar)  # fmt: skip
    bar.close()
    graph = _assemble(src, selected, selected_rows, logit_rows, model.n_layers, builder.n_pos)
    tokens = model.to_str_tokens(ids_1P[0])
    return Graph(
        prompt=prompt, token_ids=ids_1P[0].tolist(), tokens=tokens, n_layers=model.n_layers,
        features=src.features[selected.to(src.features.device)].cpu(),
        activations=src.activations[selected.to(src.activations.device)].float().cpu(),
        logit_ids=logit_ids.tolist(), logit_tokens=[model.tokenizer.decode([i]) for i in logit_ids.tolist()],
        logit_probs=logit_probs.float(),
        adjacency=graph, model_name=model.name, transcoders=rep.fingerprints(),
    )  # fmt: skip


def eager_replacement(model: Model) -> bool:
    """Whether the replacement pass runs eager attention: on the CPU, where PyTorch's fused attention backward is
    slow (in bfloat16 several times the eager one); circuit-tracer runs it eagerly too. Its patterns are constants
    either way; the attention implementation is switched back afterwards, also on an error."""
    return model.device.type == "cpu"


def check_settings(
    max_n_logits: int,
    desired_logit_prob: float,
    max_feature_nodes: int | None,
    batch_size: int,
    skip_bos: bool,
    bos_error: bool,
) -> None:
    """:func:`attribute`'s settings, each of the right type and range (a clear error naming it otherwise)."""
    check_positive_int("max_n_logits", max_n_logits)
    check_positive_int("batch_size", batch_size)
    if max_feature_nodes is not None:
        check_positive_int("max_feature_nodes", max_feature_nodes)
    for name, flag in (("skip_bos", skip_bos), ("bos_error", bos_error)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}.")
    check_fraction("desired_logit_prob", desired_logit_prob, high="]")


def final_logits(model: Model, W_U: torch.Tensor, final_D: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits [V] of the final residual ``final_D`` and the unembedding's mean row [D], reading ``W_U`` a
    float32 slice at a time (each slice's memory-mapped pages released after use, core/memory/pages.py)."""
    with torch.no_grad():
        h = final_D.detach().float()
        logit_parts, sums = [], []
        for c in W_U.split(SLICE_ROWS):
            c_float = c.float()  # one conversion per slice
            logit_parts.append(c_float @ h)
            sums.append(h.new_ones(len(c_float)) @ c_float)  # the column sums, as one matrix-vector product
            release_pages(c)
        logits = model.softcap(torch.cat(logit_parts))
        mean_D = torch.stack(sums).sum(0) / W_U.shape[0]
    return logits, mean_D


def feature_rows(
    builder: RowBuilder,
    wanted: int,
    by_influence: bool,
    logit_rows: torch.Tensor,
    logit_probs: torch.Tensor,
    bar: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of ``wanted`` features, a batch per backward pass: (feature ids, their rows [wanted, sources]),
    ids ascending. With ``by_influence`` each batch takes the most influential features not yet computed (by the
    rows so far), else features in order. Only the computed rows are held, never [features, sources]."""
    n_f = builder.n_features
    computed = torch.zeros(wanted, builder.n_sources)  # in the order computed
    row_of = torch.full((n_f,), -1, dtype=torch.long)
    done = torch.zeros(n_f, dtype=torch.bool)
    order = torch.arange(n_f)
    n_done = 0
    while n_done < wanted:
        if by_influence:
            order = _by_influence(computed[row_of[done]], n_f, logit_rows, logit_probs, done)
        pick = order[~done[order]][: min(builder.batch, wanted - n_done)]
        computed[n_done : n_done + len(pick)] = builder.rows([("feature", i) for i in pick.tolist()])
        row_of[pick] = torch.arange(n_done, n_done + len(pick))
        done[pick] = True
        n_done += len(pick)
        bar.update(len(pick))
    selected = done.nonzero().flatten()
    return selected, computed[row_of[selected]]


def _by_influence(done_rows: torch.Tensor, n_f: int, logit_rows: torch.Tensor, probs: torch.Tensor,
                  done: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Feature ids by their influence on the logits through the rows computed so far (largest first).

    Only computed rows (the done features' and the logits') carry influence on, so the walk runs over those
    rows alone: ``|done| + K`` rows instead of the whole square matrix (whose memory grows as features^2).
    """
    rows = torch.cat([logit_rows, done_rows])  # [K + d, n_src]; done_rows in the order of done's True entries
    normalised = normalise_rows(rows)
    done_ids = done.nonzero().flatten()
    step = probs.double() @ normalised[: len(probs)]  # [n_src]: the first step, from the logits
    score = step.clone()
    for _ in range(n_f + 1):
        carried = step[done_ids]  # influence reaching a computed feature goes on through its row
        if not bool(carried.any()):
            break
        step = carried @ normalised[len(probs) :]
        score += step
    score = score[:n_f]
    score[done] = -1
    return torch.argsort(score, descending=True)


def _assemble(src: Sources, selected: torch.Tensor, selected_rows: torch.Tensor, logit_rows: torch.Tensor,
              n_layers: int, n_pos: int) -> torch.Tensor:  # fmt: skip
    """The square adjacency over [selected features, errors, tokens, logits] (``selected_rows``: their rows)."""
    n_f_all = len(src.features)
    k = len(selected)
    cols = torch.cat([selected, torch.arange(n_f_all, n_f_all + n_layers * n_pos + n_pos)])
    n = k + n_layers * n_pos + n_pos + len(logit_rows)
    a = torch.zeros(n, n)
    a[:k, : len(cols)] = selected_rows[:, cols]
    a[n - len(logit_rows) :, : len(cols)] = logit_rows[:, cols]
    return a
