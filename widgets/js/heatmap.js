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
  const colMax = ilabDecode(model.get("column_max"));
  const featureIds = model.get("feature_ids");
  const labels = model.get("labels");
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
  nav.append(prev, pageLabel, next);
  bar.append(picker, legendBox, nav);
  const docsBox = ilabFocusBox("ilab-docs", "grid", "tokens: arrow keys move, Enter selects");
  const status = ilabEl("div", "ilab-status ilab-muted");
  const tip = ilabEl("div", "ilab-tip");
  root.append(bar, docsBox, status, tip);
  [search, select, docsBox].forEach(ilabKeepKeys);

  const label = (c) => (labels[c] ? `${featureIds[c]} · ${labels[c]}` : `${featureIds[c]}`);
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

  function scaleInfo(col) {
    const values = columns.get(col);
    let diverging = model.get("scale") === "diverging";
    if (model.get("scale") === "auto" && values) diverging = values.some((v) => v < 0);
    return { values, vmax: colMax[col], diverging };
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
    const { values, vmax, diverging } = scaleInfo(col);
    if (!values) {
      request(col);
      status.textContent = `loading feature ${featureIds[col]}…`;
      return;
    }
    for (let j = 0; j < spans.length; j++) {
      const v = values[pageStart + j];
      spans[j].style.background = ilabColor(v, vmax, diverging);
      spans[j].dataset.v = String(v);
    }
    const name = featureIds.length === 1 && !labels[0] ? "" : ` ${label(col)}`;
    legendBox.replaceChildren(ilabLegend(diverging ? -vmax : 0, vmax, diverging), ilabEl("span", "ilab-muted", name));
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
      status.textContent = `selected token ${sel}: ${JSON.stringify(vocab[tokenIds[sel]])} = ${v}`;
    }
  }

  function topAt(i) {
    // The top features at token i: sent by Python when over the cap, else computed here.
    if (topF) return Array.from({ length: k }, (_, j) => [topF[i * k + j], topV[i * k + j]]);
    const all = [];
    for (const [c, values] of columns) all.push([c, values[i]]);
    return all.sort((a, b) => b[1] - a[1]).slice(0, k);
  }

  function tipText(i) {
    const col = colIndex();
    const values = columns.get(col);
    const lines = [`${JSON.stringify(vocab[tokenIds[i]])}  (token ${i}, doc ${docOf[i]})`];
    lines.push(`${label(col)}: ${values ? ilabFmt(values[i]) : "…"}`);
    if (featureIds.length > 1) {
      lines.push("top features here:");
      for (const [c, v] of topAt(i)) lines.push(`  ${label(c)}: ${ilabFmt(v)}`);
    }
    return lines.join("\n");
  }

  function showTip(span) {
    tip.textContent = tipText(Number(span.dataset.i));
    const r = span.getBoundingClientRect();
    tip.style.left = `${Math.round(r.left)}px`;
    tip.style.top = `${Math.round(r.bottom + 4)}px`;
    tip.style.display = "block";
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

  docsBox.addEventListener("mouseover", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-tok");
    if (span) showTip(span);
  });
  docsBox.addEventListener("mouseleave", () => (tip.style.display = "none"));
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
  docsBox.addEventListener("blur", () => (tip.style.display = "none"));
  search.addEventListener("input", fillOptions);
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
  const onScheme = () => ilabTheme(root, model.get("scheme"));
  const onPageTokens = () => {
    pages = pagesFor(docStarts, nTokens, Math.max(50, model.get("page_tokens")));
    drawPage();
  };
  const handlers = {
    "msg:custom": onMsg,
    "change:feature": onFeature,
    "change:scale": colour,
    "change:selected_token": markSelected,
    "change:page": drawPage,
    "change:page_tokens": onPageTokens,
    "change:scheme": onScheme,
  };
  return ilabListen(model, handlers, () => {
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
}

export default { render };
