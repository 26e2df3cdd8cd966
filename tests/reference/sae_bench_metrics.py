"""sae-bench 0.6.0's own sparse-probing and first-letter absorption numbers on tiny inputs: run in .ref/sae-bench only.

    .ref/sae-bench/bin/python tests/reference/sae_bench_metrics.py tests/reference/sae_bench_metrics.json

Reads what ``tests/reference/sae_bench_inputs.py`` wrote (interplab's side) under ``tests/reference/sae_bench/``:
per-token activations of labelled texts from the tiny GPT-2, a random SAE and a planted-absorption SAE as
SAELens folders (loaded here with sae_lens's own ``SAE.load_from_disk``), word activations, and the probe
directions and main latents of interplab's absorption. sae-bench's top-level runners load a
TransformerLens model and data sets from the hub, so this calls the functions they use, unchanged:

- sparse probing: ``activation_collection.create_meaned_model_activations`` and
  ``get_sae_meaned_activations`` (mean pooling), then ``probe_training.train_probe_on_activations`` in the
  order and with the arguments of ``sparse_probing.main.run_eval_single_dataset`` (full-activation probe:
  AdamW; top-k probes: mean-difference selection + scikit-learn). ``prepare_probe_data`` (its random
  balanced tasks) and ``train_probe_gpu`` are observed, not replaced: each task's texts in order, and the
  torch RNG state each Adam probe starts from, are recorded so interplab can rerun the same task.
- absorption: ``FeatureAbsorptionCalculator.calculate_absorption`` with the given probe direction and main
  latents; a stand-in for the TransformerLens model returns the given activation at the word's position
  (it answers ``run_with_cache`` and ``to_tokens`` only). Also sae-bench's own letter probe
  (``train_multi_probe``, Adam) and k-sparse probes (``train_k_sparse_probes``: latents ranked by an
  L1-penalised probe) on the training words, to compare directions and latent choices with interplab's.

``JAXTYPING_DISABLE=1``: with the jaxtyping (0.3.11) and beartype (0.23.1) that sae-bench 0.6.0 resolves to,
``train_probe_on_activations(..., select_top_k=k)`` raises a ``BeartypeCallHintParamViolation`` (the
per-class size bound by its own signature clashes with the twice-as-large balanced task passed on to
``train_sklearn_probe``), so the shape checks (checks only, no computation) are switched off.

This file imports nothing of interplab (the two environments differ).
"""

from __future__ import annotations

import os

os.environ["JAXTYPING_DISABLE"] = "1"

import importlib.metadata as md
import json
import sys
from pathlib import Path

import sae_bench.evals.sparse_probing.probe_training as probe_training
import sae_bench.sae_bench_utils.activation_collection as activation_collection
import torch
from sae_bench.evals.absorption.feature_absorption_calculator import FeatureAbsorptionCalculator
from sae_bench.evals.absorption.k_sparse_probing import train_k_sparse_probes
from sae_bench.evals.absorption.probing import train_multi_probe
from sae_lens import SAE
from safetensors.torch import load_file

HERE = Path(__file__).resolve().parent
INPUTS = HERE / "sae_bench"
SEED, K_VALUES, SAE_BATCH = 42, (1, 2, 5), 8
COMMAND = ("bash tests/reference/build_sae_bench.sh  (runs: .ref/sae-bench/bin/python "
           "tests/reference/sae_bench_metrics.py tests/reference/sae_bench_metrics.json)")  # fmt: skip


