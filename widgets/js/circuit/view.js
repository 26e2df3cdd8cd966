// @ts-check
// CircuitGraph, the view: the pruning slider and rule, supernode controls, the canvas, the selected node's
// card, the intervention's answer.
import { ilabEl, ilabKeepKeys, ilabSearchBox, ilabTip } from "../shared/index.js";
/** @import { Tip } from "../shared/tip.js" */
/** @import { Graph } from "./graph.js" */

/** Canvas width in CSS pixels. */
export const WIDTH = 900;

/**
 * @typedef {object} CircuitView
 * @property {AnyModel} model
 * @property {HTMLDivElement} root
 * @property {HTMLInputElement} slider
 * @property {HTMLSpanElement} sliderValue
 * @property {HTMLInputElement} groupName
 * @property {HTMLButtonElement} groupButton
 * @property {HTMLSpanElement} info
 * @property {HTMLSpanElement} rule the pruning rule in words
 * @property {HTMLButtonElement} showHidden brings hidden nodes back
 * @property {HTMLDivElement} card the selected node's card
 * @property {HTMLCanvasElement} canvas
 * @property {HTMLDivElement} answer
 * @property {HTMLDivElement} groupsLine
 * @property {Tip} tip
 * @property {Graph | null} g the decoded graph
 * @property {Uint8Array} visible per node
 * @property {number} hover the node under the mouse (-1: none)
 * @property {Set<number>} picked shift-clicked nodes for a supernode
 * @property {Set<number> | null} highlight edges on the hovered node's strongest paths
 */

/**
 * The pruning slider (cumulative influence kept).
 * @returns {HTMLInputElement}
 */
function pruningSlider() {
  const slider = ilabEl("input");
  slider.type = "range";
  slider.min = "0.05";
  slider.max = "1";
  slider.step = "0.01";
  slider.setAttribute("aria-label", "cumulative influence kept");
  return slider;
}

/**
 * The widget's elements, with no graph drawn yet.
 * @param {AnyModel} model
 * @returns {CircuitView}
 */
export function circuitView(model) {
  const root = ilabEl("div", "ilab-circuit");
  const bar = ilabEl("div", "ilab-cg-bar");
  const sliderLabel = ilabEl("label", null, "show nodes carrying ");
  const slider = pruningSlider();
  const sliderValue = ilabEl("span", "ilab-muted");
  sliderLabel.append(slider, sliderValue);
  const groupName = ilabSearchBox("supernode label", "supernode label");
  const groupButton = ilabEl("button", null, "Group");
  const info = ilabEl("span", "ilab-muted");
  const showHidden = ilabEl("button", "ilab-cg-unhide", "Show hidden");
  showHidden.hidden = true;
  bar.append(sliderLabel, groupName, groupButton, info);
  const ruleLine = ilabEl("div", "ilab-cg-rule-line");
  const rule = ilabEl("span", "ilab-cg-rule ilab-muted");
  ruleLine.append(rule, showHidden);
  const card = ilabEl("div", "ilab-cg-card");
  card.hidden = true;
  const side = ilabEl("div", "ilab-cg-side");
  const canvas = ilabEl("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", "attribution graph");
  const answer = ilabEl("div", "ilab-cg-answer");
  side.append(canvas, card, answer);
  const groupsLine = ilabEl("div", "ilab-cg-groups ilab-muted");
  root.append(bar, ruleLine, side, groupsLine);
  const tip = ilabTip(root, "ilab-cg-tip");
  [slider, groupName, canvas].forEach(ilabKeepKeys);
  return { model, root, slider, sliderValue, groupName, groupButton, info, rule, showHidden, card, canvas, answer, groupsLine, tip,
    g: null, visible: new Uint8Array(0), hover: -1, picked: new Set(), highlight: null };
}
