// @ts-check
// CircuitGraph, the selected node's QK section (core/circuits/qk_heads.py): the heads that move the most into
// it, and for the strongest one the query-side and key-side contributors of its pre-softmax score.
import { ilabEl, ilabFmtSigned } from "../shared/index.js";
/** @import { Graph } from "./graph.js" */

/**
 * A table of "name value" rows.
 * @param {string} cls
 * @param {[string, number][]} rows
 */
function valueTable(cls, rows) {
  const table = ilabEl("table", cls);
  for (const [name, value] of rows) {
    const row = ilabEl("tr");
    row.append(ilabEl("td", null, name), ilabEl("td", null, ilabFmtSigned(value)));
    table.append(row);
  }
  return table;
}

/**
 * A source's name as the card shows it: its label when it is drawn, else the name the table gives it.
 * @param {Graph} g
 * @param {{source: string, view: number}} row
 */
function sourceName(g, row) {
  return row.view >= 0 && row.view < g.n ? g.labels[row.view] : row.source;
}

/**
 * The QK section of a node with QK data: its incoming heads and its strongest head's contributors.
 * @param {Graph} g
 * @param {any} qk one entry of ilab.circuits.qk_cards
 * @returns {HTMLElement[]}
 */
export function qkSections(g, qk) {
  const [layer, head] = qk.head;
  const key = g.tokenNames[qk.key_pos] ?? String(qk.key_pos);
  const box = ilabEl("div", "ilab-cg-qk");
  box.append(
    ilabEl("div", "ilab-cg-section", "incoming attention (value path)"),
    valueTable("ilab-cg-qk-heads", qk.heads.map((/** @type {any} */ h) => [`L${h.layer}.H${h.head} from ${g.tokenNames[h.key_pos] ?? h.key_pos} (attn ${h.pattern.toFixed(2)})`, h.moved])),
    ilabEl("div", "ilab-cg-section", `why L${layer}.H${head} attends to ${key}: score ${ilabFmtSigned(qk.score)}`),
    ilabEl("div", "ilab-muted", "query side"),
    valueTable("ilab-cg-qk-query", qk.query.map((/** @type {any} */ r) => [sourceName(g, r), r.contribution])),
    ilabEl("div", "ilab-muted", "key side"),
    valueTable("ilab-cg-qk-key", qk.key.map((/** @type {any} */ r) => [sourceName(g, r), r.contribution])),
  );
  return [box];
}
