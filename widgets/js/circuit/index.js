// @ts-check
// CircuitGraph: an attribution graph on a canvas; columns are positions, rows layers; client-side pruning;
// a card for the clicked node, with Pin and Hide.
import { ilabEl, ilabListen, ilabOnThemeChange, ilabSave, ilabTheme } from "../shared/index.js";
import { drawCard, selectEdge } from "./card.js";
import { draw } from "./draw.js";
import { edgeAt } from "./edges.js";
import { decodeGraph, describeNode, layout, nodeAt, strongestPaths, visibleNodes } from "./graph.js";
import { drawAnswer, drawGroups } from "./panel.js";
import { circuitView, WIDTH } from "./view.js";
/** @import { CircuitView } from "./view.js" */

/**
 * Something at (x, y) on the canvas for the hover box to sit next to.
 * @param {HTMLCanvasElement} canvas
 * @param {number} x
 * @param {number} y
 */
function anchorAt(canvas, x, y) {
  const r = canvas.getBoundingClientRect();
  return { getBoundingClientRect: () => ({ left: r.left + x, right: r.left + x, top: r.top + y - 6, bottom: r.top + y + 6 }) };
}

/**
 * The node under a mouse event (-1: none).
 * @param {CircuitView} view
 * @param {MouseEvent} ev
 */
function nodeUnder(view, ev) {
  if (!view.g) return -1;
  const r = view.canvas.getBoundingClientRect();
  return nodeAt(view.g, view.visible, ev.clientX - r.left, ev.clientY - r.top);
}

/**
 * The edge under a mouse event (-1: none).
 * @param {CircuitView} view
 * @param {MouseEvent} ev
 */
function edgeUnder(view, ev) {
  if (!view.g) return -1;
  const r = view.canvas.getBoundingClientRect();
  return edgeAt(view.g, view.visible, ev.clientX - r.left, ev.clientY - r.top);
}

/**
 * The canvas: hover describes a node and lights its strongest paths, a click selects it (or the edge under
 * it), a shift-click picks it for a supernode.
 * @param {CircuitView} view
 */
function wireCanvas(view) {
  const { model, canvas, tip } = view;
  canvas.addEventListener("mousemove", (ev) => {
    const i = nodeUnder(view, ev);
    if (i === view.hover || !view.g) return;
    const g = view.g;
    view.hover = i;
    view.highlight = i >= 0 ? strongestPaths(g, view.visible, i) : null;
    if (i >= 0) tip.show(anchorAt(canvas, g.xy[2 * i], g.xy[2 * i + 1]), describeNode(g, i).map((line) => ilabEl("div", null, line)));
    else tip.hide();
    draw(view);
  });
  canvas.addEventListener("mouseleave", () => {
    view.hover = -1;
    view.highlight = null;
    tip.hide();
    draw(view);
  });
  canvas.addEventListener("click", (ev) => {
    const i = nodeUnder(view, ev);
    if (i < 0) {
      const e = edgeUnder(view, ev);
      if (e >= 0 && !ev.shiftKey) selectEdge(model, e);
      return;
    }
    if (!ev.shiftKey) {
      model.set("selected_edge", -1);
      return ilabSave(model, "selected", i);
    }
    if (view.picked.has(i)) view.picked.delete(i);
    else view.picked.add(i);
    draw(view);
  });
}

/**
 * The pruning slider (the browser prunes: no round trip), the supernode button and the button that brings
 * hidden nodes back.
 * @param {CircuitView} view
 * @param {() => void} prune
 */
function wireControls(view, prune) {
  const { model, slider, groupName } = view;
  slider.addEventListener("input", () => {
    model.set("threshold", Number(slider.value));
    prune();
    model.save_changes();
  });
  view.groupButton.addEventListener("click", () => {
    const label = groupName.value.trim();
    if (!label || !view.picked.size) return;
    ilabSave(model, "supernodes", [...model.get("supernodes"), { label, nodes: [...view.picked] }]);
    view.picked = new Set();
    groupName.value = "";
  });
  view.showHidden.addEventListener("click", () => ilabSave(model, "hidden", []));
}

/**
 * After pinning or hiding: the button that brings hidden nodes back says how many there are.
 * @param {CircuitView} view
 */
function showHiddenCount(view) {
  const n = (view.model.get("hidden") || []).length;
  view.showHidden.hidden = n === 0;
  view.showHidden.textContent = `Show hidden (${n})`;
}

/** @param {RenderProps} props */
function render({ model, el }) {
  performance.mark("ilab-circuit-render-start");
  const view = circuitView(model);
  el.appendChild(view.root);
  const prune = () => {
    if (view.g) view.visible = visibleNodes(view.g, model.get("threshold"), model.get("pinned"), model.get("hidden"));
    showHiddenCount(view);
    draw(view);
  };
  const drawAll = () => {
    ilabTheme(view.root, model.get("scheme"));
    view.g = decodeGraph(model);
    layout(view.g, view.canvas, WIDTH);
    view.slider.value = String(model.get("threshold"));
    prune();
    drawAnswer(view.answer, model.get("intervention"));
    drawGroups(view.groupsLine, model.get("supernodes"));
    drawCard(view);
  };
  wireCanvas(view);
  wireControls(view, prune);
  const stop = ilabListen(
    model,
    {
      "change:graph": drawAll,
      "change:scheme": drawAll,
      "change:threshold": () => {
        view.slider.value = String(model.get("threshold"));
        prune();
      },
      "change:selected": () => {
        draw(view);
        drawCard(view);
      },
      "change:selected_edge": () => {
        draw(view);
        drawCard(view);
      },
      "change:pinned": () => {
        prune();
        drawCard(view);
      },
      "change:hidden": prune,
      "change:supernodes": () => {
        draw(view);
        drawGroups(view.groupsLine, model.get("supernodes"));
      },
      "change:intervention": () => drawAnswer(view.answer, model.get("intervention")),
    },
    drawAll,
  );
  requestAnimationFrame(() => requestAnimationFrame(() => performance.mark("ilab-circuit-painted")));
  const unwatch = ilabOnThemeChange(() => draw(view));
  return () => {
    stop();
    unwatch();
    view.tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
