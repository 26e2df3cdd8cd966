// @ts-check
// LogitLens, drawing: the token menu, the grid of cells, their colours, and the selected cell's details.
import { ilabColor, ilabEl, ilabFmt, ilabLegend, ilabTokenText } from "../shared/index.js";
import { colourProb, topList } from "./data.js";
/** @import { LensView } from "./view.js" */

/**
 * The menu of tokens to colour by, the most probable anywhere first.
 * @param {LensView} view
 */
export function drawPicker({ model, data, picker }) {
  picker.replaceChildren();
  const C = data.colourIndex.length;
  const best = data.colourIndex.map((v, c) => {
    let m = 0;
    for (let i = 0; i < data.L * data.P; i++) m = Math.max(m, data.colourProbs[i * C + c]);
    return { v, m };
  });
  best.sort((a, b) => b.m - a.m);
  for (const { v, m } of best) {
    const opt = ilabEl("option", null, `${ilabTokenText(data.vocab[v]).text}   (max ${ilabFmt(m)})`);
    opt.value = String(data.ids[v]);
    picker.appendChild(opt);
  }
  picker.value = String(model.get("token_id"));
}

/**
 * The column heads: the input's tokens with their positions.
 * @param {LensView} view
 */
function drawHeads({ data, grid }) {
  grid.appendChild(ilabEl("div", "ilab-lens-corner ilab-muted", "layer ↓  input →"));
  data.tokens.forEach((t, p) => {
    const shown = ilabTokenText(t);
    const head = ilabEl("div", "ilab-lens-col" + (shown.faint ? " ilab-faint" : ""), shown.text);
    head.title = `position ${p}`;
    head.appendChild(ilabEl("span", "ilab-lens-pos ilab-muted", String(p)));
    grid.appendChild(head);
  });
}

/**
 * The grid: a row per layer, each cell the top token and its probability.
 * @param {LensView} view
 */
export function drawGrid(view) {
  const { data, grid } = view;
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `auto repeat(${data.P}, minmax(44px, 1fr))`;
  drawHeads(view);
  view.cells = [];
  for (let l = 0; l < data.L; l++) {
    grid.appendChild(ilabEl("div", "ilab-lens-row ilab-muted", `L${data.layers[l]}`));
    for (let p = 0; p < data.P; p++) {
      const i = (l * data.P + p) * data.k;
      const shown = ilabTokenText(data.vocab[data.topIndex[i]]);
      const cell = ilabEl("div", "ilab-lens-cell");
      cell.setAttribute("role", "gridcell");
      cell.dataset.l = String(l);
      cell.dataset.p = String(p);
      cell.append(
        ilabEl("span", "ilab-lens-top" + (shown.faint ? " ilab-faint" : ""), shown.text),
        ilabEl("span", "ilab-lens-prob", ilabFmt(data.topProbs[i])),
      );
      grid.appendChild(cell);
      view.cells.push(cell);
    }
  }
}

/**
 * Colour every cell by the chosen token's probability there.
 * @param {LensView} view
 */
export function recolour({ model, data, cells, legendBox, picker }) {
  for (const cell of cells) {
    const v = colourProb(model, data, Number(cell.dataset.l), Number(cell.dataset.p));
    cell.style.background = ilabColor(v, model.get("color_scale"));
    cell.dataset.v = String(v);
  }
  legendBox.replaceChildren(ilabLegend(model.get("color_scale")));
  picker.value = String(model.get("token_id"));
}

/**
 * Cell (l, p) in words: where it is, the chosen token's probability, the top five tokens.
 * @param {LensView} view
 * @param {number} l
 * @param {number} p
 */
export function describe({ model, data }, l, p) {
  const chosen = data.vocab[data.ids.indexOf(model.get("token_id"))];
  const lines = [`layer ${data.layers[l]} · after position ${p} ${ilabTokenText(data.tokens[p]).text}`];
  lines.push(`P(${ilabTokenText(chosen ?? "").text}) = ${ilabFmt(colourProb(model, data, l, p))}`);
  for (const [t, pr] of topList(data, l, p, 5)) lines.push(`${ilabFmt(pr).padStart(6)}  ${ilabTokenText(t).text}`);
  return lines.join("\n");
}

/**
 * Mark the selected cell ([layer, position]) and list its top tokens below the grid.
 * @param {LensView} view
 */
export function markSelected({ model, data, cells, detail }) {
  const sel = model.get("selected");
  cells.forEach((c) => c.classList.remove("ilab-selected"));
  detail.replaceChildren();
  if (!sel || sel.length !== 2) {
    detail.appendChild(ilabEl("span", "ilab-muted", "Click a cell for its top tokens."));
    return;
  }
  const l = data.layers.indexOf(sel[0]);
  const p = sel[1];
  if (l < 0 || p < 0 || p >= data.P) return;
  cells[l * data.P + p].classList.add("ilab-selected");
  detail.appendChild(ilabEl("div", "ilab-lens-where", `layer ${sel[0]} · after position ${p} ${ilabTokenText(data.tokens[p]).text}`));
  const list = ilabEl("ol", "ilab-lens-toplist");
  for (const [t, pr] of topList(data, l, p, data.k)) {
    const shown = ilabTokenText(t);
    const item = ilabEl("li", "ilab-lens-topitem");
    item.append(ilabEl("span", "ilab-lens-toktext" + (shown.faint ? " ilab-faint" : ""), shown.text),
                ilabEl("span", "ilab-muted", ` ${ilabFmt(pr)}`));
    list.appendChild(item);
  }
  detail.appendChild(list);
}
