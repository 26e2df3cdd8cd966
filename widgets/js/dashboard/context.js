// @ts-check
// FeatureDashboard, what its parts share: the model, the store, names for latents, selecting one, the tip.
/** @import { Tip } from "../shared/tip.js" */
/** @import { DashStore } from "./store.js" */

/**
 * @typedef {object} DashContext
 * @property {AnyModel} model
 * @property {DashStore} store
 * @property {DashNames} names how a latent is named: a label set by hand wins over its automatic explanation
 * @property {(i: number) => void} select make a latent the selected one
 * @property {Tip} tip
 */

/**
 * @typedef {object} DashNames
 * @property {(i: number) => string} label the label shown: the hand label, else the automatic explanation
 * @property {(i: number) => string} hand the label set by hand ("" when none)
 * @property {(i: number) => string} source "hand", "auto" or ""
 * @property {(i: number) => any} explanation the automatic explanation's record (null when none)
 * @property {(i: number) => string} name the id with the label shown
 */

/**
 * The context of one view of a dashboard.
 * @param {AnyModel} model
 * @param {DashStore} store
 * @param {Tip} tip
 * @returns {DashContext}
 */
export function dashContext(model, store, tip) {
  /** @param {number} i */
  const hand = (i) => model.get("labels")[String(i)] || "";
  /** @param {number} i */
  const explanation = (i) => (model.get("explanations") || {})[String(i)] || null;
  /** @param {number} i */
  const source = (i) => (hand(i) ? "hand" : explanation(i) && explanation(i).text ? "auto" : "");
  /** @param {number} i */
  const label = (i) => hand(i) || (explanation(i) && explanation(i).text) || "";
  /** @param {number} i */
  const name = (i) => (label(i) ? `${i} · ${label(i)}` : `${i}`);
  const d = model.get("d_sae");
  /** @param {number} i */
  const select = (i) => {
    if (i < 0 || i >= d) return;
    model.set("selected", i);
    model.save_changes();
  };
  return { model, store, names: { label, hand, source, explanation, name }, select, tip };
}
