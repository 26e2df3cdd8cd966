// SteeringPanel: prompt, one slider per vector, site / temperature / seed, baseline vs steered text.

function render({ model, el }) {
  const root = ilabEl("div", "ilab-steer");
  el.appendChild(root);

  // --- prompt
  const promptRow = ilabEl("div", "ilab-steer-prompt-row");
  const prompt = ilabEl("textarea", "ilab-steer-prompt");
  prompt.rows = 2;
  prompt.setAttribute("aria-label", "prompt");
  prompt.placeholder = "type a prompt; Enter runs (Shift+Enter: new line)";
  const go = ilabEl("button", "ilab-steer-run", "Run");
  promptRow.append(prompt, go);

  // --- sliders
  const sliders = ilabEl("div", "ilab-steer-sliders");
  const inputs = new Map();
  const shown = new Map();
  for (const name of model.get("names")) {
    const [lo, hi, step] = model.get("ranges")[name];
    const row = ilabEl("label", "ilab-steer-slider");
    const label = ilabEl("span", "ilab-steer-name", name);
    const min = ilabEl("span", "ilab-steer-min ilab-muted", ilabFmt(lo));
    const max = ilabEl("span", "ilab-steer-max ilab-muted", ilabFmt(hi));
    const input = ilabEl("input", "ilab-steer-range");
    input.type = "range";
    input.min = String(lo);
    input.max = String(hi);
    input.step = String(step);
    input.dataset.name = name;
    input.setAttribute("aria-label", `scale of ${name}`);
    const value = ilabEl("span", "ilab-steer-value");
    row.append(label, min, input, max, value);
    sliders.appendChild(row);
    inputs.set(name, input);
    shown.set(name, value);
  }
  const reset = ilabEl("button", "ilab-steer-reset", "Reset");
  reset.setAttribute("aria-label", "reset all sliders to 0");

  // --- settings
  const settings = ilabEl("div", "ilab-steer-settings");
  const site = ilabEl("select", "ilab-steer-site");
  site.setAttribute("aria-label", "site");
  for (const s of model.get("sites")) {
    const opt = ilabEl("option", null, s);
    opt.value = s;
    site.appendChild(opt);
  }
  const temp = ilabEl("input", "ilab-steer-temperature");
  temp.type = "number";
  temp.min = "0";
  temp.step = "0.1";
  temp.setAttribute("aria-label", "temperature");
  const seed = ilabEl("input", "ilab-steer-seed");
  seed.type = "number";
  seed.step = "1";
  seed.setAttribute("aria-label", "seed");
  settings.append(
    ilabEl("span", "ilab-muted", "site"), site,
    ilabEl("span", "ilab-muted", "temperature"), temp,
    ilabEl("span", "ilab-muted", "seed"), seed, reset,
  );

  // --- outputs
  const outs = ilabEl("div", "ilab-steer-outs");
  const readouts = new Map();
  const col = (title, cls, key) => {
    const box = ilabEl("div", `ilab-steer-col ${cls}`);
    const text = ilabEl("div", "ilab-steer-text");
    const head = ilabEl("div", "ilab-steer-head");
    const readout = ilabEl("span", "ilab-steer-metric");
    readouts.set(key, readout);
    head.append(ilabEl("span", "ilab-steer-title ilab-muted", title), readout);
    box.append(head, text);
    outs.appendChild(box);
    return text;
  };
  const baseText = col("baseline", "ilab-steer-baseline", "baseline");
  const steerText = col("steered", "ilab-steer-steered", "steered");
  const status = ilabEl("div", "ilab-steer-status ilab-muted");
  const tip = ilabTip(root, "ilab-steer-tip");
  root.append(promptRow, sliders, settings, outs, status);
  [prompt, site, temp, seed, ...inputs.values()].forEach(ilabKeepKeys);

  // --- sending (sliders debounced: only the last position of a burst is sent)
  let timer = null;
  const sendValues = () => {
    timer = null;
    const vals = {};
    for (const [name, input] of inputs) vals[name] = Number(input.value);
    model.set("values", vals);
    model.save_changes();
  };
  const onSlide = (name) => {
    shown.get(name).textContent = ilabFmt(Number(inputs.get(name).value));
    if (timer) clearTimeout(timer);
    timer = setTimeout(sendValues, Math.max(0, model.get("debounce_ms")));
  };
  for (const [name, input] of inputs) input.addEventListener("input", () => onSlide(name));
  reset.addEventListener("click", () => {
    for (const input of inputs.values()) input.value = "0";
    for (const name of inputs.keys()) shown.get(name).textContent = "0";
    if (timer) clearTimeout(timer);
    sendValues();
  });
  const sendPrompt = () => {
    if (prompt.value !== model.get("prompt")) {
      model.set("prompt", prompt.value); // a new prompt runs by itself
      model.save_changes();
      return;
    }
    try {
      model.send({ type: "run" }); // the same prompt: run again (after an error, or to resample)
    } catch (err) {
      status.textContent = "no kernel: run the notebook to generate";
    }
  };
  go.addEventListener("click", sendPrompt);
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      sendPrompt();
    }
  });
  site.addEventListener("change", () => {
    model.set("site", site.value);
    model.save_changes();
  });
  temp.addEventListener("change", () => {
    const t = Number(temp.value);
    if (Number.isFinite(t) && t >= 0) {
      model.set("temperature", t);
      model.save_changes();
    }
  });
  seed.addEventListener("change", () => {
    const s = Math.trunc(Number(seed.value));
    if (Number.isFinite(s)) {
      model.set("seed", s);
      model.save_changes();
    }
  });

  // --- drawing
  /** The first position where the two texts differ (-1: none yet). */
  const firstDiff = (a, b) => {
    if (!a || !b) return -1;
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
    return -1;
  };
  const drawTokens = (box, tokens, other) => {
    box.replaceChildren();
    const diff = firstDiff(tokens, other);
    tokens.forEach((tok, i) => {
      const t = ilabTokenText(tok);
      const span = ilabEl("span", "ilab-steer-tok", t.text);
      span.dataset.i = String(i);
      if (t.faint) span.classList.add("ilab-faint");
      if (i === diff) span.classList.add("ilab-steer-diff"); // where the texts part ways
      else if (diff >= 0 && i > diff) span.classList.add("ilab-steer-after");
      box.appendChild(span);
      if (t.newline) box.appendChild(document.createElement("br"));
    });
  };
  const drawReadout = () => {
    const name = model.get("metric_name");
    const vals = model.get("metric_values") || {};
    for (const [key, el] of readouts) {
      el.style.display = name ? "" : "none";
      el.textContent = name ? `${name} = ${key in vals ? ilabFmt(vals[key]) : "…"}` : "";
    }
  };
  outs.addEventListener("mouseover", (e) => {
    const span = e.target.closest && e.target.closest(".ilab-steer-tok");
    if (!span) return tip.hide();
    const i = Number(span.dataset.i);
    const base = model.get("baseline_tokens")[i];
    const steered = model.get("steered_tokens")[i];
    const show = (t) => (t === undefined ? "–" : ilabTokenText(t).text);
    const same = base === steered ? "same in both" : "the texts differ here";
    tip.show(span, `generated token ${i + 1}\nbaseline: ${show(base)}\nsteered:  ${show(steered)}\n${same}`);
  });
  outs.addEventListener("mouseleave", () => tip.hide());
  const drawText = () => {
    const base = model.get("baseline_tokens");
    const steered = model.get("steered_tokens");
    drawTokens(baseText, base, steered.length ? steered : null);
    drawTokens(steerText, steered, base);
    steerText.dataset.run = String(model.get("run_id"));
    drawReadout();
  };
  const drawControls = () => {
    if (document.activeElement !== prompt) prompt.value = model.get("prompt");
    const vals = model.get("values");
    for (const [name, input] of inputs) {
      if (timer === null && name in vals) input.value = String(vals[name]);
      shown.get(name).textContent = ilabFmt(Number(input.value));
    }
    site.value = model.get("site");
    temp.value = String(model.get("temperature"));
    seed.value = String(model.get("seed"));
  };
  const drawStatus = () => {
    const s = model.get("status");
    status.textContent = `run ${model.get("run_id")} · ${s}`;
    root.dataset.status = s;
    status.classList.toggle("ilab-steer-error", s.startsWith("error"));
  };
  const draw = () => {
    ilabTheme(root, model.get("scheme"));
    drawControls();
    drawText();
    drawStatus();
  };
  const stop = ilabListen(
    model,
    {
      "change:baseline_tokens": drawText,
      "change:steered_tokens": drawText,
      "change:run_id": () => {
        drawText();
        drawStatus();
      },
      "change:status": drawStatus,
      "change:metric_values": drawReadout,
      "change:metric_name": drawReadout,
      "change:values": drawControls,
      "change:prompt": drawControls,
      "change:site": drawControls,
      "change:temperature": drawControls,
      "change:seed": drawControls,
      "change:scheme": draw,
    },
    draw,
  );
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
