"""Training the pretrained SAE suite shipped for the embedded Gemma 3 270M: cache, train, evaluate, save.

A recipe over several capabilities (data, SAEs, evaluation), so it lives above them all;
``python -m interplab train-suite`` runs it. The suite's loader is :mod:`interplab.core.saes.pretrained`.

Example
-------
>>> results = train_suite("/tmp/suite-store", out_dir="/tmp/suite", layers=(6,), n_tokens=200_000)
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.corpus import default_corpus
from ..evals.reconstruction import evaluate
from ..loading.load import load_model
from ..saes.pretrained import suite_folder
from ..saes.training.trainer import train_saes
from ..saes.writer import save_saelens
from ..storage.atomic import write_text


def train_suite(
    store_path: str,
    out_dir: str | Path | None = None,
    layers: tuple[int, ...] = (0, 3, 6, 9, 12, 15),
    n_tokens: int = 1_000_000,
    width: int = 4096,
    k: int = 32,
    eval_texts: int = 32,
) -> dict[int, dict[str, float]]:
    """Cache (resumable), train one BatchTopK SAE per layer from one stream, evaluate, save fp16.

    Returns each layer's evaluation numbers; ``README.md`` in ``out_dir`` (default: the installed suite's
    folder) records them.
    """
    out = Path(out_dir) if out_dir is not None else suite_folder()
    model = load_model()
    sites = [f"blocks.{layer}.hook_resid_post" for layer in layers]
    docs = default_corpus()
    train_docs, held_out = docs[:-200], docs[-200:]
    store = model.cache(
        train_docs, sites, store_path, n_tokens=n_tokens, context_size=128, batch_size=16, dtype="bfloat16"
    )
    specs = [{"arch": "batchtopk", "width": width, "k": k, "site": s} for s in sites]
    saes = train_saes(
        store, specs, n_tokens=n_tokens, batch_size=4096, checkpoint_dir=str(Path(store_path) / "training")
    )
    texts = [d[:400].rsplit(" ", 1)[0] for d in held_out[:: max(1, len(held_out) // eval_texts)]][:eval_texts]
    results = {}
    for layer, sae in zip(layers, saes):
        sae.cfg.model_name = model.name
        sae.to(torch.float16).to(torch.float32)  # evaluate exactly what is shipped: float16 weights
        result = evaluate(sae, model, texts)
        results[layer] = result.to_dict()
        sae.cfg.metadata["evaluation"] = results[layer]
        save_saelens(
            sae,
            out / f"blocks.{layer}.hook_resid_post",
            dtype=torch.float16,
            sparsity=torch.from_numpy(result.density).clamp_min(1e-10).log10(),
        )
    _write_readme(out, store_path, layers, n_tokens, width, k, len(texts), results)
    return results


def _write_readme(
    out: Path,
    store_path: str,
    layers: tuple[int, ...],
    n_tokens: int,
    width: int,
    k: int,
    n_texts: int,
    results: dict[int, dict[str, float]],
) -> None:
    keys = ("explained_variance", "l0", "ce_loss_recovered", "kl_spliced", "dead_fraction", "ce_clean", "ce_spliced")
    table = ["| layer | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for layer in layers:
        table.append(f"| {layer} | " + " | ".join(f"{results[layer][key]:.4g}" for key in keys) + " |")
    layer_args = " ".join(str(layer) for layer in layers)
    text = (
        f"""# Pretrained SAEs for the embedded Gemma 3 270M

BatchTopK SAEs (width {width}, k {k}) on `blocks.L.hook_resid_post` for L in {list(layers)}, trained
by interplab's own trainer on {n_tokens:,} tokens of the default corpus (one activation pass feeding
all {len(layers)} SAEs; context 128, BOS excluded, batch 4096). Saved in SAELens format, float16.
Load one with `ilab.load_sae("embedded", layer=L)`.

Made with:

    python -m interplab train-suite --store {store_path} --layers {layer_args} --n-tokens {n_tokens} \\
        --width {width} --k {k}

Evaluation with `ilab.evaluate` on {n_texts} held-out passages (the last 200 documents of the default
corpus, which training never reached):

"""
        + "\n".join(table)
        + "\n"
    )
    write_text(out / "README.md", text)
