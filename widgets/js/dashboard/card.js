// @ts-check
// FeatureDashboard, the card of the selected latent (histogram, logit effects, neighbours, examples).
import {
  ilabClosest, ilabEl, ilabFmt, ilabFmtSigned, ilabKeepKeys, ilabTokenLabel, ilabTokenSpan, ilabTokenText,
} from "../shared/index.js";
import { binText, histogramSvg } from "./histogram.js";
import { explanationText } from "./listdata.js";
/** @import { DashContext } from "./context.js" */
/** @import { Card } from "./store.js" */

/**
 * One example's tokens, coloured by activation on 0..vmax; the example's max marked.
 * @param {DashContext} ctx
 * @param {Card} c
 * @param {number} e the example
 * @param {number} vmax
 */
function tokenRow({ store }, c, e, vmax) {
  const line = ilabEl("div", "ilab-dash-tokens");
  const from = e * c.context;
  for (let t = from; t < (e + 1) * c.context; t++) {
    if (c.tokens[t] < 0) continue;
    const span = ilabTokenSpan(store.tokenText(c.tokens[t]), c.acts[t], { kind: "sequential", vmin: 0, center: 0, vmax });
    span.dataset.tok = store.tokenText(c.tokens[t]);
    if (t - from === c.lead) span.classList.add("ilab-dash-lead"); // the example's max
    line.appendChild(span);
  }
  return line;
}

/**
 * Examples `from`..`to` under a title (those where the latent fired).
 * @param {DashContext} ctx
 * @param {Card} c
 * @param {number} from
 * @param {number} to
 * @param {string} title
 */
function examples(ctx, c, from, to, title) {
  const box = ilabEl("div", "ilab-dash-examples");
  box.appendChild(ilabEl("div", "ilab-dash-h", title));
  const vmax = ctx.store.maxAct[c.id];
  let shown = 0;
  for (let e = from; e < to; e++) {
    if (!(c.exMax[e] > 0)) continue;
    const ex = ilabEl("div", "ilab-dash-ex");
    ex.appendChild(ilabEl("span", "ilab-dash-exmax ilab-muted", ilabFmt(c.exMax[e])));
    ex.appendChild(tokenRow(ctx, c, e, vmax));
    box.appendChild(ex);
    shown++;
  }
  if (!shown) box.appendChild(ilabEl("div", "ilab-muted", "no examples: this latent never fired on the corpus"));
  return box;
}

/**
 * The tokens the latent promotes and suppresses most through the unembedding.
 * @param {DashContext} ctx
 * @param {Card} c
 */
function logitTable({ store }, c) {
  const table = ilabEl("div", "ilab-dash-logits");
  ["promotes", "suppresses"].forEach((title, side) => {
    const col = ilabEl("div", "ilab-dash-logitcol");
    col.appendChild(ilabEl("div", "ilab-dash-h", title));
    for (let j = 0; j < c.nLogit; j++) {
      const id = c.logitIds[side * c.nLogit + j];
      const v = c.logitVals[side * c.nLogit + j];
      const line = ilabEl("div", "ilab-dash-logit");
      line.append(ilabTokenLabel(store.tokenText(id)), ilabEl("span", "ilab-dash-logitv", ilabFmtSigned(v)));
      col.appendChild(line);
    }
    table.appendChild(col);
  });
  return table;
}

/**
 * The nearest latents by decoder cosine, a button each.
 * @param {DashContext} ctx
 * @param {Card} c
 */
function neighbours({ names, select }, c) {
  const box = ilabEl("div", "ilab-dash-near");
  box.appendChild(ilabEl("span", "ilab-dash-h", "neighbours (decoder cosine): "));
  let any = false;
  for (let j = 0; j < c.nearIds.length; j++) {
    const i = c.nearIds[j];
    if (i < 0) continue;
    any = true;
    const b = ilabEl("button", "ilab-dash-nearbtn", `${names.name(i)} (${c.nearCos[j].toFixed(2)})`);
    b.dataset.latent = String(i);
    b.addEventListener("click", () => select(i));
    box.appendChild(b);
  }
  if (!any) box.appendChild(ilabEl("span", "ilab-muted", "give sae= to see them"));
  return box;
}

/**
 * The automatic explanation (text only through textContent) and its score beside the baselines.
 * @param {any} rec
 * @param {boolean} overridden a hand label wins over it
 */
