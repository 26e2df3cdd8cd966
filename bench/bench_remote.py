"""What a trace costs through a real NDIF server on loopback, against the same trace run locally.

Run ``python bench/bench_remote.py`` (``make bench-remote``; about 4 minutes on 2 cores, most of it
starting the server). It starts the self-hosted NDIF of ``ndif-local/`` serving the embedded
Gemma 3 270M (or reuses one: ``--reuse server.json`` as written by the tests' ``ILAB_NDIF_REUSE``),
loads the same model locally, and times the same interplab calls both ways as medians of
interleaved rounds (each round runs both sides, alternating which goes first), so machine load
hits both alike. It prints ONE JSON object on stdout; progress goes to stderr.

* ``small``: ``collect`` of one site from one 16-token text (the forward stops at layer 6): the
  fixed cost of a request (serialising, HTTP, queue, Ray, the websocket, the result download).
* ``large``: ``collect`` of three sites from 8 texts of 128 tokens (3 x 8 x 128 x 640 floats,
  7.9 MB back): what moving a large result costs.

Both client and server share this machine's 2 cores, so the server's compute is not free:
``overhead_ms`` (remote minus local) is what the request path adds on loopback; over a network
add the transfer time of the payload and result sizes reported.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from interplab.core.model.remote import client_nnsight
from nnsight.intervention.backends.remote import RemoteBackend

import interplab as ilab

REPO = Path(__file__).resolve().parents[1]
SITE = "blocks.6.hook_resid_post"
SITES3 = ["blocks.3.hook_resid_post", "blocks.9.hook_mlp_out", "blocks.17.hook_resid_post"]


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def load_serve():
    spec = importlib.util.spec_from_file_location("ilab_ndif_serve", REPO / "ndif-local" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def texts_of(tokenizer, n: int, length: int) -> list[str]:
    words = ("the cat sat on the mat while the dog ran to the house and the bird sang in the tree " * 40).split()
    out = []
    for i in range(n):
        ids = tokenizer(" ".join(words[i : i + length * 2]), add_special_tokens=False)["input_ids"][: length - 1]
        out.append(tokenizer.decode(ids))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reuse", help="JSON of a running server (host, api_key)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    server, started = None, time.monotonic()
    if args.reuse:
        info = json.loads(Path(args.reuse).read_text())
        host, key, startup = info["host"], info["api_key"], info.get("timings", {})
    else:
        from interplab.core.loading.embedded import prepare_embedded_model

        log("starting the self-hosted NDIF (about a minute)")
        server = load_serve().start(prepare_embedded_model())
        host, key, startup = server.host, server.api_key, server.timings
    try:
        os.environ["NDIF_API_KEY"] = key
        t0 = time.monotonic()
        remote = ilab.load_model(remote=host)
        load_remote_s = time.monotonic() - t0
        t0 = time.monotonic()
        local = ilab.load_model()
        load_local_s = time.monotonic() - t0
        small = texts_of(local.tokenizer, 1, 16)
        large = texts_of(local.tokenizer, 8, 128)
        sizes: dict[str, list[int]] = {"payload": [], "result": []}
        post, finalize = RemoteBackend._post, RemoteBackend.finalize

        def counting_post(self, request, blob):
            sizes["payload"].append(len(blob))
            return post(self, request, blob)

        def counting_finalize(self, content):
            sizes["result"].append(len(content))
            return finalize(self, content)

        RemoteBackend._post, RemoteBackend.finalize = counting_post, counting_finalize
        cases = {
            "small": lambda m: m.collect(small, SITE),
            "large": lambda m: m.collect(large, SITES3, batch_size=8),
        }
        results = {}
        for name, run in cases.items():
            for m in (local, remote):  # warm-up (the first remote request may deploy or warm the replica)
                run(m)
            sizes["payload"].clear(), sizes["result"].clear()
            times = {"local": [], "remote": []}
            for r in range(args.rounds):
                order = [("local", local), ("remote", remote)][:: 1 if r % 2 == 0 else -1]
                for side, m in order:
                    start = time.perf_counter()
                    run(m)
                    times[side].append(time.perf_counter() - start)
            med = {side: statistics.median(v) for side, v in times.items()}
            results[name] = {
                "local_ms": round(1000 * med["local"], 1), "remote_ms": round(1000 * med["remote"], 1),
                "ratio_remote_to_local": round(med["remote"] / med["local"], 2),
                "overhead_ms": round(1000 * (med["remote"] - med["local"]), 1),
                "payload_bytes": int(statistics.median(sizes["payload"])),
                "result_bytes": int(statistics.median(sizes["result"])) if sizes["result"] else None,
            }  # fmt: skip
            log(f"{name}: {results[name]}")
        out = {
            "bench": "remote", "machine": platform.machine(), "cores": os.cpu_count(), "rounds": args.rounds,
            "server": {"ndif": "0.1.2", "nnsight": remote.server.nnsight_version, "host": "127.0.0.1",
                       "startup_s": startup},
            "client": {"nnsight": client_nnsight()},
            "load_model_s": {"remote": round(load_remote_s, 1), "local": round(load_local_s, 1)},
            **results,
            "wall_s": round(time.monotonic() - started, 1),
        }  # fmt: skip
        print(json.dumps(out))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
