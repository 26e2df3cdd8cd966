// @ts-check
// LogitLens, the view: the token menu and legend, the grid, and the selected cell's details.
import { ilabEl, ilabFocusBox, ilabKeepKeys, ilabTip } from "../shared/index.js";
import { lensData } from "./data.js";
/** @import { Tip } from "../shared/tip.js" */
/** @import { LensData } from "./data.js" */

/**
 * @typedef {object} LensView
 * @property {AnyModel} model
 * @property {LensData} data
 * @property {HTMLDivElement} root
 * @property {HTMLSelectElement} picker
 * @property {HTMLDivElement} legendBox
 * @property {HTMLDivElement} grid
 * @property {HTMLDivElement} detail
 * @property {Tip} tip
 * @property {HTMLDivElement[]} cells
 */

/**
 * The widget's elements and data, with nothing drawn yet.
 * @param {AnyModel} model
 * @returns {LensView}
 */
export function lensView(model) {
  const root = ilabEl("div", "ilab-lens");
  const bar = ilabEl("div", "ilab-lens-bar");
  const pickLabel = ilabEl("label", "ilab-lens-pick");
  const picker = ilabEl("select", "ilab-lens-token");
  picker.setAttribute("aria-label", "colour cells by the probability of this token");
  pickLabel.append(ilabEl("span", "ilab-muted", "colour by P( "), picker, ilabEl("span", "ilab-muted", " )"));
  const legendBox = ilabEl("div", "ilab-legend-box");
  bar.append(pickLabel, legendBox);
  const grid = ilabFocusBox("ilab-lens-grid", "grid", "logit lens: arrow keys move, Enter selects");
  const detail = ilabEl("div", "ilab-lens-detail");
  const tip = ilabTip(root, "ilab-lens-tip");
  root.append(bar, grid, detail);
  [picker, grid].forEach(ilabKeepKeys);
  return { model, data: lensData(model), root, picker, legendBox, grid, detail, tip, cells: [] };
}
