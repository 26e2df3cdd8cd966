// @ts-check
// CircuitGraph, drawing the canvas: layer names, supernode boxes, edges, nodes and the prompt's tokens.
import { ilabIsDark, ilabTokenText } from "../shared/index.js";
import { edgePoint } from "./edges.js";
import { WIDTH } from "./view.js";
/** @import { Graph } from "./graph.js" */
/** @import { CircuitView } from "./view.js" */

const KIND_COLOURS = {
  light: ["#2f6fb3", "#9a9a9a", "#3a9a4a", "#c2571a"],
  dark: ["#6aa8ee", "#b0b0b0", "#6fd47f", "#f09050"],
};

/**
 * Each supernode: a ring around each of its members (however far apart they are: a box around them all
 * would cover most of the graph) and its label beside its topmost member.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Graph} g
 * @param {{label: string, nodes: number[]}[]} supernodes
 * @param {boolean} dark
 * @param {Uint8Array} visible
 */
function drawSupernodes(ctx, g, supernodes, dark, visible) {
  ctx.strokeStyle = dark ? "#e0c060" : "#b08000";
  ctx.fillStyle = ctx.strokeStyle;
  ctx.lineWidth = 1.5;
  for (const sn of supernodes) {
    const members = sn.nodes.filter((i) => i < g.n && visible[i]);
    if (!members.length) continue;
    let top = members[0];
    for (const i of members) {
      ctx.beginPath();
      ctx.arc(g.xy[2 * i], g.xy[2 * i + 1], 9, 0, 2 * Math.PI);
      ctx.stroke();
      if (g.xy[2 * i + 1] < g.xy[2 * top + 1]) top = i;
    }
    ctx.fillText(sn.label, g.xy[2 * top] + 12, g.xy[2 * top + 1] + 4);
  }
}

/**
 * The names of the logit nodes (above them) and of pinned nodes (beside them); where each label went is
 * kept on the canvas (`ilabLabels`: text and box), for tests.
 * @param {CanvasRenderingContext2D} ctx
 * @param {CircuitView} view
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawLabels(ctx, { visible, model }, g, dark) {
  const pinned = new Set(model.get("pinned") || []);
  /** @type {{text: string, node: number, x: number, y: number, width: number}[]} */
  const drawn = [];
  ctx.font = "11px sans-serif";
  for (let i = 0; i < g.n; i++) {
    if (!visible[i] || !(g.kind[i] === 3 || pinned.has(i))) continue;
    const text = g.names[i];
    const width = ctx.measureText(text).width;
    const logit = g.kind[i] === 3;
    const x = logit ? g.xy[2 * i] - width / 2 : g.xy[2 * i] + 8;
    const y = logit ? g.xy[2 * i + 1] - 9 : g.xy[2 * i + 1] - 6;
    ctx.fillStyle = dark ? "rgba(30,30,30,0.8)" : "rgba(255,255,255,0.8)";
    ctx.fillRect(x - 1, y - 10, width + 2, 13);
    ctx.fillStyle = dark ? "#f0f0f0" : "#111";
    ctx.fillText(text, x, y);
    drawn.push({ text, node: i, x, y: y - 10, width });
  }
  ctx.font = "10px sans-serif";
  /** @type {any} */ (ctx.canvas).ilabLabels = drawn;
}

/**
 * The edges between visible nodes: blue positive, red negative, thicker the stronger; with a node hovered,
 * its strongest paths lit and weak edges dropped; the selected edge in gold. Returns how many edges are between visible nodes.
 * @param {CanvasRenderingContext2D} ctx
 * @param {CircuitView} view
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawEdges(ctx, { visible, highlight, model }, g, dark) {
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
  const chosen = model.get("selected_edge") ?? -1;
  if (chosen >= 0 && chosen < g.m && visible[g.src[chosen]] && visible[g.dst[chosen]]) {
    ctx.strokeStyle = dark ? "#e0c060" : "#b08000";
    ctx.lineWidth = 3;
    ctx.beginPath();
    ctx.moveTo(g.xy[2 * g.src[chosen]], g.xy[2 * g.src[chosen] + 1]);
    ctx.lineTo(g.xy[2 * g.dst[chosen]], g.xy[2 * g.dst[chosen] + 1]);
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
  const pinned = new Set(model.get("pinned") || []);
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
    if (picked.has(i) || pinned.has(i)) {
      ctx.strokeStyle = dark ? "#fff" : "#000";
      ctx.lineWidth = pinned.has(i) ? 2 : 1;
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
 * The prompt's tokens under their columns (spaces shown as ␣), cut to the column's width; an edge-level
 * circuit's column names (one node a cell, at its middle) centred.
 * @param {CanvasRenderingContext2D} ctx
 * @param {Graph} g
 * @param {boolean} dark
 */
function drawTokens(ctx, g, dark) {
  ctx.fillStyle = dark ? "#ddd" : "#222";
  for (let p = 0; p < g.nPos; p++) {
    const t = (g.tokenNames[p] ?? ilabTokenText(g.tokens[p] || "").text).slice(0, Math.max(3, Math.floor(g.colW / 6)));
    const x = g.kindNames ? 50 + g.colW * (p + 0.5) - ctx.measureText(t).width / 2 : 50 + g.colW * p + 2;
    ctx.fillText(t, x, g.H - 4);
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
  const shown = drawEdges(ctx, view, g, dark);
  drawSupernodes(ctx, g, model.get("supernodes"), dark, visible);
  const nodes = drawNodes(ctx, view, g, dark);
  drawTokens(ctx, g, dark);
  drawLabels(ctx, view, g, dark);
  view.sliderValue.textContent = ` ${Math.round(100 * Number(model.get("threshold")))}% of the influence`;
  view.info.textContent = `${nodes} nodes, ${shown} edges shown`;
  view.rule.textContent = g.rule ? `pruned to ${g.rule}` : "";
  /** @type {any} */ (canvas).ilabNodePosition = (/** @type {number} */ i) =>
    visible[i] ? [g.xy[2 * i], g.xy[2 * i + 1]] : null; // for tests
  /** @type {any} */ (canvas).ilabEdgePoint = (/** @type {number} */ e) => edgePoint(g, visible, e); // for tests
  canvas.dataset.nodes = String(nodes);
  canvas.dataset.edges = String(shown);
  canvas.dataset.lit = String(highlight ? highlight.size : 0); // edges on the hovered node's strongest paths
}
