// @ts-check
// Tokens as coloured spans.
import { ilabEl } from "./dom.js";
import { ilabTokenText } from "./format.js";
import { ilabColor } from "./scale.js";
/** @import { ScaleLike } from "./scale.js" */

/**
 * One token as a span (class ilab-tok; text via textContent, whitespace made visible), coloured by
 * `value` on `scale` (see ilabScale) when a value is given. Shared by the heatmap and the dashboard.
 * @param {string} tok
 * @param {number} [value]
 * @param {ScaleLike} [scale]
 * @param {boolean} [diverging]
 * @returns {HTMLSpanElement}
 */
export function ilabTokenSpan(tok, value, scale, diverging) {
  const shown = ilabTokenText(tok);
  const span = ilabEl("span", shown.faint ? "ilab-tok ilab-faint" : "ilab-tok", shown.text);
  if (shown.newline) span.dataset.newline = "1";
  if (value !== undefined) {
    span.style.background = ilabColor(value, scale, diverging);
    span.dataset.v = String(value);
  }
  return span;
}

/**
 * A token shown on its own (a list or table of tokens, where a leading space cannot be seen): its leading
 * spaces and tabs as faint "·" and "⇥" marks (class ilab-space, as whitespace-only tokens are shown), so
 * " evening" reads "·evening" and differs from "evening". Text via textContent only.
 * @param {string} tok
 * @returns {HTMLSpanElement}
 */
export function ilabTokenLabel(tok) {
  const lead = /^[ \t]+/.exec(tok);
  if (!lead || lead[0] === tok) return ilabTokenSpan(tok);
  const span = ilabEl("span", "ilab-tok ilab-tok-label");
  const marks = lead[0].replace(/ /g, "·").replace(/\t/g, "⇥");
  span.append(ilabEl("span", "ilab-space", marks), ilabEl("span", null, ilabTokenText(tok.slice(lead[0].length)).text));
  span.title = `${JSON.stringify(tok)}: ${lead[0].length === 1 ? "a leading space" : "leading whitespace"} (·)`;
  return span;
}
