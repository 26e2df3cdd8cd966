// FeatureDashboard: a searchable, sortable list of latents and a card for the selected one.

const SVG_NS = "http://www.w3.org/2000/svg";
const MAX_ROWS = 200;

/** Cards from a bundle: `get(name)` returns the payload {view, dtype, shape} of one array. */
function unpackCards(get, nTop, lead) {
  const ids = ilabDecode(get("ids"));
  const out = new Map();
  if (!ids) return out;
  const arr = (name) => ({ data: ilabDecode(get(name)), shape: get(name).shape });
  const tokens = arr("tokens");
  const acts = arr("acts");
  const exMax = arr("ex_max");
  const counts = arr("hist_counts");
  const edges = arr("hist_edges");
  const logitIds = arr("logit_ids");
  const logitVals = arr("logit_values");
  const nearIds = arr("near_ids");
  const nearCos = arr("near_cos");
  const row = (a, r) => {
    const size = a.shape.slice(1).reduce((x, y) => x * y, 1);
    return a.data.subarray(r * size, (r + 1) * size);
  };
  for (let r = 0; r < ids.length; r++) {
    out.set(ids[r], {
      id: ids[r],
      nTop,
      lead,
      nEx: tokens.shape[1],
      context: tokens.shape[2],
      tokens: row(tokens, r),
      acts: row(acts, r),
      exMax: row(exMax, r),
      counts: row(counts, r),
      edges: row(edges, r),
      nLogit: logitIds.shape[2],
      logitIds: row(logitIds, r),
      logitVals: row(logitVals, r),
      nearIds: row(nearIds, r),
      nearCos: row(nearCos, r),
    });
  }
  return out;
}

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

