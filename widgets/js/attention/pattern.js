// @ts-check
// AttentionPattern, painting: attention probabilities as colours, and a query x key matrix on a canvas.
import { ilabScale, ilabScalePos } from "../shared/index.js";
/** @import { ScaleLike } from "../shared/scale.js" */

/**
 * Colour for an attention probability on the widget's scale (the shared ilabScalePos), as a plain rgba()
 * a canvas accepts: orange, or blue for the "attended by" strip; `alpha` is the theme's strongest alpha.
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
 * Paint an n x n pattern (query rows, key columns) on a canvas, `cell` pixels per token.
 * @param {HTMLCanvasElement} canvas
 * @param {Float32Array} pat
 * @param {number} n
 * @param {number} cell
 * @param {boolean} light
 * @param {ScaleLike} scale
 * @param {number} alpha
 */
export function drawPattern(canvas, pat, n, cell, light, scale, alpha) {
  canvas.width = n * cell;
  canvas.height = n * cell;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  ctx.fillStyle = light ? "#ffffff" : "#111111";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < n; q++) {
    for (let k = 0; k < n; k++) {
      const colour = attnColor(pat[q * n + k], scale, alpha, false);
      if (colour === "transparent") continue;
      ctx.fillStyle = colour;
      ctx.fillRect(k * cell, q * cell, cell, cell);
    }
  }
}
