// @ts-check
// AttentionPattern, drawing: the layer menu, the head thumbnails, the chosen head's matrix and the strips.
import { ilabCellLegend, ilabEl, ilabPalette, ilabTokenSpan, ilabTokenText } from "../shared/index.js";
import { attnColor, drawPattern } from "./pattern.js";
import { currentPattern, focusToken, headPattern, heatAlpha, layerIndex } from "./view.js";
/** @import { AttentionView } from "./view.js" */

/**
 * The layer menu (hidden with a single layer).
 * @param {AttentionView} view
 */
export function drawLayers({ model, layerSelect, layerBox }) {
  layerSelect.replaceChildren();
  for (const l of model.get("layers")) {
    const opt = ilabEl("option", null, `L${l}`);
    opt.value = String(l);
    layerSelect.appendChild(opt);
  }
  layerSelect.value = String(model.get("layer"));
  layerBox.style.display = model.get("layers").length > 1 ? "" : "none";
}

/**
 * A thumbnail of every head of the chosen layer (a button each).
 * @param {AttentionView} view
 */
export function drawThumbs(view) {
  const { model, thumbs, n } = view;
  thumbs.replaceChildren();
  const li = layerIndex(model);
  const palette = ilabPalette(view.root);
  for (let h = 0; h < view.nHeads; h++) {
    const box = ilabEl("button", "ilab-attn-thumb");
    box.dataset.head = String(h);
    box.setAttribute("role", "option");
    box.setAttribute("aria-label", `head ${h}`);
    box.classList.toggle("ilab-active", h === model.get("head"));
    const c = ilabEl("canvas", "ilab-attn-thumbcanvas");
    const cell = Math.max(1, Math.floor(64 / Math.max(1, n)));
    drawPattern(c, headPattern(view, li, h), n, cell, palette, model.get("color_scale"));
    box.append(c, ilabEl("span", "ilab-attn-thumblabel", `H${h}`));
    thumbs.appendChild(box);
  }
}

/**
 * The token labels left of the matrix (shown when rows are tall enough to read).
 * @param {AttentionView} view
 */
function drawRowLabels({ rowLabels, tokens, cell }) {
  rowLabels.replaceChildren();
  rowLabels.style.display = cell >= 10 ? "" : "none";
  tokens.forEach((t, i) => {
    const shown = ilabTokenText(t);
    const label = ilabEl("div", "ilab-attn-rowlabel" + (shown.faint ? " ilab-faint" : ""), shown.text);
    label.style.height = `${cell}px`;
    label.style.lineHeight = `${cell}px`;
    label.dataset.i = String(i);
    rowLabels.appendChild(label);
  });
}

/**
 * The token labels under the matrix's columns (the keys), written downwards; shown when columns are wide enough.
 * @param {AttentionView} view
 */
function drawColLabels({ colLabels, tokens, cell, model }) {
  colLabels.replaceChildren();
  colLabels.style.display = cell >= 10 ? "" : "none";
  tokens.forEach((t, i) => {
    const shown = ilabTokenText(t);
    const hidden = i === 0 && model.get("hide_bos");
    const label = ilabEl("div", "ilab-attn-collabel" + (shown.faint || hidden ? " ilab-faint" : ""), shown.text);
    label.style.width = `${cell}px`;
    label.style.lineHeight = `${cell}px`;
    label.dataset.i = String(i);
    label.title = `key ${i}: ${shown.text}${hidden ? " (hidden)" : ""}`;
    colLabels.appendChild(label);
  });
}

/**
 * What the matrix shows about the BOS column, in words.
 * @param {AttentionView} view
 */
function drawBosNote({ model, bosBox, renormBox, bosNote }) {
  const hide = model.get("hide_bos");
  bosBox.checked = hide;
  renormBox.checked = model.get("renormalize");
  renormBox.disabled = !hide;
  bosNote.textContent = !hide ? "" : model.get("renormalize")
    ? "BOS column hidden; rows renormalised over the other keys (each sums to 1)"
    : "BOS column hidden; values as computed (a row sums to 1 − its BOS attention)";
}

/**
 * The chosen head's query x key matrix, its legend and title, with the focus token's row and column framed.
 * @param {AttentionView} view
 */
export function drawMatrix(view) {
  const { model, matrix, n, cell } = view;
  const scale = model.get("color_scale");
  const palette = ilabPalette(view.root);
  drawPattern(matrix, currentPattern(view), n, cell, palette, scale);
  view.legendBox.replaceChildren(ilabCellLegend(scale));
  matrix.setAttribute("aria-label", `layer ${model.get("layer")} head ${model.get("head")}: ${n} x ${n} attention pattern`);
  view.title.textContent = `L${model.get("layer")} H${model.get("head")} · query ↓ attends to key →`;
  drawRowLabels(view);
  drawColLabels(view);
  drawBosNote(view);
  const focus = focusToken(view);
  if (focus >= 0) {
    const ctx = /** @type {CanvasRenderingContext2D} */ (matrix.getContext("2d"));
    ctx.strokeStyle = palette.fg;
    ctx.lineWidth = 1;
    ctx.strokeRect(0.5, focus * cell + 0.5, n * cell - 1, cell - 1);
    ctx.strokeRect(focus * cell + 0.5, 0.5, cell - 1, n * cell - 1);
  }
}

/**
 * The tokens twice: coloured by where the focus token attends, and by how much each attends to it.
 * @param {AttentionView} view
 */
export function drawStrips(view) {
  const { model, tokens, n, fromStrip, toStrip } = view;
  const i = focusToken(view);
  const pat = currentPattern(view);
  const who = ilabTokenText(tokens[i]).text;
  const scale = model.get("color_scale");
  const alpha = heatAlpha(view);
  view.fromLabel.textContent = `${who} (position ${i}) attends to:`;
  view.toLabel.textContent = `attending to ${who}:`;
  fromStrip.replaceChildren();
  toStrip.replaceChildren();
  tokens.forEach((t, j) => {
    /** @type {[HTMLElement, number, boolean][]} */
    const both = [[fromStrip, pat[i * n + j], false], [toStrip, pat[j * n + i], true]];
    for (const [strip, v, key] of both) {
      const span = ilabTokenSpan(t);
      span.classList.add("ilab-attn-tok");
      span.style.background = attnColor(v, scale, alpha, key);
      span.dataset.i = String(j);
      span.dataset.v = String(v);
      span.classList.toggle("ilab-attn-focus", j === i);
      span.classList.toggle("ilab-selected", j === model.get("selected_token"));
      strip.appendChild(span);
    }
  });
}

/**
 * The chosen head: matrix, strips, and its thumbnail marked.
 * @param {AttentionView} view
 */
export function drawHead(view) {
  drawMatrix(view);
  drawStrips(view);
  for (const b of view.thumbs.children) {
    const thumb = /** @type {HTMLElement} */ (b);
    thumb.classList.toggle("ilab-active", Number(thumb.dataset.head) === view.model.get("head"));
  }
}
