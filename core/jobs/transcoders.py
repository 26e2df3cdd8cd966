"""Training the transcoders shipped for the embedded Gemma 3 270M: one per layer, from one activation pass.

Every layer's MLP input (``blocks.L.hook_mlp_in``) and output (``blocks.L.hook_mlp_out``) come from the
same forward passes, which feed all the transcoders at once (:func:`interplab.core.saes.training.trainer.train_saes`
with one spec per layer); the run checkpoints and resumes as that trainer's
:class:`~interplab.core.storage.resumable.ResumableJob`, and ``--stop-at-checkpoint`` rebuilds the transcoders
its last checkpoint holds.
``python -m interplab train-transcoders`` runs it. The quality table (per-layer explained variance of the
MLP output, and the replacement model's loss against the real model's) is written beside them.

Example
-------
>>> tcs = train_transcoders("/tmp/tc", layers=range(18), n_tokens=300_000)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from ..circuits.quality import transcoder_quality
from ..data.corpus import default_corpus
from ..loading.load import load_model
from ..saes.base import SAE
from ..saes.pretrained import transcoders_folder
from ..saes.training.trainer import CHECKPOINT, read_checkpoint, train_saes
from ..saes.writer import save_saelens
from ..storage.atomic import write_text

logger = logging.getLogger(__name__)


def corpus_split(eval_texts: int) -> tuple[list[str], list[str]]:
    """The default corpus less its last 200 documents (to train on), and ``eval_texts`` passages of up to 400
    characters spread over those 200 (held out, for the quality tables of the shipped transcoders and CLT).

    >>> train_docs, held_out_texts = corpus_split(16)
    """
    docs = default_corpus()
    held_out = docs[-200:]
    texts = [d[:400].rsplit(" ", 1)[0] for d in held_out[:: max(1, len(held_out) // eval_texts)]][:eval_texts]
    return docs[:-200], texts


def train_transcoders(
    checkpoint_dir: str | Path,
    out_dir: str | Path | None = None,
    layers: Iterable[int] | None = None,
    n_tokens: int = 300_000,
    width: int = 1024,
    k: int = 16,
    batch_size: int = 1024,
    eval_texts: int = 16,
    skip: bool = False,
    lr: float | None = None,
    stop_at_checkpoint: bool = False,
) -> dict[int, dict[str, Any]]:
    """Train one BatchTopK transcoder per layer (MLP input -> MLP output, with an affine skip if ``skip``) from
    one stream; evaluate; save fp16.

    ``stop_at_checkpoint`` ends a run early: what the last checkpoint of the same settings holds is evaluated
    and saved (the README says at which step), without training further.
    """
    out = Path(out_dir) if out_dir is not None else transcoders_folder()
    model = load_model()
    layers = list(range(model.n_layers) if layers is None else layers)
    train_docs, texts = corpus_split(eval_texts)
    specs = [{"arch": "batchtopk", "width": width, "k": k, "site": f"blocks.{layer}.hook_mlp_in",
              "site_out": f"blocks.{layer}.hook_mlp_out", "skip": skip, **({"lr": lr} if lr else {})}
             for layer in layers]  # fmt: skip
    stopped = None
    if stop_at_checkpoint:
        tcs, stopped = transcoders_from_checkpoint(Path(checkpoint_dir), specs, model.name, model.d_model)
    else:
        tcs = train_saes(model, specs, n_tokens=n_tokens, batch_size=batch_size, corpus=train_docs,
                         checkpoint_dir=str(checkpoint_dir), checkpoint_every=10)  # fmt: skip
    for tc in tcs:
        tc.cfg.model_name = model.name
        tc.to(torch.float16).to(torch.float32)  # evaluate exactly what is shipped: float16 weights
    table = transcoder_quality(model, tcs, texts)
    for tc, row in zip(tcs, table["layers"], strict=True):
        tc.cfg.metadata["evaluation"] = row
        save_saelens(tc, out / f"blocks.{tc.site.split('.')[1]}.transcoder", dtype=torch.float16)
    _write_readme(
        out, layers, n_tokens, width, k, len(texts), table, skip=skip, lr=lr, batch_size=batch_size, stopped=stopped
    )
    return {row["layer"]: row for row in table["layers"]}


def transcoders_from_checkpoint(
    folder: str | Path, specs: list[dict[str, Any]], model_name: str, d: int
) -> tuple[list[SAE], int]:
    """The transcoders a training checkpoint holds (scales folded in as at the end of training), and its step.

    >>> tcs, step = transcoders_from_checkpoint("/tmp/tc-train", specs, "gemma-3-270m", 640)
    """
    folder = Path(folder)
    state = read_checkpoint(folder / CHECKPOINT)
    if len(state["saes"]) != len(specs):
        raise ValueError(f"The checkpoint in {str(folder)!r} holds {len(state['saes'])} transcoders; the settings "
                         f"name {len(specs)}.")  # fmt: skip
    out = []
    for spec, weights in zip(specs, state["saes"], strict=True):
        tc = SAE.create(spec["arch"], d_in=d, d_sae=spec["width"], k=spec["k"], site=spec["site"],
                        site_out=spec["site_out"], d_out=d, skip=spec["skip"], model_name=model_name)  # fmt: skip
        tc.load_state_dict(weights)
        tc.fold_input_scale(state["scales"][spec["site"]], state["scales"][spec["site_out"]])
        out.append(tc.eval())
    return out, int(state["step"])


def _write_readme(out: Path, layers: list[int], n_tokens: int, width: int, k: int, n_texts: int,
                  table: dict[str, Any], skip: bool = False, lr: float | None = None,
                  batch_size: int = 1024, stopped: int | None = None) -> None:  # fmt: skip
    rows = ["| layer | explained variance of hook_mlp_out | l0 |", "|---|---|---|"]
    rows += [f"| {r['layer']} | {r['explained_variance']:.4f} | {r['l0']:.1f} |" for r in table["layers"]]
    flags = (" --skip" if skip else "") + (f" --lr {lr:g}" if lr else "")
    seen = (
        f"{n_tokens:,} tokens"
        if stopped is None
        else (
            f"the first {stopped * batch_size:,} tokens (a run of {n_tokens:,} stopped at its checkpoint at step "
            f"{stopped}, before the learning rate decayed; `--stop-at-checkpoint` saved it)"
        )
    )
    if stopped is not None:
        flags += "\n    # stopped early, then: the same command with --stop-at-checkpoint"
    text = (
        f"""# Transcoders for the embedded Gemma 3 270M

