// @ts-check
// Colour scales: where a value falls, its colour, and a legend. Python resolves the scale
// (core/views/colors.py); the browser only draws from it.
import { ilabEl } from "./dom.js";
import { ilabFmt } from "./format.js";
/** @import { Palette } from "./theme.js" */

/**
 * A colour scale as drawn.
 * @typedef {object} Scale
 * @property {"sequential" | "diverging"} kind
 * @property {number} vmin
 * @property {number} center
 * @property {number} vmax
 */

/**
 * What a scale may arrive as: a Scale (a ColorScale's dict), its 4 numbers [kind code, vmin, center, vmax],
 * or the old vmax number (with `diverging`).
 * @typedef {Scale | number[] | Float32Array | number | null | undefined} ScaleLike
 */

/**
 * A colour scale as drawn: {kind: "sequential"|"diverging", vmin, center, vmax}. Accepts what Python sends
 * (core/views/colors.py: a ColorScale's dict, or its 4 numbers [kind code, vmin, center, vmax]) and the old
 * (vmax, diverging) pair: sequential 0..vmax, or diverging -vmax..vmax around 0.
 * @param {ScaleLike} scale
 * @param {boolean} [diverging]
 * @returns {Scale}
 */
export function ilabScale(scale, diverging) {
  if (typeof scale === "number") {
    return diverging
      ? { kind: "diverging", vmin: -scale, center: 0, vmax: scale }
      : { kind: "sequential", vmin: 0, center: 0, vmax: scale };
  }
  if (!scale) return { kind: "sequential", vmin: 0, center: 0, vmax: 0 };
  if (Array.isArray(scale) || ArrayBuffer.isView(scale)) {
    return { kind: scale[0] >= 0.5 ? "diverging" : "sequential", vmin: scale[1], center: scale[2], vmax: scale[3] };
  }
  return scale;
}

/**
 * Row `i` of a [n, 4] scales payload (one scale per feature or per grid) as a scale.
 * @param {Float32Array | null} scales
 * @param {number} i
 * @returns {Scale}
 */
export function ilabScaleAt(scales, i) {
  return scales ? ilabScale(scales.subarray(4 * i, 4 * i + 4)) : ilabScale(null);
}

/**
 * Where a value falls on a scale: 0..1 (sequential), -1..1 (diverging); NaN for a non-finite value.
 * @param {number} value
 * @param {Scale} scale
 * @returns {number}
 */
export function ilabScalePos(value, scale) {
  const s = scale;
  if (!Number.isFinite(value)) return NaN;
  if (s.kind === "diverging") {
    if (value >= s.center) return s.vmax > s.center ? Math.min(1, (value - s.center) / (s.vmax - s.center)) : 0;
    return s.vmin < s.center ? Math.max(-1, (value - s.center) / (s.center - s.vmin)) : 0;
  }
  if (!(s.vmax > s.vmin)) return 0;
  return Math.max(0, Math.min(1, (value - s.vmin) / (s.vmax - s.vmin)));
}

/**
 * Colour for a value on a scale (see ilabScale): orange above (sequential: towards vmax), blue below the
 * centre. Translucent, with the strongest alpha set by the theme (--ilab-heat-alpha: lower in dark themes),
 * so text stays readable (contrast >= 4.5:1) on light and dark backgrounds.
 * @param {number} value
 * @param {ScaleLike} scale
 * @param {boolean} [diverging]
 * @returns {string}
 */
export function ilabColor(value, scale, diverging) {
  const t = ilabScalePos(value, ilabScale(scale, diverging));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const rgb = t >= 0 ? "230, 85, 13" : "49, 130, 189";
  return `rgba(${rgb}, calc(var(--ilab-heat-alpha, 0.85) * ${Math.abs(t).toFixed(3)}))`;
}

