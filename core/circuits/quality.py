"""How well transcoders replace the MLPs: per-layer explained variance, and the replacement model's loss.

Example
-------
>>> table = transcoder_quality(model, transcoders, held_out_texts)
>>> table["layers"][6]["explained_variance"], table["ce_clean"], table["ce_replacement"]
"""

from __future__ import annotations

from typing import Any

import torch
from tqdm.auto import tqdm

from ..checks import check_texts
from ..model.model import Model
from ..model.trace_ops import read_site, sae_decode, sae_encode, write_site
from ..saes.base import SAE
from ..saes.clt import CrossLayerTranscoder
from .replacers import check_transcoders, replacer


def replacement_edit(model: Model, tcs: list[SAE]) -> Any:
    """An ``edit(inputs, step)`` that replaces every MLP's output by its transcoder's prediction (no error term)."""
    plan = [(model.envoy(tc.site), model.envoy(tc.site_out), tc.trace_params(),
             tc.W_skip.detach().clone() if tc.cfg.skip else None) for tc in tcs]  # fmt: skip

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        for (in_env, in_io), (out_env, out_io), params, skip in plan:
            x = read_site(in_env, in_io)
            out = read_site(out_env, out_io)
            pred = sae_decode(params, sae_encode(params, x))
            if skip is not None:
                pred = pred + x.to(skip.dtype) @ skip
            write_site(out_env, out_io, pred.to(out.dtype))

    return edit


def clt_edit(model: Model, clt: CrossLayerTranscoder) -> Any:
    """An ``edit(inputs, step)`` that replaces every MLP's output by a cross-layer transcoder's prediction: each
    layer's latents read its MLP input, and layer ``m``'s output is what layers ``0..m`` write to it (no error)."""
    with torch.no_grad():
        w_enc, b_enc, b_dec = clt.W_enc.detach().clone(), clt.b_enc.detach().clone(), clt.b_dec.detach().clone()
        w_dec = [w.detach().clone() for w in clt.W_dec]
        threshold = None if clt.threshold is None else clt.threshold.detach().clone()
        w_skip = None if clt.W_skip is None else clt.W_skip.detach().clone()
    sites = [(model.envoy(a), model.envoy(b)) for a, b in zip(clt.sites, clt.sites_out, strict=True)]
    activation, k = clt.activation, int(clt.k or 1)

    def edit(inputs: dict[str, torch.Tensor], step: int) -> None:
        acts = []
        for layer, ((in_env, in_io), (out_env, out_io)) in enumerate(sites):
            x = read_site(in_env, in_io)
            out = read_site(out_env, out_io)
            xf = x.to(w_enc.dtype)
            pre = xf @ w_enc[layer] + b_enc[layer]
            if threshold is not None:
                a = pre * (pre > threshold[layer])
            elif activation == "relu":
                a = pre.relu()
            else:
                vals, idx = torch.topk(pre, k, dim=-1)
                a = torch.zeros_like(pre).scatter(-1, idx, vals.relu())
            acts.append(a)
            pred = b_dec[layer] + xf @ w_skip[layer] if w_skip is not None else b_dec[layer] + 0 * xf
            for source in range(layer + 1):
                pred = pred + acts[source] @ w_dec[source][:, layer - source]
            write_site(out_env, out_io, pred.to(out.dtype))

    return edit


def _next_token_loss(model: Model, text: str, edit: Any = None) -> tuple[float, int]:
    ids = model.to_tokens(text)["input_ids"][0]
    logits = model.logits(text, positions=None, edit=edit)[0, : len(ids) - 1]
    loss = torch.nn.functional.cross_entropy(logits.float(), ids[1:], reduction="sum")
    return float(loss), len(ids) - 1


def transcoder_quality(model: Model, transcoders: Any, texts: Any, progress: bool = True) -> dict[str, Any]:
    """Per layer: the explained variance of ``hook_mlp_out`` and the mean L0 (BOS excluded); and the mean
    next-token loss of the real model and of the replacement model (every MLP replaced at once).

    ``transcoders`` is one transcoder per layer or a cross-layer transcoder (``l0`` is then each layer's own
    latents'; the prediction of a layer sums what every earlier layer's latents write to it)."""
    if isinstance(transcoders, CrossLayerTranscoder):
        replacer(model, transcoders)
        return _quality(model, transcoders, check_texts(texts), progress)
    tcs = check_transcoders(model, transcoders)
    return _quality(model, tcs, check_texts(texts), progress)


def _quality(model: Model, tcs: Any, texts: list[str], progress: bool) -> dict[str, Any]:
    clt = tcs if isinstance(tcs, CrossLayerTranscoder) else None
    n_layers = model.n_layers
    err = torch.zeros(n_layers, dtype=torch.float64)
    var_sum = torch.zeros(n_layers, dtype=torch.float64)
    l0 = torch.zeros(n_layers, dtype=torch.float64)
    outs: list[list[torch.Tensor]] = [[] for _ in range(n_layers)]
    n_tok = 0
    edit = clt_edit(model, clt) if clt is not None else replacement_edit(model, tcs)
    pairs = list(zip(clt.sites, clt.sites_out, strict=True)) if clt is not None else [(tc.site, tc.site_out)
                                                                                       for tc in tcs]  # fmt: skip
    ce = [0.0, 0.0]
    for text in tqdm(texts, desc="transcoder quality", disable=not progress):
        enc = model.to_tokens(text)
        sites = [s for pair in pairs for s in pair]
        values = dict(zip(model.parse_sites(sites), model.run_sites(enc, sites), strict=True))
        by_name = {site.name: v[0, 1:].float() for site, v in values.items()}
        with torch.no_grad():
            x_L = [by_name[a] for a, _ in pairs]
            acts_L = clt.encode(x_L) if clt is not None else [tc.encode(x) for tc, x in zip(tcs, x_L, strict=True)]
            for i, (_, out_site) in enumerate(pairs):
                y = by_name[out_site]
                if clt is not None:
                    pred = clt.decode_layer(acts_L, i) + clt.skip_out(x_L[i], i)
                else:
                    pred = tcs[i].decode(acts_L[i]) + tcs[i].skip_out(x_L[i])
                err[i] += float((pred - y).pow(2).sum())
                outs[i].append(y)
                l0[i] += float((acts_L[i] != 0).sum())
        n_tok += int(enc["input_ids"].shape[1]) - 1
        for j, e in enumerate((None, edit)):
            loss, _ = _next_token_loss(model, text, e)
            ce[j] += loss
    n_pred = sum(int(model.to_tokens(t)["input_ids"].shape[1]) - 1 for t in texts)
    rows = []
    for i in range(n_layers):
        y = torch.cat(outs[i]).double()
        var_sum[i] = float((y - y.mean(0)).pow(2).sum())
        rows.append({"layer": i, "explained_variance": float(1 - err[i] / var_sum[i]), "l0": float(l0[i] / n_tok)})
    return {"layers": rows, "ce_clean": ce[0] / n_pred, "ce_replacement": ce[1] / n_pred, "n_tokens": n_pred}