BatchTopK transcoders (width {width}, k {k}{", with an affine skip connection" if skip else ""}) from
`blocks.L.hook_mlp_in` (the MLP's input: the output of the norm before it) to `blocks.L.hook_mlp_out` (what
the MLP adds to the residual stream) for every layer {layers[0]}..{layers[-1]}, trained by interplab's own
trainer on {seen} of the default corpus (one activation pass feeding all {len(layers)}
transcoders; context 128, BOS excluded, batch {batch_size}{f", lr {lr:g}" if lr else ""}). Saved in SAELens
transcoder format, float16. Load them with `ilab.circuits.embedded_transcoders()`.

Made with:

    python -m interplab train-transcoders --checkpoint-dir /tmp/tc-train --n-tokens {n_tokens} --width {width} \\
        --k {k} --batch-size {batch_size} --eval-texts {n_texts}{flags}

Quality on {n_texts} held-out passages (the last 200 documents of the default corpus, never trained on):

"""
        + "\n".join(rows)
        + f"""

Next-token loss on the same passages: the real model {table["ce_clean"]:.4f}; the replacement model (every
MLP replaced by its transcoder at once, no error terms) {table["ce_replacement"]:.4f}.
"""
    )
    write_text(out / "README.md", text)


def load_transcoders(folder: str | Path | None = None) -> dict[int, SAE]:
    """The transcoders in a folder written by :func:`train_transcoders`, by layer."""
    from ..saes.io import load_saelens

    out = {}
    for p in sorted(Path(folder or transcoders_folder()).glob("blocks.*.transcoder")):
        out[int(p.name.split(".")[1])] = load_saelens(p)
    return out
