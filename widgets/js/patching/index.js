// @ts-check
// PatchingGrid: layers x positions (or heads / latents) heatmap; tabs per site and method; click a cell.
import { ilabCellGrid, ilabClosest, ilabListen, ilabSave, ilabTheme } from "../shared/index.js";
import { markSelected } from "./detail.js";
import { drawGrid } from "./grid.js";
import { describe } from "./labels.js";
import { drawTabs } from "./tabs.js";
import { cellIds, patchingView } from "./view.js";
/** @import { PatchingView } from "./view.js" */

/**
 * Clicks and keys: a cell selects it, a latent's row label opens the latent, the checkbox normalizes.
 * @param {PatchingView} view
 * @returns {{reset: () => void}} the keyboard cursor, to reset when the grid is redrawn
 */
function wire(view) {
  const { model, gridBox, normBox } = view;
  /** @param {number} i */
  const select = (i) => {
    if (!view.current) return;
    const ids = cellIds(view.current.g, i);
    model.set("selected", [ids.rowId, ids.colId]);
    if (view.current.g.row_name === "latent") model.set("latent", ids.rowId);
    model.save_changes();
    markSelected(view);
  };
  const keys = ilabCellGrid(gridBox, ".ilab-pg-cell", {
    tip: view.tip,
    describe: (cell) => (view.current ? describe(view.current.g, view.current.d, Number(cell.dataset.i)) : ""),
    select: (cell) => select(Number(cell.dataset.i)),
    cells: () => view.cells,
    columns: () => (view.current ? view.current.g.values.shape[1] : 1),
  });
  gridBox.addEventListener("click", (e) => {
    const cell = ilabClosest(e, ".ilab-pg-cell");
    if (cell) return select(Number(cell.dataset.i));
    const row = ilabClosest(e, ".ilab-pg-latent");
    if (row) ilabSave(model, "latent", Number(row.dataset.row));
  });
  normBox.addEventListener("change", () => ilabSave(model, "normalized", normBox.checked));
  return keys;
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const view = patchingView(model);
  el.appendChild(view.root);
  const keys = wire(view);
  const drawAll = () => {
    ilabTheme(view.root, model.get("scheme"));
    view.normBox.checked = model.get("normalized");
    keys.reset();
    drawTabs(view);
    drawGrid(view);
    markSelected(view);
  };
  const stop = ilabListen(
    model,
    {
      "change:tab": drawAll,
      "change:grids": drawAll,
      "change:normalized": drawAll,
      "change:scales": drawAll,
      "change:scheme": drawAll,
      "change:selected": () => markSelected(view),
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
