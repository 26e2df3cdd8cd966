// @ts-check
// PatchingGrid, the view: its elements, the grid on show and its cells.
import { ilabDecode, ilabEl, ilabFocusBox, ilabKeepKeys, ilabTip } from "../shared/index.js";
/** @import { Tip } from "../shared/tip.js" */

/**
 * One grid as Python sends it (widgets/patching.py `_grid_payload`).
 * @typedef {object} PatchGrid
 * @property {string} key
 * @property {string} group
 * @property {string} method
 * @property {string} site
 * @property {string} metric
 * @property {"layer" | "latent"} row_name
 * @property {string} col_name "position" or "head"
 * @property {number[]} rows
 * @property {string[]} row_text
 * @property {string[]} cols
 * @property {string[]} col_tokens
 * @property {string[]} corrupt_tokens
 * @property {string[]} prompt
 * @property {string[]} corrupt_prompt
 * @property {number} n_pairs prompt pairs the values average over
 * @property {number} clean
 * @property {number} corrupt
 * @property {ArrayPayload & {dtype: "float32", shape: number[]}} values
 * @property {ArrayPayload & {dtype: "float32"}} normalized
 * @property {string[]} [top_vocab]
 * @property {ArrayPayload & {dtype: "int32"}} [top_index]
 * @property {ArrayPayload & {dtype: "float32", shape: number[]}} [top_probs]
 */

/**
 * A grid's arrays, decoded.
 * @typedef {object} Decoded
 * @property {Float32Array} values
 * @property {Float32Array} normalized
 * @property {Int32Array | null} topIndex
 * @property {Float32Array | null} topProbs
 * @property {number} k top tokens per cell
 */

/**
 * @typedef {object} PatchingView
 * @property {AnyModel} model
 * @property {HTMLDivElement} root
 * @property {HTMLDivElement} groupsBar
 * @property {HTMLDivElement} methodsBar
 * @property {HTMLInputElement} normBox
 * @property {HTMLDivElement} legendBox
 * @property {HTMLDivElement} info
 * @property {HTMLDivElement} prompts
 * @property {HTMLDivElement} gridBox
 * @property {HTMLDivElement} detail
 * @property {Tip} tip
 * @property {HTMLDivElement[]} cells
 * @property {{g: PatchGrid, d: Decoded} | null} current the grid drawn
 */

/**
 * The widget's elements (appended to a root), with no grid drawn yet.
 * @param {AnyModel} model
 * @returns {PatchingView}
 */
export function patchingView(model) {
  const root = ilabEl("div", "ilab-patching");
  const groupsBar = ilabEl("div", "ilab-pg-tabs ilab-pg-groups");
  const methodsBar = ilabEl("div", "ilab-pg-tabs ilab-pg-methods");
  const bar = ilabEl("div", "ilab-pg-bar");
  const normLabel = ilabEl("label", "ilab-pg-norm");
  const normBox = ilabEl("input");
  normBox.type = "checkbox";
  normLabel.append(normBox, ilabEl("span", null, " normalized (0 = corrupted, 1 = clean)"));
  const legendBox = ilabEl("div", "ilab-legend-box");
  const info = ilabEl("div", "ilab-pg-info ilab-muted");
  bar.append(normLabel, legendBox, info);
  const prompts = ilabEl("div", "ilab-pg-prompts");
  const gridBox = ilabFocusBox("ilab-pg-grid", "grid", "patching grid: arrow keys move, Enter selects");
  const detail = ilabEl("div", "ilab-pg-detail");
  const tip = ilabTip(root, "ilab-pg-tip");
  root.append(groupsBar, methodsBar, bar, prompts, gridBox, detail);
  [gridBox, normBox].forEach(ilabKeepKeys);
  return { model, root, groupsBar, methodsBar, normBox, legendBox, info, prompts, gridBox, detail, tip,
    cells: [], current: null };
}

/**
 * Every grid of the widget.
 * @param {AnyModel} model
 * @returns {PatchGrid[]}
 */
export function grids(model) {
  return model.get("grids");
}

/**
 * The grid of the chosen tab (the first when the tab names none).
 * @param {AnyModel} model
 * @returns {PatchGrid}
 */
export function currentGrid(model) {
  return grids(model).find((g) => g.key === model.get("tab")) || grids(model)[0];
}

/**
 * A grid's arrays, decoded.
 * @param {PatchGrid} g
 * @returns {Decoded}
 */
export function decoded(g) {
  return {
    values: ilabDecode(g.values),
    normalized: ilabDecode(g.normalized),
    topIndex: g.top_index ? ilabDecode(g.top_index) : null,
    topProbs: g.top_probs ? ilabDecode(g.top_probs) : null,
    k: g.top_probs ? g.top_probs.shape[2] : 0,
  };
}

/**
 * The row, column and their ids of cell `i` (row-major) of a grid.
 * @param {PatchGrid} g
 * @param {number} i
 */
export function cellIds(g, i) {
  const C = g.values.shape[1];
  const r = Math.floor(i / C);
  const c = i % C;
  const colId = g.col_name === "position" ? Number(g.cols[c]) : c;
  return { r, c, rowId: g.rows[r], colId };
}
