// AttentionPattern: one text's attention, head by head. A query x key matrix for the chosen head,
// thumbnails of every head of the layer (click one), and the tokens coloured by where the hovered
// token attends (as a query) and what attends to it (as a key). Click a token to keep it.

/** Colour for an attention probability in [0, 1] (one function: the shared colour scales replace it). */
function attnColor(p, key) {
  if (!(p > 0)) return "transparent";
  const a = Math.min(1, p) * 0.9;
  return key ? `rgba(49, 130, 189, ${a.toFixed(3)})` : `rgba(230, 85, 13, ${a.toFixed(3)})`;
}

/** Place a tooltip next to a point (client coordinates), inside the widget root (position: relative). */
function attnPlaceTip(tip, root, x, y) {
  const base = root.getBoundingClientRect();
  tip.style.display = "block";
  const w = tip.offsetWidth;
  const left = x + 12 + w <= window.innerWidth ? x + 12 : Math.max(0, x - 12 - w);
  tip.style.left = `${Math.round(left - base.left)}px`;
  tip.style.top = `${Math.round(y - base.top + 12)}px`;
}

function drawPattern(canvas, pat, n, cell, light) {
  // pat: Float32Array of n x n; cell: pixels per token
  canvas.width = n * cell;
  canvas.height = n * cell;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = light ? "#ffffff" : "#111111";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < n; q++) {
    for (let k = 0; k <= q && k < n; k++) {
      const v = pat[q * n + k];
      if (!(v > 0.004)) continue;
      ctx.fillStyle = attnColor(v, false);
      ctx.fillRect(k * cell, q * cell, cell, cell);
    }
  }
}

