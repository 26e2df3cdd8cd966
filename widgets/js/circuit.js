// CircuitGraph: an attribution graph on a canvas; columns are positions, rows layers; client-side pruning.

const CG_KIND_COLOURS = { light: ["#2f6fb3", "#9a9a9a", "#3a9a4a", "#c2571a"], dark: ["#6aa8ee", "#b0b0b0", "#6fd47f", "#f09050"] };
const CG_KIND_NAMES = ["feature", "error", "token", "logit"];

function render({ model, el }) {
  performance.mark("ilab-circuit-render-start");
  const root = ilabEl("div", "ilab-circuit");
  el.appendChild(root);
  const bar = ilabEl("div", "ilab-cg-bar");
  const sliderLabel = ilabEl("label", null, "pruning ");
  const slider = ilabEl("input");
  slider.type = "range";
  slider.min = "0.05";
  slider.max = "1";
  slider.step = "0.01";
  slider.setAttribute("aria-label", "cumulative influence kept");
  const sliderValue = ilabEl("span", "ilab-muted");
  sliderLabel.append(slider, sliderValue);
  const groupName = ilabSearchBox("supernode label", "supernode label");
  const groupButton = ilabEl("button", null, "Group");
  const info = ilabEl("span", "ilab-muted");
  bar.append(sliderLabel, groupName, groupButton, info);
  const side = ilabEl("div", "ilab-cg-side");
  const canvas = ilabEl("canvas");
  canvas.tabIndex = 0;
  canvas.setAttribute("role", "img");
  canvas.setAttribute("aria-label", "attribution graph");
  const answer = ilabEl("div", "ilab-cg-answer");
  side.append(canvas, answer);
  const groupsLine = ilabEl("div", "ilab-cg-groups ilab-muted");
  root.append(bar, side, groupsLine);
  const tip = ilabTip(root, "ilab-cg-tip");
  [slider, groupName, canvas].forEach(ilabKeepKeys);

  let g = null; // decoded graph
  let pos = null; // [n, 2] node centres
  let visible = null; // Uint8Array per node
  let hover = -1;
  let picked = new Set(); // shift-clicked nodes for a supernode
  let highlight = null; // Set of edge indices on the hovered node's strongest paths
  const W = 900;

  function decode() {
    const d = model.get("graph");
    g = {
      nLayers: d.n_layers, nPos: d.n_pos, n: d.n_nodes, m: d.n_edges, tokens: d.prompt_tokens, labels: d.labels,
      kind: ilabDecode(d.kind), layer: ilabDecode(d.layer), pos: ilabDecode(d.pos), latent: ilabDecode(d.latent),
      activation: ilabDecode(d.activation), rank: ilabDecode(d.rank), src: ilabDecode(d.src), dst: ilabDecode(d.dst),
      weight: ilabDecode(d.weight), latentLabels: d.latent_labels || {},
    };
    let maxW = 0;
    for (let e = 0; e < g.m; e++) maxW = Math.max(maxW, Math.abs(g.weight[e]));
    g.maxW = maxW || 1;
    g.out = Array.from({ length: g.n }, () => []);
    g.inc = Array.from({ length: g.n }, () => []);
    for (let e = 0; e < g.m; e++) {
      g.out[g.src[e]].push(e);
      g.inc[g.dst[e]].push(e);
    }
    for (const list of [...g.out, ...g.inc]) list.sort((a, b) => Math.abs(g.weight[b]) - Math.abs(g.weight[a]));
  }

  function layout() {
    const rows = g.nLayers + 2; // embeddings, layers, logits
    const H = Math.max(240, Math.min(900, rows * 34));
    const dpr = window.devicePixelRatio || 1;
    canvas.width = W * dpr;
    canvas.height = H * dpr;
    canvas.style.width = `${W}px`;
    canvas.style.height = `${H}px`;
    const colW = (W - 60) / g.nPos;
    const rowH = (H - 40) / rows;
    // nodes sharing a cell are spread across it
    const cells = new Map();
    for (let i = 0; i < g.n; i++) {
      const key = `${g.layer[i]}:${g.pos[i]}`;
      if (!cells.has(key)) cells.set(key, []);
      cells.get(key).push(i);
    }
    pos = new Float32Array(g.n * 2);
    for (const members of cells.values()) {
      members.forEach((i, j) => {
        const row = g.kind[i] === 2 ? 0 : g.kind[i] === 3 ? rows - 1 : g.layer[i] + 1;
        const spread = colW * 0.8;
        const x = 50 + colW * g.pos[i] + colW * 0.1 + (members.length > 1 ? (spread * j) / (members.length - 1) : spread / 2);
        pos[2 * i] = x;
        pos[2 * i + 1] = H - 20 - rowH * row - rowH / 2;
      });
    }
    g.H = H;
    g.rowH = rowH;
    g.colW = colW;
  }

  function computeVisible() {
    const t = model.get("threshold");
    visible = new Uint8Array(g.n);
    for (let i = 0; i < g.n; i++) visible[i] = g.kind[i] >= 2 || g.rank[i] <= t ? 1 : 0;
  }

  function strongestPaths(start) {
    const edges = new Set();
    const walk = (node, dir, depth) => {
      if (depth > 6) return;
      const list = (dir === "up" ? g.inc : g.out)[node].filter((e) => visible[g.src[e]] && visible[g.dst[e]]).slice(0, 2);
      for (const e of list) {
        if (edges.has(e)) continue;
        edges.add(e);
        walk(dir === "up" ? g.src[e] : g.dst[e], dir, depth + 1);
      }
    };
    walk(start, "up", 0);
    walk(start, "down", 0);
    return edges;
  }

  function draw() {
    const ctx = canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const dark = ilabIsDark(model.get("scheme")) || root.classList.contains("ilab-dark");
    const colours = dark ? CG_KIND_COLOURS.dark : CG_KIND_COLOURS.light;
    ctx.fillStyle = dark ? "#1e1e1e" : "#ffffff";
    ctx.fillRect(0, 0, W, g.H);
    ctx.fillStyle = dark ? "#ccc" : "#444";
    ctx.font = "10px sans-serif";
    for (let l = 0; l < g.nLayers; l += Math.max(1, Math.ceil(g.nLayers / 18))) {
      ctx.fillText(`L${l}`, 4, g.H - 20 - g.rowH * (l + 1) - g.rowH / 2 + 3);
    }
    // supernodes: a box around their members
    for (const sn of model.get("supernodes")) {
      const members = sn.nodes.filter((i) => i < g.n);
      if (!members.length) continue;
      let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
      for (const i of members) {
        x0 = Math.min(x0, pos[2 * i]); x1 = Math.max(x1, pos[2 * i]);
        y0 = Math.min(y0, pos[2 * i + 1]); y1 = Math.max(y1, pos[2 * i + 1]);
      }
      ctx.strokeStyle = dark ? "#e0c060" : "#b08000";
      ctx.strokeRect(x0 - 8, y0 - 8, x1 - x0 + 16, y1 - y0 + 16);
      ctx.fillStyle = ctx.strokeStyle;
      ctx.fillText(sn.label, x0 - 8, y0 - 11);
    }
    // edges
    const pos_ = dark ? "rgba(110,170,255," : "rgba(40,100,200,";
    const neg_ = dark ? "rgba(255,120,110," : "rgba(200,50,40,";
    let shown = 0;
    for (let e = 0; e < g.m; e++) {
      const s = g.src[e], d = g.dst[e];
      if (!visible[s] || !visible[d]) continue;
      shown++;
      const w = Math.abs(g.weight[e]) / g.maxW;
      const lit = highlight && highlight.has(e);
      if (highlight && !lit && w < 0.05) continue;
      ctx.strokeStyle = (g.weight[e] >= 0 ? pos_ : neg_) + (lit ? 0.95 : highlight ? 0.08 : Math.min(0.7, 0.15 + w)) + ")";
      ctx.lineWidth = lit ? 1 + 4 * w : 0.3 + 3 * w;
      ctx.beginPath();
      ctx.moveTo(pos[2 * s], pos[2 * s + 1]);
      ctx.lineTo(pos[2 * d], pos[2 * d + 1]);
      ctx.stroke();
    }
    let nodes = 0;
    for (let i = 0; i < g.n; i++) {
      if (!visible[i]) continue;
      nodes++;
      ctx.fillStyle = colours[g.kind[i]];
      ctx.beginPath();
      const r = i === hover || i === model.get("selected") ? 6 : picked.has(i) ? 5 : 3.5;
      if (g.kind[i] === 1) ctx.rect(pos[2 * i] - r, pos[2 * i + 1] - r, 2 * r, 2 * r);
      else ctx.arc(pos[2 * i], pos[2 * i + 1], r, 0, 2 * Math.PI);
      ctx.fill();
      if (picked.has(i)) {
        ctx.strokeStyle = dark ? "#fff" : "#000";
        ctx.stroke();
      }
    }
    // token labels under their columns (textContent-free: canvas text is never HTML)
    ctx.fillStyle = dark ? "#ddd" : "#222";
    for (let p = 0; p < g.nPos; p++) {
      const t = ilabTokenText(g.tokens[p] || "").text.slice(0, 10);
      ctx.fillText(t, 50 + g.colW * p + 2, g.H - 4);
    }
    sliderValue.textContent = ` ${Number(model.get("threshold")).toFixed(2)}`;
    info.textContent = `${nodes} nodes, ${shown} edges shown`;
    canvas.ilabNodePosition = (i) => (visible[i] ? [pos[2 * i], pos[2 * i + 1]] : null); // for tests
    canvas.dataset.nodes = String(nodes);
    canvas.dataset.edges = String(shown);
    canvas.dataset.lit = String(highlight ? highlight.size : 0); // edges on the hovered node's strongest paths
  }

  function nodeAt(x, y) {
    let best = -1, bestD = 64;
    for (let i = 0; i < g.n; i++) {
      if (!visible[i]) continue;
      const d = (pos[2 * i] - x) ** 2 + (pos[2 * i + 1] - y) ** 2;
      if (d < bestD) { bestD = d; best = i; }
    }
    return best;
  }

  function describe(i) {
    const k = CG_KIND_NAMES[g.kind[i]];
    const lines = [`${k}: ${g.labels[i]}`];
    if (g.kind[i] <= 1) lines.push(`layer ${g.layer[i]}, position ${g.pos[i]} (${g.tokens[g.pos[i]] ?? ""})`);
    if (g.kind[i] === 0) {
      lines.push(`activation ${ilabFmt(g.activation[i])}`);
      const label = g.latentLabels[String(g.latent[i])];
      if (label) lines.push(label);
    }
    lines.push(`influence rank ${ilabFmt(g.rank[i])}, ${g.inc[i].length} in / ${g.out[i].length} out`);
    return lines.map((line) => ilabEl("div", null, line));
  }

  function anchorAt(x, y) {
    const r = canvas.getBoundingClientRect();
    return { getBoundingClientRect: () => ({ left: r.left + x, right: r.left + x, top: r.top + y - 6, bottom: r.top + y + 6 }) };
  }

  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    const i = nodeAt(ev.clientX - r.left, ev.clientY - r.top);
    if (i === hover) return;
    hover = i;
    highlight = i >= 0 ? strongestPaths(i) : null;
    if (i >= 0) tip.show(anchorAt(pos[2 * i], pos[2 * i + 1]), describe(i));
    else tip.hide();
    draw();
  });
  canvas.addEventListener("mouseleave", () => { hover = -1; highlight = null; tip.hide(); draw(); });
  canvas.addEventListener("click", (ev) => {
    const r = canvas.getBoundingClientRect();
    const i = nodeAt(ev.clientX - r.left, ev.clientY - r.top);
    if (i < 0) return;
    if (ev.shiftKey) {
      if (picked.has(i)) picked.delete(i); else picked.add(i);
      draw();
      return;
    }
    model.set("selected", i);
    model.save_changes();
  });
  slider.addEventListener("input", () => {
    model.set("threshold", Number(slider.value));
    computeVisible();
    draw(); // no round trip: the browser prunes
    model.save_changes();
  });
  groupButton.addEventListener("click", () => {
    const label = groupName.value.trim();
    if (!label || !picked.size) return;
    model.set("supernodes", [...model.get("supernodes"), { label, nodes: [...picked] }]);
    model.save_changes();
    picked = new Set();
    groupName.value = "";
  });

  function drawAnswer() {
    const r = model.get("intervention");
    answer.replaceChildren();
    if (!r || !r.before) return;
    answer.append(ilabEl("div", "ilab-muted", "intervention"));
    const table = ilabEl("table");
    const head = ilabEl("tr");
    head.append(ilabEl("td", null, "before"), ilabEl("td", null, "after"));
    table.append(head);
    for (let k = 0; k < Math.max(r.before.length, r.after.length); k++) {
      const row = ilabEl("tr");
      for (const side of [r.before, r.after]) {
        const cell = side[k] ? `${ilabTokenText(side[k][0]).text} ${ilabFmt(side[k][1])}` : "";
        row.append(ilabEl("td", null, cell));
      }
      table.append(row);
    }
    answer.append(table);
    if (r.generated_after || r.generated_before) {
      answer.append(ilabEl("div", null, `before: ${r.generated_before}`), ilabEl("div", null, `after: ${r.generated_after}`));
    }
  }

  function drawGroups() {
    groupsLine.replaceChildren(...model.get("supernodes").map((s) => ilabEl("span", null, `${s.label} (${s.nodes.length})`)));
  }

  function drawAll() {
    ilabTheme(root, model.get("scheme"));
    decode();
    layout();
    slider.value = String(model.get("threshold"));
    computeVisible();
    draw();
    drawAnswer();
    drawGroups();
  }

  const stop = ilabListen(
    model,
    {
      "change:graph": drawAll,
      "change:scheme": drawAll,
      "change:threshold": () => { slider.value = String(model.get("threshold")); computeVisible(); draw(); },
      "change:selected": draw,
      "change:supernodes": () => { draw(); drawGroups(); },
      "change:intervention": drawAnswer,
    },
    drawAll,
  );
  requestAnimationFrame(() => requestAnimationFrame(() => performance.mark("ilab-circuit-painted")));
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
