// @ts-check
// CircuitGraph, the graph: decoded from the model, laid out on the canvas, and queried (paths, hits, words).
import { ilabDecode, ilabFmt } from "../shared/index.js";

export const KIND_NAMES = ["feature", "error", "token", "logit"];
/** Horizontal room per logit node (CSS pixels), for its label. */
const LOGIT_STEP = 84;

/**
 * An attribution graph as drawn: nodes (kind 0 feature, 1 error, 2 token, 3 logit) and weighted edges.
 * @typedef {object} Graph
 * @property {number} nLayers
 * @property {number} nPos
 * @property {number} n nodes
 * @property {number} m edges
 * @property {string[]} tokens the prompt's tokens
 * @property {string[]} tokenNames the prompt's tokens with their spaces shown
 * @property {string[]} labels each node's label (hover boxes)
 * @property {string[]} names each node's short name (drawn on the canvas: logits, pinned nodes)
 * @property {Uint8Array | Int32Array} kind
 * @property {Int32Array} layer
 * @property {Int32Array} pos
 * @property {Int32Array} latent
 * @property {Float32Array} activation
 * @property {Float32Array} rank cumulative influence: a node is shown when it is at most the threshold
 * @property {Float32Array} influence the node's share of all influence on the logits
 * @property {Int32Array} order the node's place by influence (1: the most influential of the whole graph)
 * @property {number} nGraphNodes nodes in the whole (unpruned) graph
 * @property {string} rule the pruning rule in words
 * @property {Record<string, any>} cards feature cards by "layer_latent"
 * @property {boolean} linked whether a FeatureDashboard is linked
 * @property {string[] | null} kindNames the kinds' names of an edge-level circuit (head, MLP, input, logits); null
 *   for an attribution graph (core/circuits/edge_view.py)
 * @property {Record<string, any>} qk QK data by view node index (core/circuits/view.py, qk_view)
 * @property {Int32Array} src
 * @property {Int32Array} dst
 * @property {Float32Array} weight
 * @property {Record<string, string>} latentLabels
 * @property {number} maxW the largest |weight|
 * @property {number[][]} out each node's outgoing edges, strongest first
 * @property {number[][]} inc each node's incoming edges, strongest first
 * @property {number} H canvas height (CSS pixels)
 * @property {number} rowH
 * @property {number} colW
 * @property {Float32Array} xy [n, 2] node centres
 */

/**
 * The graph the model holds, decoded, with edges listed per node (not laid out yet).
 * @param {AnyModel} model
 * @returns {Graph}
 */
export function decodeGraph(model) {
  const d = model.get("graph");
  /** @type {Float32Array} */
  const weight = ilabDecode(d.weight);
  /** @type {Int32Array} */
  const src = ilabDecode(d.src);
  /** @type {Int32Array} */
  const dst = ilabDecode(d.dst);
  const n = d.n_nodes;
  const m = d.n_edges;
  let maxW = 0;
  for (let e = 0; e < m; e++) maxW = Math.max(maxW, Math.abs(weight[e]));
  /** @type {number[][]} */
  const out = Array.from({ length: n }, () => []);
  /** @type {number[][]} */
  const inc = Array.from({ length: n }, () => []);
  for (let e = 0; e < m; e++) {
    out[src[e]].push(e);
    inc[dst[e]].push(e);
  }
  for (const list of [...out, ...inc]) list.sort((a, b) => Math.abs(weight[b]) - Math.abs(weight[a]));
  return {
    nLayers: d.n_layers, nPos: d.n_pos, n, m, tokens: d.prompt_tokens, labels: d.labels,
    names: d.names || d.labels, kind: ilabDecode(d.kind), layer: ilabDecode(d.layer), pos: ilabDecode(d.pos),
    latent: ilabDecode(d.latent), activation: ilabDecode(d.activation), rank: ilabDecode(d.rank),
    influence: ilabDecode(d.influence), order: ilabDecode(d.order), nGraphNodes: d.n_graph_nodes || n,
    tokenNames: d.prompt_names || [],
    rule: d.rule || "", cards: d.cards || {}, qk: d.qk || {}, kindNames: d.kind_names || null, linked: !!d.linked, src, dst, weight,
    latentLabels: d.latent_labels || {}, maxW: maxW || 1, out, inc, H: 0, rowH: 0, colW: 0, xy: new Float32Array(0),
  };
}

/**
 * Place the nodes: a column per position, a row per layer (embeddings at the bottom, logits at the top);
 * nodes sharing a cell are spread across it; the logits spread along the top row, ending at the last
 * column, with room for their labels. Sizes the canvas.
 * @param {Graph} g
 * @param {HTMLCanvasElement} canvas
 * @param {number} W canvas width (CSS pixels)
 */
