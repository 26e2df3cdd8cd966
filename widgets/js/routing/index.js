// @ts-check
// Routing: an experts x tokens grid of one MoE layer. A cell's colour is the weight the token gives the expert
// (blank where the router did not choose it); hover or focus a cell for the token, the expert, its weight, its
// place among the token's choices and the router's logit. Token text only through textContent.
import { ilabCellColor, ilabDecode, ilabEl, ilabFmt, ilabListen, ilabTheme, ilabTip, ilabTokenText } from "../shared/index.js";
/** @import { Tip } from "../shared/tip.js" */

/**
 * The hover lines of the cell of expert `e` at token `t`.
 * @param {AnyModel} model
 * @param {number} e
 * @param {number} t
 * @param {{weights: Float32Array, logits: Float32Array, ranks: Int32Array, n: number}} data
 */
function cellLines(model, e, t, data) {
  const i = e * data.n + t;
  const token = ilabTokenText(model.get("tokens")[t]).text;
  const rank = data.ranks[i];
  const lines = [ilabEl("div", "ilab-tip-title", `expert ${e} · token ${t} ${token}`)];
  lines.push(ilabEl("div", "", rank > 0 ? `weight ${ilabFmt(data.weights[i])} (choice ${rank})` : "not chosen"));
  lines.push(ilabEl("div", "ilab-muted", `router logit ${ilabFmt(data.logits[i])}`));
  return lines;
}

/**
 * The header row: a corner, then each token's text (never parsed as HTML).
 * @param {string[]} tokens
 */
function headerRow(tokens) {
  const row = ilabEl("tr");
  row.appendChild(ilabEl("th", "ilab-routing-corner", "expert \\ token"));
  for (const tok of tokens) row.appendChild(ilabEl("th", "ilab-routing-token", ilabTokenText(tok).text));
  return row;
}

/**
 * Draw the whole grid again.
 * @param {AnyModel} model
 * @param {HTMLElement} root
 * @param {Tip} tip
 */
function draw(model, root, tip) {
  ilabTheme(root, model.get("scheme"));
  root.replaceChildren();
  const tokens = model.get("tokens");
  const data = {
    weights: /** @type {Float32Array} */ (ilabDecode(model.get("weights"))),
    logits: /** @type {Float32Array} */ (ilabDecode(model.get("logits"))),
    ranks: /** @type {Int32Array} */ (ilabDecode(model.get("ranks"))),
    n: tokens.length,
  };
  const scale = model.get("scale");
  root.appendChild(ilabEl("div", "ilab-routing-title", `layer ${model.get("layer")}: experts chosen per token`));
  const table = ilabEl("table", "ilab-routing-grid");
  table.appendChild(headerRow(tokens));
  for (let e = 0; e < model.get("n_experts"); e++) {
    const row = ilabEl("tr");
    row.appendChild(ilabEl("th", "ilab-routing-expert", String(e)));
    for (let t = 0; t < data.n; t++) {
      const cell = ilabEl("td", "ilab-routing-cell");
      const i = e * data.n + t;
      if (data.ranks[i] > 0) cell.classList.add("ilab-routing-chosen");
      cell.style.background = data.ranks[i] > 0 ? ilabCellColor(data.weights[i], scale) : "";
      cell.tabIndex = 0;
      const show = () => tip.show(cell, cellLines(model, e, t, data));
      cell.addEventListener("mouseenter", show);
      cell.addEventListener("focus", show);
      cell.addEventListener("mouseleave", () => tip.hide());
      cell.addEventListener("blur", () => tip.hide());
      row.appendChild(cell);
    }
    table.appendChild(row);
  }
  root.appendChild(table);
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const root = ilabEl("div", "ilab-root ilab-routing");
  el.appendChild(root);
  const tip = ilabTip(root, "ilab-routing-tip");
  const redraw = () => draw(model, root, tip);
  const stop = ilabListen(model, { "change:weights": redraw, "change:tokens": redraw, "change:scheme": redraw }, redraw);
  return () => {
    stop();
    tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
