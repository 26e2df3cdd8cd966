// FeatureDashboard, part 1: cards and the per-model store (what every view of one dashboard shares).

const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_ROWS = 200;

/** Cards from a bundle: `get(name)` returns the payload {view, dtype, shape} of one array. */
function unpackCards(get, nTop, lead) {
  const ids = ilabDecode(get("ids"));
  const out = new Map();
  if (!ids) return out;
  const arr = (name) => ({ data: ilabDecode(get(name)), shape: get(name).shape });
  const tokens = arr("tokens");
  const acts = arr("acts");
  const exMax = arr("ex_max");
  const counts = arr("hist_counts");
  const edges = arr("hist_edges");
  const logitIds = arr("logit_ids");
  const logitVals = arr("logit_values");
  const nearIds = arr("near_ids");
  const nearCos = arr("near_cos");
  const row = (a, r) => {
    const size = a.shape.slice(1).reduce((x, y) => x * y, 1);
    return a.data.subarray(r * size, (r + 1) * size);
  };
  for (let r = 0; r < ids.length; r++) {
    out.set(ids[r], {
      id: ids[r],
      nTop,
      lead,
      nEx: tokens.shape[1],
      context: tokens.shape[2],
      tokens: row(tokens, r),
      acts: row(acts, r),
      exMax: row(exMax, r),
      counts: row(counts, r),
      edges: row(edges, r),
      nLogit: logitIds.shape[2],
      logitIds: row(logitIds, r),
      logitVals: row(logitVals, r),
      nearIds: row(nearIds, r),
      nearCos: row(nearCos, r),
    });
  }
  return out;
}

/** Stores by dashboard uid: `initialize` fills one, every `render` of that dashboard reads it. */
const DASH_STORES = new Map();

/**
 * The state shared by all views of one dashboard: per-latent arrays, the cards received so far,
 * token strings, whether a kernel answered, and an EventTarget views listen to
 * ("live", "card" with detail = latent ids, "try" with detail = {msg, buffers}).
 */
function dashStore(model) {
  const uid = model.get("_uid");
  if (DASH_STORES.has(uid)) return DASH_STORES.get(uid);
  const initial = model.get("cards");
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
      return this.strings.has(id) ? this.strings.get(id) : `<${id}>`;
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

/** Model-wide messages (from `initialize`): the kernel's pong, cards fetched on demand, try-your-text results. */
function dashOnMessage(store, msg, buffers) {
  if (!msg) return;
  if (msg.type === "pong") {
    store.live = true;
    store.events.dispatchEvent(new CustomEvent("live"));
  } else if (msg.type === "card") {
    const meta = msg.cards;
    const got = unpackCards((n) => ({ view: buffers[meta[n].buffer], dtype: meta[n].dtype, shape: meta[n].shape }),
      meta.n_top, meta.lead);
    for (const [k, v] of Object.entries(msg.token_strings)) store.strings.set(Number(k), v);
    for (const [i, c] of got) {
      store.cards.set(i, c);
      store.pending.delete(i);
    }
    store.events.dispatchEvent(new CustomEvent("card", { detail: [...got.keys()] }));
  } else if (msg.type === "try") {
    store.events.dispatchEvent(new CustomEvent("try", { detail: { msg, buffers } }));
  }
}
