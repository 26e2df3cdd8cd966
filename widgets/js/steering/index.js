// @ts-check
// SteeringPanel: prompt, one slider per vector, site / temperature / seed, baseline vs steered text.
import { ilabClosest, ilabFmt, ilabListen, ilabSave, ilabTheme } from "../shared/index.js";
import { drawControls, drawReadout, drawStatus, drawText, showTokenTip } from "./draw.js";
import { steeringView } from "./view.js";
/** @import { SteeringView } from "./view.js" */

/**
 * The sliders, debounced: only the last position of a burst is sent; Reset sends zeros at once.
 * @param {SteeringView} view
 */
function wireSliders(view) {
  const { model, inputs, shown } = view;
  const sendValues = () => {
    view.timer = null;
    /** @type {Record<string, number>} */
    const vals = {};
    for (const [name, input] of inputs) vals[name] = Number(input.value);
    ilabSave(model, "values", vals);
  };
  for (const [name, input] of inputs) {
    input.addEventListener("input", () => {
      const value = shown.get(name);
      if (value) value.textContent = ilabFmt(Number(input.value));
      if (view.timer) clearTimeout(view.timer);
      view.timer = setTimeout(sendValues, Math.max(0, model.get("debounce_ms")));
    });
  }
  view.reset.addEventListener("click", () => {
    for (const input of inputs.values()) input.value = "0";
    for (const value of shown.values()) value.textContent = "0";
    if (view.timer) clearTimeout(view.timer);
    sendValues();
  });
}

/**
 * The prompt (Enter or Run: a new prompt runs by itself, the same one is run again) and the settings.
 * @param {SteeringView} view
 */
function wireSettings(view) {
  const { model, prompt, site, temp, seed } = view;
  const sendPrompt = () => {
    if (prompt.value !== model.get("prompt")) return ilabSave(model, "prompt", prompt.value);
    try {
      model.send({ type: "run" }); // the same prompt: run again (after an error, or to resample)
    } catch {
      view.status.textContent = "no kernel: run the notebook to generate";
    }
  };
  view.go.addEventListener("click", sendPrompt);
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      sendPrompt();
    }
  });
  site.addEventListener("change", () => ilabSave(model, "site", site.value));
  temp.addEventListener("change", () => {
    const t = Number(temp.value);
    if (Number.isFinite(t) && t >= 0) ilabSave(model, "temperature", t);
  });
  seed.addEventListener("change", () => {
    const s = Math.trunc(Number(seed.value));
    if (Number.isFinite(s)) ilabSave(model, "seed", s);
  });
  view.outs.addEventListener("mouseover", (e) => {
    const span = ilabClosest(e, ".ilab-steer-tok");
    if (!span) return view.tip.hide();
    showTokenTip(view, span);
  });
  view.outs.addEventListener("mouseleave", () => view.tip.hide());
}

/** @param {RenderProps} props */
function render({ model, el }) {
  const view = steeringView(model);
  el.appendChild(view.root);
  wireSliders(view);
  wireSettings(view);
  const controls = () => drawControls(view);
  const draw = () => {
    ilabTheme(view.root, model.get("scheme"));
    drawControls(view);
    drawText(view);
    drawStatus(view);
  };
  const stop = ilabListen(
    model,
    {
      "change:baseline_tokens": () => drawText(view),
      "change:steered_tokens": () => drawText(view),
      "change:run_id": () => {
        drawText(view);
        drawStatus(view);
      },
      "change:status": () => drawStatus(view),
      "change:metric_values": () => drawReadout(view),
      "change:metric_name": () => drawReadout(view),
      "change:values": controls,
      "change:prompt": controls,
      "change:site": controls,
      "change:ranges": controls,
      "change:range_note": controls,
      "change:temperature": controls,
      "change:seed": controls,
      "change:scheme": draw,
    },
    draw,
  );
  return () => {
    stop();
    view.tip.remove();
  };
}

/** @type {WidgetModule} */
export default { render };