class Recorder:
    """Wraps sae-bench's prepare_probe_data and train_probe_gpu to note which texts each task drew."""

    def __init__(self, rows: dict[bytes, int]):
        self.rows, self.tasks, self.states = rows, [], []
        self.prepare, self.train_gpu = probe_training.prepare_probe_data, probe_training.train_probe_gpu
        self.top_k = probe_training.get_top_k_mean_diff_mask

    def prepare_probe_data(self, all_activations, class_name, perform_scr=False):
        acts, labels = self.prepare(all_activations, class_name, perform_scr)
        self.tasks.append({"class": class_name, "texts": [self.rows[r.numpy().tobytes()] for r in acts],
                           "labels": labels.tolist()})  # fmt: skip
        return acts, labels

    def get_top_k_mean_diff_mask(self, acts, labels, k):
        mask = self.top_k(acts, labels, k)
        self.tasks[-2]["selected"] = torch.nonzero(~mask).flatten().tolist()  # the train task (test came after)
        return mask

    def train_probe_gpu(self, *args, **kwargs):
        state = torch.get_rng_state().numpy().tobytes().hex()
        probe, accuracy = self.train_gpu(*args, **kwargs)
        self.states.append({"rng_state": state, "weight": probe.net.weight.flatten().tolist(),
                            "bias": float(probe.net.bias)})  # fmt: skip
        return probe, accuracy


def sparse_probing(inputs: dict, meta: dict) -> dict:
    acts_BLD = inputs["probe_acts_BLD"]
    labels, split = meta["labels"], meta["split"]
    classes = list(dict.fromkeys(labels))
    idx = {s: {c: [i for i, (lab, sp) in enumerate(zip(labels, split)) if lab == c and sp == s] for c in classes}
           for s in ("train", "test")}  # fmt: skip
    BLD = {s: {c: acts_BLD[idx[s][c]] for c in classes} for s in idx}
    sae = SAE.load_from_disk(str(INPUTS / "probing_sae"), device="cpu")
    llm = {s: activation_collection.create_meaned_model_activations(BLD[s]) for s in BLD}
    lat = {s: activation_collection.get_sae_meaned_activations(BLD[s], sae, SAE_BATCH) for s in BLD}
    rows = {}
    for s in idx:
        for c in classes:
            for i, x in zip(idx[s][c], llm[s][c], strict=True):
                rows[x.numpy().tobytes()] = i
            for i, z in zip(idx[s][c], lat[s][c], strict=True):
                rows[z.numpy().tobytes()] = i
    assert len(rows) == 2 * len(labels), "pooled rows must be distinct to be traced back to their texts"
    rec = Recorder(rows)
    probe_training.prepare_probe_data, probe_training.train_probe_gpu = rec.prepare_probe_data, rec.train_probe_gpu
    probe_training.get_top_k_mean_diff_mask = rec.get_top_k_mean_diff_mask
    torch.manual_seed(SEED)  # as run_eval_single_sae does
    runs = []

    def run(name: str, k: int | None, acts: dict, **kw) -> None:
        start = len(rec.tasks)
        _, accs = probe_training.train_probe_on_activations(acts["train"], acts["test"], select_top_k=k, **kw)
        tasks = rec.tasks[start:]
        for c in classes:
            train, test = [t for t in tasks if t["class"] == c]
            entry = {"probe": name, "k": k, "class": c, "accuracy": accs[c], "train": train, "test": test}
            if k is not None:
                entry["selected"] = sorted(train.pop("selected"))
            runs.append(entry)

    run("llm", None, llm, use_sklearn=False, batch_size=250, epochs=100, lr=1e-2)
    for k in K_VALUES:
        run("llm", k, llm)
    for k in K_VALUES:
        run("sae", k, lat)
    adam = [r for r in runs if r["probe"] == "llm" and r["k"] is None]
    for r, state in zip(adam, rec.states, strict=True):
        r.update(state)  # torch.get_rng_state() as hex bytes as train_probe_gpu started, and its best probe
    return {"seed": SEED, "k_values": list(K_VALUES), "sae_batch_size": SAE_BATCH,
            "meaned": {"llm": _by_text(llm, idx), "sae": _by_text(lat, idx)}, "runs": runs}  # fmt: skip


def _by_text(acts: dict, idx: dict) -> dict:
    """Each text's pooled row, its float32 values written with the 9 digits that keep them exact."""
    return {str(i): [float(f"{v:.9g}") for v in acts[s][c][j].tolist()]
            for s in idx for c, ids in idx[s].items() for j, i in enumerate(ids)}  # fmt: skip


