// PatchingGrid: layers x positions (or heads / latents) heatmap; tabs per site and method; click a cell.

function render({ model, el }) {
  const root = ilabEl("div", "ilab-patching");
  el.appendChild(root);
  const groupsBar = ilabEl("div", "ilab-pg-tabs ilab-pg-groups");
  const methodsBar = ilabEl("div", "ilab-pg-tabs ilab-pg-methods");
  const bar = ilabEl("div", "ilab-pg-bar");
  const normLabel = ilabEl("label", "ilab-pg-norm");
  const normBox = ilabEl("input");
  normBox.type = "checkbox";
  normLabel.append(normBox, ilabEl("span", null, " normalized (0 = corrupted, 1 = clean)"));
  const legendBox = ilabEl("div", "ilab-legend-box");
  const info = ilabEl("div", "ilab-pg-info ilab-muted");
  bar.append(normLabel, legendBox, info);
  const prompts = ilabEl("div", "ilab-pg-prompts");
  const gridBox = ilabFocusBox("ilab-pg-grid", "grid", "patching grid: arrow keys move, Enter selects");
  const detail = ilabEl("div", "ilab-pg-detail");
  const tip = ilabTip(root, "ilab-pg-tip");
  root.append(groupsBar, methodsBar, bar, prompts, gridBox, detail);
  [gridBox, normBox].forEach(ilabKeepKeys);

  let cells = [];
  let current = null;

  const grids = () => model.get("grids");
  const currentGrid = () => grids().find((g) => g.key === model.get("tab")) || grids()[0];

  function decoded(g) {
    return {
      values: ilabDecode(g.values),
      normalized: ilabDecode(g.normalized),
      topIndex: g.top_index ? ilabDecode(g.top_index) : null,
      topProbs: g.top_probs ? ilabDecode(g.top_probs) : null,
      k: g.top_probs ? g.top_probs.shape[2] : 0,
    };
  }

  /** Whether [row id, column id] names the same cell in both grids (one site's method tabs). */
  function sameCells(a, b) {
    const key = (g) => JSON.stringify([g.group, g.row_name, g.col_name, g.rows, g.cols]);
    return key(a) === key(b);
  }

  function setTab(key) {
    const before = currentGrid();
    const after = grids().find((g) => g.key === key);
    if (after && !sameCells(before, after)) model.set("selected", []); // those ids would mean another cell
    model.set("tab", key);
    model.save_changes();
  }

  function drawTabs() {
    const g0 = currentGrid();
    groupsBar.replaceChildren();
    methodsBar.replaceChildren();
    const groups = [...new Set(grids().map((g) => g.group))];
    for (const group of groups) {
      const b = ilabEl("button", "ilab-pg-tab", group);
      b.dataset.group = group;
      b.classList.toggle("ilab-active", group === g0.group);
      b.addEventListener("click", () => {
        const same = grids().filter((g) => g.group === group);
        const pick = same.find((g) => g.method === g0.method) || same[0];
        setTab(pick.key);
      });
      groupsBar.appendChild(b);
    }
    groupsBar.style.display = groups.length > 1 ? "" : "none";
    const inGroup = grids().filter((g) => g.group === g0.group);
    for (const g of inGroup) {
      const label = inGroup.filter((h) => h.method === g.method).length > 1 ? `${g.method} · ${g.key}` : g.method;
      const b = ilabEl("button", "ilab-pg-tab", label);
      b.dataset.key = g.key;
      b.dataset.method = g.method;
      b.classList.toggle("ilab-active", g.key === g0.key);
      b.addEventListener("click", () => setTab(g.key));
      methodsBar.appendChild(b);
    }
  }

  /** The clean and corrupted prompts, one token each with its position; tokens that differ are marked. */
  function drawPrompts(g) {
    prompts.replaceChildren();
    const clean = g.prompt || [];
    const corrupt = g.corrupt_prompt || [];
    if (!clean.length && !corrupt.length) return;
    for (const [name, toks, other] of [["clean", clean, corrupt], ["corrupted", corrupt, clean]]) {
      if (!toks.length) continue;
      const line = ilabEl("div", `ilab-pg-prompt ilab-pg-prompt-${name}`);
      line.appendChild(ilabEl("span", "ilab-pg-promptname ilab-muted", `${name}:`));
      toks.forEach((tok, p) => {
        const shown = ilabTokenText(tok);
        const span = ilabEl("span", "ilab-pg-ptok" + (shown.faint ? " ilab-faint" : ""), shown.text);
        span.title = `position ${p}`;
        span.dataset.pos = String(p);
        if (other.length && other[p] !== tok) span.classList.add("ilab-pg-pdiff");
        line.appendChild(span);
      });
      prompts.appendChild(line);
    }
  }

  function rowTitle(g, r) {
    const text = (g.row_text || [])[r];
    const head = g.row_name === "layer" ? `L${g.rows[r]}` : `latent ${g.rows[r]}`;
    return text ? `${head} · ${text}` : head;
  }

  function colLabel(g, c) {
    const label = ilabEl("div", "ilab-pg-collabel");
    if (g.col_name !== "position") {
      label.appendChild(ilabEl("span", "ilab-pg-coltok", g.cols[c]));
      label.title = g.cols[c];
      return label;
    }
    const tok = ilabTokenText(g.col_tokens[c]);
    label.append(
      ilabEl("span", "ilab-pg-colpos ilab-muted", g.cols[c]),
      ilabEl("span", "ilab-pg-coltok" + (tok.faint ? " ilab-faint" : ""), tok.text),
    );
    const corrupt = (g.corrupt_tokens || [])[c];
    label.title = `position ${g.cols[c]}: ${tok.text}` + (corrupt !== undefined && corrupt !== g.col_tokens[c]
      ? ` (corrupted: ${ilabTokenText(corrupt).text})` : "");
    if (corrupt !== undefined && corrupt !== g.col_tokens[c]) label.classList.add("ilab-pg-coldiff");
    return label;
  }

  function cellValue(d, i) {
    return model.get("normalized") ? d.normalized[i] : d.values[i];
  }

  function currentScale(g) {
    const s = (model.get("scales") || {})[g.key];
    if (!s) return ilabScale(1, true);
    return ilabScale(model.get("normalized") ? s.normalized : s.values);
  }

  function drawGrid() {
    const g = currentGrid();
    const d = decoded(g);
    current = { g, d };
    const [R, C] = g.values.shape;
    const scale = currentScale(g);
    legendBox.replaceChildren(ilabLegend(scale));
    info.textContent = `${g.method} ${g.site} · ${g.metric}: clean ${ilabFmt(g.clean)}, corrupted ${ilabFmt(g.corrupt)}`;
    drawPrompts(g);
    gridBox.replaceChildren();
    gridBox.style.gridTemplateColumns = `auto repeat(${C}, minmax(38px, 1fr))`;
    gridBox.dataset.rows = g.row_name;
    cells = [];
    for (let r = 0; r < R; r++) {
      const text = (g.row_text || [])[r];
      const label = ilabEl("div", "ilab-pg-rowlabel", rowTitle(g, r));
      label.dataset.row = String(g.rows[r]);
      if (g.row_name === "latent") {
        label.classList.add("ilab-pg-latent");
        label.setAttribute("role", "button");
        label.title = `latent ${g.rows[r]}${text ? ` · ${text}` : ""}: click to open its card in a linked dashboard`;
      } else if (text) label.title = text;
      gridBox.appendChild(label);
      for (let c = 0; c < C; c++) {
        const i = r * C + c;
        const cell = ilabEl("div", "ilab-pg-cell");
        cell.dataset.i = String(i);
        cell.dataset.v = String(cellValue(d, i));
        cell.setAttribute("role", "gridcell");
        cell.style.background = ilabColor(cellValue(d, i), scale);
        gridBox.appendChild(cell);
        cells.push(cell);
      }
    }
    gridBox.appendChild(ilabEl("div", "ilab-pg-rowtitle ilab-muted", `${g.row_name} ↓`));
    for (let c = 0; c < C; c++) gridBox.appendChild(colLabel(g, c));
    const colTitle = g.col_name === "position" ? "position → (index, clean token)" : `${g.col_name} →`;
    const axis = ilabEl("div", "ilab-pg-coltitle ilab-muted", colTitle);
    axis.style.gridColumn = `2 / span ${C}`;
    gridBox.appendChild(ilabEl("div", "ilab-pg-corner"));
    gridBox.appendChild(axis);
    markSelected();
  }

  function cellIds(g, i) {
    const C = g.values.shape[1];
    const r = Math.floor(i / C);
    const c = i % C;
    const colId = g.col_name === "position" ? Number(g.cols[c]) : c;
    return { r, c, rowId: g.rows[r], colId };
  }

  function describe(g, d, i) {
    const { r, c } = cellIds(g, i);
    let where = g.cols[c];
    if (g.col_name === "position") {
      where = `position ${g.cols[c]} ${ilabTokenText(g.col_tokens[c]).text}`;
      const corrupt = (g.corrupt_tokens || [])[c];
      if (corrupt !== undefined && corrupt !== g.col_tokens[c]) where += ` (corrupted: ${ilabTokenText(corrupt).text})`;
    }
    const row = g.row_name === "layer" ? `layer ${g.rows[r]}` : rowTitle(g, r);
    return `${row} · ${where}\nvalue ${ilabFmt(d.values[i])} · normalized ${ilabFmt(d.normalized[i])}`;
  }

  function markSelected() {
    const sel = model.get("selected");
    const { g, d } = current;
    detail.replaceChildren();
    cells.forEach((cell) => cell.classList.remove("ilab-selected"));
    if (!sel || sel.length !== 2) {
      detail.appendChild(ilabEl("span", "ilab-muted", "Click a cell to see the patched run's top tokens."));
      return;
    }
    const i = cells.findIndex((_, j) => {
      const ids = cellIds(g, j);
      return ids.rowId === sel[0] && ids.colId === sel[1];
    });
    if (i < 0) return;
    cells[i].classList.add("ilab-selected");
    detail.appendChild(ilabEl("div", "ilab-pg-where", describe(g, d, i)));
    if (!d.topIndex) {
      detail.appendChild(ilabEl("div", "ilab-muted", "A first-order estimate: no patched run, so no top tokens."));
      return;
    }
    const list = ilabEl("ol", "ilab-pg-top");
    for (let j = 0; j < d.k; j++) {
      const item = ilabEl("li", "ilab-pg-topitem");
      const tok = ilabTokenText(g.top_vocab[d.topIndex[i * d.k + j]]);
      item.append(ilabEl("span", "ilab-pg-toktext" + (tok.faint ? " ilab-faint" : ""), tok.text));
      item.append(ilabEl("span", "ilab-muted", ` ${ilabFmt(d.topProbs[i * d.k + j])}`));
      list.appendChild(item);
    }
    detail.appendChild(list);
  }

  function select(i) {
    const ids = cellIds(current.g, i);
    model.set("selected", [ids.rowId, ids.colId]);
    if (current.g.row_name === "latent") model.set("latent", ids.rowId);
    model.save_changes();
    markSelected();
  }

  const keys = ilabCellGrid(gridBox, ".ilab-pg-cell", {
    tip,
    describe: (cell) => describe(current.g, current.d, Number(cell.dataset.i)),
    select: (cell) => select(Number(cell.dataset.i)),
    cells: () => cells,
    columns: () => current.g.values.shape[1],
  });
  gridBox.addEventListener("click", (e) => {
    const cell = e.target.closest(".ilab-pg-cell");
    if (cell) return select(Number(cell.dataset.i));
    const row = e.target.closest(".ilab-pg-latent");
    if (row) {
      model.set("latent", Number(row.dataset.row));
      model.save_changes();
    }
  });
  normBox.addEventListener("change", () => {
    model.set("normalized", normBox.checked);
    model.save_changes();
  });

  function drawAll() {
    ilabTheme(root, model.get("scheme"));
    normBox.checked = model.get("normalized");
    keys.reset();
    drawTabs();
    drawGrid();
  }

  const stop = ilabListen(
    model,
    {
      "change:tab": drawAll,
      "change:grids": drawAll,
      "change:normalized": drawAll,
      "change:scales": drawAll,
      "change:scheme": drawAll,
      "change:selected": markSelected,
    },
    drawAll,
  );
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