/**
 * Colour for a value on a scale in a cell that holds no text (a grid cell, a canvas cell): the theme's cell
 * colours (--ilab-cell-pos / --ilab-cell-neg, brighter in dark themes) with alpha growing linearly with the
 * value in light themes and with its square root in dark ones (--ilab-cell-lin), so mid and small values stay
 * visible on a dark background. CSS variables: the colour follows a theme change by itself.
 * @param {number} value
 * @param {ScaleLike} scale
 * @returns {string}
 */
export function ilabCellColor(value, scale) {
  const t = ilabScalePos(value, ilabScale(scale));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const a = Math.abs(t);
  const rgb = t >= 0 ? "var(--ilab-cell-pos, 230, 85, 13)" : "var(--ilab-cell-neg, 49, 130, 189)";
  const mix = `(var(--ilab-cell-lin, 1) * ${a.toFixed(4)} + (1 - var(--ilab-cell-lin, 1)) * ${Math.sqrt(a).toFixed(4)})`;
  return `rgba(${rgb}, calc(var(--ilab-cell-alpha, 0.85) * ${mix}))`;
}

/**
 * ilabCellColor for a canvas, which takes no CSS variables: the same colour from a palette read off the
 * widget's root (ilabPalette). `key` paints every value in the "below" colour (a second hue).
 * @param {number} value
 * @param {ScaleLike} scale
 * @param {Palette} palette
 * @param {boolean} [key]
 * @returns {string}
 */
export function ilabCanvasColor(value, scale, palette, key) {
  const t = ilabScalePos(value, ilabScale(scale));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const a = Math.abs(t);
  const mix = palette.lin * a + (1 - palette.lin) * Math.sqrt(a);
  return `rgba(${key || t < 0 ? palette.neg : palette.pos}, ${(palette.alpha * mix).toFixed(3)})`;
}

/**
 * A legend: the lowest value, a bar coloured by `colour`, the centre of a diverging scale, the highest value.
 * @param {Scale} s
 * @param {number} lo
 * @param {(value: number, scale: Scale) => string} colour
 * @returns {HTMLDivElement}
 */
function legendOf(s, lo, colour) {
  const box = ilabEl("div", "ilab-legend");
  box.appendChild(ilabEl("span", "ilab-legend-label ilab-legend-min", ilabFmt(lo)));
  const bar = ilabEl("span", "ilab-legend-bar");
  const stops = [];
  for (let i = 0; i <= 10; i++) stops.push(colour(lo + ((s.vmax - lo) * i) / 10, s));
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  if (s.kind === "diverging" && s.vmax > lo) {
    const mark = ilabEl("span", "ilab-legend-center");
    mark.style.left = `${(100 * (s.center - lo)) / (s.vmax - lo)}%`;
    mark.title = `centre ${ilabFmt(s.center)}`;
    bar.appendChild(mark);
  }
  box.appendChild(bar);
  box.appendChild(ilabEl("span", "ilab-legend-label ilab-legend-max", ilabFmt(s.vmax)));
  box.dataset.kind = s.kind;
  return box;
}

/**
 * A legend for a scale (see ilabScale; the old (vmin, vmax, diverging) form still works): the lowest value,
 * a bar coloured as ilabColor colours values, the centre of a diverging scale, and the highest value.
 * @param {ScaleLike} scale
 * @param {number} [vmax]
 * @param {boolean} [diverging]
 * @returns {HTMLDivElement}
 */
export function ilabLegend(scale, vmax, diverging) {
  let s = ilabScale(scale, diverging);
  let lo = s.vmin;
  if (typeof scale === "number") {
    s = ilabScale(vmax, diverging); // old form: (vmin, vmax, diverging)
    lo = scale;
  }
  return legendOf(s, lo, (v, sc) => ilabColor(v, sc));
}

/**
 * A legend for cells coloured by ilabCellColor (grid and canvas cells without text).
 * @param {ScaleLike} scale
 * @returns {HTMLDivElement}
 */
export function ilabCellLegend(scale) {
  const s = ilabScale(scale);
  return legendOf(s, s.vmin, ilabCellColor);
}
