// @ts-check
// PatchingGrid, the grid: one coloured cell per (row, column), row labels on the left, column labels below.
import { ilabCellColor, ilabCellLegend, ilabEl, ilabFmt, ilabScale } from "../shared/index.js";
import { colLabel, drawPrompts, rowTitle } from "./labels.js";
import { tabName } from "./tabs.js";
import { currentGrid, decoded } from "./view.js";
/** @import { Decoded, PatchGrid, PatchingView } from "./view.js" */

/**
 * The value shown in cell `i`: raw or normalized, as the checkbox says.
 * @param {AnyModel} model
 * @param {Decoded} d
 * @param {number} i
 */
function cellValue(model, d, i) {
  return model.get("normalized") ? d.normalized[i] : d.values[i];
}

/**
 * The colour scale of a grid (Python resolves one per grid, raw and normalized).
 * @param {AnyModel} model
 * @param {PatchGrid} g
 */
function currentScale(model, g) {
  const s = (model.get("scales") || {})[g.key];
  if (!s) return ilabScale(1, true);
  return ilabScale(model.get("normalized") ? s.normalized : s.values);
}

/**
 * The label at the start of row `r`; a latent's opens its card in a linked dashboard.
 * @param {PatchGrid} g
 * @param {number} r
 */
function rowLabel(g, r) {
  const text = (g.row_text || [])[r];
  const label = ilabEl("div", "ilab-pg-rowlabel", rowTitle(g, r));
  label.dataset.row = String(g.rows[r]);
  if (g.row_name === "latent") {
    label.classList.add("ilab-pg-latent");
    label.setAttribute("role", "button");
    label.title = `latent ${g.rows[r]}${text ? ` · ${text}` : ""}: click to open its card in a linked dashboard`;
  } else if (text) label.title = text;
  return label;
}

/**
 * The column labels and axis titles under the cells.
 * @param {HTMLElement} gridBox
 * @param {PatchGrid} g
 * @param {number} C
 */
function drawAxes(gridBox, g, C) {
  gridBox.appendChild(ilabEl("div", "ilab-pg-rowtitle ilab-muted", `${g.row_name} ↓`));
  for (let c = 0; c < C; c++) gridBox.appendChild(colLabel(g, c));
  const colTitle = g.col_name === "position" ? "position → (index, clean token)" : `${g.col_name} →`;
  const axis = ilabEl("div", "ilab-pg-coltitle ilab-muted", colTitle);
  axis.style.gridColumn = `2 / span ${C}`;
  gridBox.appendChild(ilabEl("div", "ilab-pg-corner"));
  gridBox.appendChild(axis);
}

/**
 * Draw the chosen grid: legend, baselines, prompts, cells and labels (the selection is marked after).
 * @param {PatchingView} view
 */
export function drawGrid(view) {
  const { model, gridBox } = view;
  const g = currentGrid(model);
  const d = decoded(g);
  view.current = { g, d };
  const [R, C] = g.values.shape;
  const scale = currentScale(model, g);
  view.legendBox.replaceChildren(ilabCellLegend(scale));
  const name = tabName(g);
  const how = `${g.method} patching of ${g.site}`;
  const what = name === g.method ? how : `${name} (${how})`;
  const pairs = g.n_pairs > 1 ? `mean over ${g.n_pairs} prompt pairs` : "1 prompt pair";
  view.info.textContent = `${what} · ${g.metric}, ${pairs}: clean ${ilabFmt(g.clean)}, corrupted ${ilabFmt(g.corrupt)}`;
  drawPrompts(view.prompts, g);
  gridBox.replaceChildren();
  gridBox.style.gridTemplateColumns = `auto repeat(${C}, minmax(38px, 1fr))`;
  gridBox.dataset.rows = g.row_name;
  view.cells = [];
  for (let r = 0; r < R; r++) {
    gridBox.appendChild(rowLabel(g, r));
    for (let c = 0; c < C; c++) {
      const i = r * C + c;
      const cell = ilabEl("div", "ilab-pg-cell");
      cell.dataset.i = String(i);
      cell.dataset.v = String(cellValue(model, d, i));
      cell.setAttribute("role", "gridcell");
      cell.style.background = ilabCellColor(cellValue(model, d, i), scale);
      gridBox.appendChild(cell);
      view.cells.push(cell);
    }
  }
  drawAxes(gridBox, g, C);
}
