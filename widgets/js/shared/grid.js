// @ts-check
// Hover, keyboard cursor and Enter for a grid of cells.
import { ilabClosest } from "./dom.js";
/** @import { Tip } from "./tip.js" */

/**
 * @typedef {object} CellGridOptions
 * @property {Tip} tip
 * @property {(cell: HTMLElement) => string} describe the hover text of a cell
 * @property {(cell: HTMLElement) => void} select what Enter does
 * @property {() => HTMLElement[]} cells every cell, in reading order
 * @property {() => number} columns cells in a row
 */

/**
 * Hover, keyboard cursor and Enter for a grid of cells (elements matching `selector` inside `box`,
 * `cells()` in reading order, `columns()` a row): hovering shows `describe(cell)` in `tip`, the arrow
 * keys move a cursor, Enter calls `select(cell)`. Returns `{reset}`, to call when the cells are redrawn.
 * @param {HTMLElement} box
 * @param {string} selector
 * @param {CellGridOptions} options
 * @returns {{reset: () => void}}
 */
export function ilabCellGrid(box, selector, { tip, describe, select, cells, columns }) {
  let cursor = -1;
  /** @param {number} i */
  function move(i) {
    const all = cells();
    if (cursor >= 0 && all[cursor]) all[cursor].classList.remove("ilab-cursor");
    cursor = Math.max(0, Math.min(all.length - 1, i));
    all[cursor].classList.add("ilab-cursor");
  }
  box.addEventListener("mouseover", (e) => {
    const cell = ilabClosest(e, selector);
    if (!cell) return tip.hide();
    tip.show(cell, describe(cell));
  });
  box.addEventListener("mouseleave", () => tip.hide());
  box.addEventListener("keydown", (e) => {
    const C = columns();
    /** @type {Record<string, number>} */
    const moves = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: C, ArrowUp: -C };
    if (e.key in moves) {
      move((cursor < 0 ? 0 : cursor) + moves[e.key]);
      e.preventDefault();
    } else if (e.key === "Enter" && cursor >= 0) {
      select(cells()[cursor]);
      e.preventDefault();
    }
  });
  return {
    reset() {
      cursor = -1;
    },
  };
}
