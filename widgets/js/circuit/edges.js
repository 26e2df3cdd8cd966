// @ts-check
// CircuitGraph, the edges: which one is under the mouse, where a click selects one, which go through attention.
import { nodeAt } from "./graph.js";
/** @import { Graph } from "./graph.js" */

/**
 * The visible edge within 4 pixels of (x, y), the nearest (-1: none).
 * @param {Graph} g
 * @param {Uint8Array} visible
 * @param {number} x
 * @param {number} y
 */
export function edgeAt(g, visible, x, y) {
  let best = -1;
  let bestD = 16;
  for (let e = 0; e < g.m; e++) {
    const s = g.src[e];
    const d = g.dst[e];
    if (!visible[s] || !visible[d]) continue;
    const [ax, ay, bx, by] = [g.xy[2 * s], g.xy[2 * s + 1], g.xy[2 * d], g.xy[2 * d + 1]];
    const len2 = (bx - ax) ** 2 + (by - ay) ** 2 || 1;
    const t = Math.max(0, Math.min(1, ((x - ax) * (bx - ax) + (y - ay) * (by - ay)) / len2));
    const dist = (ax + t * (bx - ax) - x) ** 2 + (ay + t * (by - ay) - y) ** 2;
    if (dist < bestD) {
      bestD = dist;
      best = e;
    }
  }
  return best;
}

/**
 * A point on edge `e` where a click selects it (the nearest edge there, no node under it); null when none.
 * @param {Graph} g
 * @param {Uint8Array} visible
 * @param {number} e
 * @returns {[number, number] | null}
 */
export function edgePoint(g, visible, e) {
  const s = g.src[e];
  const d = g.dst[e];
  if (e < 0 || e >= g.m || !visible[s] || !visible[d]) return null;
  for (const t of [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.45, 0.55, 0.35, 0.65, 0.25, 0.75]) {
    const x = g.xy[2 * s] + t * (g.xy[2 * d] - g.xy[2 * s]);
    const y = g.xy[2 * s + 1] + t * (g.xy[2 * d + 1] - g.xy[2 * s + 1]);
    if (nodeAt(g, visible, x, y) < 0 && edgeAt(g, visible, x, y) === e) return [x, y];
  }
  return null;
}

/**
 * Whether edge `e` of an attribution graph goes through attention: from an earlier position.
 * @param {Graph} g
 * @param {number} e
 */
export function isAttentionEdge(g, e) {
  return !g.kindNames && g.pos[g.src[e]] < g.pos[g.dst[e]];
}
