// @ts-check
// FeatureHeatmap, the data: tokens, documents, the feature columns received so far, and names for features.
import { ilabDecode, ilabTokenText } from "../shared/index.js";
import { documentOf, pagesFor } from "./pages.js";

/**
 * What the heatmap shows, decoded once; `scales`, `labels`, `pages` and `columns` change later.
 * @typedef {object} HeatmapData
 * @property {string[]} vocab
 * @property {Int32Array} tokenIds
 * @property {Int32Array} docStarts
 * @property {Int32Array} docOf each token's document
 * @property {number} nTokens
 * @property {Int32Array | null} topF [nTokens, k] top feature ids, when Python sent them
 * @property {Float32Array | null} topV
 * @property {Record<string, string>} topLabels labels of top features that are not offered
 * @property {Set<number>} bosSet flat indexes of BOS tokens
 * @property {Float32Array | null} scales [n features, 4] colour scales
 * @property {number[]} featureIds
 * @property {string[]} labels
 * @property {number} k top features per token
 * @property {Map<number, Float32Array>} columns values of each column (feature index) received
 * @property {Set<number>} pending columns asked for and not received
 * @property {boolean} live whether a kernel answered the ping: missing columns can be fetched
 * @property {[number, number][]} pages
 */

/**
 * The heatmap's data from the model's traits.
 * @param {AnyModel} model
 * @returns {HeatmapData}
 */
export function heatmapData(model) {
  /** @type {Int32Array} */
  const tokenIds = ilabDecode(model.get("token_ids"));
  /** @type {Int32Array} */
  const docStarts = ilabDecode(model.get("doc_starts"));
  /** @type {Int32Array | null} */
  const topF = ilabDecode(model.get("top_features"));
  const featureIds = model.get("feature_ids");
  const nTokens = tokenIds.length;
  const columns = new Map();
  /** @type {Float32Array} */
  const vals = ilabDecode(model.get("values"));
  model.get("sent_columns").forEach((/** @type {number} */ c, /** @type {number} */ i) => {
    columns.set(c, vals.subarray(i * nTokens, (i + 1) * nTokens));
  });
  return {
    vocab: model.get("vocab"),
    tokenIds,
    docStarts,
    docOf: documentOf(docStarts, nTokens),
    nTokens,
    topF,
    topV: ilabDecode(model.get("top_values")),
    topLabels: model.get("top_labels") || {},
    bosSet: new Set(ilabDecode(model.get("bos_tokens")) || []),
    scales: ilabDecode(model.get("scales")),
    featureIds,
    labels: model.get("labels"),
    k: topF && nTokens ? topF.length / nTokens : Math.min(5, featureIds.length),
    columns,
    pending: new Set(),
    live: false,
    pages: pagesFor(docStarts, nTokens, Math.max(50, model.get("page_tokens"))),
  };
}

/**
 * Column `c`'s feature id with its label.
 * @param {HeatmapData} data
 * @param {number} c
 */
export function columnLabel({ featureIds, labels }, c) {
  return labels[c] ? `${featureIds[c]} · ${labels[c]}` : `${featureIds[c]}`;
}

/**
 * A feature id with its label, whether or not it is offered.
 * @param {HeatmapData} data
 * @param {number} id
 */
export function featureLabel(data, id) {
  const c = data.featureIds.indexOf(id);
  if (c >= 0) return columnLabel(data, c);
  return data.topLabels[id] ? `${id} · ${data.topLabels[id]}` : `${id}`;
}

/**
 * Token `i`'s text itself, as drawn (no escapes).
 * @param {HeatmapData} data
 * @param {number} i
 */
export function tokenShown(data, i) {
  return ilabTokenText(data.vocab[data.tokenIds[i]]).text;
}

/**
 * The index of the chosen feature's column (0 when it is not offered).
 * @param {AnyModel} model
 * @param {HeatmapData} data
 */
export function colIndex(model, data) {
  return Math.max(0, data.featureIds.indexOf(model.get("feature")));
}

/**
 * The top features at token i, as [feature id, value], zeros left out: sent by Python when over the cap or
 * drawn from more features than offered (every latent of an SAE), else computed here.
 * @param {HeatmapData} data
 * @param {number} i
 * @returns {[number, number][]}
 */
export function topAt({ topF, topV, k, columns, featureIds }, i) {
  /** @type {[number, number][]} */
  let all;
  if (topF && topV) all = Array.from({ length: k }, (_, j) => [topF[i * k + j], topV[i * k + j]]);
  else {
    all = [];
    for (const [c, values] of columns) all.push([featureIds[c], values[i]]);
    all = all.sort((a, b) => b[1] - a[1]).slice(0, k);
  }
  return all.filter(([, v]) => v !== 0 && Number.isFinite(v));
}