class WordActivations:
    """Stands in for the TransformerLens model: the activation of each prompt's word at position -2."""

    def __init__(self, words: list[str], X: torch.Tensor):
        self.X, self.row = X, {w: i for i, w in enumerate(words)}

    def _word(self, prompt: str) -> str:
        return prompt.rsplit("\n", 1)[-1].removesuffix(":")

    def to_tokens(self, prompt: str) -> torch.Tensor:
        return torch.zeros(1, 2, dtype=torch.long)

    def run_with_cache(self, prompts: list[str], names_filter: list[str]):
        x = torch.stack([self.X[self.row[self._word(p)]] for p in prompts])
        return None, {names_filter[0]: torch.stack([x, torch.zeros_like(x)], 1)}


def absorption(inputs: dict, meta: dict) -> dict:
    a = meta["absorption"]
    sae = SAE.load_from_disk(str(INPUTS / "absorption_sae"), device="cpu")
    calc = FeatureAbsorptionCalculator(model=WordActivations(a["words"], inputs["absorption_X"]), icl_word_list=[],
                                       base_template="{word}:", word_token_pos=-2)  # fmt: skip
    out = {"thresholds": {"full_absorption_probe_cos_sim": calc.full_absorption_probe_cos_sim_threshold,
                          "absorption_fraction_probe_cos_sim": calc.absorption_fraction_probe_cos_sim_threshold,
                          "probe_projection_proportion": calc.probe_projection_proportion_threshold,
                          "absorption_fraction_max_absorbing_latents": calc.absorption_fraction_max_absorbing_latents},
           "letters": {}}  # fmt: skip
    for c, direction in a["directions"].items():
        words = [w for w, lc, t in zip(a["words"], a["letters"], a["test"], strict=True) if lc == c and t]
        res = calc.calculate_absorption(sae, words, torch.tensor(direction), a["main"][c], layer=0,
                                        show_progress=False)  # fmt: skip
        out["letters"][c] = {"main": res.main_feature_ids, "words": [r.word for r in res.word_results],
                             "probe_projection": [r.probe_projection for r in res.word_results],
                             "absorption_fraction": [float(r.absorption_fraction) for r in res.word_results],
                             "is_full_absorption": [bool(r.is_full_absorption) for r in res.word_results],
                             "top_projection_feature": [r.top_projection_feature_scores[0].feature_id
                                                        for r in res.word_results]}  # fmt: skip
    train = [i for i, t in enumerate(a["test"]) if not t]
    letters = sorted(set(a["letters"]))
    X_tr = inputs["absorption_X"][train]
    y_tr = torch.tensor([letters.index(a["letters"][i]) for i in train])
    torch.manual_seed(SEED)
    probe = train_multi_probe(X_tr, torch.nn.functional.one_hot(y_tr), show_progress=False, device=torch.device("cpu"))
    k_sparse = train_k_sparse_probes(sae, [(a["words"][i], int(y)) for i, y in zip(train, y_tr, strict=True)], X_tr,
                                     ks=[1, 2, 3])  # fmt: skip
    for li, c in enumerate(letters):
        out["letters"][c]["sae_bench_probe_direction"] = probe.weights[li].detach().tolist()
        out["letters"][c]["k_sparse_latents"] = {str(k): k_sparse[k][li].feature_ids.tolist() for k in (1, 2, 3)}
    return out


def main(path: str) -> None:
    inputs = load_file(INPUTS / "inputs.safetensors")
    meta = json.loads((INPUTS / "inputs.json").read_text())
    versions = {
        p: md.version(p) for p in ("sae-bench", "sae-lens", "torch", "scikit-learn", "numpy", "jaxtyping", "beartype")
    }
    result = {"_generated_by": COMMAND, "versions": versions, "python": sys.version.split()[0],
              "sparse_probing": sparse_probing(inputs, meta), "absorption": absorption(inputs, meta)}  # fmt: skip
    Path(path).write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(HERE / "sae_bench_metrics.json"))
