// @ts-check
// LogitLens: layers x positions; each cell the top next token and its probability, coloured by the
// probability of a chosen token; hover for the cell's top tokens, click to keep them.
import { ilabCellGrid, ilabClosest, ilabListen, ilabSave, ilabTheme } from "../shared/index.js";
import { describe, drawGrid, drawPicker, markSelected, recolour } from "./draw.js";
import { lensData } from "./data.js";
import { lensView } from "./view.js";

/** @param {RenderProps} props */
function render({ model, el }) {
  const view = lensView(model);
  el.appendChild(view.root);
  /** @param {HTMLElement} cell */
  const select = (cell) => {
    ilabSave(model, "selected", [view.data.layers[Number(cell.dataset.l)], Number(cell.dataset.p)]);
    markSelected(view);
  };
  const keys = ilabCellGrid(view.grid, ".ilab-lens-cell", {
    tip: view.tip,
    describe: (cell) => describe(view, Number(cell.dataset.l), Number(cell.dataset.p)),
    select,
    cells: () => view.cells,
    columns: () => view.data.P,
  });
  view.grid.addEventListener("click", (e) => {
    const cell = ilabClosest(e, ".ilab-lens-cell");
    if (cell) select(cell);
  });
  view.picker.addEventListener("change", () => {
    ilabSave(model, "token_id", Number(view.picker.value));
    recolour(view);
  });
  const drawAll = () => {
    ilabTheme(view.root, model.get("scheme"));
    view.data = lensData(model);
    keys.reset();
    drawPicker(view);
    drawGrid(view);
    recolour(view);
    markSelected(view);
  };
  const stop = ilabListen(
    model,
    {
      "change:token_id": () => recolour(view),
      "change:color_scale": () => recolour(view),
      "change:selected": () => markSelected(view),
      "change:scheme": drawAll,
      "change:top_index": drawAll,
    },
    drawAll,
  );
  return () => {
    stop();
    view.tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
