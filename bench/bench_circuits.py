"""Benchmark attribution graphs and the CircuitGraph widget.

Run ``python bench/bench_circuits.py`` (a few minutes on the embedded model; ``--quick`` uses a tiny
random Gemma 3 and fewer page loads). It prints ONE JSON object on stdout; progress goes to stderr.

(a) Graph time for a 16-token prompt against the bare passes it needs: ``attribute`` runs one forward
    pass of ``batch_size`` copies of the prompt and ``n`` backward passes (reported by the builder). The
    baseline, measured in the same run, is a plain forward + backward of the same batch through the same
    model (no nnsight, no freezing), timed and multiplied by ``n``: ratio = graph time / (n x baseline).
    Transcoders: the embedded model's shipped ones when present, else random BatchTopK transcoders of
    width 1024, k 16 (the time does not depend on their quality). ``max_feature_nodes`` caps the rows.
(b) Widget payload for 1,000 nodes / 10,000 edges (a synthetic graph): bytes of the JSON message and
    of the binary buffers as ipywidgets sends them; baseline: the same arrays as JSON lists.
(c) First paint in headless Chromium of the exported HTML (the notebook stored with its widget state,
    ``interplab.export_html``, every non-file request aborted): ``ilab-circuit-render-start`` to
    ``ilab-circuit-painted`` (two animation frames after the first draw). Goal <= 500 ms.
(d) With ``--vs-circuit-tracer`` only: graphs against circuit-tracer 0.5.0's on the same model, replacement
    (the shipped transcoders and/or a CLT, ``--kind``) and prompt, two long-lived workers interleaved, both
    dtypes, 1 and 2 threads, 128 and 512 feature nodes (``--dtypes``, ``--threads``, ``--nodes`` pick
    configurations) (:mod:`bench.vs_circuit_tracer`).
    Goal: interplab at least 2x faster in every configuration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

PROMPT_16 = "When Mary and John went to the store, John gave a drink to"
PAINT_GOAL_MS = 500.0
MARK_START, MARK_PAINTED = "ilab-circuit-render-start", "ilab-circuit-painted"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def random_transcoders(model: Any, width: int, k: int, threshold: float = 0.5) -> list[Any]:
    from interplab.core.saes import SAE

    out = []
    for layer in range(model.n_layers):
        tc = SAE.create("batchtopk", d_in=model.d_model, d_sae=width, k=k, site=f"blocks.{layer}.hook_mlp_in",
                        site_out=f"blocks.{layer}.hook_mlp_out", d_out=model.d_model)  # fmt: skip
        tc.init_weights(layer)
        with torch.no_grad():
            tc.topk_threshold.fill_(threshold)
        out.append(tc.eval())
    return out


def graph_section(quick: bool, batch: int, max_features: int, folder: str | None = None) -> dict[str, Any]:
    import importlib

    from interplab.core.circuits import attribute

    import interplab as ilab

    attribute_module = importlib.import_module("interplab.core.circuits.attribute")  # the function shadows it

    if quick:
        from tests.tiny import tiny_model

        model, prompt = tiny_model("gemma3"), "the cat sat on the mat and the dog ran to the big red house and"
        tcs = random_transcoders(model, 64, 4, threshold=0.02)
        source = "random (tiny model)"
    else:
        model, prompt = ilab.load_model(dtype="float32"), PROMPT_16
        try:
            if folder:  # SAELens transcoder folders (e.g. from `python -m interplab train-transcoders --out`)
                paths = sorted(Path(folder).iterdir(), key=lambda p: int(p.name.split(".")[1]))
                tcs = [ilab.load_sae(p) for p in paths]
                source = f"trained, from {folder}"
            else:
                tcs, source = ilab.circuits.embedded_transcoders(), "shipped"
        except FileNotFoundError:
            tcs, source = random_transcoders(model, 1024, 16), "random BatchTopK width 1024 k 16"
    n_tokens = int(model.to_tokens(prompt)["input_ids"].shape[1])
    passes: list[int] = []
    real_rows = attribute_module.RowBuilder.rows

    def counting(self: Any, targets: Any) -> Any:
        out = real_rows(self, targets)
        passes.append(self.backward_passes)
        return out

    attribute_module.RowBuilder.rows = counting
    try:
        t0 = time.perf_counter()
        graph = attribute(model, tcs, prompt, batch_size=batch, max_feature_nodes=max_features, progress=False)
        graph_s = time.perf_counter() - t0
    finally:
        attribute_module.RowBuilder.rows = real_rows
    n_backward = passes[-1]
    ids = model.to_tokens(prompt)["input_ids"][:1].expand(batch, -1)
    hf = model.module

    def bare() -> float:
        t = time.perf_counter()
        out = hf(input_ids=ids, logits_to_keep=1).logits
        out.sum().backward()
        hf.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    bare()
    base = statistics.median(bare() for _ in range(3 if not quick else 5))
    return {
        "model": model.name, "transcoders": source, "prompt_tokens": n_tokens, "batch_size": batch,
        "max_feature_nodes": max_features, "graph_s": round(graph_s, 3), "backward_passes": n_backward,
        "forward_passes": 1, "bare_forward_backward_s": round(base, 4),
        "baseline": "n_backward x (plain HF forward + backward of the same batch)",
        "ratio_graph_over_bare_passes": round(graph_s / (n_backward * base), 3),
        "n_features": graph.n_features, "n_nodes": graph.n_nodes,
    }  # fmt: skip


def synthetic_graph(n_nodes: int = 1000, n_edges: int = 10_000, seed: int = 0) -> Any:
    from interplab.core.circuits import Graph

    rng = np.random.default_rng(seed)
    n_layers, n_pos, n_logits = 18, 16, 5
    n_f = n_nodes - n_layers * n_pos - n_pos - n_logits
    feats = np.stack([rng.integers(0, n_layers, n_f), rng.integers(0, n_pos, n_f), rng.integers(0, 4096, n_f)], 1)
    order = np.lexsort((feats[:, 1], feats[:, 0]))
    feats = feats[order]
    n = n_nodes
    layer_of = np.concatenate([feats[:, 0], np.repeat(np.arange(n_layers), n_pos), np.full(n_pos, -1),
                               np.full(n_logits, n_layers)])  # fmt: skip
    adj = np.zeros((n, n), dtype=np.float32)
    # every feature and error reaches a logit and every feature reads a token: no node without influence
    for s in range(n_f + n_layers * n_pos):
        adj[n - n_logits + rng.integers(0, n_logits), s] = rng.standard_normal()
    for d in range(n_f):
        adj[d, n_f + n_layers * n_pos + rng.integers(0, n_pos)] = rng.standard_normal()
    placed = int((adj != 0).sum())
    while placed < n_edges:
        d, s = rng.integers(0, n, 2)
        is_target = d < n_f or d >= n - n_logits
        if is_target and s < n - n_logits and layer_of[s] < layer_of[d] and adj[d, s] == 0:
            adj[d, s] = rng.standard_normal()
            placed += 1
    return Graph(prompt="synthetic", token_ids=list(range(n_pos)), tokens=[f"t{i}" for i in range(n_pos)],
                 n_layers=n_layers, features=torch.from_numpy(feats).long(),
                 activations=torch.rand(n_f), logit_ids=list(range(n_logits)),
                 logit_tokens=[f"o{i}" for i in range(n_logits)], logit_probs=torch.full((n_logits,), 0.19),
                 adjacency=torch.from_numpy(adj))  # fmt: skip


def payload_section(widget: Any) -> dict[str, Any]:
    from ipywidgets.widgets.widget import _remove_buffers
    from jupyter_client.jsonutil import json_default

    state, _, buffers = _remove_buffers(widget.get_state())
    state = {k: v for k, v in state.items() if k not in ("_esm", "_css")}
    message = json.dumps(state, default=json_default).encode()
    arrays = {k: v for k, v in widget._view.items() if isinstance(v, np.ndarray)}
    as_json = json.dumps({k: v.tolist() for k, v in arrays.items()}).encode()
    binary = sum(len(b) for b in buffers)
    return {"nodes": widget._view["n_nodes"], "edges": widget._view["n_edges"], "json_message_bytes": len(message),
            "binary_bytes": binary, "total_bytes": len(message) + binary, "baseline_arrays_as_json_bytes": len(as_json),
            "ratio_total_over_json_baseline": round((len(message) + binary) / len(as_json), 3)}  # fmt: skip


def export_page(widget: Any, folder: Path) -> Path:
    import nbformat
    from ipywidgets.embed import dependency_state, embed_data

    from interplab.export import export_html

    data = embed_data(views=[widget], drop_defaults=False, state=dependency_state([widget], drop_defaults=False))
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": data["manager_state"]}
    cell = nbformat.v4.new_code_cell("ilab.widgets.CircuitGraph(graph)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("execute_result", execution_count=1, data={
        "application/vnd.jupyter.widget-view+json": data["view_specs"][0], "text/plain": repr(widget)})]  # fmt: skip
    nb.cells = [cell]
    src = folder / "circuit.ipynb"
    nbformat.write(nb, src)
    return export_html(src, folder / "site" / "circuit.html", execute=False)


def paint_section(html: Path, loads: int, home: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from bench.bench_widgets import offline_page
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    rows = []
    problems: dict[str, list[str]] = {"blocked": [], "errors": [], "console_errors": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                    env={"HOME": str(home), "PATH": "/usr/bin:/bin"})  # fmt: skip
        try:
            for i in range(loads + 1):
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = offline_page(context, problems)
                page.goto(html.as_uri(), wait_until="load", timeout=120_000)
                page.wait_for_function(f"performance.getEntriesByName('{MARK_PAINTED}', 'mark').length > 0",
                                       timeout=120_000)  # fmt: skip
                marks = page.evaluate(f"""() => {{
                  const m = (n) => performance.getEntriesByName(n, "mark").map((e) => e.startTime);
                  const c = document.querySelector(".ilab-circuit canvas");
                  return {{start: m("{MARK_START}"), painted: m("{MARK_PAINTED}"),
                          nodes: c ? Number(c.dataset.nodes) : 0, edges: c ? Number(c.dataset.edges) : 0}};
                }}""")
                context.close()
                row = {"render_ms": marks["painted"][0] - marks["start"][0], "nodes_drawn": marks["nodes"],
                       "edges_drawn": marks["edges"]}  # fmt: skip
                log(f"  load {i}: {json.dumps(row)}")
                if i:
                    rows.append(row)
            version = browser.version
        finally:
            browser.close()
    if not all(r["nodes_drawn"] > 0 and r["edges_drawn"] > 0 for r in rows):
        raise RuntimeError(f"the page drew no graph: {rows} {problems}")
    med = statistics.median(r["render_ms"] for r in rows)
    return {"chromium": version, "render_to_painted_ms_median": round(med, 1),
            "render_to_painted_ms_all": [round(r["render_ms"], 1) for r in rows],
            "nodes_drawn": rows[0]["nodes_drawn"], "edges_drawn": rows[0]["edges_drawn"], "loads": loads,
            "html_bytes": html.stat().st_size, "network_requests_blocked": len(problems["blocked"]),
            "page_errors": problems["errors"][:5], "goal": f"<= {PAINT_GOAL_MS:g} ms",
            "goal_met": med <= PAINT_GOAL_MS}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, fewer page loads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-feature-nodes", type=int, default=128)
    parser.add_argument("--transcoders", help="a folder of SAELens transcoder folders, one per layer")
    parser.add_argument(
        "--vs-circuit-tracer",
        action="store_true",
        help="only (d): graphs against circuit-tracer's, every configuration of the flags below",
    )
    parser.add_argument("--kind", choices=["transcoders", "clt", "both"], default="both", help="(d) only")
    parser.add_argument("--nodes", type=int, nargs="+", default=[128, 512], help="(d) only: feature-node caps")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="(d) only")
    parser.add_argument("--clt-width", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.vs_circuit_tracer:
        from bench.vs_circuit_tracer import vs_circuit_tracer

        log("graphs against circuit-tracer")
        kinds = ["transcoders", "clt"] if args.kind == "both" else [args.kind]
        vs = vs_circuit_tracer(kinds, args.clt_width, args.nodes, args.repeats, args.dtypes, args.threads)
        print(json.dumps({"benchmark": "circuits", "vs_circuit_tracer": vs}, indent=1))
        return
    import interplab as ilab

    result: dict[str, Any] = {"benchmark": "circuits", "quick": args.quick}
    log("graph time")
    result["graph"] = graph_section(args.quick, args.batch_size, args.max_feature_nodes, args.transcoders)
    log("widget payload")
    widget = ilab.widgets.CircuitGraph(synthetic_graph(), node_threshold=1.0, edge_threshold=1.0)
    widget.threshold = 1.0  # the slider at its end: every node and edge is drawn
    result["payload"] = payload_section(widget)
    log("first paint")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            html = export_page(widget, Path(tmp))
            result["first_paint"] = paint_section(html, 2 if args.quick else 5, Path(tmp) / "home")
        except Exception as exc:
            result["first_paint"] = {"skipped": f"{type(exc).__name__}: {exc}"[:500], "goal_met": None}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
