// @ts-check
// PatchingGrid, the selected cell: marked in the grid, and described below it with the patched run's top tokens.
import { ilabEl, ilabFmt, ilabTokenText } from "../shared/index.js";
import { describe } from "./labels.js";
import { cellIds } from "./view.js";
/** @import { Decoded, PatchGrid, PatchingView } from "./view.js" */

/**
 * The patched run's top tokens at cell `i`, as a list.
 * @param {PatchGrid} g
 * @param {Decoded} d
 * @param {number} i
 */
function topList(g, d, i) {
  const list = ilabEl("ol", "ilab-pg-top");
  const topIndex = /** @type {Int32Array} */ (d.topIndex);
  const topProbs = /** @type {Float32Array} */ (d.topProbs);
  const vocab = g.top_vocab || [];
  for (let j = 0; j < d.k; j++) {
    const item = ilabEl("li", "ilab-pg-topitem");
    const tok = ilabTokenText(vocab[topIndex[i * d.k + j]]);
    item.append(ilabEl("span", "ilab-pg-toktext" + (tok.faint ? " ilab-faint" : ""), tok.text));
    item.append(ilabEl("span", "ilab-muted", ` ${ilabFmt(topProbs[i * d.k + j])}`));
    list.appendChild(item);
  }
  return list;
}

/**
 * Mark the cell the `selected` trait names ([row id, column id]) and describe it below the grid.
 * @param {PatchingView} view
 */
export function markSelected({ model, cells, current, detail }) {
  const sel = model.get("selected");
  if (!current) return;
  const { g, d } = current;
  detail.replaceChildren();
  cells.forEach((cell) => cell.classList.remove("ilab-selected"));
  if (!sel || sel.length !== 2) {
    detail.appendChild(ilabEl("span", "ilab-muted", "Click a cell to see the patched run's top tokens."));
    return;
  }
  const i = cells.findIndex((_, j) => {
    const ids = cellIds(g, j);
    return ids.rowId === sel[0] && ids.colId === sel[1];
  });
  if (i < 0) return;
  cells[i].classList.add("ilab-selected");
  detail.appendChild(ilabEl("div", "ilab-pg-where", describe(g, d, i)));
  if (!d.topIndex) {
    detail.appendChild(ilabEl("div", "ilab-muted", "A first-order estimate: no patched run, so no top tokens."));
    return;
  }
  detail.appendChild(topList(g, d, i));
}
