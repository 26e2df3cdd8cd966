// @ts-check
// CircuitGraph, drawing the canvas: layer names, supernode boxes, edges, nodes and the prompt's tokens.
import { ilabIsDark, ilabTokenText } from "../shared/index.js";
import { WIDTH } from "./view.js";
/** @import { Graph } from "./graph.js" */
/** @import { CircuitView } from "./view.js" */

const KIND_COLOURS = {
  light: ["#2f6fb3", "#9a9a9a", "#3a9a4a", "#c2571a"],
  dark: ["#6aa8ee", "#b0b0b0", "#6fd47f", "#f09050"],
};

/**
 * A box around each supernode's members, with its label.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Graph} g
 * @param {{label: string, nodes: number[]}[]} supernodes
 * @param {boolean} dark
 */
function drawSupernodes(ctx, g, supernodes, dark) {
  for (const sn of supernodes) {
    const members = sn.nodes.filter((i) => i < g.n);
    if (!members.length) continue;
    let x0 = Infinity;
    let y0 = Infinity;
    let x1 = -Infinity;
    let y1 = -Infinity;
    for (const i of members) {
      x0 = Math.min(x0, g.xy[2 * i]);
      x1 = Math.max(x1, g.xy[2 * i]);
      y0 = Math.min(y0, g.xy[2 * i + 1]);
      y1 = Math.max(y1, g.xy[2 * i + 1]);
    }
    ctx.strokeStyle = dark ? "#e0c060" : "#b08000";
    ctx.strokeRect(x0 - 8, y0 - 8, x1 - x0 + 16, y1 - y0 + 16);
    ctx.fillStyle = ctx.strokeStyle;
    ctx.fillText(sn.label, x0 - 8, y0 - 11);
  }
}

/**
 * The edges between visible nodes: blue positive, red negative, thicker the stronger; with a node hovered,
 * its strongest paths lit and weak edges dropped. Returns how many edges are between visible nodes.
 * @param {CanvasRenderingContext2D} ctx
 * @param {CircuitView} view
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawEdges(ctx, { visible, highlight }, g, dark) {
  const positive = dark ? "rgba(110,170,255," : "rgba(40,100,200,";
  const negative = dark ? "rgba(255,120,110," : "rgba(200,50,40,";
  let shown = 0;
  for (let e = 0; e < g.m; e++) {
    const s = g.src[e];
    const d = g.dst[e];
    if (!visible[s] || !visible[d]) continue;
    shown++;
    const w = Math.abs(g.weight[e]) / g.maxW;
    const lit = highlight && highlight.has(e);
    if (highlight && !lit && w < 0.05) continue;
    const alpha = lit ? 0.95 : highlight ? 0.08 : Math.min(0.7, 0.15 + w);
    ctx.strokeStyle = (g.weight[e] >= 0 ? positive : negative) + alpha + ")";
    ctx.lineWidth = lit ? 1 + 4 * w : 0.3 + 3 * w;
    ctx.beginPath();
    ctx.moveTo(g.xy[2 * s], g.xy[2 * s + 1]);
    ctx.lineTo(g.xy[2 * d], g.xy[2 * d + 1]);
    ctx.stroke();
  }
  return shown;
}

/**
 * The visible nodes (errors as squares); hovered, selected and picked ones larger. Returns how many.
 * @param {CanvasRenderingContext2D} ctx
 * @param {CircuitView} view
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawNodes(ctx, { model, visible, hover, picked }, g, dark) {
  const colours = dark ? KIND_COLOURS.dark : KIND_COLOURS.light;
  let nodes = 0;
  for (let i = 0; i < g.n; i++) {
    if (!visible[i]) continue;
    nodes++;
    ctx.fillStyle = colours[g.kind[i]];
    ctx.beginPath();
    const r = i === hover || i === model.get("selected") ? 6 : picked.has(i) ? 5 : 3.5;
    if (g.kind[i] === 1) ctx.rect(g.xy[2 * i] - r, g.xy[2 * i + 1] - r, 2 * r, 2 * r);
    else ctx.arc(g.xy[2 * i], g.xy[2 * i + 1], r, 0, 2 * Math.PI);
    ctx.fill();
    if (picked.has(i)) {
      ctx.strokeStyle = dark ? "#fff" : "#000";
      ctx.stroke();
    }
  }
  return nodes;
}

/**
 * The background, the layer names on the left, and the tokens under their columns (canvas text is
 * never HTML).
 * @param {CanvasRenderingContext2D} ctx
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawFrame(ctx, g, dark) {
  ctx.fillStyle = dark ? "#1e1e1e" : "#ffffff";
  ctx.fillRect(0, 0, WIDTH, g.H);
  ctx.fillStyle = dark ? "#ccc" : "#444";
  ctx.font = "10px sans-serif";
  for (let l = 0; l < g.nLayers; l += Math.max(1, Math.ceil(g.nLayers / 18))) {
    ctx.fillText(`L${l}`, 4, g.H - 20 - g.rowH * (l + 1) - g.rowH / 2 + 3);
  }
}

/**
 * The prompt's tokens under their columns.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawTokens(ctx, g, dark) {
  ctx.fillStyle = dark ? "#ddd" : "#222";
  for (let p = 0; p < g.nPos; p++) {
    const t = ilabTokenText(g.tokens[p] || "").text.slice(0, 10);
    ctx.fillText(t, 50 + g.colW * p + 2, g.H - 4);
  }
}

/**
 * Draw the graph as pruned, and say how much is shown (also in the canvas's data attributes, for tests).
 * @param {CircuitView} view
 */
export function draw(view) {
  const { model, canvas, g, visible, highlight } = view;
  if (!g) return;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const dark = ilabIsDark(model.get("scheme")) || view.root.classList.contains("ilab-dark");
  drawFrame(ctx, g, dark);
  drawSupernodes(ctx, g, model.get("supernodes"), dark);
  const shown = drawEdges(ctx, view, g, dark);
  const nodes = drawNodes(ctx, view, g, dark);
  drawTokens(ctx, g, dark);
  view.sliderValue.textContent = ` ${Number(model.get("threshold")).toFixed(2)}`;
  view.info.textContent = `${nodes} nodes, ${shown} edges shown`;
  /** @type {any} */ (canvas).ilabNodePosition = (/** @type {number} */ i) =>
    visible[i] ? [g.xy[2 * i], g.xy[2 * i + 1]] : null; // for tests
  canvas.dataset.nodes = String(nodes);
  canvas.dataset.edges = String(shown);
  canvas.dataset.lit = String(highlight ? highlight.size : 0); // edges on the hovered node's strongest paths
}
