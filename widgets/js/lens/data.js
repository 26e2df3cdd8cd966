// @ts-check
// LogitLens, the data: each cell's top tokens, and the probabilities of the tokens cells can be coloured by.
import { ilabDecode } from "../shared/index.js";

/**
 * The lens as decoded from the model's traits (cell (l, p) is layer index l after position p).
 * @typedef {object} LensData
 * @property {number} L layers
 * @property {number} P positions
 * @property {number} k top tokens per cell
 * @property {Int32Array} topIndex [L, P, k] indexes into vocab
 * @property {Float32Array} topProbs [L, P, k]
 * @property {number[]} colourIndex vocab indexes of the tokens cells can be coloured by
 * @property {Float32Array} colourProbs [L, P, colourIndex.length]
 * @property {string[]} vocab the tokens the lens names
 * @property {number[]} ids their token ids
 * @property {string[]} tokens the input's tokens
 * @property {number[]} layers
 */

/**
 * The lens from the model's traits.
 * @param {AnyModel} model
 * @returns {LensData}
 */
export function lensData(model) {
  const [L, P, k] = model.get("top_index").shape;
  return {
    L, P, k,
    topIndex: ilabDecode(model.get("top_index")),
    colourIndex: model.get("colour_index"),
    topProbs: ilabDecode(model.get("top_probs")),
    colourProbs: ilabDecode(model.get("colour_probs")),
    vocab: model.get("vocab"),
    ids: model.get("vocab_ids"),
    tokens: model.get("tokens"),
    layers: model.get("layers"),
  };
}

/**
 * The probability of the chosen token (`token_id`) at cell (l, p); NaN when it cannot colour cells.
 * @param {AnyModel} model
 * @param {LensData} data
 * @param {number} l
 * @param {number} p
 */
export function colourProb(model, data, l, p) {
  const c = data.colourIndex.indexOf(data.ids.indexOf(model.get("token_id")));
  const C = data.colourIndex.length;
  return c < 0 ? NaN : data.colourProbs[(l * data.P + p) * C + c];
}

/**
 * The first `n` top tokens at cell (l, p), with their probabilities.
 * @param {LensData} data
 * @param {number} l
 * @param {number} p
 * @param {number} n
 * @returns {[string, number][]}
 */
export function topList(data, l, p, n) {
  /** @type {[string, number][]} */
  const out = [];
  for (let j = 0; j < Math.min(n, data.k); j++) {
    const i = (l * data.P + p) * data.k + j;
    out.push([data.vocab[data.topIndex[i]], data.topProbs[i]]);
  }
  return out;
}
