// FeatureDashboard, part 5: model-wide wiring in `initialize`, one view per `render`.

/** Once per widget model: route the kernel's messages into the shared store, and ping for a live kernel. */
function initialize({ model }) {
  const store = dashStore(model);
  const onMsg = (msg, buffers) => dashOnMessage(store, msg, buffers);
  model.on("msg:custom", onMsg);
  if (model.get("live")) {
    try {
      model.send({ type: "ping" }); // answered only by a live kernel
    } catch (err) {
      // exported HTML: no kernel to talk to
    }
  }
  return () => model.off("msg:custom", onMsg);
}

function render({ model, el }) {
  const store = dashStore(model);
  const root = ilabEl("div", "ilab-dash");
  el.appendChild(root);
  const names = {
    label: (i) => model.get("labels")[String(i)] || "",
    name: (i) => (names.label(i) ? `${i} · ${names.label(i)}` : `${i}`),
  };
  const d = model.get("d_sae");
  const select = (i) => {
    if (i < 0 || i >= d) return;
    model.set("selected", i);
    model.save_changes();
  };
  const tip = ilabTip(root, "ilab-dash-tip");
  const list = dashList(model, store, names, select);
  const card = dashCard(model, store, names, select, tip);
  const tryIt = dashTry(model, store, names, select, tip);
  const status = ilabEl("div", "ilab-status ilab-muted");
  const right = ilabEl("div", "ilab-dash-right");
  right.append(card.el, tryIt.el, status);
  root.append(list.el, right);

  const onLive = () => {
    tryIt.setLive();
    list.fill();
    if (!store.cards.has(model.get("selected"))) card.draw();
  };
  const onCard = (e) => {
    if (e.detail.includes(model.get("selected"))) card.draw();
  };
  const onTry = (e) => tryIt.show(e.detail);
  store.events.addEventListener("live", onLive);
  store.events.addEventListener("card", onCard);
  store.events.addEventListener("try", onTry);

  const onScheme = () => ilabTheme(root, model.get("scheme"));
  const onSort = () => {
    list.fillSorts();
    list.fill();
  };
  const handlers = {
    "change:selected": () => {
      list.showSelected();
      card.draw();
    },
    "change:labels": () => {
      list.fill();
      card.draw();
    },
    "change:sort": onSort,
    "change:query": list.syncQuery,
    "change:score_values": onSort,
    "change:scheme": onScheme,
  };
  const stop = ilabListen(model, handlers, () => {
    onScheme();
    tryIt.setLive();
    list.fillSorts();
    list.fill();
    card.draw();
  });
  return () => {
    stop();
    store.events.removeEventListener("live", onLive);
    store.events.removeEventListener("card", onCard);
    store.events.removeEventListener("try", onTry);
    tip.remove();
  };
}

export default { initialize, render };
