"""Training the cross-layer transcoder shipped for the embedded Gemma 3 270M, from one activation pass per batch.

:func:`~interplab.core.saes.clt_train.train_clt` on the default corpus less its last 200 documents (held out for
the quality table), resumable in ``checkpoint_dir``; the CLT is saved in float16 in circuit-tracer's layout
(:func:`~interplab.core.saes.clt_io.save_clt`) with a README holding the exact command and the quality table
(per-layer explained variance of the MLP output on held-out passages, the replacement model's loss).
``--stop-at-checkpoint`` ends a run early: the CLT its last checkpoint holds is evaluated and saved.
``python -m interplab train-clt`` runs it.

Example
-------
>>> rows = train_embedded_clt("/tmp/clt-train", n_tokens=300_000, d_sae=152, k=16)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ..circuits.quality import transcoder_quality
from ..loading.load import load_model
from ..saes.clt import CrossLayerTranscoder
from ..saes.clt_io import save_clt
from ..saes.clt_train import JOB, folded, train_clt
from ..saes.pretrained import clt_folder
from ..storage.atomic import write_text
from ..storage.checkpoint import read_state_file
from ..storage.resumable import STATE_FILE
from .transcoders import corpus_split

logger = logging.getLogger(__name__)


def train_embedded_clt(
    checkpoint_dir: str | Path, out_dir: str | Path | None = None, n_tokens: int = 300_000, d_sae: int = 152,
    k: int = 16, eval_texts: int = 16, stop_at_checkpoint: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Train (or finish, or with ``stop_at_checkpoint`` cut short) the embedded model's TopK CLT; evaluate the
    float16 weights on held-out passages; save them with a README. Returns the quality table and the run's
    ``tokens``, ``fvu`` and ``l0``.

    >>> table = train_embedded_clt("/tmp/clt-train", out_dir="/tmp/clt", n_tokens=20_000, d_sae=32, k=4)
    """
    out = Path(out_dir) if out_dir is not None else clt_folder()
    model = load_model()
    train_docs, texts = corpus_split(eval_texts)
    if stop_at_checkpoint:
        clt, history = clt_from_checkpoint(Path(checkpoint_dir), model.n_layers, model.d_model, d_sae, k)
    else:
        res = train_clt(model, train_docs, d_sae=d_sae, k=k, n_tokens=n_tokens, path=checkpoint_dir,
                        checkpoint_every=20)  # fmt: skip
        clt, history = res.clt, res.history
    clt.to(torch.float16).to(torch.float32)  # evaluate exactly what is shipped: float16 weights
    table = transcoder_quality(model, clt, texts)
    save_clt(clt.to(torch.float16), out)
    run = {"tokens": int(history["tokens"][-1]), "fvu": history["fvu"][-1], "l0": history["l0"][-1]}
    command = (f"python -m interplab train-clt --checkpoint-dir /tmp/clt-train --n-tokens {n_tokens} "
               f"--d-sae {d_sae} --k {k} --eval-texts {len(texts)}")  # fmt: skip
    command += f" \\\n        --out {out_dir}" if out_dir else ""
    if stop_at_checkpoint:
        command += "\n    # stopped early, then: the same command with --stop-at-checkpoint"
    _write_readme(out, clt, run, table, command, n_tokens, len(texts))
    return {**run, **table}


def clt_from_checkpoint(
    folder: Path, n_layers: int, d_model: int, d_sae: int, k: int
) -> tuple[CrossLayerTranscoder, dict[str, list[float]]]:
    """The CLT a :func:`train_clt` checkpoint holds (its scales folded in, as at the end of training) and the
    run's history so far.

    >>> clt, history = clt_from_checkpoint(Path("/tmp/clt-train"), 18, 640, 152, 16)
    """
    inputs, state = read_state_file(folder / STATE_FILE, JOB)
    if (inputs.get("d_sae"), inputs.get("k")) != (d_sae, k):
        raise ValueError(f"The checkpoint in {str(folder)!r} is of d_sae={inputs.get('d_sae')}, k={inputs.get('k')}; "
                         f"the settings name d_sae={d_sae}, k={k}.")  # fmt: skip
    clt = CrossLayerTranscoder(n_layers, d_model, d_sae, "topk", k=k, skip=bool(inputs.get("skip")))
    clt.load_state_dict(state["weights"])
    return folded(clt, state["scale"]), {key: [float(v) for v in vs] for key, vs in state["history"].items()}


def _write_readme(out: Path, clt: CrossLayerTranscoder, run: dict[str, Any], table: dict[str, Any],
                  command: str, n_tokens: int, n_texts: int) -> None:  # fmt: skip
    rows = ["| layer | explained variance of hook_mlp_out | l0 |", "|---|---|---|"]
    rows += [f"| {r['layer']} | {r['explained_variance']:.4f} | {r['l0']:.1f} |" for r in table["layers"]]
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    seen = f"{run['tokens']:,} tokens" + ("" if run["tokens"] >= n_tokens else f" (of a {n_tokens:,}-token run)")
    text = f"""# Cross-layer transcoder for the embedded Gemma 3 270M

A TopK cross-layer transcoder (d_sae {clt.d_sae} latents per layer, k {clt.k} active per layer): layer L's encoder
reads `blocks.L.hook_mlp_in`, its decoders write to `blocks.M.hook_mlp_out` for every M >= L. Trained by
interplab's `train_clt` on {seen} of the default corpus (rows of 64 tokens, batch 8, BOS excluded, Adam 1e-3,
every layer's input and output divided by its RMS norm, folded into the weights after training); at the end of
training the fraction of variance unexplained was {run["fvu"]:.3f} (mean over layers) and l0 {run["l0"]:.2f} per
layer. float16 in circuit-tracer's layout ({size / 1e6:.1f} MB), read by `ilab.circuits.load_clt` and
`ilab.circuits.embedded_clt()`.

Made with:

    {command}

Quality on {n_texts} held-out passages (the last 200 documents of the default corpus, never trained on):

""" + "\n".join(rows) + f"""

Next-token loss on the same passages: the real model {table["ce_clean"]:.4f}; the replacement model (every MLP
replaced by the CLT at once, no error terms) {table["ce_replacement"]:.4f}.
"""  # fmt: skip
    write_text(out / "README.md", text)
