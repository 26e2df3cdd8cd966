// @ts-check
// FeatureHeatmap, drawing: the feature list, one page of tokens, their colours and the selected token.
import { ilabColor, ilabEl, ilabFmt, ilabLegend, ilabScaleAt, ilabTokenSpan } from "../shared/index.js";
import { request } from "./columns.js";
import { colIndex, columnLabel, tokenShown } from "./data.js";
/** @import { HeatmapView } from "./view.js" */

/**
 * The feature list: up to 500 features whose id or label holds the search text.
 * @param {HeatmapView} view
 */
export function fillOptions({ model, data, search, select }) {
  const q = search.value.trim().toLowerCase();
  select.replaceChildren();
  let shown = 0;
  for (let c = 0; c < data.featureIds.length && shown < 500; c++) {
    const text = columnLabel(data, c);
    if (q && !text.toLowerCase().includes(q)) continue;
    const opt = ilabEl("option", null, text);
    opt.value = String(data.featureIds[c]);
    opt.selected = data.featureIds[c] === model.get("feature");
    select.appendChild(opt);
    shown++;
  }
}

/**
 * Colour the page's tokens by the chosen feature (asking the kernel for its values when they are missing).
 * @param {HeatmapView} view
 */
export function colour(view) {
  const { model, data, spans, legendBox } = view;
  const col = colIndex(model, data);
  const values = data.columns.get(col);
  const scale = ilabScaleAt(data.scales, col);
  if (!values) {
    request(view, col);
    view.status.textContent = `loading feature ${data.featureIds[col]}…`;
    return;
  }
  for (let j = 0; j < spans.length; j++) {
    const v = values[view.pageStart + j];
    spans[j].style.background = ilabColor(v, scale);
    spans[j].dataset.v = String(v);
  }
  legendBox.replaceChildren(ilabLegend(scale));
  if (data.featureIds.length > 1 || data.labels[0]) {
    legendBox.appendChild(ilabEl("span", "ilab-legend-name", columnLabel(data, col)));
  }
}

/**
 * Mark the selected token on the page and say its value in the status line.
 * @param {HeatmapView} view
 */
export function markSelected({ model, data, docsBox, spans, pageStart, status }) {
  const sel = model.get("selected_token");
  for (const s of docsBox.querySelectorAll(".ilab-selected")) s.classList.remove("ilab-selected");
  if (sel >= pageStart && sel < pageStart + spans.length) spans[sel - pageStart].classList.add("ilab-selected");
  if (sel >= 0 && sel < data.nTokens) {
    const values = data.columns.get(colIndex(model, data));
    const v = values ? ilabFmt(values[sel]) : "…";
    status.textContent = `selected token ${sel}: ${tokenShown(data, sel)} = ${v}`;
  }
}

/**
 * Draw the page the `page` trait names: one span per token, a block per document.
 * @param {HeatmapView} view
 */
export function drawPage(view) {
  const { model, data, docsBox } = view;
  const p = Math.min(Math.max(0, model.get("page")), data.pages.length - 1);
  const [a, b] = data.pages[p];
  view.pageStart = a;
  docsBox.replaceChildren();
  view.spans = [];
  let docEl = ilabEl("div", "ilab-doc");
  let doc = -1;
  for (let i = a; i < b; i++) {
    if (data.docOf[i] !== doc) {
      doc = data.docOf[i];
      docEl = ilabEl("div", "ilab-doc");
      docEl.dataset.doc = String(doc);
      docsBox.appendChild(docEl);
    }
    const span = ilabTokenSpan(data.vocab[data.tokenIds[i]]);
    span.dataset.i = String(i);
    docEl.appendChild(span);
    if (span.dataset.newline) docEl.appendChild(document.createElement("br"));
    view.spans.push(span);
  }
  view.pageLabel.textContent = ` page ${p + 1}/${data.pages.length} · tokens ${a}–${b - 1} of ${data.nTokens} `;
  view.prev.disabled = p === 0;
  view.next.disabled = p === data.pages.length - 1;
  colour(view);
  markSelected(view);
}