export function layout(g, canvas, W) {
  const rows = g.nLayers + 2; // embeddings, layers, logits
  const H = Math.max(240, Math.min(900, rows * 34));
  const dpr = window.devicePixelRatio || 1;
  canvas.width = W * dpr;
  canvas.height = H * dpr;
  canvas.style.width = `${W}px`;
  canvas.style.height = `${H}px`;
  const colW = (W - 60) / g.nPos;
  const rowH = (H - 40) / rows;
  /** @type {Map<string, number[]>} */
  const cells = new Map();
  for (let i = 0; i < g.n; i++) {
    const key = `${g.layer[i]}:${g.pos[i]}`;
    const members = cells.get(key) || [];
    members.push(i);
    cells.set(key, members);
  }
  const xy = new Float32Array(g.n * 2);
  const spread = colW * 0.8;
  for (const members of cells.values()) {
    members.forEach((i, j) => {
      const row = g.kind[i] === 2 ? 0 : g.kind[i] === 3 ? rows - 1 : g.layer[i] + 1;
      const within = members.length > 1 ? (spread * j) / (members.length - 1) : spread / 2;
      xy[2 * i] = 50 + colW * g.pos[i] + colW * 0.1 + within;
      xy[2 * i + 1] = H - 20 - rowH * row - rowH / 2;
    });
  }
  const logits = [];
  for (let i = 0; i < g.n; i++) if (g.kind[i] === 3) logits.push(i);
  const step = Math.min(LOGIT_STEP, (W - 70) / Math.max(1, logits.length));
  const right = Math.min(W - step / 2 - 4, 50 + colW * (g.nPos - 0.5) + (step * (logits.length - 1)) / 2);
  logits.forEach((i, k) => {
    xy[2 * i] = right - step * (logits.length - 1 - k);
  });
  Object.assign(g, { H, rowH, colW, xy });
}

/**
 * Which nodes the pruning threshold keeps (tokens, logits and pinned nodes always; hidden nodes never).
 * @param {Graph} g
 * @param {number} threshold
 * @param {number[]} [pinned]
 * @param {number[]} [hidden]
 */
export function visibleNodes(g, threshold, pinned = [], hidden = []) {
  const visible = new Uint8Array(g.n);
  for (let i = 0; i < g.n; i++) visible[i] = g.kind[i] >= 2 || g.rank[i] <= threshold ? 1 : 0;
  for (const i of pinned) if (i >= 0 && i < g.n) visible[i] = 1;
  for (const i of hidden) if (i >= 0 && i < g.n) visible[i] = 0;
  return visible;
}

/**
 * The edges on a node's strongest paths, up and down (two strongest visible edges a step, six steps).
 * @param {Graph} g
 * @param {Uint8Array} visible
 * @param {number} start
 * @returns {Set<number>}
 */
export function strongestPaths(g, visible, start) {
  const edges = new Set();
  /**
   * @param {number} node
   * @param {"up" | "down"} dir
   * @param {number} depth
   */
  const walk = (node, dir, depth) => {
    if (depth > 6) return;
    const list = (dir === "up" ? g.inc : g.out)[node].filter((e) => visible[g.src[e]] && visible[g.dst[e]]).slice(0, 2);
    for (const e of list) {
      if (edges.has(e)) continue;
      edges.add(e);
      walk(dir === "up" ? g.src[e] : g.dst[e], dir, depth + 1);
    }
  };
  walk(start, "up", 0);
  walk(start, "down", 0);
  return edges;
}

/**
 * The visible node within 8 pixels of (x, y), the nearest (-1: none).
 * @param {Graph} g
 * @param {Uint8Array} visible
 * @param {number} x
 * @param {number} y
 */
export function nodeAt(g, visible, x, y) {
  let best = -1;
  let bestD = 64;
  for (let i = 0; i < g.n; i++) {
    if (!visible[i]) continue;
    const d = (g.xy[2 * i] - x) ** 2 + (g.xy[2 * i + 1] - y) ** 2;
    if (d < bestD) {
      bestD = d;
      best = i;
    }
  }
  return best;
}

/**
 * Node `i`'s influence in words: its share of the influence on the logits and its place among all nodes.
 * @param {Graph} g
 * @param {number} i
 */
export function influenceText(g, i) {
  if (g.kind[i] === 3) return "a logit: where the influence ends";
  const share = (100 * g.influence[i]).toFixed(g.influence[i] < 0.01 ? 2 : 1);
  return `influence ${share}% of the total (#${g.order[i]} of ${g.nGraphNodes} nodes)`;
}

/**
 * Node `i` in words, a line each: kind and label, where it is, its activation and label, its rank.
 * @param {Graph} g
 * @param {number} i
 * @returns {string[]}
 */
export function describeNode(g, i) {
  const lines = [`${(g.kindNames || KIND_NAMES)[g.kind[i]]}: ${g.labels[i]}`];
  if (g.kindNames) {
    if (g.kind[i] <= 1) lines.push(`layer ${g.layer[i]}, column ${g.tokenNames[g.pos[i]] ?? ""}`);
    lines.push(`${(100 * g.influence[i]).toFixed(1)}% of the circuit's |score|`);
  } else if (g.kind[i] <= 1) lines.push(`layer ${g.layer[i]}, position ${g.pos[i]} (${g.tokenNames[g.pos[i]] ?? g.tokens[g.pos[i]] ?? ""})`);
  if (g.kind[i] === 0 && !g.kindNames) {
    lines.push(`activation ${ilabFmt(g.activation[i])}`);
    const label = g.latentLabels[String(g.latent[i])];
    if (label) lines.push(label);
  }
  if (!g.kindNames) lines.push(influenceText(g, i));
  const count = (/** @type {number} */ k) => `${k} edge${k === 1 ? "" : "s"}`;
  lines.push(`${count(g.inc[i].length)} in, ${count(g.out[i].length)} out (as pruned)`);
  return lines;
}
