// @ts-check
// CircuitGraph, beside the canvas: the intervention's before/after answer, and the supernodes made so far.
import { ilabEl, ilabFmt, ilabTokenText } from "../shared/index.js";

/**
 * The intervention's top tokens before and after (and the generated texts), when there is one.
 * @param {HTMLElement} answer
 * @param {any} r the `intervention` trait: {before, after: [token, probability][], generated_before, ...}
 */
export function drawAnswer(answer, r) {
  answer.replaceChildren();
  if (!r || !r.before) return;
  answer.append(ilabEl("div", "ilab-muted", "intervention"));
  const table = ilabEl("table");
  const head = ilabEl("tr");
  head.append(ilabEl("td", null, "before"), ilabEl("td", null, "after"));
  table.append(head);
  for (let k = 0; k < Math.max(r.before.length, r.after.length); k++) {
    const row = ilabEl("tr");
    for (const side of [r.before, r.after]) {
      const cell = side[k] ? `${ilabTokenText(side[k][0]).text} ${ilabFmt(side[k][1])}` : "";
      row.append(ilabEl("td", null, cell));
    }
    table.append(row);
  }
  answer.append(table);
  if (r.generated_after || r.generated_before) {
    answer.append(ilabEl("div", null, `before: ${r.generated_before}`), ilabEl("div", null, `after: ${r.generated_after}`));
  }
}

/**
 * The supernodes, each with its size.
 * @param {HTMLElement} line
 * @param {{label: string, nodes: number[]}[]} supernodes
 */
export function drawGroups(line, supernodes) {
  line.replaceChildren(...supernodes.map((s) => ilabEl("span", null, `${s.label} (${s.nodes.length})`)));
}
