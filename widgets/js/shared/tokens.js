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
