// @ts-check
// PatchingGrid, the tabs: one per site (group), and one per method of the chosen site.
import { ilabEl, ilabSave } from "../shared/index.js";
import { currentGrid, grids } from "./view.js";
/** @import { PatchGrid, PatchingView } from "./view.js" */

/**
 * Whether [row id, column id] names the same cell in both grids (one site's method tabs).
 * @param {PatchGrid} a
 * @param {PatchGrid} b
 */
function sameCells(a, b) {
  /** @param {PatchGrid} g */
  const key = (g) => JSON.stringify([g.group, g.row_name, g.col_name, g.rows, g.cols]);
  return key(a) === key(b);
}

/**
 * Show the grid with this key; the selected cell goes when its ids would mean another cell there.
 * @param {AnyModel} model
 * @param {string} key
 */
function setTab(model, key) {
  const before = currentGrid(model);
  const after = grids(model).find((g) => g.key === key);
  if (after && !sameCells(before, after)) model.set("selected", []); // those ids would mean another cell
  ilabSave(model, "tab", key);
}

/**
 * A grid's name as the user gave it (its key), or its method when the key only repeats the site's name
 * (`{"exact": grid, **ilab.patching.attribution(...)}` names attribution grids by site).
 * @param {PatchGrid} g
 */
export function tabName(g) {
  return g.key === g.group || g.key === g.site ? g.method : g.key;
}

/**
 * The site tabs (shown when there are several sites) and the method tabs of the chosen site.
 * @param {PatchingView} view
 */
export function drawTabs({ model, groupsBar, methodsBar }) {
  const g0 = currentGrid(model);
  groupsBar.replaceChildren();
  methodsBar.replaceChildren();
  const groups = [...new Set(grids(model).map((g) => g.group))];
  for (const group of groups) {
    const b = ilabEl("button", "ilab-pg-tab", group);
    b.dataset.group = group;
    b.classList.toggle("ilab-active", group === g0.group);
    b.addEventListener("click", () => {
      const same = grids(model).filter((g) => g.group === group);
      const pick = same.find((g) => g.method === g0.method) || same[0];
      setTab(model, pick.key);
    });
    groupsBar.appendChild(b);
  }
  groupsBar.style.display = groups.length > 1 ? "" : "none";
  const inGroup = grids(model).filter((g) => g.group === g0.group);
  for (const g of inGroup) {
    const b = ilabEl("button", "ilab-pg-tab", tabName(g));
    b.title = `${g.method} patching of ${g.site}`;
    b.dataset.key = g.key;
    b.dataset.method = g.method;
    b.classList.toggle("ilab-active", g.key === g0.key);
    b.addEventListener("click", () => setTab(model, g.key));
    methodsBar.appendChild(b);
  }
}
