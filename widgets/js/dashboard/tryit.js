// FeatureDashboard, part 4: "try your text" (needs a live kernel with the model and the SAE).

function dashTry(model, store, names, select, tip) {
  const el = ilabEl("div", "ilab-dash-try");
  el.addEventListener("mouseover", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-dash-trytokens .ilab-tok");
    if (!span) return tip.hide();
    tip.show(span, `${ilabTokenText(span.dataset.tok).text}\nactivation ${ilabFmt(Number(span.dataset.v))}`);
  });
  el.addEventListener("mouseleave", () => tip.hide());
  const area = ilabEl("textarea", "ilab-dash-text");
  area.rows = 2;
  area.placeholder = "try your text: which latents fire, and how much the selected one does";
  area.setAttribute("aria-label", "try your text");
  ilabKeepKeys(area);
  const run = ilabEl("button", "ilab-dash-run", "run");
  const note = ilabEl("span", "ilab-dash-trynote ilab-muted", "needs a live kernel (model and SAE)");
  const out = ilabEl("div", "ilab-dash-tryout");
  el.append(ilabEl("div", "ilab-dash-h", "try your text"), area, run, note, out);

  function setLive() {
    const live = store.live && model.get("live");
    area.disabled = !live;
    run.disabled = !live;
    note.style.display = live ? "none" : "";
  }

  run.addEventListener("click", () => {
    if (run.disabled || !area.value.trim()) return;
    note.style.display = "";
    note.textContent = "running…";
    model.send({ type: "try", text: area.value, latent: model.get("selected") });
  });

  function show({ msg, buffers }) {
    out.replaceChildren();
    if (msg.error) {
      note.style.display = "";
      note.textContent = msg.error;
      return;
    }
    note.style.display = "none";
    const acts = ilabDecode({ view: buffers[0], dtype: "float32" });
    const topIds = ilabDecode({ view: buffers[1], dtype: "int32" });
    const topVals = ilabDecode({ view: buffers[2], dtype: "float32" });
    const k = msg.shapes.top_ids[1];
    let vmax = store.maxAct[msg.latent];
    for (const a of acts) vmax = Math.max(vmax, a);
    out.appendChild(ilabEl("div", "ilab-dash-h", `latent ${names.name(msg.latent)} on your text`));
    const line = ilabEl("div", "ilab-dash-tokens ilab-dash-trytokens");
    msg.tokens.forEach((tok, t) => {
      const span = ilabTokenSpan(tok, acts[t], { kind: "sequential", vmin: 0, center: 0, vmax });
      span.dataset.tok = tok;
      line.appendChild(span);
    });
    out.appendChild(line);
    const table = ilabEl("div", "ilab-dash-trytable");
    msg.tokens.forEach((tok, t) => {
      const row = ilabEl("div", "ilab-dash-tryrow");
      row.appendChild(ilabTokenSpan(tok));
      for (let j = 0; j < k; j++) {
        const i = topIds[t * k + j];
        const v = topVals[t * k + j];
        if (!(v > 0)) continue;
        const b = ilabEl("button", "ilab-dash-nearbtn", `${names.name(i)}: ${ilabFmt(v)}`);
        b.dataset.latent = String(i);
        b.addEventListener("click", () => select(i));
        row.appendChild(b);
      }
      table.appendChild(row);
    });
    out.appendChild(table);
  }

  return { el, setLive, show };
}
