// @ts-check
// The hover box every widget uses.
import { ilabEl } from "./dom.js";

/**
 * What a hover box is placed next to: an element, or anything that says where it is on the page.
 * @typedef {{getBoundingClientRect(): {left: number, right: number, top: number, bottom: number}}} Anchor
 */

/**
 * @typedef {object} Tip
 * @property {HTMLDivElement} el the box
 * @property {(anchor: Anchor, content: string | Node[]) => void} show
 * @property {() => void} hide
 * @property {() => void} remove
 */

const GAP = 4;

/**
 * Put `tip` below `anchor` (above when there is no room), inside the viewport.
 * @param {HTMLElement} tip
 * @param {Anchor} anchor
 */
function place(tip, anchor) {
  tip.style.left = "0px";
  tip.style.top = "0px";
  tip.style.display = "block";
  const origin = tip.getBoundingClientRect(); // where (0, 0) lands: the containing block's corner
  const r = anchor.getBoundingClientRect();
  const vw = document.documentElement.clientWidth || window.innerWidth;
  const vh = document.documentElement.clientHeight || window.innerHeight;
  const x = Math.max(GAP, Math.min(r.left, vw - origin.width - GAP));
  let y = r.bottom + GAP;
  if (y + origin.height > vh - GAP && r.top - GAP - origin.height >= GAP) y = r.top - GAP - origin.height;
  y = Math.max(GAP, Math.min(y, vh - origin.height - GAP));
  tip.style.left = `${Math.round(x - origin.left)}px`;
  tip.style.top = `${Math.round(y - origin.top)}px`;
}

/**
 * A hover box for a widget, placed next to what it describes. It lives in document.body: inside
 * JupyterLab an output's ancestors set `contain`/transforms, which would shift a fixed box away from
 * its token (or clip it). `show(anchor, text)` puts it below the anchor (above when there is no room),
 * inside the viewport; `hide()`; `remove()` when the view goes.
 * @param {HTMLElement} root the widget's root (its theme classes are copied)
 * @param {string} [cls]
 * @returns {Tip}
 */
export function ilabTip(root, cls) {
  const tip = ilabEl("div", `ilab-root ilab-tip${cls ? ` ${cls}` : ""}`);
  tip.setAttribute("role", "tooltip");
  tip.style.display = "none";
  document.body.appendChild(tip);
  return {
    el: tip,
    show(anchor, content) {
      for (const c of ["ilab-dark", "ilab-light"]) tip.classList.toggle(c, root.classList.contains(c));
      if (typeof content === "string") tip.textContent = content;
      else tip.replaceChildren(...content);
      place(tip, anchor);
    },
    hide() {
      tip.style.display = "none";
    },
    remove() {
      tip.remove();
    },
  };
}
