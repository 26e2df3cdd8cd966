// FeatureHeatmap / TokenHeatmap: paged flowing text, one span per token on the current page only.

const REQUEST_TIMEOUT_MS = 4000; // a column not received by then: say why, allow asking again

function pagesFor(docStarts, nTokens, perPage) {
  // Group whole documents into pages of about perPage tokens; split documents longer than a page.
  const pages = [];
  let start = 0;
  for (let d = 0; d + 1 < docStarts.length; d++) {
    const end = docStarts[d + 1];
    if (end - start > perPage && docStarts[d] > start) {
      pages.push([start, docStarts[d]]);
      start = docStarts[d];
    }
    while (end - start > perPage) {
      pages.push([start, start + perPage]);
      start += perPage;
    }
  }
  if (start < nTokens || pages.length === 0) pages.push([start, nTokens]);
  return pages;
}

function render({ model, el }) {
  performance.mark("ilab-heatmap-render-start"); // time to first paint: see bench/bench_widgets.py
  const root = ilabEl("div", "ilab-heatmap");
  el.appendChild(root);
  const vocab = model.get("vocab");
  const tokenIds = ilabDecode(model.get("token_ids"));
  const docStarts = ilabDecode(model.get("doc_starts"));
  const topF = ilabDecode(model.get("top_features"));
  const topV = ilabDecode(model.get("top_values"));
  const topLabels = model.get("top_labels") || {};
  const bosSet = new Set(ilabDecode(model.get("bos_tokens")) || []);
  let scales = ilabDecode(model.get("scales"));
  const featureIds = model.get("feature_ids");
  let labels = model.get("labels");
  const nTokens = tokenIds.length;
  const k = topF && nTokens ? topF.length / nTokens : Math.min(5, featureIds.length);
  const columns = new Map();
  const pending = new Set();
  let live = false; // a kernel answered our ping: missing columns can be fetched
  {
    const sent = model.get("sent_columns");
    const vals = ilabDecode(model.get("values"));
    sent.forEach((c, i) => columns.set(c, vals.subarray(i * nTokens, (i + 1) * nTokens)));
  }
  const docOf = new Int32Array(nTokens);
  for (let d = 0; d + 1 < docStarts.length; d++) docOf.fill(d, docStarts[d], docStarts[d + 1]);

  // --- controls
  const bar = ilabEl("div", "ilab-bar");
  const picker = ilabEl("div", "ilab-picker");
  const search = ilabSearchBox("search features by id or label", "search features");
  const select = ilabEl("select", "ilab-select");
  select.size = 5;
  select.setAttribute("aria-label", "feature");
  picker.append(search, select);
  const legendBox = ilabEl("div", "ilab-legend-box");
  const nav = ilabEl("div", "ilab-nav");
  const prev = ilabEl("button", "ilab-prev", "◀");
  const next = ilabEl("button", "ilab-next", "▶");
  prev.setAttribute("aria-label", "previous page");
  next.setAttribute("aria-label", "next page");
  const pageLabel = ilabEl("span", "ilab-page ilab-muted");
  const prevHit = ilabEl("button", "ilab-prev-active", "◂ active");
  const nextHit = ilabEl("button", "ilab-next-active", "active ▸");
  prevHit.title = "the previous token where this feature is not zero (any page)";
  nextHit.title = "the next token where this feature is not zero (any page)";
  prevHit.setAttribute("aria-label", "previous token where the feature is active");
  nextHit.setAttribute("aria-label", "next token where the feature is active");
  nav.append(prevHit, prev, pageLabel, next, nextHit);
  bar.append(picker, legendBox, nav);
  const docsBox = ilabFocusBox("ilab-docs", "grid", "tokens: arrow keys move, Enter selects");
  const status = ilabEl("div", "ilab-status ilab-muted");
  const tip = ilabTip(root, "ilab-heat-tip");
  root.append(bar, docsBox, status);
  [search, select, docsBox].forEach(ilabKeepKeys);

  const label = (c) => (labels[c] ? `${featureIds[c]} · ${labels[c]}` : `${featureIds[c]}`);
  const columnOf = new Map(featureIds.map((f, c) => [f, c]));
  const idLabel = (id) => (columnOf.has(id) ? label(columnOf.get(id)) : topLabels[id] ? `${id} · ${topLabels[id]}` : `${id}`);
  const tokenShown = (i) => ilabTokenText(vocab[tokenIds[i]]).text; // the text itself, as drawn (no escapes)
  const colIndex = () => Math.max(0, featureIds.indexOf(model.get("feature")));
  let pages = pagesFor(docStarts, nTokens, Math.max(50, model.get("page_tokens")));
  let spans = [];
  let pageStart = 0;
  let cursor = -1;

  function fillOptions() {
    const q = search.value.trim().toLowerCase();
    select.replaceChildren();
    let shown = 0;
    for (let c = 0; c < featureIds.length && shown < 500; c++) {
      const text = label(c);
      if (q && !text.toLowerCase().includes(q)) continue;
      const opt = ilabEl("option", null, text);
      opt.value = String(featureIds[c]);
      opt.selected = featureIds[c] === model.get("feature");
      select.appendChild(opt);
      shown++;
    }
  }


  const NOT_EXPORTED = "Values of this feature were not exported; run the notebook to see them.";

  /** Ask the kernel for a column; with no answer in time, say why and allow asking again. */
  function request(col) {
    if (pending.has(col)) return;
    pending.add(col);
    try {
      model.send({ type: "column", index: col });
    } catch (err) {
      pending.delete(col); // exported HTML: no kernel to ask
      status.textContent = NOT_EXPORTED;
      return;
    }
    setTimeout(() => {
      if (columns.has(col)) return;
      pending.delete(col); // a later request asks again
      if (col !== colIndex()) return;
      if (!live) {
        status.textContent = NOT_EXPORTED;
        return;
      }
      const retry = ilabEl("button", "ilab-retry", "retry");
      retry.addEventListener("click", () => {
        status.textContent = `loading feature ${featureIds[col]}…`;
        request(col);
      });
      status.replaceChildren(
        ilabEl("span", null, `No answer from the kernel for feature ${featureIds[col]} yet (it may be busy). `),
        retry,
      );
    }, REQUEST_TIMEOUT_MS);
  }

  function colour() {
    const col = colIndex();
    const values = columns.get(col);
    const scale = ilabScaleAt(scales, col);
    if (!values) {
      request(col);
      status.textContent = `loading feature ${featureIds[col]}…`;
      return;
    }
    for (let j = 0; j < spans.length; j++) {
      const v = values[pageStart + j];
      spans[j].style.background = ilabColor(v, scale);
      spans[j].dataset.v = String(v);
    }
    legendBox.replaceChildren(ilabLegend(scale));
    if (featureIds.length > 1 || labels[0]) legendBox.appendChild(ilabEl("span", "ilab-legend-name", label(col)));
  }

  function drawPage() {
    const p = Math.min(Math.max(0, model.get("page")), pages.length - 1);
    const [a, b] = pages[p];
    pageStart = a;
    docsBox.replaceChildren();
    spans = [];
    let docEl = null;
    let doc = -1;
    for (let i = a; i < b; i++) {
      if (docOf[i] !== doc) {
        doc = docOf[i];
        docEl = ilabEl("div", "ilab-doc");
        docEl.dataset.doc = String(doc);
        docsBox.appendChild(docEl);
      }
      const span = ilabTokenSpan(vocab[tokenIds[i]]);
      span.dataset.i = String(i);
      docEl.appendChild(span);
      if (span.dataset.newline) docEl.appendChild(document.createElement("br"));
      spans.push(span);
    }
    pageLabel.textContent = ` page ${p + 1}/${pages.length} · tokens ${a}–${b - 1} of ${nTokens} `;
    prev.disabled = p === 0;
    next.disabled = p === pages.length - 1;
    colour();
    markSelected();
  }

  function markSelected() {
    const sel = model.get("selected_token");
    for (const s of docsBox.querySelectorAll(".ilab-selected")) s.classList.remove("ilab-selected");
    if (sel >= pageStart && sel < pageStart + spans.length) spans[sel - pageStart].classList.add("ilab-selected");
    if (sel >= 0 && sel < nTokens) {
      const col = colIndex();
      const values = columns.get(col);
      const v = values ? ilabFmt(values[sel]) : "…";
      status.textContent = `selected token ${sel}: ${tokenShown(sel)} = ${v}`;
    }
  }

  function topAt(i) {
    // The top features at token i, as [feature id, value], zeros left out: sent by Python when over
    // the cap or drawn from more features than offered (every latent of an SAE), else computed here.
    let all;
    if (topF) all = Array.from({ length: k }, (_, j) => [topF[i * k + j], topV[i * k + j]]);
    else {
      all = [];
      for (const [c, values] of columns) all.push([featureIds[c], values[i]]);
      all = all.sort((a, b) => b[1] - a[1]).slice(0, k);
    }
    return all.filter(([, v]) => v !== 0 && Number.isFinite(v));
  }

  function tipText(i) {
    const col = colIndex();
    const values = columns.get(col);
    const lines = [`${tokenShown(i)}  (token ${i}, doc ${docOf[i]}${bosSet.has(i) ? ", BOS: outside the colour scale" : ""})`];
    lines.push(`${label(col)}: ${values ? ilabFmt(values[i]) : "…"}`);
    if (featureIds.length > 1 || topF) {
      const top = topAt(i);
      lines.push(top.length ? "top features here:" : "no feature is active here");
      for (const [f, v] of top) lines.push(`  ${idLabel(f)}: ${ilabFmt(v)}`);
    }
    return lines.join("\n");
  }

  function showTip(span) {
    tip.show(span, tipText(Number(span.dataset.i)));
  }

  function select_(i) {
    model.set("selected_token", i);
    model.save_changes();
  }

  function moveCursor(delta) {
    if (!spans.length) return;
    const old = spans[cursor - pageStart];
    if (old) old.classList.remove("ilab-cursor");
    cursor = Math.min(pageStart + spans.length - 1, Math.max(pageStart, (cursor < 0 ? pageStart - 1 : cursor) + delta));
    const span = spans[cursor - pageStart];
    span.classList.add("ilab-cursor");
    span.scrollIntoView({ block: "nearest" });
    showTip(span);
  }

  /** Select the next (dir 1) or previous (-1) token where the feature is not zero, turning pages as needed. */
  function jumpActive(dir) {
    const col = colIndex();
    const values = columns.get(col);
    if (!values) return request(col);
    const sel = model.get("selected_token");
    const from = sel >= 0 ? sel : dir > 0 ? pageStart - 1 : pageStart + spans.length;
    for (let n = 1; n <= nTokens; n++) {
      const i = (((from + dir * n) % nTokens) + nTokens) % nTokens;
      if (values[i] === 0 || !Number.isFinite(values[i]) || bosSet.has(i)) continue;
      const p = pages.findIndex(([a, b]) => i >= a && i < b);
      if (p !== model.get("page")) {
        model.set("page", p); // redraws (change:page) before the selection below
        model.save_changes();
      }
      select_(i);
      const span = spans[i - pageStart];
      if (span) {
        span.scrollIntoView({ block: "nearest" });
        showTip(span);
      }
      if ((dir > 0 && i <= from) || (dir < 0 && i >= from)) status.textContent += " (wrapped around)";
      return;
    }
    status.textContent = `${label(col)} is zero on every token.`;
  }

  docsBox.addEventListener("mouseover", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-tok");
    if (span) showTip(span);
  });
  docsBox.addEventListener("mouseleave", () => tip.hide());
  docsBox.addEventListener("click", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-tok");
    if (span) select_(Number(span.dataset.i));
  });
  docsBox.addEventListener("keydown", (e) => {
    if (e.key === "ArrowRight") moveCursor(1);
    else if (e.key === "ArrowLeft") moveCursor(-1);
    else if ((e.key === "Enter" || e.key === " ") && cursor >= 0) select_(cursor);
    else return;
    e.preventDefault();
  });
  docsBox.addEventListener("blur", () => tip.hide());
  search.addEventListener("input", fillOptions);
  search.addEventListener("keydown", (e) => {
    // Enter picks the only match (or the first of several)
    if (e.key !== "Enter" || !select.options.length) return;
    e.preventDefault();
    model.set("feature", Number(select.options[0].value));
    model.save_changes();
  });
  select.addEventListener("change", () => {
    model.set("feature", Number(select.value));
    model.save_changes();
  });
  const turn = (d) => {
    model.set("page", Math.min(pages.length - 1, Math.max(0, model.get("page") + d)));
    model.save_changes();
  };
  prev.addEventListener("click", () => turn(-1));
  next.addEventListener("click", () => turn(1));
  prevHit.addEventListener("click", () => jumpActive(-1));
  nextHit.addEventListener("click", () => jumpActive(1));

  const onMsg = (msg, buffers) => {
    if (msg && msg.type === "pong") live = true;
    if (!msg || msg.type !== "column" || !buffers || !buffers.length) return;
    columns.set(msg.index, ilabDecode({ view: buffers[0], dtype: "float32" }));
    pending.delete(msg.index);
    status.textContent = "";
    colour();
    markSelected();
  };
  const onFeature = () => {
    fillOptions();
    colour();
    markSelected();
  };
  const onLabels = () => {
    labels = model.get("labels"); // a linked dashboard's labels arrive here
    fillOptions();
    colour();
  };
  const onScheme = () => ilabTheme(root, model.get("scheme"));
  const onPageTokens = () => {
    pages = pagesFor(docStarts, nTokens, Math.max(50, model.get("page_tokens")));
    drawPage();
  };
  const handlers = {
    "msg:custom": onMsg,
    "change:feature": onFeature,
    "change:labels": onLabels,
    "change:scales": () => {
      scales = ilabDecode(model.get("scales"));
      colour();
    },
    "change:selected_token": markSelected,
    "change:page": drawPage,
    "change:page_tokens": onPageTokens,
    "change:scheme": onScheme,
  };
  const stop = ilabListen(model, handlers, () => {
    picker.style.display = model.get("show_picker") ? "" : "none";
    onScheme();
    try {
      model.send({ type: "ping" }); // answered only by a live kernel
    } catch (err) {
      live = false; // exported HTML
    }
    fillOptions();
    drawPage();
    // the frame after next has been painted with the first page
    requestAnimationFrame(() => requestAnimationFrame(() => performance.mark("ilab-heatmap-painted")));
  });
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
