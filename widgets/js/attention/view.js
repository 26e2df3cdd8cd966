// @ts-check
// AttentionPattern, the view: layer menu, head thumbnails, the matrix with its row labels, two token strips.
import { ilabDecode, ilabEl, ilabKeepKeys, ilabTip } from "../shared/index.js";
import { shownPattern } from "./pattern.js";
/** @import { Tip } from "../shared/tip.js" */

/**
 * @typedef {object} AttentionView
 * @property {AnyModel} model
 * @property {HTMLDivElement} root
 * @property {HTMLLabelElement} layerBox
 * @property {HTMLSelectElement} layerSelect
 * @property {HTMLSpanElement} title
 * @property {HTMLDivElement} legendBox
 * @property {HTMLDivElement} thumbs
 * @property {HTMLDivElement} rowLabels
 * @property {HTMLDivElement} colLabels the key axis: a token under each column
 * @property {HTMLInputElement} bosBox hide the BOS (first key) column
 * @property {HTMLInputElement} renormBox renormalise rows over the other keys when it is hidden
 * @property {HTMLSpanElement} bosNote what the matrix shows about the BOS column
 * @property {HTMLCanvasElement} matrix
 * @property {HTMLDivElement} pointer a point under the mouse for the hover box to sit next to
 * @property {HTMLDivElement} strips
 * @property {HTMLDivElement} fromLabel
 * @property {HTMLDivElement} fromStrip
 * @property {HTMLDivElement} toLabel
 * @property {HTMLDivElement} toStrip
 * @property {Tip} tip
 * @property {string[]} tokens
 * @property {number} n tokens
 * @property {Float32Array} all [layers, heads, n, n] patterns
 * @property {number} nHeads
 * @property {number} hovered the token under the mouse in a strip (-1: none)
 * @property {number} cell matrix pixels per token
 */

/**
 * A labelled checkbox.
 * @param {string} text
 * @param {string} ariaLabel
 */
function checkbox(text, ariaLabel) {
  const box = ilabEl("label", "ilab-attn-check");
  const input = ilabEl("input");
  input.type = "checkbox";
  input.setAttribute("aria-label", ariaLabel);
  box.append(input, ilabEl("span", null, ` ${text}`));
  return { box, input };
}

/** @param {HTMLElement} el @param {Record<string, string>} attrs */
function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
}

/**
 * The widget's elements and patterns, with nothing drawn yet.
 * @param {AnyModel} model
 * @returns {AttentionView}
 */
export function attentionView(model) {
  const root = ilabEl("div", "ilab-attn");
  const bar = ilabEl("div", "ilab-attn-bar");
  const layerBox = ilabEl("label", "ilab-attn-layer");
  const layerSelect = ilabEl("select");
  layerSelect.setAttribute("aria-label", "layer");
  layerBox.append(ilabEl("span", "ilab-muted", "layer "), layerSelect);
  const title = ilabEl("span", "ilab-attn-title");
  const legendBox = ilabEl("div", "ilab-legend-box");
  const { box: bosLabel, input: bosBox } = checkbox("hide BOS column", "hide the first key (BOS) column");
  const { box: renormLabel, input: renormBox } = checkbox("renormalise rows", "renormalise each row over the other keys");
  const bosNote = ilabEl("span", "ilab-attn-bosnote ilab-muted");
  bar.append(layerBox, title, legendBox, bosLabel, renormLabel, bosNote);
  const thumbs = ilabEl("div", "ilab-attn-thumbs");
  setAttrs(thumbs, { role: "listbox", "aria-label": "heads of this layer" });
  const main = ilabEl("div", "ilab-attn-main");
  const rowLabels = ilabEl("div", "ilab-attn-rowlabels");
  const matrix = ilabEl("canvas", "ilab-attn-matrix");
  matrix.setAttribute("role", "img");
  const matrixBox = ilabEl("div", "ilab-attn-matrixbox");
  const pointer = ilabEl("div", "ilab-attn-pointer");
  const colLabels = ilabEl("div", "ilab-attn-collabels");
  colLabels.setAttribute("aria-label", "keys");
  matrixBox.append(matrix, pointer, colLabels);
  main.append(rowLabels, matrixBox);
  const strips = ilabEl("div", "ilab-attn-strips");
  const fromLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const fromStrip = ilabEl("div", "ilab-attn-strip ilab-attn-from");
  const toLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const toStrip = ilabEl("div", "ilab-attn-strip ilab-attn-to");
  strips.append(fromLabel, fromStrip, toLabel, toStrip);
  const tip = ilabTip(root, "ilab-attn-tip");
  root.append(bar, thumbs, main, strips);
  [layerSelect, thumbs, bosBox, renormBox].forEach(ilabKeepKeys);
  const tokens = model.get("tokens");
  const n = tokens.length;
  return { model, root, layerBox, layerSelect, title, legendBox, thumbs, rowLabels, colLabels, bosBox, renormBox,
    bosNote, matrix, pointer, strips,
    fromLabel, fromStrip, toLabel, toStrip, tip, tokens, n, all: ilabDecode(model.get("patterns")),
    nHeads: model.get("patterns").shape[1], hovered: -1, cell: Math.max(4, Math.min(22, Math.floor(440 / Math.max(1, n)))) };
}

/**
 * The chosen layer's index in the `layers` trait (0 when it is not there).
 * @param {AnyModel} model
 */
export function layerIndex(model) {
  return Math.max(0, model.get("layers").indexOf(model.get("layer")));
}

/**
 * Head `h` of layer index `li`: its n x n pattern as shown (the BOS column hidden when the widget says so).
 * @param {AttentionView} view
 * @param {number} li
 * @param {number} h
 */
export function headPattern({ all, nHeads, n, model }, li, h) {
  const raw = all.subarray((li * nHeads + h) * n * n, (li * nHeads + h + 1) * n * n);
  return shownPattern(raw, n, model.get("hide_bos"), model.get("renormalize"));
}

/** The chosen head's pattern. @param {AttentionView} view */
export function currentPattern(view) {
  return headPattern(view, layerIndex(view.model), view.model.get("head"));
}

/** The theme's strongest alpha (--ilab-heat-alpha). @param {AttentionView} view */
export function heatAlpha({ root }) {
  return Number(getComputedStyle(root).getPropertyValue("--ilab-heat-alpha")) || 0.85;
}

/**
 * The token the strips describe: the hovered one, else the selected one, else the last.
 * @param {AttentionView} view
 */
export function focusToken({ hovered, model, n }) {
  return hovered >= 0 ? hovered : model.get("selected_token") >= 0 ? model.get("selected_token") : n - 1;
}
