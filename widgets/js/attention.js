// AttentionPattern: one text's attention, head by head. A query x key matrix for the chosen head,
// thumbnails of every head of the layer (click one), and the tokens coloured by where the hovered
// token attends (as a query) and what attends to it (as a key). Click a token to keep it.

/**
 * Colour for an attention probability on the widget's scale (the shared ilabScalePos), as a plain rgba()
 * a canvas accepts: orange, or blue for the "attended by" strip; `alpha` is the theme's strongest alpha.
 */
function attnColor(p, scale, alpha, key) {
  const t = ilabScalePos(p, ilabScale(scale));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const rgb = key || t < 0 ? "49, 130, 189" : "230, 85, 13";
  return `rgba(${rgb}, ${(alpha * Math.abs(t)).toFixed(3)})`;
}

function drawPattern(canvas, pat, n, cell, light, scale, alpha) {
  // pat: Float32Array of n x n; cell: pixels per token
  canvas.width = n * cell;
  canvas.height = n * cell;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = light ? "#ffffff" : "#111111";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  for (let q = 0; q < n; q++) {
    for (let k = 0; k < n; k++) {
      const colour = attnColor(pat[q * n + k], scale, alpha, false);
      if (colour === "transparent") continue;
      ctx.fillStyle = colour;
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
  const legendBox = ilabEl("div", "ilab-legend-box");
  bar.append(layerBox, title, legendBox);
  const thumbs = ilabEl("div", "ilab-attn-thumbs");
  thumbs.setAttribute("role", "listbox");
  thumbs.setAttribute("aria-label", "heads of this layer");
  const main = ilabEl("div", "ilab-attn-main");
  const rowLabels = ilabEl("div", "ilab-attn-rowlabels");
  const matrix = ilabEl("canvas", "ilab-attn-matrix");
  matrix.setAttribute("role", "img");
  const matrixBox = ilabEl("div", "ilab-attn-matrixbox");
  const pointer = ilabEl("div", "ilab-attn-pointer"); // a point under the mouse for the hover box to sit next to
  matrixBox.append(matrix, pointer);
  main.append(rowLabels, matrixBox);
  const strips = ilabEl("div", "ilab-attn-strips");
  const fromLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const fromStrip = ilabEl("div", "ilab-attn-strip ilab-attn-from");
  const toLabel = ilabEl("div", "ilab-attn-striplabel ilab-muted");
  const toStrip = ilabEl("div", "ilab-attn-strip ilab-attn-to");
  strips.append(fromLabel, fromStrip, toLabel, toStrip);
  const tip = ilabTip(root, "ilab-attn-tip");
  root.append(bar, thumbs, main, strips);
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
  const scale = () => model.get("color_scale");
  const alpha = () => Number(getComputedStyle(root).getPropertyValue("--ilab-heat-alpha")) || 0.85;

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
      drawPattern(c, headPattern(li, h), n, Math.max(1, Math.floor(64 / Math.max(1, n))), light(), scale(), alpha());
      box.append(c, ilabEl("span", "ilab-attn-thumblabel", `H${h}`));
      thumbs.appendChild(box);
    }
  }

  function drawMatrix() {
    drawPattern(matrix, current(), n, cell, light(), scale(), alpha());
    legendBox.replaceChildren(ilabLegend(scale()));
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
    const who = ilabTokenText(tokens[i]).text;
    fromLabel.textContent = `${who} (position ${i}) attends to:`;
    toLabel.textContent = `attending to ${who}:`;
    fromStrip.replaceChildren();
    toStrip.replaceChildren();
    tokens.forEach((t, j) => {
      for (const [strip, v, key] of [[fromStrip, pat[i * n + j], false], [toStrip, pat[j * n + i], true]]) {
        const span = ilabTokenSpan(t);
        span.classList.add("ilab-attn-tok");
        span.style.background = attnColor(v, scale(), alpha(), key);
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
    tip.show(span, `${ilabTokenText(tokens[j]).text} (position ${j})\nattends to ${ilabTokenText(tokens[i]).text}: ${ilabFmt(pat[j * n + i])}` +
      `\n${ilabTokenText(tokens[i]).text} attends to it: ${ilabFmt(pat[i * n + j])}`);
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
    tip.hide();
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
    pointer.style.left = `${e.clientX - r.left}px`;
    pointer.style.top = `${e.clientY - r.top}px`;
    tip.show(pointer, `query ${ilabTokenText(tokens[q]).text} (${q}) → key ${ilabTokenText(tokens[k]).text} (${k})\n` +
      `attention ${ilabFmt(current()[q * n + k])}`);
  });
  matrix.addEventListener("mouseleave", () => tip.hide());
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

  const stop = ilabListen(
    model,
    {
      "change:color_scale": drawAll,
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
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
