// @ts-check
// FeatureDashboard: model-wide wiring in `initialize`, one view per `render`.
import { ilabEl, ilabListen, ilabTheme, ilabTip } from "../shared/index.js";
import { dashCard } from "./card.js";
import { dashContext } from "./context.js";
import { dashList } from "./list.js";
import { dashOnMessage, dashStore } from "./store.js";
import { dashTry } from "./tryit.js";
/** @import { DashStore } from "./store.js" */

/**
 * Once per widget model: route the kernel's messages into the shared store, and ping for a live kernel.
 * @param {InitializeProps} props
 */
function initialize({ model }) {
  const store = dashStore(model);
  /** @param {any} msg @param {DataView[]} buffers */
  const onMsg = (msg, buffers) => dashOnMessage(store, msg, buffers);
  model.on("msg:custom", onMsg);
  try {
    model.send({ type: "ping" }); // answered by a running kernel (cards on demand, label edits kept)
  } catch {
    // exported HTML: no kernel to talk to
  }
  return () => model.off("msg:custom", onMsg);
}

/**
 * Listen to the store's events ("live", "card", "try"); returns the cleanup.
 * @param {DashStore} store
 * @param {Record<string, (e: any) => void>} listeners
 */
function listenStore(store, listeners) {
  for (const [name, fn] of Object.entries(listeners)) store.events.addEventListener(name, fn);
  return () => {
    for (const [name, fn] of Object.entries(listeners)) store.events.removeEventListener(name, fn);
  };
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const store = dashStore(model);
  const root = ilabEl("div", "ilab-dash");
  el.appendChild(root);
  const tip = ilabTip(root, "ilab-dash-tip");
  const ctx = dashContext(model, store, tip);
  const list = dashList(ctx);
  const card = dashCard(ctx);
  const tryIt = dashTry(ctx);
  const right = ilabEl("div", "ilab-dash-right");
  right.append(card.el, tryIt.el, ilabEl("div", "ilab-status ilab-muted"));
  root.append(list.el, right);
  const unlisten = listenStore(store, {
    live: () => {
      tryIt.setLive();
      list.fill();
      card.draw(); // the label box is editable now, and a card not sent can be fetched
    },
    card: (e) => {
      if (e.detail.includes(model.get("selected"))) card.draw();
    },
    try: (e) => tryIt.show(e.detail),
  });
  const onScheme = () => ilabTheme(root, model.get("scheme"));
  const onSort = () => {
    list.fillSorts();
    list.fill();
  };
  const stop = ilabListen(model, {
    "change:selected": () => {
      list.showSelected();
      card.draw();
    },
    "change:labels": () => {
      list.fill();
      card.draw();
    },
    "change:explanations": () => {
      list.fill();
      card.draw();
    },
    "change:sort": onSort,
    "change:query": list.syncQuery,
    "change:score_values": onSort,
    "change:scheme": onScheme,
  }, () => {
    onScheme();
    tryIt.setLive();
    list.fillSorts();
    list.fill();
    card.draw();
  });
  return () => {
    stop();
    unlisten();
    tip.remove();
  };
}

/** @type {WidgetModule} */
export default { initialize, render };
