// @ts-check
// FeatureDashboard, the activation histogram of a latent's card, as SVG.
import { ilabFmt } from "../shared/index.js";
/** @import { Card } from "./store.js" */

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 320;
const H = 110;
const PAD_LEFT = 34;
const PAD_BOTTOM = 18;
const PAD_TOP = 6;

/**
 * An SVG element with attributes.
 * @param {string} tag
 * @param {Record<string, string | number>} attrs
 * @returns {SVGElement}
 */
function svgEl(tag, attrs) {
  const el = /** @type {SVGElement} */ (document.createElementNS(SVG_NS, tag));
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/**
 * The axis line and the labels at its ends (lowest and highest activation, zero and the peak count).
 * @param {SVGElement} svg
 * @param {Card} card
 * @param {number} top the peak count
 */
function axes(svg, card, top) {
  const n = card.counts.length;
  /** @param {number} x @param {number} y @param {string} s @param {string} anchor */
  const text = (x, y, s, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor, class: "ilab-dash-axis" });
    t.textContent = s;
    svg.appendChild(t);
  };
  svg.appendChild(svgEl("line", { x1: PAD_LEFT, y1: H - PAD_BOTTOM, x2: W - 4, y2: H - PAD_BOTTOM, class: "ilab-dash-axisline" }));
  text(PAD_LEFT, H - 4, ilabFmt(card.edges[0]), "start");
  text(W - 4, H - 4, ilabFmt(card.edges[n]), "end");
  text(PAD_LEFT - 4, PAD_TOP + 8, ilabFmt(top), "end");
  text(PAD_LEFT - 4, H - PAD_BOTTOM, "0", "end");
}

/**
 * A bin in words: its activation range, its count of tokens and their share of the firing tokens.
 * @param {Card} card
 * @param {number} b
 */
export function binText(card, b) {
  let total = 0;
  for (const c of card.counts) total += c;
  const share = total > 0 ? ` (${ilabFmt((100 * card.counts[b]) / total)}% of firing tokens)` : "";
  return `activation ${ilabFmt(card.edges[b])}–${ilabFmt(card.edges[b + 1])}\n${card.counts[b]} tokens${share}`;
}

/**
 * The activation histogram as SVG bars (counts of tokens per activation bin); each bin has a full-height
 * hover area (class ilab-dash-binhit, data-bin) that the card shows a hover box for.
 * @param {Card} card
 */
export function histogramSvg(card) {
  const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "ilab-dash-hist" });
  svg.setAttribute("role", "img");
  const n = card.counts.length;
  let top = 0;
  for (const c of card.counts) top = Math.max(top, c);
  const bw = (W - PAD_LEFT - 4) / Math.max(1, n);
  for (let b = 0; b < n; b++) {
    const h = top > 0 ? ((H - PAD_BOTTOM - PAD_TOP) * card.counts[b]) / top : 0;
    const rect = svgEl("rect", { x: PAD_LEFT + b * bw, y: H - PAD_BOTTOM - h, width: Math.max(1, bw - 1), height: h,
      class: "ilab-dash-bar" });
    const tip = svgEl("title", {});
    tip.textContent = `${ilabFmt(card.edges[b])}–${ilabFmt(card.edges[b + 1])}: ${card.counts[b]} tokens`;
    rect.appendChild(tip);
    svg.appendChild(rect);
    const hit = svgEl("rect", { x: PAD_LEFT + b * bw, y: PAD_TOP, width: bw, height: H - PAD_BOTTOM - PAD_TOP,
      class: "ilab-dash-binhit", "data-bin": b });
    svg.appendChild(hit);
  }
  axes(svg, card, top);
  svg.setAttribute("aria-label", `activation histogram: ${n} bins up to ${ilabFmt(card.edges[n])}, peak ${top} tokens`);
  return svg;
}
