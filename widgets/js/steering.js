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
    const input = ilabEl("input", "ilab-steer-range");
    input.type = "range";
    input.min = String(lo);
    input.max = String(hi);
    input.step = String(step);
    input.dataset.name = name;
    input.setAttribute("aria-label", `scale of ${name}`);
    const value = ilabEl("span", "ilab-steer-value");
    row.append(label, input, value);
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
  const col = (title, cls) => {
    const box = ilabEl("div", `ilab-steer-col ${cls}`);
    const text = ilabEl("div", "ilab-steer-text");
    box.append(ilabEl("div", "ilab-steer-title ilab-muted", title), text);
    outs.appendChild(box);
    return text;
  };
  const baseText = col("baseline", "ilab-steer-baseline");
  const steerText = col("steered", "ilab-steer-steered");
  const status = ilabEl("div", "ilab-steer-status ilab-muted");
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
    model.set("prompt", prompt.value);
    model.save_changes();
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
  const drawTokens = (box, tokens, other) => {
    box.replaceChildren();
    tokens.forEach((tok, i) => {
      const t = ilabTokenText(tok);
      const span = ilabEl("span", "ilab-steer-tok", t.text);
      if (t.faint) span.classList.add("ilab-muted");
      if (other && tok !== other[i]) span.classList.add("ilab-steer-diff");
      box.appendChild(span);
      if (t.newline) box.appendChild(document.createElement("br"));
    });
  };
  const drawText = () => {
    const base = model.get("baseline_tokens");
    const steered = model.get("steered_tokens");
    drawTokens(baseText, base, steered.length ? steered : null);
    drawTokens(steerText, steered, base);
    steerText.dataset.run = String(model.get("run_id"));
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
  return ilabListen(
    model,
    {
      "change:baseline_tokens": drawText,
      "change:steered_tokens": drawText,
      "change:run_id": () => {
        drawText();
        drawStatus();
      },
      "change:status": drawStatus,
      "change:values": drawControls,
      "change:prompt": drawControls,
      "change:site": drawControls,
      "change:temperature": drawControls,
      "change:seed": drawControls,
      "change:scheme": draw,
    },
    draw,
  );
}

export default { render };
