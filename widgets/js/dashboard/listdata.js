// @ts-check
// FeatureDashboard, the list's data: the order of latents for a sort, and which match a search.
import { ilabDecode } from "../shared/index.js";
/** @import { DashContext } from "./context.js" */
/** @import { DashStore } from "./store.js" */

/**
 * Every latent id in the order the `sort` trait asks for (largest first, ties by id).
 * @param {AnyModel} model
 * @param {DashStore} store
 */
export function listOrder(model, store) {
  const sort = model.get("sort");
  const ids = Array.from({ length: model.get("d_sae") }, (_, i) => i);
  if (sort === "id") return ids;
  const key = sort === "score" ? ilabDecode(model.get("score_values")) : sort === "max_act" ? store.maxAct : store.density;
  if (!key) return ids;
  /** @param {number} i */
  const k = (i) => (Number.isNaN(key[i]) ? -Infinity : key[i]);
  return ids.sort((a, b) => k(b) - k(a) || a - b);
}

/**
 * The name of the statistic the list shows.
 * @param {AnyModel} model
 */
export function statName(model) {
  const sort = model.get("sort");
  return sort === "score" ? model.get("score_name") : sort === "max_act" ? "max act" : "density";
}

/**
 * Search over latents: by id prefix, label, or one of the tokens at the max of its top examples.
 * @param {DashContext} ctx
 */
export function listSearch({ model, store, names }) {
  const d = model.get("d_sae");
  /** @type {Int32Array | null} */
  const maxTokens = ilabDecode(model.get("max_tokens"));
  const nTop = maxTokens ? maxTokens.length / Math.max(1, d) : 0;
  /** @type {string[] | null} per latent: its top tokens, stripped and lower-cased, joined (built on first search) */
  let tokenText = null;
  /**
   * The distinct tokens at the max of each of a latent's top examples (null: not sent).
   * @param {number} i
   */
  const topTokens = (i) => {
    if (!maxTokens) return null;
    const seen = new Set();
    for (let j = 0; j < nTop; j++) {
      const t = maxTokens[i * nTop + j];
      if (t >= 0) seen.add(store.tokenText(t));
    }
    return [...seen];
  };
  /**
   * Whether latent `i` matches the search text `q` (lower-cased; empty matches all).
   * @param {number} i
   * @param {string} q
   */
  const matches = (i, q) => {
    if (!q) return true;
    if (/^\d+$/.test(q) && String(i).startsWith(q)) return true;
    if (names.label(i).toLowerCase().includes(q)) return true;
    if (!maxTokens) return false;
    if (!tokenText) {
      tokenText = Array.from({ length: d }, (_, j) => "\u0001" + (topTokens(j) || []).map((t) => t.trim().toLowerCase()).join("\u0001"));
    }
    return tokenText[i].includes(q.trim());
  };
  return { topTokens, matches };
}
