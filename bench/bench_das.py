"""Benchmark: DAS training steps per second against pyvene, and probe fitting against scikit-learn.

1. DAS: a randomly initialised GPT-2 (``--layers`` layers, ``--width`` wide, vocab ``--vocab``; built from its
   config, no download), batches of ``--batch`` prompt pairs of ``--length`` tokens, k = 1 at
   ``blocks.1.hook_resid_post``, last position, Adam. interplab's side is what ``ilab.das.fit`` does per run:
   read the sources once (no grad), then per step one traced base forward that computes the loss and its
   gradient inside the trace (remote-safe). pyvene 0.1.8's side (``RotatedSpaceIntervention`` through
   ``IntervenableModel``, its usual training loop: a source and a base forward per step) runs in its own
   environment ``.ref/pyvene`` (``bash tests/reference/build_pyvene.sh``) on the same config, in the same run.
   Steps per second of each (interplab's includes reading the sources, spread over the steps) and the ratio.
2. Probes: logistic probes for every layer's ``hook_resid_post`` of the embedded Gemma 3 270M on ``--tokens``
   tokens of the default corpus (label: whether the next token starts a word), fitted by
   ``ilab.probes``' solver and by scikit-learn's ``LogisticRegression`` (lbfgs, the same C, standardised
   features) on the same features: total fitting time of each, the ratio and the largest accuracy gap.

Prints one JSON object. Run: ``python bench/bench_das.py [--tokens 50000] [--skip-probes] [--skip-das]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interplab.core.das.intervene import prepare, run  # noqa: E402
from interplab.core.probes.solver import fit_logistic, predict  # noqa: E402

import interplab as ilab  # noqa: E402

PYVENE = ROOT / ".ref" / "pyvene" / "bin" / "python"


def word_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<bos>": 1, "<eos>": 2} | {f"w{i}": i for i in range(3, vocab)}
    tk = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")


def das_part(args: argparse.Namespace) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = dict(n_layer=args.layers, n_embd=args.width, n_head=4, vocab_size=args.vocab, n_positions=256,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
    spec = {"config": config, "batch_size": args.batch, "length": args.length, "steps": args.steps, "k": 1,
            "threads": torch.get_num_threads()}  # fmt: skip
    torch.manual_seed(0)
    model = ilab.load_model(GPT2LMHeadModel(GPT2Config(**config)).eval(), tokenizer=word_tokenizer(args.vocab))
    gen = torch.Generator().manual_seed(1)
    n = args.batch * args.steps
    text = lambda: " ".join(f"w{i}" for i in torch.randint(3, args.vocab, (args.length - 1,), generator=gen).tolist())  # noqa: E731
    labels = [f"w{i}" for i in torch.randint(3, args.vocab, (n,), generator=gen).tolist()]
    pairs = ilab.das.counterfactual_pairs(model, [text() for _ in range(n)], [text() for _ in range(n)], labels)
    site = "blocks.1.hook_resid_post"
    A = torch.randn(args.width, 1, requires_grad=True)
    opt = torch.optim.Adam([A], lr=0.01)
    start = time.perf_counter()
    prep = prepare(model, pairs, site, [-1], args.batch)
    read = time.perf_counter() - start
    times = []
    for s in range(args.steps + 1):
        idx = torch.arange(s % args.steps * args.batch, (s % args.steps + 1) * args.batch)
        t = time.perf_counter()
        _, grad, _ = run(model, prep, idx, None, A)
        opt.zero_grad()
        A.grad = grad
        opt.step()
        times.append(time.perf_counter() - t)
    per_step = sum(times[1:]) / args.steps + read / args.steps
    out = {"config": spec, "interplab_steps_per_s": 1 / per_step, "interplab_source_read_s": read}
    if PYVENE.exists():
        res = subprocess.run([str(PYVENE), "-W", "ignore", str(ROOT / "tests/reference/pyvene_das.py"), "--bench",
                              json.dumps(spec)], capture_output=True, text=True, check=True, cwd=ROOT)  # fmt: skip
        ref = json.loads(res.stdout.strip().splitlines()[-1])
        out["pyvene_steps_per_s"] = ref["steps_per_s"]
        out["ratio"] = out["interplab_steps_per_s"] / ref["steps_per_s"]
    else:
        out["pyvene_steps_per_s"] = None
        out["note"] = "pyvene's environment is not built: bash tests/reference/build_pyvene.sh"
    return out


def probe_part(args: argparse.Namespace) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    model = ilab.load_model()
    sites = [f"blocks.{layer}.hook_resid_post" for layer in range(model.n_layers)]
    texts, n = [], 0
    for text in ilab.default_corpus():
        texts.append(text)
        n += int(model.to_tokens(text)["attention_mask"].sum())
        if n >= args.tokens:
            break
    acts = model.collect(texts, sites, batch_size=8)
    words = acts.flat_str_tokens()
    T = min(len(words), args.tokens)
    feats = {s: acts.flat(s)[:T].float() for s in sites}
    del acts
    y = torch.tensor([int(w.startswith(("\u2581", " "))) for w in words[1 : T + 1]] + [0] * (T + 1 - len(words)))[:T]
    split = int(0.8 * T)
    ours_s = sk_s = 0.0
    gaps = []
    for s in sites:
        x = feats[s]
        t = time.perf_counter()
        fit = fit_logistic(x[:split], y[:split], 2, C=1.0)
        ours_s += time.perf_counter() - t
        acc = float((predict(fit, x[split:]) == y[split:]).float().mean())
        xn = x.numpy()
        t = time.perf_counter()
        scaler = StandardScaler().fit(xn[:split])
        ref = LogisticRegression(C=1.0, max_iter=500).fit(scaler.transform(xn[:split]), y[:split].numpy())
        sk_s += time.perf_counter() - t
        gaps.append(abs(acc - float((ref.predict(scaler.transform(xn[split:])) == y[split:].numpy()).mean())))
    return {"layers": len(sites), "tokens": T, "d": int(feats[sites[0]].shape[1]), "interplab_fit_s": ours_s,
            "sklearn_fit_s": sk_s, "ratio": sk_s / ours_s, "max_accuracy_gap": max(gaps)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=50_000)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=24)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--skip-probes", action="store_true")
    p.add_argument("--skip-das", action="store_true")
    args = p.parse_args()
    out: dict = {"torch_threads": torch.get_num_threads()}
    if not args.skip_das:
        out["das"] = das_part(args)
        print(json.dumps(out["das"]), file=sys.stderr)
    if not args.skip_probes:
        out["probes"] = probe_part(args)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
