// @ts-check
// SteeringPanel, the view: the prompt, a slider per vector, the settings, and the two texts.
import { ilabEl, ilabFmt, ilabKeepKeys, ilabTip } from "../shared/index.js";
/** @import { Tip } from "../shared/tip.js" */

/**
 * @typedef {object} SteeringView
 * @property {AnyModel} model
 * @property {HTMLDivElement} root
 * @property {HTMLTextAreaElement} prompt
 * @property {HTMLButtonElement} go
 * @property {Map<string, HTMLInputElement>} inputs a slider per vector name
 * @property {Map<string, HTMLSpanElement>} shown each slider's value
 * @property {Map<string, [HTMLSpanElement, HTMLSpanElement]>} ends each slider's lowest and highest value
 * @property {HTMLDivElement} rangeNote how the sliders' ends were chosen
 * @property {HTMLButtonElement} reset
 * @property {HTMLSelectElement} site
 * @property {HTMLInputElement} temp
 * @property {HTMLInputElement} seed
 * @property {HTMLDivElement} outs
 * @property {Map<string, HTMLSpanElement>} readouts the metric above each text ("baseline", "steered")
 * @property {HTMLDivElement} baseText
 * @property {HTMLDivElement} steerText
 * @property {HTMLDivElement} status
 * @property {Tip} tip
 * @property {ReturnType<typeof setTimeout> | null} timer a slider burst not sent yet
 */

/**
 * One slider row for a vector: its name, range ends, the slider and its value.
 * @param {string} name
 * @param {[number, number, number]} range low, high, step
 */
function sliderRow(name, [lo, hi, step]) {
  const row = ilabEl("label", "ilab-steer-slider");
  const input = ilabEl("input", "ilab-steer-range");
  input.type = "range";
  input.min = String(lo);
  input.max = String(hi);
  input.step = String(step);
  input.dataset.name = name;
  input.setAttribute("aria-label", `scale of ${name}`);
  const value = ilabEl("span", "ilab-steer-value");
  const low = ilabEl("span", "ilab-steer-min ilab-muted", ilabFmt(lo));
  const high = ilabEl("span", "ilab-steer-max ilab-muted", ilabFmt(hi));
  row.append(ilabEl("span", "ilab-steer-name", name), low, input, high, value);
  return { row, input, value, low, high };
}

/**
 * A number input with a label for screen readers.
 * @param {string} cls
 * @param {string} step
 * @param {string} ariaLabel
 */
function numberInput(cls, step, ariaLabel) {
  const input = ilabEl("input", cls);
  input.type = "number";
  input.step = step;
  input.setAttribute("aria-label", ariaLabel);
  return input;
}

/**
 * The site menu, the temperature, the seed and the reset button.
 * @param {AnyModel} model
 * @param {HTMLButtonElement} reset
 */
function settingsRow(model, reset) {
  const settings = ilabEl("div", "ilab-steer-settings");
  const site = ilabEl("select", "ilab-steer-site");
  site.setAttribute("aria-label", "site");
  for (const s of model.get("sites")) {
    const opt = ilabEl("option", null, s);
    opt.value = s;
    site.appendChild(opt);
  }
  const temp = numberInput("ilab-steer-temperature", "0.1", "temperature");
  temp.min = "0";
  const seed = numberInput("ilab-steer-seed", "1", "seed");
  settings.append(
    ilabEl("span", "ilab-muted", "site"), site,
    ilabEl("span", "ilab-muted", "temperature"), temp,
    ilabEl("span", "ilab-muted", "seed"), seed, reset,
  );
  return { settings, site, temp, seed };
}

/**
 * The two output columns (baseline, steered), each with a title and a metric readout.
 * @param {Map<string, HTMLSpanElement>} readouts filled by key
 */
function outputColumns(readouts) {
  const outs = ilabEl("div", "ilab-steer-outs");
  /** @param {string} title @param {string} cls @param {string} key */
  const col = (title, cls, key) => {
    const box = ilabEl("div", `ilab-steer-col ${cls}`);
    const text = ilabEl("div", "ilab-steer-text");
    const head = ilabEl("div", "ilab-steer-head");
    const readout = ilabEl("span", "ilab-steer-metric");
    readouts.set(key, readout);
    head.append(ilabEl("span", "ilab-steer-title ilab-muted", title), readout);
    box.append(head, text);
    outs.appendChild(box);
    return text;
  };
  const baseText = col("baseline", "ilab-steer-baseline", "baseline");
  const steerText = col("steered", "ilab-steer-steered", "steered");
  return { outs, baseText, steerText };
}

/**
 * The widget's elements, with nothing drawn yet.
 * @param {AnyModel} model
 * @returns {SteeringView}
 */
export function steeringView(model) {
  const root = ilabEl("div", "ilab-steer");
  const promptRow = ilabEl("div", "ilab-steer-prompt-row");
  const prompt = ilabEl("textarea", "ilab-steer-prompt");
  prompt.rows = 2;
  prompt.setAttribute("aria-label", "prompt");
  prompt.placeholder = "type a prompt; Enter runs (Shift+Enter: new line)";
  const go = ilabEl("button", "ilab-steer-run", "Run");
  promptRow.append(prompt, go);
  const sliders = ilabEl("div", "ilab-steer-sliders");
  const inputs = new Map();
  const shown = new Map();
  const ends = new Map();
  for (const name of model.get("names")) {
    const { row, input, value, low, high } = sliderRow(name, model.get("ranges")[name]);
    sliders.appendChild(row);
    inputs.set(name, input);
    shown.set(name, value);
    ends.set(name, [low, high]);
  }
  const rangeNote = ilabEl("div", "ilab-steer-rangenote ilab-muted");
  const reset = ilabEl("button", "ilab-steer-reset", "Reset");
  reset.setAttribute("aria-label", "reset all sliders to 0");
  const { settings, site, temp, seed } = settingsRow(model, reset);
  const readouts = new Map();
  const { outs, baseText, steerText } = outputColumns(readouts);
  const status = ilabEl("div", "ilab-steer-status ilab-muted");
  const tip = ilabTip(root, "ilab-steer-tip");
  root.append(promptRow, sliders, rangeNote, settings, outs, status);
  [prompt, site, temp, seed, ...inputs.values()].forEach(ilabKeepKeys);
  return { model, root, prompt, go, inputs, shown, ends, rangeNote, reset, site, temp, seed, outs, readouts, baseText, steerText,
    status, tip, timer: null };
}
