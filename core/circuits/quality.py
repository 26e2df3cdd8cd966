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
from .attribute import check_transcoders


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


def _next_token_loss(model: Model, text: str, edit: Any = None) -> tuple[float, int]:
    ids = model.to_tokens(text)["input_ids"][0]
    logits = model.logits(text, positions=None, edit=edit)[0, : len(ids) - 1]
    loss = torch.nn.functional.cross_entropy(logits.float(), ids[1:], reduction="sum")
    return float(loss), len(ids) - 1


def transcoder_quality(model: Model, transcoders: Any, texts: Any, progress: bool = True) -> dict[str, Any]:
    """Per layer: the explained variance of ``hook_mlp_out`` and the mean L0 (BOS excluded); and the mean
    next-token loss of the real model and of the replacement model (every MLP replaced at once)."""
    tcs = check_transcoders(model, transcoders)
    texts = check_texts(texts)
    err = torch.zeros(len(tcs), dtype=torch.float64)
    var_sum = torch.zeros(len(tcs), dtype=torch.float64)
    l0 = torch.zeros(len(tcs), dtype=torch.float64)
    outs: list[list[torch.Tensor]] = [[] for _ in tcs]
    n_tok = 0
    edit = replacement_edit(model, tcs)
    ce = [0.0, 0.0]
    for text in tqdm(texts, desc="transcoder quality", disable=not progress):
        enc = model.to_tokens(text)
        sites = [s for tc in tcs for s in (tc.site, tc.site_out)]
        values = dict(zip(model.parse_sites(sites), model.run_sites(enc, sites), strict=True))
        by_name = {site.name: v[0, 1:].float() for site, v in values.items()}
        with torch.no_grad():
            for i, tc in enumerate(tcs):
                x, y = by_name[tc.site], by_name[tc.site_out]
                acts = tc.encode(x)
                err[i] += float((tc.decode(acts) + tc.skip_out(x) - y).pow(2).sum())
                outs[i].append(y)
                l0[i] += float((acts != 0).sum())
        n_tok += int(enc["input_ids"].shape[1]) - 1
        for j, e in enumerate((None, edit)):
            loss, _ = _next_token_loss(model, text, e)
            ce[j] += loss
    n_pred = sum(int(model.to_tokens(t)["input_ids"].shape[1]) - 1 for t in texts)
    rows = []
    for i in range(len(tcs)):
        y = torch.cat(outs[i]).double()
        var_sum[i] = float((y - y.mean(0)).pow(2).sum())
        rows.append({"layer": i, "explained_variance": float(1 - err[i] / var_sum[i]), "l0": float(l0[i] / n_tok)})
    return {"layers": rows, "ce_clean": ce[0] / n_pred, "ce_replacement": ce[1] / n_pred, "n_tokens": n_pred}
