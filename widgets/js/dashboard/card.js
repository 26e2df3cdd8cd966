// FeatureDashboard, part 3: the card of the selected latent (histogram, logit effects, neighbours, examples).

function svgEl(tag, attrs) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** The activation histogram as SVG bars (counts of tokens per activation bin). */
function histogramSvg(card) {
  const W = 320, H = 110, padL = 34, padB = 18, padT = 6;
  const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "ilab-dash-hist" });
  svg.setAttribute("role", "img");
  const n = card.counts.length;
  let top = 0;
  for (const c of card.counts) top = Math.max(top, c);
  const bw = (W - padL - 4) / Math.max(1, n);
  for (let b = 0; b < n; b++) {
    const h = top > 0 ? ((H - padB - padT) * card.counts[b]) / top : 0;
    const rect = svgEl("rect", { x: padL + b * bw, y: H - padB - h, width: Math.max(1, bw - 1), height: h,
      class: "ilab-dash-bar" });
    const tip = svgEl("title", {});
    tip.textContent = `${ilabFmt(card.edges[b])}–${ilabFmt(card.edges[b + 1])}: ${card.counts[b]} tokens`;
    rect.appendChild(tip);
    svg.appendChild(rect);
  }
  const text = (x, y, s, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor, class: "ilab-dash-axis" });
    t.textContent = s;
    svg.appendChild(t);
  };
  svg.appendChild(svgEl("line", { x1: padL, y1: H - padB, x2: W - 4, y2: H - padB, class: "ilab-dash-axisline" }));
  text(padL, H - 4, ilabFmt(card.edges[0]), "start");
  text(W - 4, H - 4, ilabFmt(card.edges[n]), "end");
  text(padL - 4, padT + 8, ilabFmt(top), "end");
  text(padL - 4, H - padB, "0", "end");
  svg.setAttribute("aria-label", `activation histogram: ${n} bins up to ${ilabFmt(card.edges[n])}, peak ${top} tokens`);
  return svg;
}

/** The card column: `draw()` shows the selected latent (or asks the kernel for its card). */
function dashCard(model, store, names, select, tip) {
  const el = ilabEl("div", "ilab-dash-card");
  el.addEventListener("mouseover", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-dash-tokens .ilab-tok");
    if (!span) return tip.hide();
    const lead = span.classList.contains("ilab-dash-lead") ? " (this example's max)" : "";
    tip.show(span, `${ilabTokenText(span.dataset.tok).text}\nactivation ${ilabFmt(Number(span.dataset.v))}${lead}`);
  });
  el.addEventListener("mouseleave", () => tip.hide());

  function tokenRow(tokens, acts, from, to, vmax, lead) {
    const line = ilabEl("div", "ilab-dash-tokens");
    for (let t = from; t < to; t++) {
      if (tokens[t] < 0) continue;
      const span = ilabTokenSpan(store.tokenText(tokens[t]), acts[t], { kind: "sequential", vmin: 0, center: 0, vmax });
      span.dataset.tok = store.tokenText(tokens[t]);
      if (t - from === lead) span.classList.add("ilab-dash-lead"); // the example's max
      line.appendChild(span);
    }
    return line;
  }

  function examples(c, from, to, title) {
    const box = ilabEl("div", "ilab-dash-examples");
    box.appendChild(ilabEl("div", "ilab-dash-h", title));
    const vmax = store.maxAct[c.id];
    let shown = 0;
    for (let e = from; e < to; e++) {
      if (!(c.exMax[e] > 0)) continue;
      const ex = ilabEl("div", "ilab-dash-ex");
      ex.appendChild(ilabEl("span", "ilab-dash-exmax ilab-muted", ilabFmt(c.exMax[e])));
      ex.appendChild(tokenRow(c.tokens, c.acts, e * c.context, (e + 1) * c.context, vmax, c.lead));
      box.appendChild(ex);
      shown++;
    }
    if (!shown) box.appendChild(ilabEl("div", "ilab-muted", "no examples: this latent never fired on the corpus"));
    return box;
  }

  function logitTable(c) {
    const table = ilabEl("div", "ilab-dash-logits");
    ["promotes", "suppresses"].forEach((title, side) => {
      const col = ilabEl("div", "ilab-dash-logitcol");
      col.appendChild(ilabEl("div", "ilab-dash-h", title));
      for (let j = 0; j < c.nLogit; j++) {
        const id = c.logitIds[side * c.nLogit + j];
        const v = c.logitVals[side * c.nLogit + j];
        const line = ilabEl("div", "ilab-dash-logit");
        line.append(ilabTokenSpan(store.tokenText(id)), ilabEl("span", "ilab-dash-logitv", ilabFmtSigned(v)));
        col.appendChild(line);
      }
      table.appendChild(col);
    });
    return table;
  }

  function neighbours(c) {
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

  function header(i) {
    const head = ilabEl("div", "ilab-dash-head");
    head.appendChild(ilabEl("span", "ilab-dash-title", `latent ${names.name(i)}`));
    const input = ilabEl("input", "ilab-dash-label");
    input.placeholder = "label this latent";
    input.setAttribute("aria-label", "label");
    input.value = names.label(i);
    ilabKeepKeys(input);
    const save = () => {
      if (input.value === names.label(i)) return;
      const labels = { ...model.get("labels") };
      if (input.value.trim()) labels[String(i)] = input.value.trim();
      else delete labels[String(i)];
      model.set("labels", labels);
      model.save_changes();
    };
    input.addEventListener("change", save);
    input.addEventListener("keydown", (e) => e.key === "Enter" && save());
    head.appendChild(input);
    const s = store;
    const stats = `density ${ilabFmt(s.density[i] * 100)}% · max ${ilabFmt(s.maxAct[i])} · mean ${ilabFmt(s.meanAct[i])}`;
    head.appendChild(ilabEl("div", "ilab-dash-stats ilab-muted", stats));
    return head;
  }

  function draw() {
    const i = model.get("selected");
    const c = store.cards.get(i);
    el.replaceChildren(header(i));
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
    top.append(hist, logitTable(c));
    el.append(top, neighbours(c), examples(c, 0, c.nTop, "top activations"));
    el.appendChild(examples(c, c.nTop, c.nEx, "across the activation range"));
  }

  return { el, draw };
}
