// @ts-check
// CircuitGraph, the selected node's card: what and where it is, its strongest inputs and outputs, Pin and Hide;
// for a feature with card data (core/circuits/cards.py) its top activations and the tokens it promotes; for a
// node with QK data (core/circuits/qk_heads.py) its incoming heads and why the strongest attends where it does.
import { ilabEl, ilabFmt, ilabFmtSigned, ilabSave, ilabTokenSpan } from "../shared/index.js";
import { isAttentionEdge } from "./edges.js";
import { describeNode } from "./graph.js";
import { qkSections } from "./qk.js";
/** @import { CircuitView } from "./view.js" */

/**
 * Select edge `e` (its card replaces the node's).
 * @param {AnyModel} model
 * @param {number} e
 */
export function selectEdge(model, e) {
  model.set("selected", -1);
  ilabSave(model, "selected_edge", e);
}

/**
 * A node's strongest edges one way, as "name weight" rows; an incoming attention edge with QK data is a link
 * to its card.
 * @param {CircuitView} view
 * @param {number} i
 * @param {"in" | "out"} way
 */
function strongest({ g, model }, i, way) {
  if (!g) return [];
  const edges = (way === "in" ? g.inc : g.out)[i].slice(0, 3);
  const table = ilabEl("table");
  for (const e of edges) {
    const other = way === "in" ? g.src[e] : g.dst[e];
    const row = ilabEl("tr");
    row.append(ilabEl("td", null, g.labels[other]), ilabEl("td", null, ilabFmtSigned(g.weight[e])));
    if (way === "in" && g.qk[`${i},${other}`]) {
      row.classList.add("ilab-cg-edge-link");
      row.title = "why the head attends there";
      row.addEventListener("click", () => selectEdge(model, e));
    }
    table.append(row);
  }
  return edges.length ? [ilabEl("div", "ilab-cg-section", way === "in" ? "strongest inputs" : "strongest outputs"), table] : [];
}

/**
 * A feature's top activations (one window of tokens each, the strongest token outlined) and logit effects.
 * @param {any} card a feature card from core/circuits/cards.py
 * @returns {HTMLElement[]}
 */
function featureSections(card) {
  const parts = [ilabEl("div", "ilab-cg-section", `top activations (fires on ${(100 * card.density).toFixed(0)}% of tokens)`)];
  for (const ex of card.examples) {
    const line = ilabEl("div", "ilab-cg-example");
    ex.tokens.forEach((/** @type {string} */ tok, /** @type {number} */ k) => {
      const span = ilabTokenSpan(tok, ex.acts[k], ex.max);
      if (k === ex.at) span.classList.add("ilab-cg-max");
      line.append(span);
    });
    line.append(ilabEl("span", "ilab-muted", ` ${ilabFmt(ex.max)}`));
    parts.push(line);
  }
  for (const [title, list] of [["promotes", card.promotes], ["suppresses", card.suppresses]]) {
    const table = ilabEl("table", `ilab-cg-${title}`);
    for (const [tok, v] of list || []) {
      const row = ilabEl("tr");
      row.append(ilabEl("td", null, tok), ilabEl("td", null, ilabFmtSigned(v)));
      table.append(row);
    }
    parts.push(ilabEl("div", "ilab-cg-section", `${title} (logit effect)`), table);
  }
  return parts;
}

/**
 * Pin (always shown, labelled) and Hide buttons for node `i`.
 * @param {CircuitView} view
 * @param {number} i
 */
function buttons(view, i) {
  const { model } = view;
  const box = ilabEl("div", "ilab-cg-buttons");
  const pinned = (model.get("pinned") || []).includes(i);
  const pin = ilabEl("button", "ilab-cg-pin", pinned ? "Unpin" : "Pin");
  pin.addEventListener("click", () => {
    const now = model.get("pinned") || [];
    ilabSave(model, "pinned", pinned ? now.filter((/** @type {number} */ j) => j !== i) : [...now, i]);
  });
  const hide = ilabEl("button", "ilab-cg-hide", "Hide");
  hide.addEventListener("click", () => {
    const now = model.get("pinned") || [];
    model.set("pinned", now.filter((/** @type {number} */ j) => j !== i));
    model.set("selected", -1);
    ilabSave(model, "hidden", [...(model.get("hidden") || []), i]);
  });
  box.append(pin, hide);
  return box;
}

/**
 * The card of edge `e`: its ends and weight; for an attention edge its QK section, or how to get one.
 * @param {CircuitView} view
 * @param {number} e
 */
function drawEdgeCard({ g, card }, e) {
  if (!g) return;
  const s = g.src[e];
  const d = g.dst[e];
  card.dataset.edge = String(e);
  card.append(ilabEl("h4", null, `edge: ${g.labels[s]} → ${g.labels[d]}`), ilabEl("div", null, `direct effect ${ilabFmtSigned(g.weight[e])}`));
  if (!isAttentionEdge(g, e)) {
    if (!g.kindNames) card.append(ilabEl("div", "ilab-muted", "within one position: through the residual stream, not attention"));
    return;
  }
  const qk = g.qk[`${d},${s}`];
  if (qk) card.append(ilabEl("div", null, `attention from position ${g.pos[s]} to ${g.pos[d]}`), ...qkSections(g, qk));
  else card.append(ilabEl("div", "ilab-muted", "why a head attends here: CircuitGraph(graph, qk=ilab.circuits.qk_cards(model, transcoders, graph, w.attention_edges()))"));
}

/**
 * Fill the card of the selected node or edge (hidden when none is selected).
 * @param {CircuitView} view
 */
export function drawCard(view) {
  const { g, card, model } = view;
  const i = model.get("selected");
  const e = model.get("selected_edge") ?? -1;
  card.replaceChildren();
  delete card.dataset.edge;
  delete card.dataset.node;
  const edge = !!g && (i < 0 || i >= g.n) && e >= 0 && e < g.m;
  card.hidden = !g || ((i < 0 || i >= g.n) && !edge);
  if (!g || card.hidden) return;
  if (edge) return drawEdgeCard(view, e);
  const [title, ...rest] = describeNode(g, i);
  card.dataset.node = String(i);
  card.append(ilabEl("h4", null, title), ...rest.map((line) => ilabEl("div", null, line)), buttons(view, i));
  card.append(...strongest(view, i, "in"), ...strongest(view, i, "out"));
  if (g.qk[String(i)]) card.append(...qkSections(g, g.qk[String(i)]));
  if (g.kind[i] === 0 && !g.kindNames) {
    const data = g.cards[`${g.layer[i]}_${g.latent[i]}`];
    if (data) card.append(...featureSections(data));
    else if (!g.linked) {
      card.append(ilabEl("div", "ilab-muted", "top activations and logit effects: CircuitGraph(graph, cards=ilab.circuits.feature_cards(graph, model, transcoders))"));
    }
  }
}
