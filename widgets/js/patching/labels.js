// @ts-check
// PatchingGrid, the words around the grid: the prompts, row and column labels, and a cell's description.
import { ilabEl, ilabFmt, ilabTokenText } from "../shared/index.js";
import { cellIds } from "./view.js";
/** @import { Decoded, PatchGrid } from "./view.js" */

/**
 * The clean and corrupted prompts, one token each with its position; tokens that differ are marked.
 * @param {HTMLElement} prompts
 * @param {PatchGrid} g
 */
export function drawPrompts(prompts, g) {
  prompts.replaceChildren();
  const clean = g.prompt || [];
  const corrupt = g.corrupt_prompt || [];
  if (!clean.length && !corrupt.length) return;
  if (g.n_pairs > 1) {
    const note = `the values average ${g.n_pairs} prompt pairs; shown: pair 1 of ${g.n_pairs} (the token labels are its)`;
    prompts.appendChild(ilabEl("div", "ilab-pg-pairs ilab-muted", note));
  }
  /** @type {[string, string[], string[]][]} */
  const lines = [["clean", clean, corrupt], ["corrupted", corrupt, clean]];
  for (const [name, toks, other] of lines) {
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

/**
 * A row's name: its layer, or its latent with the latent's label.
 * @param {PatchGrid} g
 * @param {number} r
 */
export function rowTitle(g, r) {
  const text = (g.row_text || [])[r];
  const head = g.row_name === "layer" ? `L${g.rows[r]}` : `latent ${g.rows[r]}`;
  return text ? `${head} · ${text}` : head;
}

/**
 * The label under column `c`: a head's name, or a position with its clean token (and the corrupted one
 * where it differs).
 * @param {PatchGrid} g
 * @param {number} c
 */
export function colLabel(g, c) {
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

/**
 * A cell in words: its row, its column (with the tokens there), its value and normalized value.
 * @param {PatchGrid} g
 * @param {Decoded} d
 * @param {number} i
 */
export function describe(g, d, i) {
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
