// interplab shared widget helpers: prepended to every widget's module (no build step).

/** Turn a binary payload {view: DataView, dtype, shape} into a typed array. */
function ilabDecode(payload) {
  if (!payload || !payload.view) return null;
  const Types = { float32: Float32Array, int32: Int32Array, uint8: Uint8Array };
  const T = Types[payload.dtype];
  let view = payload.view;
  if (!(view instanceof DataView)) {
    // Static HTML managers may hand over an ArrayBuffer or typed array.
    view = ArrayBuffer.isView(view)
      ? new DataView(view.buffer, view.byteOffset, view.byteLength)
      : new DataView(view);
  }
  if (view.byteOffset % T.BYTES_PER_ELEMENT === 0) {
    return new T(view.buffer, view.byteOffset, view.byteLength / T.BYTES_PER_ELEMENT);
  }
  return new T(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
}

/** Create an element with a class and (untrusted) text set via textContent, never innerHTML. */
function ilabEl(tag, cls, text) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined && text !== null) el.textContent = String(text);
  return el;
}

/** Format a number compactly: 3 significant digits, exponent for very small/large values. */
function ilabFmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const a = Math.abs(x);
  if (a === 0) return "0";
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  return x.toPrecision(3).replace(/\.?0+$/, "");
}

/** Whether the page is in a dark theme (JupyterLab sets data-jp-theme-light). */
function ilabIsDark(scheme) {
  if (scheme === "dark") return true;
  if (scheme === "light") return false;
  const light = document.body && document.body.dataset ? document.body.dataset.jpThemeLight : undefined;
  if (light !== undefined) return light === "false";
  return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
}

/** Apply the scheme class to a widget root. */
function ilabTheme(root, scheme) {
  root.classList.add("ilab-root");
  root.classList.toggle("ilab-dark", scheme === "dark");
  root.classList.toggle("ilab-light", scheme === "light");
}

/**
 * Colour for a value. Sequential: transparent -> orange by |v|/vmax. Diverging: blue for
 * negative, red for positive. Colours are translucent so text stays readable on light and dark.
 */
function ilabColor(value, vmax, diverging) {
  if (!(vmax > 0) || !Number.isFinite(value)) return "transparent";
  let t = Math.max(-1, Math.min(1, value / vmax));
  if (!diverging) t = Math.max(0, t);
  const alpha = Math.abs(t) * 0.85;
  if (alpha < 0.02) return "transparent";
  return t >= 0 ? `rgba(230, 85, 13, ${alpha.toFixed(3)})` : `rgba(49, 130, 189, ${alpha.toFixed(3)})`;
}

/** A legend bar from vmin to vmax, coloured as ilabColor colours values on the scale of `vmax`. */
function ilabLegend(vmin, vmax, diverging) {
  const box = ilabEl("div", "ilab-legend");
  box.appendChild(ilabEl("span", "ilab-legend-label", ilabFmt(vmin)));
  const bar = ilabEl("span", "ilab-legend-bar");
  const stops = [];
  for (let i = 0; i <= 10; i++) {
    const v = vmin + ((vmax - vmin) * i) / 10;
    stops.push(ilabColor(v, vmax, diverging));
  }
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  box.appendChild(bar);
  box.appendChild(ilabEl("span", "ilab-legend-label", ilabFmt(vmax)));
  return box;
}

/** Display form of a token: whitespace made visible, text otherwise unchanged. */
function ilabTokenText(tok) {
  if (tok === "") return { text: "∅", faint: true, newline: false };
  const newline = tok.includes("\n");
  if (/^\s+$/.test(tok)) {
    const shown = tok.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/ /g, "·");
    return { text: shown, faint: true, newline };
  }
  return { text: tok.replace(/\n/g, "↵"), faint: false, newline };
}

/** A search box (untrusted text stays in its value). */
function ilabSearchBox(placeholder, ariaLabel) {
  const box = ilabEl("input", "ilab-search");
  box.type = "search";
  box.placeholder = placeholder;
  box.setAttribute("aria-label", ariaLabel);
  return box;
}

/** A focusable container that the arrow keys move through (role grid or listbox, with a label for screen readers). */
function ilabFocusBox(cls, role, ariaLabel) {
  const box = ilabEl("div", cls);
  box.tabIndex = 0;
  box.setAttribute("role", role);
  box.setAttribute("aria-label", ariaLabel);
  return box;
}

/** Stop JupyterLab from swallowing keys meant for a control inside the output. */
function ilabKeepKeys(el) {
  el.addEventListener("keydown", (e) => e.stopPropagation());
}

/** Subscribe to model events, run the first draw, and return the cleanup that unsubscribes. */
function ilabListen(model, handlers, firstDraw) {
  for (const [event, handler] of Object.entries(handlers)) model.on(event, handler);
  firstDraw();
  return () => {
    for (const [event, handler] of Object.entries(handlers)) model.off(event, handler);
  };
}

/**
 * One token as a span (class ilab-tok; text via textContent, whitespace made visible), coloured by
 * `value` on the scale of `vmax` when a value is given. Shared by the heatmap and the dashboard.
 */
function ilabTokenSpan(tok, value, vmax, diverging) {
  const shown = ilabTokenText(tok);
  const span = ilabEl("span", shown.faint ? "ilab-tok ilab-faint" : "ilab-tok", shown.text);
  if (shown.newline) span.dataset.newline = "1";
  if (value !== undefined) {
    span.style.background = ilabColor(value, vmax, diverging);
    span.dataset.v = String(value);
  }
  return span;
}