function render({ model, el }) {
  const root = ilabEl("div", "ilab-dash");
  el.appendChild(root);
  const d = model.get("d_sae");
  const density = ilabDecode(model.get("density"));
  const maxAct = ilabDecode(model.get("max_act"));
  const meanAct = ilabDecode(model.get("mean_act"));
  const strings = new Map(Object.entries(model.get("token_strings")).map(([k, v]) => [Number(k), v]));
  const initial = model.get("cards");
  const cards = unpackCards((name) => initial[name], initial.n_top, initial.lead);
  const pending = new Set();
  let live = false; // a kernel answered our ping

  // --- layout
  const list = ilabEl("div", "ilab-dash-list");
  const search = ilabEl("input", "ilab-search");
  search.type = "search";
  search.placeholder = "search latents by id or label";
  search.setAttribute("aria-label", "search latents");
  const sortSel = ilabEl("select", "ilab-dash-sort");
  sortSel.setAttribute("aria-label", "sort latents");
  const count = ilabEl("div", "ilab-dash-count ilab-muted");
  const rows = ilabEl("div", "ilab-dash-rows");
  rows.setAttribute("role", "listbox");
  rows.tabIndex = 0;
  list.append(search, sortSel, count, rows);
  const card = ilabEl("div", "ilab-dash-card");
  const status = ilabEl("div", "ilab-status ilab-muted");
  const tryBox = ilabEl("div", "ilab-dash-try");
  const right = ilabEl("div", "ilab-dash-right");
  right.append(card, tryBox, status);
  root.append(list, right);
  [search, sortSel, rows].forEach(ilabKeepKeys);

  const label = (i) => model.get("labels")[String(i)] || "";
  const name = (i) => (label(i) ? `${i} · ${label(i)}` : `${i}`);
  const select = (i) => {
    if (i < 0 || i >= d) return;
    model.set("selected", i);
    model.save_changes();
  };

  // --- list
  function fillSorts() {
    const opts = [["density", "density"], ["max_act", "max activation"], ["id", "id"]];
    if (model.get("score_values") && model.get("score_values").view) opts.splice(2, 0, ["score", model.get("score_name")]);
    sortSel.replaceChildren();
    for (const [v, text] of opts) {
      const o = ilabEl("option", null, `sort: ${text}`);
      o.value = v;
      o.selected = v === model.get("sort");
      sortSel.appendChild(o);
    }
  }

  function order() {
    const sort = model.get("sort");
    const ids = Array.from({ length: d }, (_, i) => i);
    if (sort === "id") return ids;
    const key = sort === "score" ? ilabDecode(model.get("score_values")) : sort === "max_act" ? maxAct : density;
    if (!key) return ids;
    const k = (i) => (Number.isNaN(key[i]) ? -Infinity : key[i]);
    return ids.sort((a, b) => k(b) - k(a) || a - b);
  }

  function matches(i, q) {
    if (!q) return true;
    if (/^\d+$/.test(q) && String(i).startsWith(q)) return true;
    return label(i).toLowerCase().includes(q);
  }

  function fillRows() {
    const q = search.value.trim().toLowerCase();
    const sort = model.get("sort");
    const scores = sort === "score" ? ilabDecode(model.get("score_values")) : null;
    rows.replaceChildren();
    let n = 0;
    for (const i of order()) {
      if (!matches(i, q)) continue;
      n++;
      if (n > MAX_ROWS) continue;
      const row = ilabEl("div", "ilab-dash-row");
      row.dataset.latent = String(i);
      row.setAttribute("role", "option");
      if (i === model.get("selected")) row.classList.add("ilab-selected");
      row.appendChild(ilabEl("span", "ilab-dash-name", name(i)));
      const stat = scores ? ilabFmt(scores[i]) : sort === "max_act" ? ilabFmt(maxAct[i]) : `${ilabFmt(density[i] * 100)}%`;
      row.appendChild(ilabEl("span", "ilab-dash-stat ilab-muted", stat));
      if (!cards.has(i) && !live) row.classList.add("ilab-dash-absent");
      rows.appendChild(row);
    }
    count.textContent = n > MAX_ROWS ? `${n} latents (first ${MAX_ROWS} shown)` : `${n} latents`;
  }

  rows.addEventListener("click", (e) => {
    const row = e.target.closest && e.target.closest(".ilab-dash-row");
    if (row) select(Number(row.dataset.latent));
  });
  rows.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    const all = Array.from(rows.children);
    const at = all.findIndex((r) => r.classList.contains("ilab-selected"));
    const next = all[Math.max(0, Math.min(all.length - 1, at + (e.key === "ArrowDown" ? 1 : -1)))];
    if (next) select(Number(next.dataset.latent));
    e.preventDefault();
  });
  search.addEventListener("input", () => {
    model.set("query", search.value);
    model.save_changes();
    fillRows();
  });
  sortSel.addEventListener("change", () => {
    model.set("sort", sortSel.value);
    model.save_changes();
  });

  // --- card
  function tokenRow(tokens, acts, from, to, vmax, lead) {
    const line = ilabEl("div", "ilab-dash-tokens");
    for (let t = from; t < to; t++) {
      if (tokens[t] < 0) continue;
      const span = ilabTokenSpan(strings.has(tokens[t]) ? strings.get(tokens[t]) : `<${tokens[t]}>`, acts[t], vmax, false);
      span.title = ilabFmt(acts[t]);
      if (t - from === lead) span.classList.add("ilab-dash-lead"); // the example's max
      line.appendChild(span);
    }
    return line;
  }

  function examples(c, from, to, title) {
    const box = ilabEl("div", "ilab-dash-examples");
    box.appendChild(ilabEl("div", "ilab-dash-h", title));
    const vmax = maxAct[c.id];
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
        const tok = ilabTokenSpan(strings.has(id) ? strings.get(id) : `<${id}>`);
        line.append(tok, ilabEl("span", "ilab-dash-logitv ilab-muted", ilabFmt(v)));
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
      const b = ilabEl("button", "ilab-dash-nearbtn", `${name(i)} (${c.nearCos[j].toFixed(2)})`);
      b.dataset.latent = String(i);
      b.addEventListener("click", () => select(i));
      box.appendChild(b);
    }
    if (!any) box.appendChild(ilabEl("span", "ilab-muted", "give sae= to see them"));
    return box;
  }

  function header(i) {
    const head = ilabEl("div", "ilab-dash-head");
    head.appendChild(ilabEl("span", "ilab-dash-title", `latent ${name(i)}`));
    const input = ilabEl("input", "ilab-dash-label");
    input.placeholder = "label this latent";
    input.setAttribute("aria-label", "label");
    input.value = label(i);
    ilabKeepKeys(input);
    const save = () => {
      if (input.value === label(i)) return;
      const labels = { ...model.get("labels") };
      if (input.value.trim()) labels[String(i)] = input.value.trim();
      else delete labels[String(i)];
      model.set("labels", labels);
      model.save_changes();
    };
    input.addEventListener("change", save);
    input.addEventListener("keydown", (e) => e.key === "Enter" && save());
    head.appendChild(input);
    const stats = `density ${ilabFmt(density[i] * 100)}% · max ${ilabFmt(maxAct[i])} · mean ${ilabFmt(meanAct[i])}`;
    head.appendChild(ilabEl("div", "ilab-dash-stats ilab-muted", stats));
    return head;
  }

  function drawCard() {
    const i = model.get("selected");
    const c = cards.get(i);
    card.replaceChildren(header(i));
    card.dataset.latent = String(i);
    if (!c) {
      if (live) {
        request(i);
        card.appendChild(ilabEl("div", "ilab-muted", "loading…"));
      } else {
        card.appendChild(ilabEl("div", "ilab-muted", "This latent's card was not exported; run the notebook to see it."));
      }
      return;
    }
    const top = ilabEl("div", "ilab-dash-top");
    const hist = ilabEl("div", "ilab-dash-histbox");
    hist.append(ilabEl("div", "ilab-dash-h", "activation histogram (firing tokens)"), histogramSvg(c));
    top.append(hist, logitTable(c));
    card.append(top, neighbours(c), examples(c, 0, c.nTop, "top activations"));
    card.appendChild(examples(c, c.nTop, c.nEx, "across the activation range"));
  }

  function request(i) {
    if (pending.has(i)) return;
    pending.add(i);
    model.send({ type: "card", latent: i });
  }

  // --- try your text
  const area = ilabEl("textarea", "ilab-dash-text");
  area.rows = 2;
  area.placeholder = "try your text: which latents fire, and how much the selected one does";
  area.setAttribute("aria-label", "try your text");
  ilabKeepKeys(area);
  const run = ilabEl("button", "ilab-dash-run", "run");
  const tryNote = ilabEl("span", "ilab-dash-trynote ilab-muted", "needs a live kernel (model and SAE)");
  const tryOut = ilabEl("div", "ilab-dash-tryout");
  tryBox.append(ilabEl("div", "ilab-dash-h", "try your text"), area, run, tryNote, tryOut);

  function setLive(on) {
    live = on && model.get("live");
    area.disabled = !live;
    run.disabled = !live;
    tryNote.style.display = live ? "none" : "";
  }

  run.addEventListener("click", () => {
    if (!live || !area.value.trim()) return;
    tryNote.style.display = "";
    tryNote.textContent = "running…";
    model.send({ type: "try", text: area.value, latent: model.get("selected") });
  });

  function showTry(msg, buffers) {
    tryOut.replaceChildren();
    if (msg.error) {
      tryNote.style.display = "";
      tryNote.textContent = msg.error;
      return;
    }
    tryNote.style.display = "none";
    const acts = ilabDecode({ view: buffers[0], dtype: "float32" });
    const topIds = ilabDecode({ view: buffers[1], dtype: "int32" });
    const topVals = ilabDecode({ view: buffers[2], dtype: "float32" });
    const k = msg.shapes.top_ids[1];
    let vmax = maxAct[msg.latent];
    for (const a of acts) vmax = Math.max(vmax, a);
    tryOut.appendChild(ilabEl("div", "ilab-dash-h", `latent ${name(msg.latent)} on your text`));
    const line = ilabEl("div", "ilab-dash-tokens ilab-dash-trytokens");
    msg.tokens.forEach((tok, t) => {
      const span = ilabTokenSpan(tok, acts[t], vmax, false);
      span.title = ilabFmt(acts[t]);
      line.appendChild(span);
    });
    tryOut.appendChild(line);
    const table = ilabEl("div", "ilab-dash-trytable");
    msg.tokens.forEach((tok, t) => {
      const row = ilabEl("div", "ilab-dash-tryrow");
      row.appendChild(ilabTokenSpan(tok));
      for (let j = 0; j < k; j++) {
        const i = topIds[t * k + j];
        const v = topVals[t * k + j];
        if (!(v > 0)) continue;
        const b = ilabEl("button", "ilab-dash-nearbtn", `${name(i)}: ${ilabFmt(v)}`);
        b.dataset.latent = String(i);
        b.addEventListener("click", () => select(i));
        row.appendChild(b);
      }
      table.appendChild(row);
    });
    tryOut.appendChild(table);
  }

  // --- messages and traits
  const onMsg = (msg, buffers) => {
    if (!msg) return;
    if (msg.type === "pong") {
      setLive(true);
      fillRows();
      if (!cards.has(model.get("selected"))) drawCard();
    } else if (msg.type === "card") {
      const meta = msg.cards;
      const got = unpackCards((n) => ({ view: buffers[meta[n].buffer], dtype: meta[n].dtype, shape: meta[n].shape }),
        meta.n_top, meta.lead);
      for (const [k, v] of Object.entries(msg.token_strings)) strings.set(Number(k), v);
      for (const [i, c] of got) {
        cards.set(i, c);
        pending.delete(i);
      }
      if (got.has(model.get("selected"))) drawCard();
    } else if (msg.type === "try") {
      showTry(msg, buffers);
    }
  };
  const onSelected = () => {
    for (const r of rows.querySelectorAll(".ilab-selected")) r.classList.remove("ilab-selected");
    const row = rows.querySelector(`[data-latent="${model.get("selected")}"]`);
    if (row) {
      row.classList.add("ilab-selected");
      row.scrollIntoView({ block: "nearest" });
    }
    drawCard();
  };
  const onLabels = () => {
    fillRows();
    drawCard();
  };
  const onSort = () => {
    fillSorts();
    fillRows();
  };
  const onQuery = () => {
    if (search.value === model.get("query")) return;
    search.value = model.get("query");
    fillRows();
  };
  const onScheme = () => ilabTheme(root, model.get("scheme"));
  const handlers = {
    "msg:custom": onMsg,
    "change:selected": onSelected,
    "change:labels": onLabels,
    "change:sort": onSort,
    "change:query": onQuery,
    "change:score_values": onSort,
    "change:scheme": onScheme,
  };
  return ilabListen(model, handlers, () => {
    onScheme();
    search.value = model.get("query");
    setLive(false);
    fillSorts();
    fillRows();
    drawCard();
    if (model.get("live")) {
      try {
        model.send({ type: "ping" }); // answered only by a live kernel
      } catch (err) {
        setLive(false); // exported HTML: no kernel to talk to
      }
    }
  });
}

export default { render };
