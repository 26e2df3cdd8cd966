// @ts-check
// FeatureDashboard, "try your text" (needs a live kernel with the model and the SAE).
import { ilabClosest, ilabDecode, ilabEl, ilabFmt, ilabKeepKeys, ilabTokenSpan, ilabTokenText } from "../shared/index.js";
/** @import { DashContext } from "./context.js" */

/**
 * A table of the text's tokens, each with the latents most active there (buttons that select them).
 * @param {DashContext} ctx
 * @param {string[]} tokens
 * @param {Int32Array} topIds [tokens, k]
 * @param {Float32Array} topVals [tokens, k]
 * @param {number} k
 */
function topTable({ names, select }, tokens, topIds, topVals, k) {
  const table = ilabEl("div", "ilab-dash-trytable");
  tokens.forEach((tok, t) => {
    const row = ilabEl("div", "ilab-dash-tryrow");
    row.appendChild(ilabTokenSpan(tok));
    for (let j = 0; j < k; j++) {
      const i = topIds[t * k + j];
      const v = topVals[t * k + j];
      if (!(v > 0)) continue;
      const b = ilabEl("button", "ilab-dash-nearbtn", `${names.name(i)}: ${ilabFmt(v)}`);
      b.dataset.latent = String(i);
      b.addEventListener("click", () => select(i));
      row.appendChild(b);
    }
    table.appendChild(row);
  });
  return table;
}

/**
 * The kernel's answer: the text coloured by the selected latent, and the top latents at each token.
 * @param {DashContext} ctx
 * @param {HTMLElement} out
 * @param {any} msg {latent, tokens, shapes, density_filter}
 * @param {DataView[]} buffers the latent's activations, then the top latents' ids and values
 */
function showResult(ctx, out, msg, buffers) {
  /** @type {Float32Array} */
  const acts = ilabDecode({ view: buffers[0], dtype: "float32" });
  let vmax = ctx.store.maxAct[msg.latent];
  for (const a of acts) vmax = Math.max(vmax, a);
  out.appendChild(ilabEl("div", "ilab-dash-h", `latent ${ctx.names.name(msg.latent)} on your text`));
  const line = ilabEl("div", "ilab-dash-tokens ilab-dash-trytokens");
  msg.tokens.forEach((/** @type {string} */ tok, /** @type {number} */ t) => {
    const span = ilabTokenSpan(tok, acts[t], { kind: "sequential", vmin: 0, center: 0, vmax });
    span.dataset.tok = tok;
    line.appendChild(span);
  });
  out.appendChild(line);
  const topIds = ilabDecode({ view: buffers[1], dtype: "int32" });
  const topVals = ilabDecode({ view: buffers[2], dtype: "float32" });
  out.appendChild(topTable(ctx, msg.tokens, topIds, topVals, msg.shapes.top_ids[1]));
  if (msg.density_filter) out.appendChild(ilabEl("div", "ilab-dash-tryfilter ilab-muted", `top latents per token: ${msg.density_filter}`));
}

/**
 * The "try your text" box: a text area, a run button, a note (why it is off, or what went wrong), the answer.
 * @param {DashContext} ctx
 */
export function dashTry(ctx) {
  const { model, store, tip } = ctx;
  const el = ilabEl("div", "ilab-dash-try");
  el.addEventListener("mouseover", (e) => {
    const span = ilabClosest(e, ".ilab-dash-trytokens .ilab-tok");
    if (!span) return tip.hide();
    tip.show(span, `${ilabTokenText(span.dataset.tok ?? "").text}\nactivation ${ilabFmt(Number(span.dataset.v))}`);
  });
  el.addEventListener("mouseleave", () => tip.hide());
  const area = ilabEl("textarea", "ilab-dash-text");
  area.rows = 2;
  area.placeholder = "try your text: which latents fire, and how much the selected one does";
  area.setAttribute("aria-label", "try your text");
  ilabKeepKeys(area);
  const run = ilabEl("button", "ilab-dash-run", "run");
  const note = ilabEl("span", "ilab-dash-trynote ilab-muted", "needs a live kernel (model and SAE)");
  const out = ilabEl("div", "ilab-dash-tryout");
  el.append(ilabEl("div", "ilab-dash-h", "try your text"), area, run, note, out);
  const setLive = () => {
    const live = store.live && model.get("live");
    area.disabled = !live;
    run.disabled = !live;
    note.style.display = live ? "none" : "";
  };
  run.addEventListener("click", () => {
    if (run.disabled || !area.value.trim()) return;
    note.style.display = "";
    note.textContent = "running…";
    model.send({ type: "try", text: area.value, latent: model.get("selected") });
  });
  /** @param {{msg: any, buffers: DataView[]}} answer */
  const show = ({ msg, buffers }) => {
    out.replaceChildren();
    note.style.display = msg.error ? "" : "none";
    if (msg.error) note.textContent = msg.error;
    else showResult(ctx, out, msg, buffers);
  };
  return { el, setLive, show };
}
