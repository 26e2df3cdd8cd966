// @ts-check
// AttentionPattern, painting: attention probabilities as colours, and a query x key matrix on a canvas.
import { ilabCanvasColor, ilabScale, ilabScalePos } from "../shared/index.js";
/** @import { ScaleLike } from "../shared/scale.js" */
/** @import { Palette } from "../shared/theme.js" */

/**
 * Colour for an attention probability on the widget's scale (the shared ilabScalePos), as a plain rgba()
 * for the token strips (text on it: the theme's text-safe alpha): orange, or blue for the "attended by" strip.
 * @param {number} p
 * @param {ScaleLike} scale
 * @param {number} alpha
 * @param {boolean} key whether the colour is for the "attended by" strip
 */
export function attnColor(p, scale, alpha, key) {
  const t = ilabScalePos(p, ilabScale(scale));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const rgb = key || t < 0 ? "49, 130, 189" : "230, 85, 13";
  return `rgba(${rgb}, ${(alpha * Math.abs(t)).toFixed(3)})`;
}

/**
 * The pattern as shown: as computed, or with key 0 (BOS) hidden (NaN), each row renormalised over the other
 * keys when `renormalize` (core/views/attention_pattern.py `without_first_key` gives the same numbers).
 * @param {Float32Array} pat n x n
 * @param {number} n
 * @param {boolean} hideFirst
 * @param {boolean} renormalize
 * @returns {Float32Array}
 */
export function shownPattern(pat, n, hideFirst, renormalize) {
  if (!hideFirst) return pat;
  const out = new Float32Array(pat);
  for (let q = 0; q < n; q++) {
    let rest = 0;
    for (let k = 1; k < n; k++) rest += pat[q * n + k];
    for (let k = 1; k < n; k++) out[q * n + k] = renormalize ? (rest > 0 ? pat[q * n + k] / rest : 0) : pat[q * n + k];
    out[q * n] = NaN;
  }
  return out;
}

/**
 * Paint an n x n pattern (query rows, key columns) on a canvas, `cell` pixels per token, in the theme's
 * palette (a hidden value, NaN, is left as background).
 * @param {HTMLCanvasElement} canvas
 * @param {Float32Array} pat
 * @param {number} n
 * @param {number} cell
 * @param {Palette} palette
 * @param {ScaleLike} scale
 */
export function drawPattern(canvas, pat, n, cell, palette, scale) {
  canvas.width = n * cell;
  canvas.height = n * cell;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.fillStyle = palette.bg;
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < n; q++) {
    for (let k = 0; k < n; k++) {
      const colour = ilabCanvasColor(pat[q * n + k], scale, palette);
      if (colour === "transparent") continue;
      ctx.fillStyle = colour;
      ctx.fillRect(k * cell, q * cell, cell, cell);
    }
  }
}
