// LogitLens: layers x positions; each cell the top next token and its probability, coloured by the
// probability of a chosen token; hover for the cell's top tokens, click to keep them.


function render({ model, el }) {
  const root = ilabEl("div", "ilab-lens");
  el.appendChild(root);
  const bar = ilabEl("div", "ilab-lens-bar");
  const pickLabel = ilabEl("label", "ilab-lens-pick");
  const picker = ilabEl("select", "ilab-lens-token");
  picker.setAttribute("aria-label", "colour cells by the probability of this token");
  pickLabel.append(ilabEl("span", "ilab-muted", "colour by P( "), picker, ilabEl("span", "ilab-muted", " )"));
  const legendBox = ilabEl("div", "ilab-legend-box");
  bar.append(pickLabel, legendBox);
  const grid = ilabFocusBox("ilab-lens-grid", "grid", "logit lens: arrow keys move, Enter selects");
  const detail = ilabEl("div", "ilab-lens-detail");
  const tip = ilabTip(root, "ilab-lens-tip");
  root.append(bar, grid, detail);
  [picker, grid].forEach(ilabKeepKeys);

  let cells = [];
  let data = null;

  function decode() {
    const topIndex = ilabDecode(model.get("top_index"));
    const [L, P, k] = model.get("top_index").shape;
    const colourIndex = model.get("colour_index");
    return {
      L, P, k, topIndex, colourIndex,
      topProbs: ilabDecode(model.get("top_probs")),
      colourProbs: ilabDecode(model.get("colour_probs")),
      vocab: model.get("vocab"),
      ids: model.get("vocab_ids"),
      tokens: model.get("tokens"),
      layers: model.get("layers"),
    };
  }

  function chosenColumn() {
    const v = data.ids.indexOf(model.get("token_id"));
    return data.colourIndex.indexOf(v);
  }

  function colourProb(l, p) {
    const c = chosenColumn();
    const C = data.colourIndex.length;
    return c < 0 ? NaN : data.colourProbs[(l * data.P + p) * C + c];
  }

  function drawPicker() {
    picker.replaceChildren();
    const C = data.colourIndex.length;
    const best = data.colourIndex.map((v, c) => {
      let m = 0;
      for (let i = 0; i < data.L * data.P; i++) m = Math.max(m, data.colourProbs[i * C + c]);
      return { v, m };
    });
    best.sort((a, b) => b.m - a.m);
    for (const { v, m } of best) {
      const opt = ilabEl("option", null, `${ilabTokenText(data.vocab[v]).text}   (max ${ilabFmt(m)})`);
      opt.value = String(data.ids[v]);
      picker.appendChild(opt);
    }
    picker.value = String(model.get("token_id"));
  }

  function drawGrid() {
    grid.replaceChildren();
    grid.style.gridTemplateColumns = `auto repeat(${data.P}, minmax(44px, 1fr))`;
    grid.appendChild(ilabEl("div", "ilab-lens-corner ilab-muted", "layer ↓  input →"));
    data.tokens.forEach((t, p) => {
      const shown = ilabTokenText(t);
      const head = ilabEl("div", "ilab-lens-col" + (shown.faint ? " ilab-faint" : ""), shown.text);
      head.title = `position ${p}`;
      head.appendChild(ilabEl("span", "ilab-lens-pos ilab-muted", String(p)));
      grid.appendChild(head);
    });
    cells = [];
    for (let l = 0; l < data.L; l++) {
      grid.appendChild(ilabEl("div", "ilab-lens-row ilab-muted", `L${data.layers[l]}`));
      for (let p = 0; p < data.P; p++) {
        const i = (l * data.P + p) * data.k;
        const shown = ilabTokenText(data.vocab[data.topIndex[i]]);
        const cell = ilabEl("div", "ilab-lens-cell");
        cell.setAttribute("role", "gridcell");
        cell.dataset.l = String(l);
        cell.dataset.p = String(p);
        cell.append(
          ilabEl("span", "ilab-lens-top" + (shown.faint ? " ilab-faint" : ""), shown.text),
          ilabEl("span", "ilab-lens-prob", ilabFmt(data.topProbs[i])),
        );
        grid.appendChild(cell);
        cells.push(cell);
      }
    }
  }

  function recolour() {
    for (const cell of cells) {
      const v = colourProb(Number(cell.dataset.l), Number(cell.dataset.p));
      cell.style.background = ilabColor(v, model.get("color_scale"));
      cell.dataset.v = String(v);
    }
    legendBox.replaceChildren(ilabLegend(model.get("color_scale")));
    picker.value = String(model.get("token_id"));
  }

  function topList(l, p, n) {
    const out = [];
    for (let j = 0; j < Math.min(n, data.k); j++) {
      const i = (l * data.P + p) * data.k + j;
      out.push([data.vocab[data.topIndex[i]], data.topProbs[i]]);
    }
    return out;
  }

  function describe(l, p) {
    const chosen = data.vocab[data.ids.indexOf(model.get("token_id"))];
    const lines = [`layer ${data.layers[l]} · after position ${p} ${ilabTokenText(data.tokens[p]).text}`];
    lines.push(`P(${ilabTokenText(chosen ?? "").text}) = ${ilabFmt(colourProb(l, p))}`);
    for (const [t, pr] of topList(l, p, 5)) lines.push(`${ilabFmt(pr).padStart(6)}  ${ilabTokenText(t).text}`);
    return lines.join("\n");
  }

  function markSelected() {
    const sel = model.get("selected");
    cells.forEach((c) => c.classList.remove("ilab-selected"));
    detail.replaceChildren();
    if (!sel || sel.length !== 2) {
      detail.appendChild(ilabEl("span", "ilab-muted", "Click a cell for its top tokens."));
      return;
    }
    const l = data.layers.indexOf(sel[0]);
    const p = sel[1];
    if (l < 0 || p < 0 || p >= data.P) return;
    cells[l * data.P + p].classList.add("ilab-selected");
    detail.appendChild(ilabEl("div", "ilab-lens-where", `layer ${sel[0]} · after position ${p} ${ilabTokenText(data.tokens[p]).text}`));
    const list = ilabEl("ol", "ilab-lens-toplist");
    for (const [t, pr] of topList(l, p, data.k)) {
      const shown = ilabTokenText(t);
      const item = ilabEl("li", "ilab-lens-topitem");
      item.append(ilabEl("span", "ilab-lens-toktext" + (shown.faint ? " ilab-faint" : ""), shown.text),
                  ilabEl("span", "ilab-muted", ` ${ilabFmt(pr)}`));
      list.appendChild(item);
    }
    detail.appendChild(list);
  }

  function select(cell) {
    model.set("selected", [data.layers[Number(cell.dataset.l)], Number(cell.dataset.p)]);
    model.save_changes();
    markSelected();
  }

  const keys = ilabCellGrid(grid, ".ilab-lens-cell", {
    tip,
    describe: (cell) => describe(Number(cell.dataset.l), Number(cell.dataset.p)),
    select,
    cells: () => cells,
    columns: () => data.P,
  });
  grid.addEventListener("click", (e) => {
    const cell = e.target.closest(".ilab-lens-cell");
    if (cell) select(cell);
  });
  picker.addEventListener("change", () => {
    model.set("token_id", Number(picker.value));
    model.save_changes();
    recolour();
  });

  function drawAll() {
    ilabTheme(root, model.get("scheme"));
    data = decode();
    keys.reset();
    drawPicker();
    drawGrid();
    recolour();
    markSelected();
  }

  const stop = ilabListen(
    model,
    {
      "change:token_id": recolour,
      "change:color_scale": recolour,
      "change:selected": markSelected,
      "change:scheme": drawAll,
      "change:top_index": drawAll,
    },
    drawAll,
  );
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
