// @ts-check
// FeatureHeatmap / TokenHeatmap: paged flowing text, one span per token on the current page only.
import { ilabClosest, ilabDecode, ilabListen, ilabSave, ilabTheme } from "../shared/index.js";
import { colour, drawPage, fillOptions, markSelected } from "./draw.js";
import { jumpActive, moveCursor, showTip } from "./navigate.js";
import { pagesFor } from "./pages.js";
import { heatmapView } from "./view.js";
/** @import { HeatmapView } from "./view.js" */

/**
 * The tokens: hover describes one, a click or Enter selects it, the arrow keys move a cursor.
 * @param {HeatmapView} view
 */
function wireTokens(view) {
  const { model, docsBox, tip } = view;
  docsBox.addEventListener("mouseover", (e) => {
    const span = ilabClosest(e, ".ilab-tok");
    if (span) showTip(view, span);
  });
  docsBox.addEventListener("mouseleave", () => tip.hide());
  docsBox.addEventListener("click", (e) => {
    const span = ilabClosest(e, ".ilab-tok");
    if (span) ilabSave(model, "selected_token", Number(span.dataset.i));
  });
  docsBox.addEventListener("keydown", (e) => {
    if (e.key === "ArrowRight") moveCursor(view, 1);
    else if (e.key === "ArrowLeft") moveCursor(view, -1);
    else if ((e.key === "Enter" || e.key === " ") && view.cursor >= 0) ilabSave(model, "selected_token", view.cursor);
    else return;
    e.preventDefault();
  });
  docsBox.addEventListener("blur", () => tip.hide());
}

/**
 * The feature picker and the page buttons.
 * @param {HeatmapView} view
 */
function wireControls(view) {
  const { model, search, select, data } = view;
  search.addEventListener("input", () => fillOptions(view));
  search.addEventListener("keydown", (e) => {
    // Enter picks the only match (or the first of several)
    if (e.key !== "Enter" || !select.options.length) return;
    e.preventDefault();
    ilabSave(model, "feature", Number(select.options[0].value));
  });
  select.addEventListener("change", () => ilabSave(model, "feature", Number(select.value)));
  /** @param {number} d */
  const turn = (d) => ilabSave(model, "page", Math.min(data.pages.length - 1, Math.max(0, model.get("page") + d)));
  view.prev.addEventListener("click", () => turn(-1));
  view.next.addEventListener("click", () => turn(1));
  view.prevHit.addEventListener("click", () => jumpActive(view, -1));
  view.nextHit.addEventListener("click", () => jumpActive(view, 1));
}

/**
 * What the kernel sends: its answer to the ping, and the values of a column asked for.
 * @param {HeatmapView} view
 * @returns {(msg: any, buffers: DataView[]) => void}
 */
function onMessage(view) {
  const { data } = view;
  return (msg, buffers) => {
    if (msg && msg.type === "pong") data.live = true;
    if (!msg || msg.type !== "column" || !buffers || !buffers.length) return;
    data.columns.set(msg.index, ilabDecode({ view: buffers[0], dtype: "float32" }));
    data.pending.delete(msg.index);
    view.status.textContent = "";
    colour(view);
    markSelected(view);
  };
}

/**
 * The model's events, by name.
 * @param {HeatmapView} view
 * @returns {ModelHandlers}
 */
function handlers(view) {
  const { model, data } = view;
  return {
    "msg:custom": onMessage(view),
    "change:feature": () => {
      fillOptions(view);
      colour(view);
      markSelected(view);
    },
    "change:labels": () => {
      data.labels = model.get("labels"); // a linked dashboard's labels arrive here
      fillOptions(view);
      colour(view);
    },
    "change:scales": () => {
      data.scales = ilabDecode(model.get("scales"));
      colour(view);
    },
    "change:selected_token": () => markSelected(view),
    "change:page": () => drawPage(view),
    "change:page_tokens": () => {
      data.pages = pagesFor(data.docStarts, data.nTokens, Math.max(50, model.get("page_tokens")));
      drawPage(view);
    },
    "change:scheme": () => ilabTheme(view.root, model.get("scheme")),
  };
}

/** @param {RenderProps} props */
function render({ model, el }) {
  performance.mark("ilab-heatmap-render-start"); // time to first paint: see bench/bench_widgets.py
  const view = heatmapView(model);
  el.appendChild(view.root);
  wireTokens(view);
  wireControls(view);
  const stop = ilabListen(model, handlers(view), () => {
    view.picker.style.display = model.get("show_picker") ? "" : "none";
    ilabTheme(view.root, model.get("scheme"));
    try {
      model.send({ type: "ping" }); // answered only by a live kernel
    } catch {
      view.data.live = false; // exported HTML
    }
    fillOptions(view);
    drawPage(view);
    // the frame after next has been painted with the first page
    requestAnimationFrame(() => requestAnimationFrame(() => performance.mark("ilab-heatmap-painted")));
  });
  return () => {
    stop();
    view.tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
