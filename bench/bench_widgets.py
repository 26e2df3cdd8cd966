"""Benchmark the heatmap widget: bytes on the wire, Python serialisation time, first paint in Chromium.

Run ``python bench/bench_widgets.py`` (about 1-2 minutes). It prints ONE JSON object on
stdout; progress goes to stderr. ``--quick`` uses fewer repetitions.

Data: token strings from the embedded model's tokenizer on the default corpus (documents of
at most 512 tokens, each starting with ``<bos>``, as ``Model.collect`` gives them; only the
tokenizer is loaded, no forward pass), or a synthetic vocabulary of 5,000 strings when the
embedded model is not prepared. Values: dense standard-normal float32, [n_tokens, 32].

(a) Payload: what goes over the wire when a kernel sends the widget, measured the way
    ipywidgets sends it: ``get_state()`` split by ``_remove_buffers`` into a JSON message
    (packed with jupyter_client's ``json_packer``) plus raw binary buffers. The ``_esm`` and
    ``_css`` sources are reported apart (sent with every widget, the same text each time).
    Goal: at most 4 bytes per value plus the token text once.
    Baseline: the values as a JSON list (``json.dumps(values.tolist())``), same run.
(b) Python-side time (median): constructing the widget; ``get_state`` + ``_remove_buffers``.
(c) First paint in headless Chromium (Debian's, the launch arguments of the browser tests,
    every non-file request aborted): the notebook is exported with ``interplab.export_html``
    and opened over file://. Measured with the ``performance.mark`` calls in heatmap/index.js:
    ``ilab-heatmap-render-start`` at the top of ``render()`` and ``ilab-heatmap-painted``
    two animation frames after the first page was drawn. Reported: painted - render_start
    (the widget's own rendering; goal <= 500 ms at 100k tokens x 32 features), and for
    reference navigation start -> render_start (loading the page and its widget state) and
    navigation start -> painted. Median of several page loads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # for tests.browser.conftest (the Chromium launch arguments)

N_FEATURES = 32
SIZES = (10_000, 100_000)
DOC_TOKENS = 512
BYTES_PER_VALUE_GOAL = 4.0
PAINT_GOAL_MS = 500.0
PAINT_GOAL_TOKENS = 100_000
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SOURCE_TRAITS = ("_esm", "_css")
MARK_START, MARK_PAINTED = "ilab-heatmap-render-start", "ilab-heatmap-painted"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def median_s(fn: Callable[[], object], reps: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


# --- data -------------------------------------------------------------------------------


def corpus_documents(n_tokens: int) -> tuple[list[list[str]], str]:
    """Documents of real token strings (embedded tokenizer on the default corpus), or synthetic ones."""
    try:
        from interplab.core.loading.embedded import embedded_model_dir, is_prepared

        if not is_prepared():
            raise FileNotFoundError("the embedded model is not prepared")
        from transformers import AutoTokenizer

        import interplab as ilab

        tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
        docs: list[list[int]] = []
        total = 0
        for text in ilab.default_corpus():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            for start in range(0, len(ids), DOC_TOKENS - 1):
                doc = [tokenizer.bos_token_id, *ids[start : start + DOC_TOKENS - 1]]
                docs.append(doc)
                total += len(doc)
                if total >= n_tokens:
                    break
            if total >= n_tokens:
                break
        distinct = sorted({i for d in docs for i in d})
        text_of = dict(zip(distinct, tokenizer.batch_decode([[i] for i in distinct])))
        return [[text_of[i] for i in d] for d in docs], "embedded tokenizer on the default corpus"
    except Exception as exc:  # no embedded model here: a synthetic vocabulary of word-like strings
        log(f"using synthetic tokens ({exc})")
        rng = np.random.default_rng(0)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        vocab = [(" " if i % 3 else "") + "".join(rng.choice(letters, 2 + i % 8)) for i in range(5_000)]
        ids = rng.zipf(1.3, n_tokens) % len(vocab)
        flat = [vocab[i] for i in ids]
        return [flat[i : i + DOC_TOKENS] for i in range(0, n_tokens, DOC_TOKENS)], "synthetic 5,000-string vocabulary"


def take(docs: list[list[str]], n_tokens: int) -> list[list[str]]:
    out: list[list[str]] = []
    left = n_tokens
    for d in docs:
        if left <= 0:
            break
        out.append(d[:left])
        left -= len(out[-1])
    return out


# --- (a) payload and (b) Python time ----------------------------------------------------------


def wire(widget: Any) -> dict[str, Any]:
    """Bytes of the comm-open message ipywidgets sends for ``widget``, by part."""
    from ipywidgets.widgets.widget import _remove_buffers
    from jupyter_client.session import json_packer

    state, paths, buffers = _remove_buffers(widget.get_state())
    sources = {k: len(json_packer(state.pop(k))) for k in SOURCE_TRAITS if k in state}
    by_trait = {".".join(map(str, p)): memoryview(b).nbytes for p, b in zip(paths, buffers)}
    return {
        "json_bytes": len(json_packer({"state": state, "buffer_paths": paths})),
        "buffer_bytes": sum(by_trait.values()),
        "buffers": by_trait,
        "vocab_json_bytes": len(json_packer(state["vocab"])),
        "source_bytes": sources,
    }


def payload_section(docs: list[list[str]], n: int, reps: int, json_reps: int) -> dict[str, Any]:
    from interplab.widgets import FeatureHeatmap
    from interplab.widgets._kit import OPTIONS, array_payload
    from ipywidgets.widgets.widget import _remove_buffers
    from jupyter_client.session import json_packer

    tokens = take(docs, n)
    values = np.random.default_rng(n).standard_normal((n, N_FEATURES), dtype=np.float32)
    n_values = n * N_FEATURES
    assert n_values <= OPTIONS["max_values"], "every column is sent at these sizes"

    made: list[Any] = []

    def construct() -> None:
        made.append(FeatureHeatmap(tokens, values))

    construct_s, _ = median_s(construct, reps)
    w = made[-1]
    for old in made[:-1]:
        old.close()
    state_s, _ = median_s(lambda: _remove_buffers(w.get_state()), reps)
    parts = wire(w)
    assert parts["buffers"]["values.view"] == 4 * n_values
    w.close()

    total = parts["json_bytes"] + parts["buffer_bytes"]
    text = parts["vocab_json_bytes"]
    values_bytes = parts["buffers"]["values.view"]
    token_ids = parts["buffers"]["token_ids.view"]
    # top features per token travel only when over the cap (else the browser computes them)
    top_k = parts["buffers"].get("top_features.view", 0) + parts["buffers"].get("top_values.view", 0)
    allowed = BYTES_PER_VALUE_GOAL * n_values + text

    # Baselines, same data: values as a JSON list vs as raw bytes.
    json_list_s, _ = median_s(lambda: json_packer(values.tolist()), json_reps)
    json_list_bytes = len(json_packer(values.tolist()))
    binary_s, _ = median_s(lambda: array_payload(values.T, "float32"), reps)

    return {
        "n_tokens": n,
        "n_features": N_FEATURES,
        "n_values": n_values,
        "n_docs": len(tokens),
        "distinct_tokens": len({t for d in tokens for t in d}),
        "wire_bytes": total,
        "wire_json_bytes": parts["json_bytes"],
        "wire_buffer_bytes": parts["buffer_bytes"],
        "buffers": parts["buffers"],
        "bytes_per_value": total / n_values,
        "values_bytes_per_value": values_bytes / n_values,
        "token_text_bytes": text,
        "token_ids_bytes_per_token": token_ids / n,
        "top_k_bytes_per_token": top_k / n,
        "bytes_per_value_excluding_token_text": (total - text) / n_values,
        "goal": f"wire_bytes <= {BYTES_PER_VALUE_GOAL:g} * n_values + token_text_bytes",
        "goal_allowed_bytes": int(allowed),
        "goal_met": total <= allowed,
        "goal_met_counting_token_ids_as_text": total <= allowed + token_ids,
        "widget_source_bytes": parts["source_bytes"],
        "json_list_baseline": {
            "bytes": json_list_bytes,
            "bytes_per_value": json_list_bytes / n_values,
            "size_ratio_vs_values_buffer": json_list_bytes / values_bytes,
            "size_ratio_vs_whole_widget": json_list_bytes / total,
            "serialise_s": json_list_s,
            "binary_values_serialise_s": binary_s,
            "time_ratio_vs_binary_values": json_list_s / binary_s,
            "time_ratio_vs_widget_state": json_list_s / state_s,
            "time_ratio_vs_widget_construct_and_state": json_list_s / (construct_s + state_s),
        },
        "python_s": {
            "construct_median": construct_s,
            "get_state_remove_buffers_median": state_s,
            "total_median": construct_s + state_s,
            "reps": reps,
        },
    }


# --- (c) first paint in Chromium -------------------------------------------------------------


def export_page(docs: list[list[str]], n: int, folder: Path) -> tuple[Path, int]:
    """A notebook holding one FeatureHeatmap with its stored widget state, exported with export_html."""
    import nbformat
    from interplab.widgets import FeatureHeatmap
    from ipywidgets.embed import dependency_state, embed_data

    from interplab.export import export_html

    tokens = take(docs, n)
    values = np.random.default_rng(n).standard_normal((n, N_FEATURES), dtype=np.float32)
    w = FeatureHeatmap(tokens, values)
    page_tokens = w.page_tokens
    # What nbclient stores after running the cell in a kernel: every trait (defaults too), buffers in base64.
    data = embed_data(views=[w], drop_defaults=False, state=dependency_state([w], drop_defaults=False))
    w.close()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {WIDGET_STATE: data["manager_state"]}
    cell = nbformat.v4.new_code_cell("ilab.widgets.FeatureHeatmap(tokens, values)", execution_count=1)
    cell.outputs = [
        nbformat.v4.new_output(
            "execute_result", data={WIDGET_VIEW: data["view_specs"][0], "text/plain": repr(w)}, execution_count=1
        )
    ]
    nb.cells = [cell]
    src = folder / f"heatmap_{n}.ipynb"
    nbformat.write(nb, src)
    return export_html(src, folder / "site" / f"heatmap_{n}.html", execute=False), page_tokens


_MARKS = f"""() => {{
  const m = (name) => performance.getEntriesByName(name, "mark").map((e) => e.startTime);
  return {{start: m("{MARK_START}"), painted: m("{MARK_PAINTED}"),
          spans: document.querySelectorAll(".ilab-heatmap .ilab-tok").length,
          coloured: Array.from(document.querySelectorAll(".ilab-heatmap .ilab-tok"))
                      .filter((e) => e.style.background && e.style.background !== "transparent").length}};
}}"""


def offline_page(context: Any, problems: dict[str, list[str]]) -> Any:
    """A page that aborts every request other than file:, data: and blob:, recording what happened."""
    page = context.new_page()

    def route(r: Any) -> None:
        if r.request.url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            problems["blocked"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: problems["errors"].append(str(e)))
    page.on("console", lambda m: problems["console_errors"].append(m.text) if m.type == "error" else None)
    return page


def paint_section(pages: dict[int, tuple[Path, int]], loads: int, home: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    env = {**os.environ, "HOME": str(home)}
    for var in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        env[var] = str(home / var.lower())
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env)
        version = browser.version
        try:
            for n, (html, page_tokens) in pages.items():
                rows = []
                problems: dict[str, list[str]] = {"blocked": [], "errors": [], "console_errors": []}
                for i in range(loads + 1):  # the first load warms the disk cache; not counted
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    page = offline_page(context, problems)
                    page.goto(html.as_uri(), wait_until="load", timeout=120_000)
                    page.wait_for_function(
                        f"performance.getEntriesByName('{MARK_PAINTED}', 'mark').length > 0", timeout=120_000
                    )
                    marks = page.evaluate(_MARKS)
                    context.close()
                    if len(marks["start"]) != 1 or len(marks["painted"]) != 1:
                        raise RuntimeError(f"expected one widget on the page, got marks {marks}")
                    start, painted = marks["start"][0], marks["painted"][0]
                    row = {
                        "render_ms": painted - start,
                        "nav_to_render_start_ms": start,
                        "nav_to_painted_ms": painted,
                        "spans": marks["spans"],
                        "coloured_spans": marks["coloured"],
                    }
                    log(f"  {n} tokens, load {i}: {json.dumps(row)}")
                    if i:
                        rows.append(row)
                # the first page holds whole documents up to page_tokens tokens
                if not all(0 < r["spans"] <= page_tokens and r["coloured_spans"] > 0 for r in rows):
                    raise RuntimeError(f"the page did not draw a page of coloured tokens: {rows}")
                render = [r["render_ms"] for r in rows]
                out[str(n)] = {
                    "n_tokens": n,
                    "n_features": N_FEATURES,
                    "spans_drawn": rows[0]["spans"],
                    "coloured_spans": rows[0]["coloured_spans"],
                    "render_to_painted_ms_median": statistics.median(render),
                    "render_to_painted_ms_all": [round(x, 1) for x in render],
                    "nav_to_render_start_ms_median": statistics.median(r["nav_to_render_start_ms"] for r in rows),
                    "nav_to_painted_ms_median": statistics.median(r["nav_to_painted_ms"] for r in rows),
                    "html_bytes": html.stat().st_size,
                    "loads": loads,
                    "network_requests_blocked": len(problems["blocked"]),
                    "page_errors": problems["errors"][:5],
                    "console_errors": problems["console_errors"][:5],
                }
        finally:
            browser.close()
    goal = out.get(str(PAINT_GOAL_TOKENS))
    return {
        "chromium": version,
        "goal": f"render_to_painted_ms_median <= {PAINT_GOAL_MS:g} at {PAINT_GOAL_TOKENS} tokens x {N_FEATURES}",
        "goal_met": bool(goal and goal["render_to_painted_ms_median"] <= PAINT_GOAL_MS),
        "by_tokens": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (about half the time)")
    args = parser.parse_args()
    reps, json_reps, loads = (2, 1, 2) if args.quick else (5, 3, 5)
    began = time.perf_counter()

    import interplab.widgets  # noqa: F401  (import time is not part of any measurement)

    log("token strings")
    docs, source = corpus_documents(max(SIZES))
    result: dict[str, Any] = {
        "bench": "widgets",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "tokens_from": source,
        "values": f"standard normal float32, [n_tokens, {N_FEATURES}]",
        "quick": args.quick,
    }

    payload = {}
    for n in SIZES:
        log(f"payload and Python time, {n} tokens x {N_FEATURES}")
        payload[str(n)] = payload_section(docs, n, reps, json_reps)
    result["payload"] = payload
    result["payload_goal_met"] = all(p["goal_met"] for p in payload.values())

    with tempfile.TemporaryDirectory(prefix="bench-widgets-") as tmp:
        folder = Path(tmp)
        try:
            log("exporting pages")
            pages = {n: export_page(docs, n, folder) for n in SIZES}
            log("first paint in Chromium")
            home = folder / "chromium-home"
            home.mkdir()
            result["first_paint"] = paint_section(pages, loads, home)
        except Exception as exc:
            log(f"first paint not measured: {type(exc).__name__}: {exc}")
            result["first_paint"] = {"skipped": f"{type(exc).__name__}: {exc}", "goal_met": None}

    # A view of the exported state's size too (base64 buffers in the page).
    for n, part in result.get("first_paint", {}).get("by_tokens", {}).items():
        part["html_bytes_per_value"] = part["html_bytes"] / (int(n) * N_FEATURES)
    result["wall_s"] = time.perf_counter() - began
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
