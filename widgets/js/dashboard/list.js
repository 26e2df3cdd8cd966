// @ts-check
// FeatureDashboard, the list: every latent, searchable by id, label, top token or promoted token, sorted by a statistic.
import {
  ilabClosest, ilabDecode, ilabEl, ilabFmt, ilabFocusBox, ilabKeepKeys, ilabSearchBox, ilabTokenText,
} from "../shared/index.js";
import { explanationText, listOrder, listSearch, statName } from "./listdata.js";
import { MAX_ROWS } from "./store.js";
/** @import { DashContext } from "./context.js" */

/**
 * @typedef {object} ListParts
 * @property {HTMLDivElement} el
 * @property {HTMLInputElement} search
 * @property {HTMLSelectElement} sortSel
 * @property {HTMLDivElement} count
 * @property {HTMLSpanElement} headStat
 * @property {HTMLDivElement} rows
 */

/** @returns {ListParts} */
function listParts() {
  const el = ilabEl("div", "ilab-dash-list");
  const search = ilabSearchBox("search by id, label, top or promoted token", "search latents by id, label, top token or promoted token");
  const sortSel = ilabEl("select", "ilab-dash-sort");
  sortSel.setAttribute("aria-label", "sort latents");
  const count = ilabEl("div", "ilab-dash-count ilab-muted");
  const head = ilabEl("div", "ilab-dash-listhead");
  const headStat = ilabEl("span", "ilab-dash-stat");
  head.append(ilabEl("span", "ilab-dash-name", "latent · label"), headStat);
  const rows = ilabFocusBox("ilab-dash-rows", "listbox", "latents: arrow keys move");
  el.append(search, sortSel, count, head, rows);
  [search, sortSel, rows].forEach(ilabKeepKeys);
  return { el, search, sortSel, count, headStat, rows };
}

/**
 * The sort menu: density, max activation, the score when there is one, id.
 * @param {AnyModel} model
 * @param {HTMLSelectElement} sortSel
 */
function fillSorts(model, sortSel) {
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

/**
 * The keyboard and mouse: a row selects its latent, the arrow keys move, Enter in the search box opens the
 * first match.
 * @param {DashContext} ctx
 * @param {ListParts} parts
 * @param {() => void} fill
 */
function wireList({ model, select }, { rows, search, sortSel }, fill) {
  rows.addEventListener("click", (e) => {
    const row = ilabClosest(e, ".ilab-dash-row");
    if (row) select(Number(row.dataset.latent));
  });
  rows.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    const all = /** @type {HTMLElement[]} */ (Array.from(rows.children));
    const at = all.findIndex((r) => r.classList.contains("ilab-selected"));
    const next = all[Math.max(0, Math.min(all.length - 1, at + (e.key === "ArrowDown" ? 1 : -1)))];
    if (next) select(Number(next.dataset.latent));
    e.preventDefault();
  });
  search.addEventListener("keydown", (e) => {
    // Enter opens the only match (or the first of several)
    if (e.key !== "Enter") return;
    e.preventDefault();
    const first = /** @type {HTMLElement | null} */ (rows.querySelector(".ilab-dash-row"));
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
}

/**
 * One latent's row: its name (top tokens on hover) and the sorted-by statistic.
 * @param {DashContext} ctx
 * @param {number} i
 * @param {string} stat
 * @param {string[] | null} tops the latent's top tokens (null: not known)
 */
function listRow({ model, store, names }, i, stat, tops) {
  const row = ilabEl("div", "ilab-dash-row");
  row.dataset.latent = String(i);
  row.setAttribute("role", "option");
  if (i === model.get("selected")) row.classList.add("ilab-selected");
  const name = ilabEl("span", "ilab-dash-name", names.name(i));
  const source = names.source(i);
  if (source) name.classList.add(`ilab-dash-${source}`); // a hand label or an automatic explanation
  const how = source === "hand" ? "label set by hand" : source === "auto" ? explanationText(names.explanation(i)) : "";
  const top = tops ? `top tokens: ${tops.map((t) => ilabTokenText(t).text).join(" | ")}` : "";
  if (how || top) name.title = [how, top].filter(Boolean).join("\n");
  row.appendChild(name);
  row.appendChild(ilabEl("span", "ilab-dash-stat ilab-muted", stat));
  if (!store.cards.has(i) && !store.live) row.classList.add("ilab-dash-absent");
  return row;
}

/**
 * The list column: search box, sort menu, count and rows. `names.name(i)` shows an id with its label.
 * @param {DashContext} ctx
 */
export function dashList(ctx) {
  const { model, store } = ctx;
  const parts = listParts();
  const { search, rows } = parts;
  const finder = listSearch(ctx);
  const fill = () => {
    const q = search.value.trim().toLowerCase();
    const sort = model.get("sort");
    const scores = sort === "score" ? ilabDecode(model.get("score_values")) : null;
    parts.headStat.textContent = statName(model);
    rows.replaceChildren();
    let n = 0;
    for (const i of listOrder(model, store)) {
      if (!finder.matches(i, q)) continue;
      n++;
      if (n > MAX_ROWS) continue;
      const stat = scores ? ilabFmt(scores[i]) : sort === "max_act" ? ilabFmt(store.maxAct[i]) : `${ilabFmt(store.density[i] * 100)}%`;
      rows.appendChild(listRow(ctx, i, stat, finder.topTokens(i)));
    }
    parts.count.textContent =
      n > MAX_ROWS ? `${n} latents (first ${MAX_ROWS} shown)` : n === 0 && q ? `no latent matches "${q}" (searched: ${finder.searched})` : `${n} latents`;
  };
  const showSelected = () => {
    for (const r of rows.querySelectorAll(".ilab-selected")) r.classList.remove("ilab-selected");
    const row = rows.querySelector(`[data-latent="${model.get("selected")}"]`);
    if (row) {
      row.classList.add("ilab-selected");
      row.scrollIntoView({ block: "nearest" });
    }
  };
  const syncQuery = () => {
    if (search.value === model.get("query")) return;
    search.value = model.get("query");
    fill();
  };
  wireList(ctx, parts, fill);
  search.value = model.get("query");
  return { el: parts.el, fill, fillSorts: () => fillSorts(model, parts.sortSel), showSelected, syncQuery };
}
