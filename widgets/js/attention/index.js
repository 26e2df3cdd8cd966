// @ts-check
// AttentionPattern: one text's attention, head by head. A query x key matrix for the chosen head,
// thumbnails of every head of the layer (click one), and the tokens coloured by where the hovered
// token attends (as a query) and what attends to it (as a key). Click a token to keep it.
import { ilabClosest, ilabDecode, ilabFmt, ilabListen, ilabOnThemeChange, ilabSave, ilabTheme, ilabTokenText } from "../shared/index.js";
import { drawHead, drawLayers, drawMatrix, drawStrips, drawThumbs } from "./draw.js";
import { attentionView, currentPattern, focusToken } from "./view.js";
/** @import { AttentionView } from "./view.js" */

/**
 * The strips: hovering a token describes it and makes it the focus, a click selects it.
 * @param {AttentionView} view
 */
function wireStrips(view) {
  const { model, strips, tip, tokens, n } = view;
  strips.addEventListener("mouseover", (e) => {
    const span = ilabClosest(e, ".ilab-attn-tok");
    if (!span) return;
    const j = Number(span.dataset.i);
    const before = focusToken(view);
    const i = before;
    const pat = currentPattern(view);
    view.hovered = j;
    const focus = ilabTokenText(tokens[i]).text;
    tip.show(span, `${ilabTokenText(tokens[j]).text} (position ${j})\nattends to ${focus}: ${ilabFmt(pat[j * n + i])}` +
      `\n${focus} attends to it: ${ilabFmt(pat[i * n + j])}`);
    if (j !== before) {
      drawMatrix(view);
      drawStrips(view);
    }
  });
  strips.addEventListener("mouseleave", () => {
    view.hovered = -1;
    tip.hide();
    drawMatrix(view);
    drawStrips(view);
  });
  strips.addEventListener("click", (e) => {
    const span = ilabClosest(e, ".ilab-attn-tok");
    if (span) ilabSave(model, "selected_token", Number(span.dataset.i));
  });
}

/**
 * The matrix (hover a cell for its query, key and probability; a click selects the query) and the heads.
 * @param {AttentionView} view
 */
function wireMatrix(view) {
  const { model, matrix, pointer, tip, tokens, n, cell, thumbs } = view;
  matrix.addEventListener("mousemove", (e) => {
    const r = matrix.getBoundingClientRect();
    const scale = matrix.width / r.width || 1;
    const k = Math.floor(((e.clientX - r.left) * scale) / cell);
    const q = Math.floor(((e.clientY - r.top) * scale) / cell);
    if (q < 0 || k < 0 || q >= n || k >= n) return;
    pointer.style.left = `${e.clientX - r.left}px`;
    pointer.style.top = `${e.clientY - r.top}px`;
    tip.show(pointer, `query ${ilabTokenText(tokens[q]).text} (${q}) → key ${ilabTokenText(tokens[k]).text} (${k})\n` +
      `attention ${ilabFmt(currentPattern(view)[q * n + k])}`);
  });
  matrix.addEventListener("mouseleave", () => tip.hide());
  matrix.addEventListener("click", (e) => {
    const r = matrix.getBoundingClientRect();
    const q = Math.floor(((e.clientY - r.top) * (matrix.height / r.height || 1)) / cell);
    if (q >= 0 && q < n) ilabSave(model, "selected_token", q);
  });
  thumbs.addEventListener("click", (e) => {
    const b = ilabClosest(e, ".ilab-attn-thumb");
    if (b) ilabSave(model, "head", Number(b.dataset.head));
  });
  thumbs.addEventListener("keydown", (e) => {
    const step = /** @type {Record<string, number>} */ ({ ArrowRight: 1, ArrowLeft: -1 })[e.key];
    if (step) {
      ilabSave(model, "head", (model.get("head") + step + view.nHeads) % view.nHeads);
      e.preventDefault();
    }
  });
  view.layerSelect.addEventListener("change", () => ilabSave(model, "layer", Number(view.layerSelect.value)));
  view.bosBox.addEventListener("change", () => ilabSave(model, "hide_bos", view.bosBox.checked));
  view.renormBox.addEventListener("change", () => ilabSave(model, "renormalize", view.renormBox.checked));
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const view = attentionView(model);
  el.appendChild(view.root);
  wireStrips(view);
  wireMatrix(view);
  const drawAll = () => {
    ilabTheme(view.root, model.get("scheme"));
    view.all = ilabDecode(model.get("patterns"));
    view.nHeads = model.get("patterns").shape[1];
    drawLayers(view);
    drawThumbs(view);
    drawHead(view);
  };
  const stop = ilabListen(
    model,
    {
      "change:color_scale": drawAll,
      "change:head": () => drawHead(view),
      "change:layer": () => {
        view.layerSelect.value = String(model.get("layer"));
        drawThumbs(view);
        drawHead(view);
      },
      "change:selected_token": () => {
        drawMatrix(view);
        drawStrips(view);
      },
      "change:scheme": drawAll,
      "change:patterns": drawAll,
      "change:hide_bos": drawAll,
      "change:renormalize": drawAll,
    },
    drawAll,
  );
  const unwatch = ilabOnThemeChange(() => {
    drawThumbs(view);
    drawHead(view);
  });
  return () => {
    stop();
    unwatch();
    view.tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
