// @ts-check
// FeatureHeatmap, fetching: a feature's values not sent with the widget are asked of the kernel.
import { ilabEl } from "../shared/index.js";
import { colIndex } from "./data.js";
/** @import { HeatmapView } from "./view.js" */

const REQUEST_TIMEOUT_MS = 4000; // a column not received by then: say why, allow asking again
const NOT_EXPORTED = "Values of this feature were not exported; run the notebook to see them.";

/**
 * Say in the status line that the kernel has not answered for column `col`, with a button to ask again.
 * @param {HeatmapView} view
 * @param {number} col
 */
function noAnswer(view, col) {
  const { data, status } = view;
  const retry = ilabEl("button", "ilab-retry", "retry");
  retry.addEventListener("click", () => {
    status.textContent = `loading feature ${data.featureIds[col]}…`;
    request(view, col);
  });
  status.replaceChildren(
    ilabEl("span", null, `No answer from the kernel for feature ${data.featureIds[col]} yet (it may be busy). `),
    retry,
  );
}

/**
 * Ask the kernel for a column; with no answer in time, say why and allow asking again.
 * @param {HeatmapView} view
 * @param {number} col
 */
export function request(view, col) {
  const { model, data, status } = view;
  if (data.pending.has(col)) return;
  data.pending.add(col);
  try {
    model.send({ type: "column", index: col });
  } catch {
    data.pending.delete(col); // exported HTML: no kernel to ask
    status.textContent = NOT_EXPORTED;
    return;
  }
  setTimeout(() => {
    if (data.columns.has(col)) return;
    data.pending.delete(col); // a later request asks again
    if (col !== colIndex(model, data)) return;
    if (!data.live) status.textContent = NOT_EXPORTED;
    else noAnswer(view, col);
  }, REQUEST_TIMEOUT_MS);
}
