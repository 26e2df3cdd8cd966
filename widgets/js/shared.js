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

/** Format a number compactly: 3 significant digits (integers from 100 up), exponent for very small/large values. */
function ilabFmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (!Number.isFinite(x)) return x > 0 ? "∞" : "-∞";
  const a = Math.abs(x);
  if (a === 0) return "0";
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  if (a >= 100) return String(Math.round(x)); // toPrecision(3) would write 1234 as "1.23e+3"
  const s = x.toPrecision(3);
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s; // only zeros after the point go
}

/** A signed number with a fixed count of decimals ("+0.52", "-1.30"): for columns of numbers that compare. */
function ilabFmtSigned(x, digits = 2) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const s = Math.abs(x) >= 1e5 ? x.toExponential(1) : x.toFixed(digits);
  return x > 0 ? `+${s}` : s;
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
 * A colour scale as drawn: {kind: "sequential"|"diverging", vmin, center, vmax}. Accepts what Python sends
 * (core/views/colors.py: a ColorScale's dict, or its 4 numbers [kind code, vmin, center, vmax]) and the old
 * (vmax, diverging) pair: sequential 0..vmax, or diverging -vmax..vmax around 0.
 */
function ilabScale(scale, diverging) {
  if (typeof scale === "number") {
    return diverging
      ? { kind: "diverging", vmin: -scale, center: 0, vmax: scale }
      : { kind: "sequential", vmin: 0, center: 0, vmax: scale };
  }
  if (!scale) return { kind: "sequential", vmin: 0, center: 0, vmax: 0 };
  if (Array.isArray(scale) || ArrayBuffer.isView(scale)) {
    return { kind: scale[0] >= 0.5 ? "diverging" : "sequential", vmin: scale[1], center: scale[2], vmax: scale[3] };
  }
  return scale;
}

/** Row `i` of a [n, 4] scales payload (one scale per feature or per grid) as a scale. */
function ilabScaleAt(scales, i) {
  return scales ? ilabScale(scales.subarray(4 * i, 4 * i + 4)) : ilabScale(null);
}

/** Where a value falls on a scale: 0..1 (sequential), -1..1 (diverging); NaN for a non-finite value. */
function ilabScalePos(value, scale) {
  const s = scale;
  if (!Number.isFinite(value)) return NaN;
  if (s.kind === "diverging") {
    if (value >= s.center) return s.vmax > s.center ? Math.min(1, (value - s.center) / (s.vmax - s.center)) : 0;
    return s.vmin < s.center ? Math.max(-1, (value - s.center) / (s.center - s.vmin)) : 0;
  }
  if (!(s.vmax > s.vmin)) return 0;
  return Math.max(0, Math.min(1, (value - s.vmin) / (s.vmax - s.vmin)));
}

/**
 * Colour for a value on a scale (see ilabScale): orange above (sequential: towards vmax), blue below the
 * centre. Translucent, with the strongest alpha set by the theme (--ilab-heat-alpha: lower in dark themes),
 * so text stays readable (contrast >= 4.5:1) on light and dark backgrounds.
 */
function ilabColor(value, scale, diverging) {
  const t = ilabScalePos(value, ilabScale(scale, diverging));
  if (!(Math.abs(t) >= 0.02)) return "transparent";
  const rgb = t >= 0 ? "230, 85, 13" : "49, 130, 189";
  return `rgba(${rgb}, calc(var(--ilab-heat-alpha, 0.85) * ${Math.abs(t).toFixed(3)}))`;
}

/**
 * A legend for a scale (see ilabScale; the old (vmin, vmax, diverging) form still works): the lowest value,
 * a bar coloured as ilabColor colours values, the centre of a diverging scale, and the highest value.
 */
function ilabLegend(scale, vmax, diverging) {
  let s = ilabScale(scale, diverging);
  let lo = s.vmin;
  if (typeof scale === "number") {
    s = ilabScale(vmax, diverging); // old form: (vmin, vmax, diverging)
    lo = scale;
  }
  const box = ilabEl("div", "ilab-legend");
  box.appendChild(ilabEl("span", "ilab-legend-label ilab-legend-min", ilabFmt(lo)));
  const bar = ilabEl("span", "ilab-legend-bar");
  const stops = [];
  for (let i = 0; i <= 10; i++) stops.push(ilabColor(lo + ((s.vmax - lo) * i) / 10, s));
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  if (s.kind === "diverging" && s.vmax > lo) {
    const mark = ilabEl("span", "ilab-legend-center");
    mark.style.left = `${(100 * (s.center - lo)) / (s.vmax - lo)}%`;
    mark.title = `centre ${ilabFmt(s.center)}`;
    bar.appendChild(mark);
  }
  box.appendChild(bar);
  box.appendChild(ilabEl("span", "ilab-legend-label ilab-legend-max", ilabFmt(s.vmax)));
  box.dataset.kind = s.kind;
  return box;
}

/**
 * A hover box for a widget, placed next to what it describes. It lives in document.body: inside
 * JupyterLab an output's ancestors set `contain`/transforms, which would shift a fixed box away from
 * its token (or clip it). `show(anchor, text)` puts it below the anchor (above when there is no room),
 * inside the viewport; `hide()`; `remove()` when the view goes.
 */
function ilabTip(root, cls) {
  const tip = ilabEl("div", `ilab-root ilab-tip${cls ? ` ${cls}` : ""}`);
  tip.setAttribute("role", "tooltip");
  tip.style.display = "none";
  document.body.appendChild(tip);
  const gap = 4;
  function place(anchor) {
    tip.style.left = "0px";
    tip.style.top = "0px";
    tip.style.display = "block";
    const origin = tip.getBoundingClientRect(); // where (0, 0) lands: the containing block's corner
    const r = anchor.getBoundingClientRect();
    const vw = document.documentElement.clientWidth || window.innerWidth;
    const vh = document.documentElement.clientHeight || window.innerHeight;
    const x = Math.max(gap, Math.min(r.left, vw - origin.width - gap));
    let y = r.bottom + gap;
    if (y + origin.height > vh - gap && r.top - gap - origin.height >= gap) y = r.top - gap - origin.height;
    y = Math.max(gap, Math.min(y, vh - origin.height - gap));
    tip.style.left = `${Math.round(x - origin.left)}px`;
    tip.style.top = `${Math.round(y - origin.top)}px`;
  }
  return {
    el: tip,
    show(anchor, content) {
      for (const c of ["ilab-dark", "ilab-light"]) tip.classList.toggle(c, root.classList.contains(c));
      if (typeof content === "string") tip.textContent = content;
      else tip.replaceChildren(...content);
      place(anchor);
    },
    hide() {
      tip.style.display = "none";
    },
    remove() {
      tip.remove();
    },
  };
}

/**
 * Hover, keyboard cursor and Enter for a grid of cells (elements matching `selector` inside `box`,
 * `cells()` in reading order, `columns()` a row): hovering shows `describe(cell)` in `tip`, the arrow
 * keys move a cursor, Enter calls `select(cell)`. Returns `{reset}`, to call when the cells are redrawn.
 */
function ilabCellGrid(box, selector, { tip, describe, select, cells, columns }) {
  let cursor = -1;
  function move(i) {
    const all = cells();
    if (cursor >= 0 && all[cursor]) all[cursor].classList.remove("ilab-cursor");
    cursor = Math.max(0, Math.min(all.length - 1, i));
    all[cursor].classList.add("ilab-cursor");
  }
  box.addEventListener("mouseover", (e) => {
    const cell = e.target.closest(selector);
    if (!cell) return tip.hide();
    tip.show(cell, describe(cell));
  });
  box.addEventListener("mouseleave", () => tip.hide());
  box.addEventListener("keydown", (e) => {
    const C = columns();
    const moves = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: C, ArrowUp: -C };
    if (e.key in moves) {
      move((cursor < 0 ? 0 : cursor) + moves[e.key]);
      e.preventDefault();
    } else if (e.key === "Enter" && cursor >= 0) {
      select(cells()[cursor]);
      e.preventDefault();
    }
  });
  return {
    reset() {
      cursor = -1;
    },
  };
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
 * `value` on `scale` (see ilabScale) when a value is given. Shared by the heatmap and the dashboard.
 */
function ilabTokenSpan(tok, value, scale, diverging) {
  const shown = ilabTokenText(tok);
  const span = ilabEl("span", shown.faint ? "ilab-tok ilab-faint" : "ilab-tok", shown.text);
  if (shown.newline) span.dataset.newline = "1";
  if (value !== undefined) {
    span.style.background = ilabColor(value, scale, diverging);
    span.dataset.v = String(value);
  }
  return span;
}
