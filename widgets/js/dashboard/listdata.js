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
 * Latents one of whose token texts (those it fires on most, those it promotes most: the index built by Python in
 * core/features/search_index.py) contains `q`, stripped and lower-cased.
 * @param {any} index the `search_index` trait: {texts, starts, entries, kinds, searched}
 * @param {number} d latents
 * @param {string} q
 * @returns {Uint8Array} per latent: 1 when found
 */
function tokenHits(index, d, q) {
  const found = new Uint8Array(d);
  /** @type {Int32Array | null} */
  const starts = ilabDecode(index && index.starts);
  /** @type {Int32Array | null} */
  const entries = ilabDecode(index && index.entries);
  if (!starts || !entries) return found;
  const hit = index.texts.map((/** @type {string} */ t) => t.includes(q));
  for (let i = 0; i < d; i++) {
    for (let e = starts[i]; e < starts[i + 1]; e++) {
      if (hit[entries[e]]) {
        found[i] = 1;
        break;
      }
    }
  }
  return found;
}

/**
 * Search over latents: by id prefix, label, one of the tokens at the max of its top examples, or one of the
 * tokens it promotes most (the same rule as `ilab.features.search_latents`).
 * @param {DashContext} ctx
 */
export function listSearch({ model, store, names }) {
  const d = model.get("d_sae");
  /** @type {Int32Array | null} */
  const maxTokens = ilabDecode(model.get("max_tokens"));
  const nTop = maxTokens ? maxTokens.length / Math.max(1, d) : 0;
  const index = model.get("search_index") || null;
  /** what a search looks in, in words */
  const searched = index && index.searched ? index.searched : "id, label";
  /** @type {{q: string, found: Uint8Array} | null} the token matches of the last query */
  let last = null;
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
    const text = q.trim();
    if (!last || last.q !== text) last = { q: text, found: tokenHits(index, d, text) };
    return last.found[i] === 1;
  };
  return { topTokens, matches, searched };
}

/**
 * An automatic explanation in words: who wrote it and its score beside the baselines of the same run.
 * @param {any} rec a record of the `explanations` trait (core/features/explanations.py)
 */
export function explanationText(rec) {
  if (!rec) return "";
  /** @param {number | null} v */
  const num = (v) => (v === null || v === undefined ? "n/a" : v.toFixed(2));
  const by = `automatic explanation by ${rec.explainer || "an explainer"}`;
  if (!rec.scorer) return `${by} (not scored)`;
  const beats = rec.score !== null && rec.shuffled !== null && rec.score > rec.shuffled ? "" : ", not above shuffled";
  return `${by}; ${rec.scorer} ${rec.metric} ${num(rec.score)} (shuffled ${num(rec.shuffled)}, constant ${num(rec.constant)}${beats})`;
}
