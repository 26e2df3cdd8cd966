// @ts-check
// FeatureHeatmap, moving around: hover text, the keyboard cursor, and jumps to where the feature is active.
import { ilabFmt, ilabSave } from "../shared/index.js";
import { request } from "./columns.js";
import { colIndex, columnLabel, featureLabel, tokenShown, topAt } from "./data.js";
/** @import { HeatmapView } from "./view.js" */

/**
 * Token `i` in words: its text, document, the chosen feature's value there and the top features.
 * @param {HeatmapView} view
 * @param {number} i
 */
function tipText({ model, data }, i) {
  const col = colIndex(model, data);
  const values = data.columns.get(col);
  const bos = data.bosSet.has(i) ? ", BOS: outside the colour scale" : "";
  const lines = [`${tokenShown(data, i)}  (token ${i}, doc ${data.docOf[i]}${bos})`];
  lines.push(`${columnLabel(data, col)}: ${values ? ilabFmt(values[i]) : "…"}`);
  if (data.featureIds.length > 1 || data.topF) {
    const top = topAt(data, i);
    const left = model.get("top_filter");  // e.g. "latents on > 10% of tokens left out"
    lines.push(top.length ? `top features here${left ? ` (${left})` : ""}:` : "no feature is active here");
    for (const [f, v] of top) lines.push(`  ${featureLabel(data, f)}: ${ilabFmt(v)}`);
  }
  return lines.join("\n");
}

/**
 * Show the hover box for a token's span.
 * @param {HeatmapView} view
 * @param {HTMLElement} span
 */
export function showTip(view, span) {
  view.tip.show(span, tipText(view, Number(span.dataset.i)));
}

/**
 * Move the keyboard cursor by `delta` tokens within the page, and describe the token it lands on.
 * @param {HeatmapView} view
 * @param {number} delta
 */
export function moveCursor(view, delta) {
  const { spans, pageStart } = view;
  if (!spans.length) return;
  const old = spans[view.cursor - pageStart];
  if (old) old.classList.remove("ilab-cursor");
  const from = view.cursor < 0 ? pageStart - 1 : view.cursor;
  view.cursor = Math.min(pageStart + spans.length - 1, Math.max(pageStart, from + delta));
  const span = spans[view.cursor - pageStart];
  span.classList.add("ilab-cursor");
  span.scrollIntoView({ block: "nearest" });
  showTip(view, span);
}

/**
 * Select the next (dir 1) or previous (-1) token where the feature is not zero, turning pages as needed.
 * @param {HeatmapView} view
 * @param {number} dir
 */
export function jumpActive(view, dir) {
  const { model, data } = view;
  const col = colIndex(model, data);
  const values = data.columns.get(col);
  if (!values) return request(view, col);
  const sel = model.get("selected_token");
  const n = data.nTokens;
  const from = sel >= 0 ? sel : dir > 0 ? view.pageStart - 1 : view.pageStart + view.spans.length;
  for (let step = 1; step <= n; step++) {
    const i = (((from + dir * step) % n) + n) % n;
    if (values[i] === 0 || !Number.isFinite(values[i]) || data.bosSet.has(i)) continue;
    const p = data.pages.findIndex(([a, b]) => i >= a && i < b);
    if (p !== model.get("page")) ilabSave(model, "page", p); // redraws (change:page) before the selection below
    ilabSave(model, "selected_token", i);
    const span = view.spans[i - view.pageStart];
    if (span) {
      span.scrollIntoView({ block: "nearest" });
      showTip(view, span);
    }
    if ((dir > 0 && i <= from) || (dir < 0 && i >= from)) view.status.textContent += " (wrapped around)";
    return;
  }
  view.status.textContent = `${columnLabel(data, col)} is zero on every token.`;
}
