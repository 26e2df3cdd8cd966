"""Feature data in the JSON layout Neuronpedia imports: SAEDashboard's ``NeuronpediaDashboardBatch`` (its
converter's output, as of sae-dashboard 0.8.0), one ``batch-N.json`` per ``batch_size`` latents, and the automatic
explanations with their scores in ``explanations.json``.

Each feature holds what the data has: the logit effects (``pos_str``/``pos_values`` promoted, ``neg_*``
suppressed), the firing density (``frac_nonzero``), the activation histogram (``freq_hist_data_bar_values`` the bin
centres, ``..._heights`` the counts), the top examples (``bin_min`` -1, ``bin_max`` the example's max,
``bin_contains`` -1, as SAEDashboard marks its top group) and the quantile examples (``bin_min`` = ``bin_max`` = the
example's max, ``bin_contains`` its share of the quantile examples), ``qualifying_token_index`` at the example's
max. Neuron alignment, correlations, the logit histogram, decoder weights by head and the decoder ``vector``, which
feature data does not keep, are empty lists. Values are rounded to 3 decimals as SAEDashboard rounds them.

``explanations.json`` lists one record per explained latent: ``modelId``, ``layer`` (the source, ``"6-<sae_set>"``),
``index``, ``description``, ``explanationModelName``, ``typeName`` and ``scores`` (the scorer, metric, value and
both baselines), after Neuronpedia's explanation export.

Example
-------
>>> data.to_neuronpedia("np/", model_id="gemma-3-270m", sae_set="interplab-res")
[PosixPath('np/batch-0.json'), PosixPath('np/explanations.json')]
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_positive_int
from ..storage.atomic import make_dirs, write_json
from ..storage.readers import inside

#: Decimals kept, as SAEDashboard's converter rounds.
DECIMALS = 3
#: ``typeName`` of the explanations written here.
EXPLANATION_TYPE = "interplab-autointerp"


def _rounded(values: Any) -> list[float]:
    return [round(float(v), DECIMALS) for v in np.asarray(values, dtype=np.float64).ravel()]


def layer_of(site: str) -> int:
    """The layer number in a site name (``blocks.6.hook_resid_post`` -> 6); 0 when it names none."""
    found = re.search(r"(?:^|\.)(\d+)(?:\.|$)", site)
    return int(found.group(1)) if found else 0


def _activations(data: Any, i: int) -> list[dict[str, Any]]:
    out = []
    for kind in ("top", "quantile"):
        maxes = getattr(data, f"{kind}_max")[i]
        n = int((maxes > 0).sum())
        for tokens, acts, peak in zip(getattr(data, f"{kind}_tokens")[i], getattr(data, f"{kind}_acts")[i], maxes):
            if peak <= 0:
                continue
            keep = tokens >= 0
            top = kind == "top"
            out.append({
                "bin_min": -1 if top else round(float(peak), DECIMALS),
                "bin_max": round(float(peak), DECIMALS),
                "bin_contains": -1 if top else round(1.0 / n, DECIMALS),
                "tokens": [data.token_str(int(t)) for t in tokens[keep]],
                "values": _rounded(acts[keep]),
                "qualifying_token_index": int(keep[: data.lead].sum()),  # the example's max, padding left out
            })  # fmt: skip
    return out


def feature_record(data: Any, i: int, dataset: str, n_prompts: int) -> dict[str, Any]:
    """Latent ``i`` of ``data`` as one feature of a NeuronpediaDashboardBatch."""
    edges = np.asarray(data.hist_edges[i], dtype=np.float64)
    return {
        "feature_index": int(i),
        **{key: [] for key in ("neuron_alignment_indices", "neuron_alignment_values", "neuron_alignment_l1",
                               "correlated_neurons_indices", "correlated_neurons_l1", "correlated_neurons_pearson",
                               "correlated_features_indices", "correlated_features_l1",
                               "correlated_features_pearson")},
        "neg_str": [data.token_str(int(t)) for t in data.logit_bottom_ids[i]],
        "neg_values": _rounded(data.logit_bottom_values[i]),
        "pos_str": [data.token_str(int(t)) for t in data.logit_top_ids[i]],
        "pos_values": _rounded(data.logit_top_values[i]),
        "frac_nonzero": round(float(data.density[i]), 6),
        "freq_hist_data_bar_values": _rounded((edges[:-1] + edges[1:]) / 2),
        "freq_hist_data_bar_heights": _rounded(data.hist_counts[i]),
        "logits_hist_data_bar_heights": [],
        "logits_hist_data_bar_values": [],
        "n_prompts_total": int(n_prompts),
        "n_tokens_in_prompt": int(data.config.get("seq_len", data.context)),
        "dataset": dataset,
        "decoder_weights_dist": [],
        "activations": _activations(data, i),
        "vector": [],
    }  # fmt: skip


def explanation_rows(data: Any, model_id: str, source: str) -> list[dict[str, Any]]:
    """The automatic explanations of ``data`` as Neuronpedia explanation records."""
    rows = []
    for i, record in sorted(data.explanations.items()):
        scores = []
        if record.get("scorer"):
            scores.append({"scorer": record["scorer"], "metric": record["metric"], "value": record["score"],
                           "shuffled": record["shuffled"], "constant": record["constant"]})  # fmt: skip
        rows.append({"modelId": model_id, "layer": source, "index": str(i), "description": record["text"],
                     "explanationModelName": record["explainer"], "typeName": EXPLANATION_TYPE,
                     "scores": scores})  # fmt: skip
    return rows


def to_neuronpedia(
    data: Any,
    folder: str | os.PathLike[str],
    model_id: str | None = None,
    sae_set: str = "interplab",
    dataset: str = "",
    batch_size: int = 128,
) -> list[Path]:
    """Write ``data`` (a :class:`~interplab.core.features.FeatureData`) into ``folder`` as Neuronpedia's importer
    reads it (see the module docstring); returns the files written, every one inside ``folder``, atomically."""
    if not isinstance(sae_set, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", sae_set):
        raise ValueError(f"sae_set={sae_set!r:.60} must be a name of letters, digits, '.', '_' or '-'.")
    batch_size = check_positive_int("batch_size", batch_size)
    model_id = str(model_id if model_id is not None else data.model_name or "model")
    root = make_dirs(folder)
    layer = layer_of(data.site)
    n_prompts = int(data.n_tokens // max(1, int(data.config.get("seq_len", data.context))))
    written = []
    for b, first in enumerate(range(0, int(data.d_sae), batch_size)):
        ids = range(first, min(first + batch_size, int(data.d_sae)))
        batch = {"model_id": model_id, "layer": layer, "sae_set": sae_set, "sae_id_suffix": None,
                 "features": [feature_record(data, i, dataset, n_prompts) for i in ids]}  # fmt: skip
        written.append(write_json(inside(root, f"batch-{b}.json", root, "batch"), batch, indent=None))
    if data.explanations:
        rows = explanation_rows(data, model_id, f"{layer}-{sae_set}")
        written.append(write_json(inside(root, "explanations.json", root, "explanations"), rows, indent=None))
    return written