function explanationLine(rec, overridden) {
  const line = ilabEl("div", "ilab-dash-explanation");
  line.append(ilabEl("span", "ilab-dash-h", overridden ? "automatic explanation (the hand label wins): " : "automatic explanation: "),
    ilabEl("span", "ilab-dash-auto", rec.text), ilabEl("span", "ilab-dash-expscore ilab-muted", ` · ${explanationText(rec)}`));
  return line;
}

/**
 * The card's head: the latent's name, a box to label it, and its statistics.
 * @param {DashContext} ctx
 * @param {number} i
 */
function header({ model, store, names }, i) {
  const head = ilabEl("div", "ilab-dash-head");
  head.appendChild(ilabEl("span", "ilab-dash-title", `latent ${names.name(i)}`));
  const input = ilabEl("input", "ilab-dash-label");
  input.placeholder = "label this latent";
  input.setAttribute("aria-label", "label");
  input.value = names.hand(i);
  const auto = names.explanation(i);
  if (auto && auto.text) input.placeholder = "label this latent (a hand label wins over the explanation)";
  ilabKeepKeys(input);
  if (!store.live) { // exported HTML (or a kernel not answering): nothing would keep an edit
    input.readOnly = true;
    input.placeholder = "no label";
    input.title = "labels are edited with a running kernel: run the notebook";
  }
  const save = () => {
    if (input.value === names.hand(i)) return;
    const labels = { ...model.get("labels") };
    if (input.value.trim()) labels[String(i)] = input.value.trim();
    else delete labels[String(i)];
    model.set("labels", labels);
    model.save_changes();
  };
  input.addEventListener("change", save);
  input.addEventListener("keydown", (e) => e.key === "Enter" && save());
  head.appendChild(input);
  if (names.source(i) === "hand") head.appendChild(ilabEl("span", "ilab-dash-source ilab-muted", "set by hand"));
  if (auto && auto.text) head.appendChild(explanationLine(auto, names.source(i) === "hand"));
  const stats = `density ${ilabFmt(store.density[i] * 100)}% · max ${ilabFmt(store.maxAct[i])} · mean ${ilabFmt(store.meanAct[i])}`;
  head.appendChild(ilabEl("div", "ilab-dash-stats ilab-muted", stats));
  return head;
}

/**
 * The card column: `draw()` shows the selected latent (or asks the kernel for its card).
 * @param {DashContext} ctx
 */
export function dashCard(ctx) {
  const { model, store, tip } = ctx;
  const el = ilabEl("div", "ilab-dash-card");
  el.addEventListener("mouseover", (e) => {
    const bin = ilabClosest(e, ".ilab-dash-binhit");
    const shown = store.cards.get(model.get("selected"));
    if (bin && shown) return tip.show(bin, binText(shown, Number(bin.dataset.bin)));
    const span = ilabClosest(e, ".ilab-dash-tokens .ilab-tok");
    if (!span) return tip.hide();
    const lead = span.classList.contains("ilab-dash-lead") ? " (this example's max)" : "";
    tip.show(span, `${ilabTokenText(span.dataset.tok ?? "").text}\nactivation ${ilabFmt(Number(span.dataset.v))}${lead}`);
  });
  el.addEventListener("mouseleave", () => tip.hide());
  const draw = () => {
    const i = model.get("selected");
    const c = store.cards.get(i);
    el.replaceChildren(header(ctx, i));
    el.dataset.latent = String(i);
    if (!c) {
      if (store.live) {
        store.request(i);
        el.appendChild(ilabEl("div", "ilab-muted", "loading…"));
      } else {
        el.appendChild(ilabEl("div", "ilab-muted", "This latent's card was not exported; run the notebook to see it."));
      }
      return;
    }
    const top = ilabEl("div", "ilab-dash-top");
    const hist = ilabEl("div", "ilab-dash-histbox");
    hist.append(ilabEl("div", "ilab-dash-h", "activation histogram (firing tokens)"), histogramSvg(c));
    top.append(hist, logitTable(ctx, c));
    el.append(top, neighbours(ctx, c), examples(ctx, c, 0, c.nTop, "top activations"));
    el.appendChild(examples(ctx, c, c.nTop, c.nEx, "across the activation range"));
  };
  return { el, draw };
}
