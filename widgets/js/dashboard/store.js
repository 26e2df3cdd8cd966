// @ts-check
// FeatureDashboard, the store: cards and per-latent arrays shared by every view of one dashboard.
import { ilabDecode } from "../shared/index.js";

export const MAX_ROWS = 200;

/**
 * One latent's card (typed arrays are its rows of the bundle's arrays).
 * @typedef {object} Card
 * @property {number} id
 * @property {number} nTop top examples (the rest sample the activation range)
 * @property {number} lead position of an example's max within its context
 * @property {number} nEx examples
 * @property {number} context tokens per example
 * @property {Int32Array} tokens [nEx, context] token ids (-1: padding)
 * @property {Float32Array} acts [nEx, context]
 * @property {Float32Array} exMax each example's max
 * @property {Float32Array} counts histogram counts
 * @property {Float32Array} edges histogram bin edges
 * @property {number} nLogit
 * @property {Int32Array} logitIds [2, nLogit] promoted, then suppressed
 * @property {Float32Array} logitVals
 * @property {Int32Array} nearIds nearest latents by decoder cosine (-1: none)
 * @property {Float32Array} nearCos
 */

/**
 * What every view of one dashboard shares.
 * @typedef {object} DashStore
 * @property {Float32Array} density
 * @property {Float32Array} maxAct
 * @property {Float32Array} meanAct
 * @property {Map<number, string>} strings token strings by id
 * @property {Map<number, Card>} cards the cards received so far
 * @property {Set<number>} pending cards asked for
 * @property {boolean} live whether a kernel answered the ping
 * @property {EventTarget} events "live", "card" (detail: latent ids), "try" (detail: {msg, buffers})
 * @property {(id: number) => string} tokenText a token's string (`<id>` when unknown)
 * @property {(i: number) => void} request ask the kernel for a latent's card
 */

/**
 * Cards from a bundle: `get(name)` returns the payload {view, dtype, shape} of one array.
 * @param {(name: string) => any} get
 * @param {number} nTop
 * @param {number} lead
 * @returns {Map<number, Card>}
 */
function unpackCards(get, nTop, lead) {
  const ids = ilabDecode(get("ids"));
  const out = new Map();
  if (!ids) return out;
  /** @param {string} name */
  const arr = (name) => ({ data: ilabDecode(get(name)), shape: get(name).shape });
  const [tokens, acts, exMax, counts, edges, logitIds, logitVals, nearIds, nearCos] = [
    "tokens", "acts", "ex_max", "hist_counts", "hist_edges", "logit_ids", "logit_values", "near_ids", "near_cos",
  ].map(arr);
  /** @param {{data: any, shape: number[]}} a @param {number} r */
  const row = (a, r) => {
    const size = a.shape.slice(1).reduce((x, y) => x * y, 1);
    return a.data.subarray(r * size, (r + 1) * size);
  };
  for (let r = 0; r < ids.length; r++) {
    out.set(ids[r], {
      id: ids[r], nTop, lead, nEx: tokens.shape[1], context: tokens.shape[2],
      tokens: row(tokens, r), acts: row(acts, r), exMax: row(exMax, r), counts: row(counts, r), edges: row(edges, r),
      nLogit: logitIds.shape[2], logitIds: row(logitIds, r), logitVals: row(logitVals, r),
      nearIds: row(nearIds, r), nearCos: row(nearCos, r),
    });
  }
  return out;
}

/**
 * Stores by dashboard uid: `initialize` fills one, every `render` of that dashboard reads it.
 * @type {Map<string, DashStore>}
 */
const DASH_STORES = new Map();

/**
 * The state shared by all views of one dashboard: per-latent arrays, the cards received so far,
 * token strings, whether a kernel answered, and an EventTarget views listen to
 * ("live", "card" with detail = latent ids, "try" with detail = {msg, buffers}).
 * @param {AnyModel} model
 * @returns {DashStore}
 */
export function dashStore(model) {
  const uid = model.get("_uid");
  const known = DASH_STORES.get(uid);
  if (known) return known;
  const initial = model.get("cards");
  /** @type {DashStore} */
  const store = {
    density: ilabDecode(model.get("density")),
    maxAct: ilabDecode(model.get("max_act")),
    meanAct: ilabDecode(model.get("mean_act")),
    strings: new Map(Object.entries(model.get("token_strings")).map(([k, v]) => [Number(k), v])),
    cards: unpackCards((name) => initial[name], initial.n_top, initial.lead),
    pending: new Set(),
    live: false, // a kernel answered our ping
    events: new EventTarget(),
    tokenText(id) {
      return this.strings.has(id) ? String(this.strings.get(id)) : `<${id}>`;
    },
    request(i) {
      if (this.pending.has(i)) return;
      this.pending.add(i);
      model.send({ type: "card", latent: i });
    },
  };
  DASH_STORES.set(uid, store);
  return store;
}

/**
 * Model-wide messages (from `initialize`): the kernel's pong, cards fetched on demand, try-your-text results.
 * @param {DashStore} store
 * @param {any} msg
 * @param {DataView[]} buffers
 */
export function dashOnMessage(store, msg, buffers) {
  if (!msg) return;
  if (msg.type === "pong") {
    store.live = true;
    store.events.dispatchEvent(new CustomEvent("live"));
  } else if (msg.type === "card") {
    const meta = msg.cards;
    const got = unpackCards((n) => ({ view: buffers[meta[n].buffer], dtype: meta[n].dtype, shape: meta[n].shape }),
      meta.n_top, meta.lead);
    for (const [k, v] of Object.entries(msg.token_strings)) store.strings.set(Number(k), /** @type {string} */ (v));
    for (const [i, c] of got) {
      store.cards.set(i, c);
      store.pending.delete(i);
    }
    store.events.dispatchEvent(new CustomEvent("card", { detail: [...got.keys()] }));
  } else if (msg.type === "try") {
    store.events.dispatchEvent(new CustomEvent("try", { detail: { msg, buffers } }));
  }
}
