// @ts-check
// FeatureDashboard, what its parts share: the model, the store, names for latents, selecting one, the tip.
/** @import { Tip } from "../shared/tip.js" */
/** @import { DashStore } from "./store.js" */

/**
 * @typedef {object} DashContext
 * @property {AnyModel} model
 * @property {DashStore} store
 * @property {{label: (i: number) => string, name: (i: number) => string}} names a latent's label, and its id
 *   with its label
 * @property {(i: number) => void} select make a latent the selected one
 * @property {Tip} tip
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
  const label = (i) => model.get("labels")[String(i)] || "";
  /** @param {number} i */
  const name = (i) => (label(i) ? `${i} · ${label(i)}` : `${i}`);
  const d = model.get("d_sae");
  /** @param {number} i */
  const select = (i) => {
    if (i < 0 || i >= d) return;
    model.set("selected", i);
    model.save_changes();
  };
  return { model, store, names: { label, name }, select, tip };
}
