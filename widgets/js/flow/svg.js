// @ts-check
// FeatureFlow, the picture: column names, match edges and latent nodes as SVG.
import { ilabFmt } from "../shared/index.js";

const SVG = "http://www.w3.org/2000/svg";
export const COL_W = 170;
export const ROW_H = 56;
export const TOP = 28;

/**
 * A latent as Python sends it (widgets/flow.py).
 * @typedef {{id: string, column: number, row: number, latent: number, label: string, tops: string[]}} FlowNode
 */
/** @typedef {{source: string, target: string, quality: number, error: number}} FlowEdge */
/** @typedef {Record<string, {x: number, y: number}>} Positions */

/**
 * An SVG element with a class.
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {string} [cls]
 * @returns {SVGElementTagNameMap[K]}
 */
export function svgEl(tag, cls) {
  const el = document.createElementNS(SVG, tag);
  if (cls) el.setAttribute("class", cls);
  return el;
}

/**
 * Each node's centre.
 * @param {FlowNode[]} nodes
 * @returns {Positions}
 */
export function positions(nodes) {
  /** @type {Positions} */
  const pos = {};
  for (const n of nodes) pos[n.id] = { x: 20 + n.column * COL_W + 40, y: TOP + n.row * ROW_H + ROW_H / 2 };
  return pos;
}

/**
 * The column names along the top.
 * @param {SVGSVGElement} svg
 * @param {string[]} columns
 */
export function drawColumns(svg, columns) {
  columns.forEach((name, c) => {
    const t = svgEl("text", "ilab-flow-col");
    t.setAttribute("x", String(20 + c * COL_W));
    t.setAttribute("y", "14");
    t.textContent = name;
    svg.appendChild(t);
  });
}

/**
 * The matches: a curve each, thicker and more opaque the better the match.
 * @param {SVGSVGElement} svg
 * @param {FlowEdge[]} edges
 * @param {Positions} pos
 */
export function drawEdges(svg, edges, pos) {
  for (const e of edges) {
    const a = pos[e.source];
    const b = pos[e.target];
    const path = svgEl("path", "ilab-flow-edge");
    const mid = (a.x + b.x) / 2;
    path.setAttribute("d", `M${a.x + 10},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.x - 10},${b.y}`);
    path.setAttribute("stroke-width", String(1 + 6 * e.quality));
    path.setAttribute("stroke-opacity", String(0.25 + 0.75 * e.quality));
    const title = svgEl("title");
    title.textContent = `match error ${ilabFmt(e.error)}`;
    path.appendChild(title);
    svg.appendChild(path);
  }
}
