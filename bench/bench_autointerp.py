"""Benchmark automated interpretability at scale: latents explained and scored per minute with the embedded
explainer, the time share of each stage, and the unbatched path measured in the same run.

Run ``python bench/bench_autointerp.py`` (a few minutes on 2 busy cores); ``--latents 8 --baseline-latents 4`` for
a quick run. It prints ONE JSON object on stdout; progress goes to stderr.

Setting: the embedded Gemma 3 270M's pretrained layer-6 SAE, feature data over ``--n-tokens`` tokens of the default
corpus (as in ``nbs/10_autointerp.ipynb``); the first ``--latents`` latents that fired with density under 5% are
explained (8 examples, up to 30 new tokens) and scored by detection (``--n-score`` held-out examples and as many
others, each asked with the own, a shuffled and a constant explanation) by the embedded SmolLM2-135M-Instruct in
bfloat16 (its prepared dtype; here a bfloat16 prefill pass took about a quarter of float32's time)
on the CPU, through ``ilab.autointerp.explain_and_score``.

- ``fast``: ``ModelChat(model, prefix_cache=True)`` (as ``explain_and_score`` builds it), batches of 8 prompts
  (shortest first) per forward pass with the shared prompt prefix's key-value cache computed once per call
  (``core/autointerp/prefix.py``); each chunk's scoring questions asked in one call; each explanation's generation
  stopped once it holds the explanation (``explanation_ended``).
- ``baseline``: the unbatched path, one prompt per pass through ``Model.generate`` / ``Model.logits``
  (``ModelChat(model, batch_size=1, prefix_cache=False)``), on the first ``--baseline-latents`` of the same latents.

``speedup`` = fast latents per minute / baseline latents per minute. Stage shares: ``explain`` (generating the
explanations), ``score`` (the scorer's P(Yes) passes), ``other`` (examples, prompts, tables, commits).
``same_explanations`` counts the latents both paths explained with the same text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def log(msg: str) -> None:
    print(f"[bench_autointerp {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class TimedClient:
    """A chat client whose calls are timed by stage."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.seconds = {"explain": 0.0, "score": 0.0}

    def complete(self, conversations: Any, max_new_tokens: int) -> list[str]:
        start = time.perf_counter()
        try:
            return self.inner.complete(conversations, max_new_tokens)
        finally:
            self.seconds["explain"] += time.perf_counter() - start

    def complete_until(self, conversations: Any, max_new_tokens: int, ended: Any) -> list[str]:
        start = time.perf_counter()
        try:
            return self.inner.complete_until(conversations, max_new_tokens, ended)
        finally:
            self.seconds["explain"] += time.perf_counter() - start

    def yes_probability(self, conversations: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.yes_probability(conversations)
        finally:
            self.seconds["score"] += time.perf_counter() - start


def measure(data: Any, latents: list[int], client: TimedClient, n_score: int) -> dict[str, Any]:
    import interplab as ilab

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        explained, scores = ilab.autointerp.explain_and_score(
            data, latents, client, scorers="detection", n_score=n_score, path=Path(folder) / "job", progress=False
        )
    seconds = time.perf_counter() - start
    other = max(seconds - sum(client.seconds.values()), 0.0)
    summary = scores.summary().loc[("detection", "auroc")]
    return {
        "latents": len(latents),
        "seconds": round(seconds, 2),
        "latents_per_minute": round(60 * len(latents) / seconds, 2),
        "stage_share": {k: round(v / seconds, 3) for k, v in {**client.seconds, "other": other}.items()},
        "detection_auroc": {k: round(float(summary[k]), 3) for k in ("explanation", "shuffled", "constant")},
        "texts": explained.texts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latents", type=int, default=24)
    parser.add_argument("--baseline-latents", type=int, default=6)
    parser.add_argument("--n-score", type=int, default=5)
    parser.add_argument("--n-tokens", type=int, default=16_000)
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    from interplab.core.autointerp.clients import ModelChat

    import interplab as ilab

    threads = torch.get_num_threads()
    log("feature data of the layer-6 SAE")
    with tempfile.TemporaryDirectory() as work:
        gemma = ilab.load_model()
        data = ilab.feature_data(ilab.load_sae("embedded", layer=6), gemma, "default", n_tokens=args.n_tokens,
                                 path=Path(work) / "layer6", progress=False)  # fmt: skip
    del gemma
    latents = [i for i in range(data.d_sae) if data.top_max[i, 0] > 0 and data.density[i] < 0.05][: args.latents]
    chat = ilab.load_model("smollm2-135m-instruct")
    log(f"fast path on {len(latents)} latents")
    fast = measure(data, latents, TimedClient(ModelChat(chat, prefix_cache=True)), args.n_score)
    log(f"unbatched path on {args.baseline_latents} latents")
    base = measure(data, latents[: args.baseline_latents], TimedClient(ModelChat(chat, 1, prefix_cache=False)),
                   args.n_score)  # fmt: skip
    base_texts, texts = base.pop("texts"), fast.pop("texts")
    same = sum(texts[i] == text for i, text in base_texts.items())
    result = {
        "explainer": chat.name,
        "dtype": str(next(chat.module.parameters()).dtype),
        "torch_threads": threads,
        "n_tokens": args.n_tokens,
        "n_score": args.n_score,
        "fast": fast,
        "baseline": base,
        "speedup": round(fast["latents_per_minute"] / base["latents_per_minute"], 2),
        "goal_latents_per_minute": 10,
        "load_average": os.getloadavg(),
        "example_explanations": {str(i): texts[i] for i in latents[:5]},
    }
    result["same_explanations"] = f"{same} of {len(base_texts)}"
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
