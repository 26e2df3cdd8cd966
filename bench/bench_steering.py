"""Benchmark the SteeringPanel's latency: slider change -> first steered token and -> 16 tokens.

Run ``python bench/bench_steering.py`` (about 2-3 minutes on 2 cores). It prints ONE JSON object on
stdout; progress goes to stderr. ``--trials`` sets the repetitions (``--trials 1`` for a smoke run).

A real kernel is started with jupyter_client. In it: the embedded model, a difference-of-means
vector at ``blocks.6.hook_resid_post``, and a ``SteeringPanel`` (greedy, 16 new tokens). The client
then moves the slider the way the frontend does, a ``comm_msg`` ``{"method": "update", "state":
{"values": ...}}`` on the widget's comm, and reads iopub until the panel's ``steered_tokens`` updates
hold 1 and then 16 tokens. Times are measured on the client from sending the message.

Baseline, same kernel, same run, alternating with the panel trials: a bare HF ``generate`` of the
same prompt and length with a streamer (time to the first new token and to all 16), timed inside
the kernel, without steering, threads or messages. Reported: medians and the ratios panel / bare
(goal <= 1.2).
"""

from __future__ import annotations

import argparse
import json
import platform
import queue
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
N_TOKENS = 16
GOAL_RATIO = 1.2
PROMPT = "I thought the movie was"

SETUP = f"""
import json, time
import torch
import interplab as ilab
from transformers.generation.streamers import BaseStreamer
model = ilab.load_model()
site = "blocks.6.hook_resid_post"
vec = ilab.steering.diff_of_means(model, site, ["I love this. It is wonderful.", "What a great day."],
                                  ["I hate this. It is awful.", "What a terrible day."], position="mean")
panel = ilab.widgets.SteeringPanel(model, {{"v": vec}}, prompt={PROMPT!r}, max_new_tokens={N_TOKENS}, debounce_ms=0)
panel.wait(300)
enc = model.to_tokens({PROMPT!r}, padding_side="left")

class _Clock(BaseStreamer):
    def __init__(self):
        self.start, self.times, self.prompt_seen = time.perf_counter(), [], False
    def put(self, value):
        if self.prompt_seen:
            self.times.append(time.perf_counter() - self.start)
        self.prompt_seen = True
    def end(self):
        pass

def bare_generate():
    clock = _Clock()
    with torch.no_grad():
        model.module.generate(**enc, max_new_tokens={N_TOKENS}, min_new_tokens={N_TOKENS}, do_sample=False,
                                  streamer=clock, pad_token_id=model.tokenizer.pad_token_id)
    return clock.times[0], clock.times[-1], len(clock.times)

bare_generate()  # warm-up
print(json.dumps({{"comm_id": panel.comm.comm_id, "baseline_tokens": len(panel.baseline_tokens)}}))
"""


def log(msg: str) -> None:
    print(f"[bench_steering] {msg}", file=sys.stderr, flush=True)


def run_code(kc: Any, code: str, timeout: float = 600) -> str:
    """Execute code in the kernel; return its stdout; raise on an error."""
    msg_id = kc.execute(code, store_history=False)
    out, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content.get("name") == "stdout":
            out.append(content["text"])
        elif kind == "error":
            raise RuntimeError(f"{content['ename']}: {content['evalue']}\n" + "\n".join(content["traceback"][-3:]))
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out)
    raise TimeoutError(f"kernel did not finish within {timeout} s")


def drain(kc: Any) -> None:
    while True:
        try:
            kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            return


def panel_trial(kc: Any, comm_id: str, value: float, timeout: float = 120) -> tuple[float, float, int]:
    """Send a slider change through the comm; time the first steered token and the 16th on iopub."""
    drain(kc)
    data = {"method": "update", "state": {"values": {"v": value}}, "buffer_paths": []}
    msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
    start = time.perf_counter()
    kc.shell_channel.send(msg)
    first = last = None
    n = 0
    new_run = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            m = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        if m["msg_type"] != "comm_msg" or m["content"].get("comm_id") != comm_id:
            continue
        data = m["content"].get("data", {})
        if data.get("method") != "update":
            continue
        state = data.get("state", {})
        if "run_id" in state:
            new_run = True
        if new_run and "steered_tokens" in state:
            n = len(state["steered_tokens"])
            now = time.perf_counter() - start
            if n >= 1 and first is None:
                first = now
            if n >= N_TOKENS:
                last = now
        status = state.get("status") or ""
        if status.startswith("error"):
            raise RuntimeError(f"panel: {status}")
        if new_run and status == "done" and first is not None:
            return first, (last if last is not None else time.perf_counter() - start), n
    raise TimeoutError("no steered tokens arrived")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args()
    from jupyter_client.manager import start_new_kernel

    log("starting a kernel")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(REPO_ROOT))
    try:
        t0 = time.perf_counter()
        info = json.loads(run_code(kc, SETUP).strip().splitlines()[-1])
        log(f"kernel ready in {time.perf_counter() - t0:.1f} s: {info}")
        comm_id = info["comm_id"]
        panel_first, panel_all, bare_first, bare_all, counts = [], [], [], [], []
        for i in range(args.trials):
            value = 1.0 + 0.5 * i  # a new slider position each time (the baseline stays cached)
            f, a, n = panel_trial(kc, comm_id, value)
            panel_first.append(f)
            panel_all.append(a)
            counts.append(n)
            bare = json.loads(run_code(kc, "print(json.dumps(bare_generate()))").strip())
            bare_first.append(bare[0])
            bare_all.append(bare[1])
            log(f"trial {i}: panel first {f * 1000:.0f} ms, {n} tokens {a * 1000:.0f} ms; "
                f"bare first {bare[0] * 1000:.0f} ms, all {bare[1] * 1000:.0f} ms")  # fmt: skip
        history = json.loads(run_code(kc, "print(json.dumps([h['values']['v'] for h in panel.history]))").strip())
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    med = statistics.median
    result = {
        "benchmark": "steering_panel_latency",
        "model": "embedded gemma3-270m (fp32, CPU)",
        "site": "blocks.6.hook_resid_post",
        "n_tokens": N_TOKENS,
        "trials": args.trials,
        "panel_first_token_s_median": round(med(panel_first), 4),
        "panel_16_tokens_s_median": round(med(panel_all), 4),
        "bare_generate_first_token_s_median": round(med(bare_first), 4),
        "bare_generate_16_tokens_s_median": round(med(bare_all), 4),
        "ratio_first_token": round(med(panel_first) / med(bare_first), 3),
        "ratio_16_tokens": round(med(panel_all) / med(bare_all), 3),
        "goal_ratio": GOAL_RATIO,
        "meets_goal_16_tokens": med(panel_all) / med(bare_all) <= GOAL_RATIO,
        "steered_tokens_per_trial": counts,
        "runs_in_history": len(history),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
