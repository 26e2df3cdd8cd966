// @ts-check
// FeatureFlow: latents followed across layers by SAE matches. One column per layer, a node per latent,
// edges thicker and more opaque the better the match. Hover a node for its label and top tokens; click
// (or Enter) to select it: Python opens its card in a linked FeatureDashboard.
import { ilabEl, ilabListen, ilabSave, ilabTheme, ilabTip, ilabTokenText } from "../shared/index.js";
import { drawColumns, drawEdges, positions, ROW_H, svgEl, TOP, COL_W } from "./svg.js";
/** @import { Tip } from "../shared/tip.js" */
/** @import { FlowNode } from "./svg.js" */

/**
 * A node's hover text: latent and layer, label, top tokens.
 * @param {FlowNode} n
 * @param {string[]} columns
 */
function nodeLines(n, columns) {
  const lines = [ilabEl("div", "ilab-tip-title", `latent ${n.latent} · ${columns[n.column]}`)];
  if (n.label) lines.push(ilabEl("div", "", n.label));
  const tops = n.tops.map((t) => ilabTokenText(t).text).join("  ");
  if (n.tops.length) lines.push(ilabEl("div", "ilab-muted", `top tokens: ${tops}`));
  return lines;
}

/**
 * One latent: a focusable circle (hover or focus describes it, click or Enter selects it) and its name.
 * @param {AnyModel} model
 * @param {Tip} tip
 * @param {FlowNode} n
 * @param {{x: number, y: number}} p
 * @param {string[]} columns
 */
function nodeGroup(model, tip, n, p, columns) {
  const selected = model.get("selected") || {};
  const circle = svgEl("circle", "ilab-flow-node");
  const attrs = { cx: String(p.x), cy: String(p.y), r: "10", tabindex: "0", role: "button",
    "aria-label": `latent ${n.latent} of ${columns[n.column]}` };
  for (const [k, v] of Object.entries(attrs)) circle.setAttribute(k, v);
  circle.dataset.id = n.id;
  if (selected.column === n.column && selected.latent === n.latent) circle.classList.add("ilab-selected");
  const text = svgEl("text", "ilab-flow-text");
  text.setAttribute("x", String(p.x + 14));
  text.setAttribute("y", String(p.y + 4));
  const label = n.label ? ` ${n.label}` : "";
  text.textContent = `#${n.latent}${label.length > 16 ? `${label.slice(0, 15)}…` : label}`;
  const show = () => tip.show(circle, nodeLines(n, columns));
  const pick = () => ilabSave(model, "selected", { column: n.column, site: columns[n.column], latent: n.latent });
  circle.addEventListener("mouseenter", show);
  circle.addEventListener("focus", show);
  circle.addEventListener("mouseleave", () => tip.hide());
  circle.addEventListener("blur", () => tip.hide());
  circle.addEventListener("click", pick);
  circle.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      ev.stopPropagation();
      pick();
    }
  });
  const g = svgEl("g");
  g.append(circle, text);
  return g;
}

/**
 * Draw the whole picture again.
 * @param {AnyModel} model
 * @param {HTMLElement} root
 * @param {Tip} tip
 */
function draw(model, root, tip) {
  ilabTheme(root, model.get("scheme"));
  root.replaceChildren();
  const columns = model.get("columns");
  /** @type {FlowNode[]} */
  const nodes = model.get("nodes");
  const rows = Math.max(1, ...nodes.map((n) => n.row + 1));
  const svg = svgEl("svg");
  svg.setAttribute("width", String(columns.length * COL_W + 20));
  svg.setAttribute("height", String(TOP + rows * ROW_H + 10));
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "latents matched across layers");
  const pos = positions(nodes);
  drawColumns(svg, columns);
  drawEdges(svg, model.get("edges"), pos);
  for (const n of nodes) svg.appendChild(nodeGroup(model, tip, n, pos[n.id], columns));
  root.appendChild(svg);
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const root = ilabEl("div", "ilab-root ilab-flow");
  el.appendChild(root);
  const tip = ilabTip(root, "ilab-flow-tip");
  const redraw = () => draw(model, root, tip);
  const stop = ilabListen(
    model,
    { "change:nodes": redraw, "change:edges": redraw, "change:selected": redraw, "change:scheme": redraw },
    redraw,
  );
  return () => {
    stop();
    tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
