// @ts-check
// FeatureHeatmap, paging: tokens grouped into pages of whole documents.

/**
 * Group whole documents into pages of about perPage tokens; split documents longer than a page.
 * @param {Int32Array} docStarts where each document starts, then the token count
 * @param {number} nTokens
 * @param {number} perPage
 * @returns {[number, number][]} each page's [first token, end]
 */
export function pagesFor(docStarts, nTokens, perPage) {
  /** @type {[number, number][]} */
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

/**
 * Each token's document.
 * @param {Int32Array} docStarts
 * @param {number} nTokens
 */
export function documentOf(docStarts, nTokens) {
  const docOf = new Int32Array(nTokens);
  for (let d = 0; d + 1 < docStarts.length; d++) docOf.fill(d, docStarts[d], docStarts[d + 1]);
  return docOf;
}
