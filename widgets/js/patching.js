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
  const gridBox = ilabFocusBox("ilab-pg-grid", "grid", "patching grid: arrow keys move, Enter selects");
  const detail = ilabEl("div", "ilab-pg-detail");
  const tip = ilabEl("div", "ilab-tip ilab-pg-tip");
  root.append(groupsBar, methodsBar, bar, gridBox, detail, tip);
  [gridBox, normBox].forEach(ilabKeepKeys);

  let cells = [];
  let cursor = -1;
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

  function setTab(key) {
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

  function colText(g, c) {
    if (g.col_name !== "position") return g.cols[c];
    return ilabTokenText(g.col_tokens[c]).text;
  }

  function cellValue(d, i) {
    return model.get("normalized") ? d.normalized[i] : d.values[i];
  }

  function drawGrid() {
    const g = currentGrid();
    const d = decoded(g);
    current = { g, d };
    const [R, C] = g.values.shape;
    let vmax = 0;
    for (let i = 0; i < R * C; i++) vmax = Math.max(vmax, Math.abs(cellValue(d, i)) || 0);
    if (model.get("normalized")) vmax = Math.max(vmax, 1);
    legendBox.replaceChildren(ilabLegend(-vmax, vmax, true));
    info.textContent = `${g.method} ${g.site} · ${g.metric}: clean ${ilabFmt(g.clean)}, corrupted ${ilabFmt(g.corrupt)}`;
    gridBox.replaceChildren();
    gridBox.style.gridTemplateColumns = `auto repeat(${C}, minmax(22px, 1fr))`;
    cells = [];
    for (let r = 0; r < R; r++) {
      const text = (g.row_text || [])[r];
      const label = ilabEl("div", "ilab-pg-rowlabel", `${g.row_name === "layer" ? "L" : "#"}${g.rows[r]}${text ? ` · ${text}` : ""}`);
      if (text) label.title = text;
      gridBox.appendChild(label);
      for (let c = 0; c < C; c++) {
        const i = r * C + c;
        const cell = ilabEl("div", "ilab-pg-cell");
        cell.dataset.i = String(i);
        cell.dataset.v = String(cellValue(d, i));
        cell.setAttribute("role", "gridcell");
        cell.style.background = ilabColor(cellValue(d, i), vmax, true);
        gridBox.appendChild(cell);
        cells.push(cell);
      }
    }
    gridBox.appendChild(ilabEl("div", "ilab-pg-corner ilab-muted", g.col_name === "position" ? "" : ""));
    for (let c = 0; c < C; c++) {
      const label = ilabEl("div", "ilab-pg-collabel", colText(g, c));
      label.title = g.col_name === "position" ? `position ${g.cols[c]}` : g.cols[c];
      gridBox.appendChild(label);
    }
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
    const { r, c, rowId } = cellIds(g, i);
    const where = g.col_name === "position" ? `position ${g.cols[c]} ${JSON.stringify(g.col_tokens[c])}` : g.cols[c];
    const rowText = (g.row_text || [])[r] ? ` (${g.row_text[r]})` : "";
    return `${g.row_name} ${rowId}${rowText} · ${where}\nvalue ${ilabFmt(d.values[i])} · normalized ${ilabFmt(d.normalized[i])}`;
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
    model.save_changes();
    markSelected();
  }

  function moveCursor(i) {
    if (cursor >= 0 && cells[cursor]) cells[cursor].classList.remove("ilab-cursor");
    cursor = Math.max(0, Math.min(cells.length - 1, i));
    cells[cursor].classList.add("ilab-cursor");
  }

  gridBox.addEventListener("mouseover", (e) => {
    const cell = e.target.closest(".ilab-pg-cell");
    if (!cell) return;
    tip.textContent = describe(current.g, current.d, Number(cell.dataset.i));
    tip.style.display = "block";
    const rect = cell.getBoundingClientRect();
    tip.style.left = `${rect.right + 6}px`;
    tip.style.top = `${rect.top}px`;
  });
  gridBox.addEventListener("mouseleave", () => {
    tip.style.display = "none";
  });
  gridBox.addEventListener("click", (e) => {
    const cell = e.target.closest(".ilab-pg-cell");
    if (cell) select(Number(cell.dataset.i));
  });
  gridBox.addEventListener("keydown", (e) => {
    const C = current.g.values.shape[1];
    const moves = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: C, ArrowUp: -C };
    if (e.key in moves) {
      moveCursor((cursor < 0 ? 0 : cursor) + moves[e.key]);
      e.preventDefault();
    } else if (e.key === "Enter" && cursor >= 0) {
      select(cursor);
      e.preventDefault();
    }
  });
  normBox.addEventListener("change", () => {
    model.set("normalized", normBox.checked);
    model.save_changes();
  });

  function drawAll() {
    ilabTheme(root, model.get("scheme"));
    normBox.checked = model.get("normalized");
    cursor = -1;
    drawTabs();
    drawGrid();
  }

  return ilabListen(
    model,
    {
      "change:tab": drawAll,
      "change:grids": drawAll,
      "change:normalized": drawAll,
      "change:scheme": drawAll,
      "change:selected": markSelected,
    },
    drawAll,
  );
}

export default { render };
