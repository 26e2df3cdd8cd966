// FeatureDashboard, part 2: the searchable, sortable list of latents.

/** The list column: search box, sort menu, count and rows. `names.name(i)` shows an id with its label. */
function dashList(model, store, names, select) {
  const el = ilabEl("div", "ilab-dash-list");
  const search = ilabSearchBox("search by id, label or top token", "search latents by id, label or top token");
  const sortSel = ilabEl("select", "ilab-dash-sort");
  sortSel.setAttribute("aria-label", "sort latents");
  const count = ilabEl("div", "ilab-dash-count ilab-muted");
  const head = ilabEl("div", "ilab-dash-listhead");
  const headName = ilabEl("span", "ilab-dash-name", "latent · label");
  const headStat = ilabEl("span", "ilab-dash-stat");
  head.append(headName, headStat);
  const rows = ilabFocusBox("ilab-dash-rows", "listbox", "latents: arrow keys move");
  el.append(search, sortSel, count, head, rows);
  [search, sortSel, rows].forEach(ilabKeepKeys);
  const d = model.get("d_sae");
  const maxTokens = ilabDecode(model.get("max_tokens"));
  const nTop = maxTokens ? maxTokens.length / Math.max(1, d) : 0;
  let tokenText = null; // per latent: its top tokens, stripped and lower-cased, joined (built on first search)

  /** The distinct tokens at the max of each of a latent's top examples. */
  function topTokens(i) {
    const seen = new Set();
    for (let j = 0; j < nTop; j++) {
      const t = maxTokens[i * nTop + j];
      if (t >= 0) seen.add(store.tokenText(t));
    }
    return [...seen];
  }
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
    const key = sort === "score" ? ilabDecode(model.get("score_values")) : sort === "max_act" ? store.maxAct : store.density;
    if (!key) return ids;
    const k = (i) => (Number.isNaN(key[i]) ? -Infinity : key[i]);
    return ids.sort((a, b) => k(b) - k(a) || a - b);
  }

  function matches(i, q) {
    if (!q) return true;
    if (/^\d+$/.test(q) && String(i).startsWith(q)) return true;
    if (names.label(i).toLowerCase().includes(q)) return true;
    if (!maxTokens) return false;
    if (!tokenText) tokenText = Array.from({ length: d }, (_, j) => "\u0001" + topTokens(j).map((t) => t.trim().toLowerCase()).join("\u0001"));
    return tokenText[i].includes(q.trim());
  }

  function statName() {
    const sort = model.get("sort");
    return sort === "score" ? model.get("score_name") : sort === "max_act" ? "max act" : "density";
  }

  function fill() {
    const q = search.value.trim().toLowerCase();
    const sort = model.get("sort");
    const scores = sort === "score" ? ilabDecode(model.get("score_values")) : null;
    headStat.textContent = statName();
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
      const name = ilabEl("span", "ilab-dash-name", names.name(i));
      if (maxTokens) name.title = `top tokens: ${topTokens(i).map((t) => ilabTokenText(t).text).join(" | ")}`;
      row.appendChild(name);
      const stat = scores
        ? ilabFmt(scores[i])
        : sort === "max_act"
          ? ilabFmt(store.maxAct[i])
          : `${ilabFmt(store.density[i] * 100)}%`;
      row.appendChild(ilabEl("span", "ilab-dash-stat ilab-muted", stat));
      if (!store.cards.has(i) && !store.live) row.classList.add("ilab-dash-absent");
      rows.appendChild(row);
    }
    count.textContent = n > MAX_ROWS ? `${n} latents (first ${MAX_ROWS} shown)` : `${n} latents`;
  }

  function showSelected() {
    for (const r of rows.querySelectorAll(".ilab-selected")) r.classList.remove("ilab-selected");
    const row = rows.querySelector(`[data-latent="${model.get("selected")}"]`);
    if (row) {
      row.classList.add("ilab-selected");
      row.scrollIntoView({ block: "nearest" });
    }
  }

  function syncQuery() {
    if (search.value === model.get("query")) return;
    search.value = model.get("query");
    fill();
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
  search.addEventListener("keydown", (e) => {
    // Enter opens the only match (or the first of several)
    if (e.key !== "Enter") return;
    e.preventDefault();
    const first = rows.querySelector(".ilab-dash-row");
    if (first) select(Number(first.dataset.latent));
  });
  search.addEventListener("input", () => {
    model.set("query", search.value);
    model.save_changes();
    fill();
  });
  sortSel.addEventListener("change", () => {
    model.set("sort", sortSel.value);
    model.save_changes();
  });
  search.value = model.get("query");
  return { el, fill, fillSorts, showSelected, syncQuery };
}
