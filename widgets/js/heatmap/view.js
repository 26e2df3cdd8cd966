// @ts-check
// FeatureHeatmap, the view: the feature picker, legend, page buttons, the tokens and a status line.
import { ilabEl, ilabFocusBox, ilabKeepKeys, ilabSearchBox, ilabTip } from "../shared/index.js";
import { heatmapData } from "./data.js";
/** @import { Tip } from "../shared/tip.js" */
/** @import { HeatmapData } from "./data.js" */

/**
 * @typedef {object} HeatmapView
 * @property {AnyModel} model
 * @property {HeatmapData} data
 * @property {HTMLDivElement} root
 * @property {HTMLDivElement} picker
 * @property {HTMLInputElement} search
 * @property {HTMLSelectElement} select
 * @property {HTMLDivElement} legendBox
 * @property {HTMLButtonElement} prev
 * @property {HTMLButtonElement} next
 * @property {HTMLSpanElement} pageLabel
 * @property {HTMLButtonElement} prevHit
 * @property {HTMLButtonElement} nextHit
 * @property {HTMLDivElement} docsBox
 * @property {HTMLDivElement} status
 * @property {Tip} tip
 * @property {HTMLSpanElement[]} spans the tokens of the page on show
 * @property {number} pageStart the first token of the page on show
 * @property {number} cursor the token the keyboard cursor is on (-1: none)
 */

/**
 * A button with a label for screen readers (and a hover title when given).
 * @param {string} cls
 * @param {string} text
 * @param {string} ariaLabel
 * @param {string} [title]
 */
function button(cls, text, ariaLabel, title) {
  const b = ilabEl("button", cls, text);
  b.setAttribute("aria-label", ariaLabel);
  if (title) b.title = title;
  return b;
}

/**
 * The widget's elements and data, with nothing drawn yet.
 * @param {AnyModel} model
 * @returns {HeatmapView}
 */
export function heatmapView(model) {
  const root = ilabEl("div", "ilab-heatmap");
  const bar = ilabEl("div", "ilab-bar");
  const picker = ilabEl("div", "ilab-picker");
  const search = ilabSearchBox("search features by id or label", "search features");
  const select = ilabEl("select", "ilab-select");
  select.size = 5;
  select.setAttribute("aria-label", "feature");
  picker.append(search, select);
  const legendBox = ilabEl("div", "ilab-legend-box");
  const nav = ilabEl("div", "ilab-nav");
  const prev = button("ilab-prev", "◀", "previous page");
  const next = button("ilab-next", "▶", "next page");
  const pageLabel = ilabEl("span", "ilab-page ilab-muted");
  const prevHit = button("ilab-prev-active", "◂ active", "previous token where the feature is active",
    "the previous token where this feature is not zero (any page)");
  const nextHit = button("ilab-next-active", "active ▸", "next token where the feature is active",
    "the next token where this feature is not zero (any page)");
  nav.append(prevHit, prev, pageLabel, next, nextHit);
  bar.append(picker, legendBox, nav);
  const docsBox = ilabFocusBox("ilab-docs", "grid", "tokens: arrow keys move, Enter selects");
  const status = ilabEl("div", "ilab-status ilab-muted");
  const tip = ilabTip(root, "ilab-heat-tip");
  root.append(bar, docsBox, status);
  [search, select, docsBox].forEach(ilabKeepKeys);
  return { model, data: heatmapData(model), root, picker, search, select, legendBox, prev, next, pageLabel,
    prevHit, nextHit, docsBox, status, tip, spans: [], pageStart: 0, cursor: -1 };
}
