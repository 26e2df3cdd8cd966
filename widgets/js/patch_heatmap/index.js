// @ts-check
// PatchHeatmap: an image drawn on a canvas with a grid of patches over it, each tinted by its value; hover or
// focus a patch for its row, column and value, click it to select it. Text only through textContent.
import { ilabCellColor, ilabDecode, ilabEl, ilabFmt, ilabListen, ilabSave, ilabTheme, ilabTip } from "../shared/index.js";
/** @import { Tip } from "../shared/tip.js" */

/**
 * The image's pixels on a canvas of its own size (CSS scales it up without smoothing).
 * @param {Uint8Array} rgb
 * @param {number[]} shape
 * @returns {HTMLCanvasElement}
 */
function imageCanvas(rgb, shape) {
  const [h, w] = shape;
  const canvas = /** @type {HTMLCanvasElement} */ (ilabEl("canvas", "ilab-patch-image"));
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  if (!ctx) return canvas;
  const pixels = ctx.createImageData(w, h);
  for (let i = 0; i < h * w; i++) {
    pixels.data[4 * i] = rgb[3 * i];
    pixels.data[4 * i + 1] = rgb[3 * i + 1];
    pixels.data[4 * i + 2] = rgb[3 * i + 2];
    pixels.data[4 * i + 3] = 255;
  }
  ctx.putImageData(pixels, 0, 0);
  return canvas;
}

/**
 * One patch cell of the overlay.
 * @param {AnyModel} model
 * @param {Tip} tip
 * @param {{index: number, row: number, col: number, value: number}} patch
 */
function patchCell(model, tip, patch) {
  const cell = ilabEl("div", "ilab-patch-cell");
  cell.style.background = ilabCellColor(patch.value, model.get("scale"));
  cell.tabIndex = 0;
  cell.dataset.index = String(patch.index);
  if (patch.index === model.get("selected")) cell.classList.add("ilab-patch-selected");
  const show = () =>
    tip.show(cell, [
      ilabEl("div", "ilab-tip-title", `patch ${patch.index} (row ${patch.row}, column ${patch.col})`),
      ilabEl("div", "", `value ${ilabFmt(patch.value)}`),
    ]);
  cell.addEventListener("mouseenter", show);
  cell.addEventListener("focus", show);
  cell.addEventListener("mouseleave", () => tip.hide());
  cell.addEventListener("blur", () => tip.hide());
  cell.addEventListener("click", () => ilabSave(model, "selected", patch.index));
  return cell;
}

/**
 * Draw the image and its patch grid again.
 * @param {AnyModel} model
 * @param {HTMLElement} root
 * @param {Tip} tip
 */
function draw(model, root, tip) {
  ilabTheme(root, model.get("scheme"));
  root.replaceChildren();
  if (model.get("title")) root.appendChild(ilabEl("div", "ilab-patch-title", model.get("title")));
  const image = model.get("image");
  const values = /** @type {Float32Array} */ (ilabDecode(model.get("values")));
  const grid = model.get("values").shape[0];
  const frame = ilabEl("div", "ilab-patch-frame");
  const size = `${model.get("size")}px`;
  frame.style.width = size;
  frame.style.height = size;
  frame.appendChild(imageCanvas(/** @type {Uint8Array} */ (ilabDecode(image)), image.shape));
  const overlay = ilabEl("div", "ilab-patch-overlay");
  overlay.style.gridTemplateColumns = `repeat(${grid}, 1fr)`;
  for (let i = 0; i < grid * grid; i++) {
    overlay.appendChild(patchCell(model, tip, { index: i, row: Math.floor(i / grid), col: i % grid, value: values[i] }));
  }
  frame.appendChild(overlay);
  root.appendChild(frame);
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const root = ilabEl("div", "ilab-root ilab-patch-heatmap");
  el.appendChild(root);
  const tip = ilabTip(root, "ilab-patch-tip");
  const redraw = () => draw(model, root, tip);
  const events = { "change:values": redraw, "change:image": redraw, "change:selected": redraw, "change:scheme": redraw };
  const stop = ilabListen(model, events, redraw);
  return () => {
    stop();
    tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