function render({ model, el }) {
  const root = ilabEl("div", "ilab-attn");
  el.appendChild(root);
  const bar = ilabEl("div", "ilab-attn-bar");
  const layerBox = ilabEl("label", "ilab-attn-layer");
  const layerSelect = ilabEl("select");
  layerSelect.setAttribute("aria-label", "layer");
  layerBox.append(ilabEl("span", "ilab-muted", "layer "), layerSelect);
  const title = ilabEl("span", "ilab-attn-title");
  bar.append(layerBox, title, ilabLegend(0, 1, false));
  const thumbs = ilabEl("div", "ilab-attn-thumbs");
  thumbs.setAttribute("role", "listbox");
  thumbs.setAttribute("aria-label", "heads of this layer");
  const main = ilabEl("div", "ilab-attn-main");
  const rowLabels = ilabEl("div", "ilab-attn-rowlabels");
  const matrix = ilabEl("canvas", "ilab-attn-matrix");
  matrix.setAttribute("role", "img");
  main.append(rowLabels, matrix);
  const strips = ilabEl("div", "ilab-attn-strips");
  const fromLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const fromStrip = ilabEl("div", "ilab-attn-strip ilab-attn-from");
  const toLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const toStrip = ilabEl("div", "ilab-attn-strip ilab-attn-to");
  strips.append(fromLabel, fromStrip, toLabel, toStrip);
  const tip = ilabEl("div", "ilab-tip ilab-attn-tip");
  root.append(bar, thumbs, main, strips, tip);
  [layerSelect, thumbs].forEach(ilabKeepKeys);

  const tokens = model.get("tokens");
  const n = tokens.length;
  let all = ilabDecode(model.get("patterns"));
  let [nLayers, nHeads] = model.get("patterns").shape;
  let hovered = -1;
  const cell = Math.max(4, Math.min(22, Math.floor(440 / Math.max(1, n))));

  const layerIndex = () => Math.max(0, model.get("layers").indexOf(model.get("layer")));
  const headPattern = (li, h) => all.subarray(((li * nHeads + h) * n) * n, ((li * nHeads + h + 1) * n) * n);
  const current = () => headPattern(layerIndex(), model.get("head"));
  const light = () => !root.classList.contains("ilab-dark") && !ilabIsDark(model.get("scheme"));

  function setTrait(name, value) {
    model.set(name, value);
    model.save_changes();
  }

  function drawLayers() {
    layerSelect.replaceChildren();
    for (const l of model.get("layers")) {
      const opt = ilabEl("option", null, `L${l}`);
      opt.value = String(l);
      layerSelect.appendChild(opt);
    }
    layerSelect.value = String(model.get("layer"));
    layerBox.style.display = model.get("layers").length > 1 ? "" : "none";
  }

  function drawThumbs() {
    thumbs.replaceChildren();
    const li = layerIndex();
    for (let h = 0; h < nHeads; h++) {
      const box = ilabEl("button", "ilab-attn-thumb");
      box.dataset.head = String(h);
      box.setAttribute("role", "option");
      box.setAttribute("aria-label", `head ${h}`);
      box.classList.toggle("ilab-active", h === model.get("head"));
      const c = ilabEl("canvas", "ilab-attn-thumbcanvas");
      drawPattern(c, headPattern(li, h), n, Math.max(1, Math.floor(64 / Math.max(1, n))) || 1, light());
      box.append(c, ilabEl("span", "ilab-attn-thumblabel", `H${h}`));
      thumbs.appendChild(box);
    }
  }

  function drawMatrix() {
    drawPattern(matrix, current(), n, cell, light());
    matrix.setAttribute("aria-label", `layer ${model.get("layer")} head ${model.get("head")}: ${n} x ${n} attention pattern`);
    title.textContent = `L${model.get("layer")} H${model.get("head")} · query ↓ attends to key →`;
    rowLabels.replaceChildren();
    rowLabels.style.display = cell >= 10 ? "" : "none";
    tokens.forEach((t, i) => {
      const shown = ilabTokenText(t);
      const label = ilabEl("div", "ilab-attn-rowlabel" + (shown.faint ? " ilab-faint" : ""), shown.text);
      label.style.height = `${cell}px`;
      label.style.lineHeight = `${cell}px`;
      label.dataset.i = String(i);
      rowLabels.appendChild(label);
    });
    const focus = focusToken();
    if (focus >= 0) {
      const ctx = matrix.getContext("2d");
      ctx.strokeStyle = light() ? "rgba(0,0,0,0.6)" : "rgba(255,255,255,0.7)";
      ctx.lineWidth = 1;
      ctx.strokeRect(0.5, focus * cell + 0.5, n * cell - 1, cell - 1);
      ctx.strokeRect(focus * cell + 0.5, 0.5, cell - 1, n * cell - 1);
    }
  }

  function focusToken() {
    return hovered >= 0 ? hovered : model.get("selected_token") >= 0 ? model.get("selected_token") : n - 1;
  }

  function drawStrips() {
    const i = focusToken();
    const pat = current();
    const who = JSON.stringify(tokens[i]);
    fromLabel.textContent = `${who} (position ${i}) attends to:`;
    toLabel.textContent = `attending to ${who}:`;
    fromStrip.replaceChildren();
    toStrip.replaceChildren();
    tokens.forEach((t, j) => {
      for (const [strip, v, key] of [[fromStrip, pat[i * n + j], false], [toStrip, pat[j * n + i], true]]) {
        const span = ilabTokenSpan(t);
        span.classList.add("ilab-attn-tok");
        // the shared scale behind text (its alpha follows the theme: light text keeps 4.5:1 in dark themes);
        // keys blue, queries orange, as attnColor draws the matrix
        span.style.background = ilabColor(key ? -v : v, { kind: "diverging", vmin: -1, center: 0, vmax: 1 });
        span.dataset.i = String(j);
        span.dataset.v = String(v);
        span.classList.toggle("ilab-attn-focus", j === i);
        span.classList.toggle("ilab-selected", j === model.get("selected_token"));
        strip.appendChild(span);
      }
    });
  }

  function drawHead() {
    drawMatrix();
    drawStrips();
    for (const b of thumbs.children) b.classList.toggle("ilab-active", Number(b.dataset.head) === model.get("head"));
  }

  function drawAll() {
    ilabTheme(root, model.get("scheme"));
    all = ilabDecode(model.get("patterns"));
    [nLayers, nHeads] = model.get("patterns").shape;
    drawLayers();
    drawThumbs();
    drawHead();
  }

  function tokenTip(e, span) {
    const j = Number(span.dataset.i);
    const i = focusToken();
    const pat = current();
    hovered = j;
    tip.textContent = `${JSON.stringify(tokens[j])} (position ${j})\nattends to ${JSON.stringify(tokens[i])}: ${ilabFmt(pat[j * n + i])}` +
      `\n${JSON.stringify(tokens[i])} attends to it: ${ilabFmt(pat[i * n + j])}`;
    const r = span.getBoundingClientRect();
    attnPlaceTip(tip, root, r.left, r.bottom - 8);
  }

  strips.addEventListener("mouseover", (e) => {
    const span = e.target.closest(".ilab-attn-tok");
    if (!span) return;
    const j = Number(span.dataset.i);
    const before = focusToken();
    tokenTip(e, span);
    if (j !== before) {
      hovered = j;
      drawMatrix();
      drawStrips();
    }
  });
  strips.addEventListener("mouseleave", () => {
    hovered = -1;
    tip.style.display = "none";
    drawMatrix();
    drawStrips();
  });
  strips.addEventListener("click", (e) => {
    const span = e.target.closest(".ilab-attn-tok");
    if (span) setTrait("selected_token", Number(span.dataset.i));
  });
  matrix.addEventListener("mousemove", (e) => {
    const r = matrix.getBoundingClientRect();
    const scale = matrix.width / r.width || 1;
    const k = Math.floor(((e.clientX - r.left) * scale) / cell);
    const q = Math.floor(((e.clientY - r.top) * scale) / cell);
    if (q < 0 || k < 0 || q >= n || k >= n) return;
    tip.textContent = `query ${JSON.stringify(tokens[q])} (${q}) → key ${JSON.stringify(tokens[k])} (${k})\n` +
      `attention ${ilabFmt(current()[q * n + k])}`;
    attnPlaceTip(tip, root, e.clientX, e.clientY);
  });
  matrix.addEventListener("mouseleave", () => (tip.style.display = "none"));
  matrix.addEventListener("click", (e) => {
    const r = matrix.getBoundingClientRect();
    const q = Math.floor(((e.clientY - r.top) * (matrix.height / r.height || 1)) / cell);
    if (q >= 0 && q < n) setTrait("selected_token", q);
  });
  thumbs.addEventListener("click", (e) => {
    const b = e.target.closest(".ilab-attn-thumb");
    if (b) setTrait("head", Number(b.dataset.head));
  });
  thumbs.addEventListener("keydown", (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    if (step) {
      setTrait("head", (model.get("head") + step + nHeads) % nHeads);
      e.preventDefault();
    }
  });
  layerSelect.addEventListener("change", () => setTrait("layer", Number(layerSelect.value)));

  return ilabListen(
    model,
    {
      "change:head": drawHead,
      "change:layer": () => {
        layerSelect.value = String(model.get("layer"));
        drawThumbs();
        drawHead();
      },
      "change:selected_token": () => {
        drawMatrix();
        drawStrips();
      },
      "change:scheme": drawAll,
      "change:patterns": drawAll,
    },
    drawAll,
  );
}

export default { render };
