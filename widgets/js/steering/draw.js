// @ts-check
// SteeringPanel, drawing: the two generated texts (where they part ways marked), the metric, the controls.
import { ilabEl, ilabFmt, ilabTokenText } from "../shared/index.js";
/** @import { SteeringView } from "./view.js" */

/**
 * The first position where the two texts differ (-1: none yet).
 * @param {string[] | null} a
 * @param {string[] | null} b
 */
function firstDiff(a, b) {
  if (!a || !b) return -1;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/**
 * One text, a span per token; from the first token that differs from `other` on, marked.
 * @param {HTMLElement} box
 * @param {string[]} tokens
 * @param {string[] | null} other
 */
function drawTokens(box, tokens, other) {
  box.replaceChildren();
  const diff = firstDiff(tokens, other);
  tokens.forEach((tok, i) => {
    const t = ilabTokenText(tok);
    const span = ilabEl("span", "ilab-steer-tok", t.text);
    span.dataset.i = String(i);
    if (t.faint) span.classList.add("ilab-faint");
    if (i === diff) span.classList.add("ilab-steer-diff"); // where the texts part ways
    else if (diff >= 0 && i > diff) span.classList.add("ilab-steer-after");
    box.appendChild(span);
    if (t.newline) box.appendChild(document.createElement("br"));
  });
}

/**
 * The metric above each text (hidden without one).
 * @param {SteeringView} view
 */
export function drawReadout({ model, readouts }) {
  const name = model.get("metric_name");
  const vals = model.get("metric_values") || {};
  for (const [key, el] of readouts) {
    el.style.display = name ? "" : "none";
    el.textContent = name ? `${name} = ${key in vals ? ilabFmt(vals[key]) : "…"}` : "";
  }
}

/**
 * The baseline and steered texts, and the metric.
 * @param {SteeringView} view
 */
export function drawText(view) {
  const { model } = view;
  const base = model.get("baseline_tokens");
  const steered = model.get("steered_tokens");
  drawTokens(view.baseText, base, steered.length ? steered : null);
  drawTokens(view.steerText, steered, base);
  view.steerText.dataset.run = String(model.get("run_id"));
  drawReadout(view);
}

/**
 * The controls as the traits say (a prompt being typed and sliders not sent yet are left alone).
 * @param {SteeringView} view
 */
export function drawControls({ model, prompt, inputs, shown, ends, rangeNote, timer, site, temp, seed }) {
  if (document.activeElement !== prompt) prompt.value = model.get("prompt");
  const vals = model.get("values");
  const ranges = model.get("ranges");
  for (const [name, input] of inputs) {
    const [lo, hi, step] = ranges[name];
    Object.assign(input, { min: String(lo), max: String(hi), step: String(step) });
    const [low, high] = ends.get(name) || [];
    if (low && high) [low.textContent, high.textContent] = [ilabFmt(lo), ilabFmt(hi)];
    if (timer === null && name in vals) input.value = String(vals[name]);
    const value = shown.get(name);
    if (value) value.textContent = ilabFmt(Number(input.value));
  }
  rangeNote.textContent = model.get("range_note");
  rangeNote.style.display = model.get("range_note") ? "" : "none";
  site.value = model.get("site");
  temp.value = String(model.get("temperature"));
  seed.value = String(model.get("seed"));
}

/**
 * The run number and state ("running", "done", "error: ...").
 * @param {SteeringView} view
 */
export function drawStatus({ model, status, root }) {
  const s = model.get("status");
  status.textContent = `run ${model.get("run_id")} · ${s}`;
  root.dataset.status = s;
  status.classList.toggle("ilab-steer-error", s.startsWith("error"));
}

/**
 * Hovering a generated token compares the two texts there.
 * @param {SteeringView} view
 * @param {HTMLElement} span
 */
export function showTokenTip({ model, tip }, span) {
  const i = Number(span.dataset.i);
  const base = model.get("baseline_tokens")[i];
  const steered = model.get("steered_tokens")[i];
  /** @param {string | undefined} t */
  const show = (t) => (t === undefined ? "–" : ilabTokenText(t).text);
  const same = base === steered ? "same in both" : "the texts differ here";
  tip.show(span, `generated token ${i + 1}\nbaseline: ${show(base)}\nsteered:  ${show(steered)}\n${same}`);
}
