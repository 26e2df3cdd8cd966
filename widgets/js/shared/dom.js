// @ts-check
// Elements, themes, keyboard and model events.

/**
 * Create an element with a class and (untrusted) text set via textContent, never innerHTML.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string | null} [cls]
 * @param {unknown} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function ilabEl(tag, cls, text) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== undefined && text !== null) el.textContent = String(text);
  return el;
}

/**
 * The element matching `selector` at or above where an event happened (null: none).
 * @param {Event} event
 * @param {string} selector
 * @returns {HTMLElement | null}
 */
export function ilabClosest(event, selector) {
  const target = event.target;
  return target instanceof Element ? /** @type {HTMLElement | null} */ (target.closest(selector)) : null;
}

/**
 * Whether the page is in a dark theme (JupyterLab sets data-jp-theme-light).
 * @param {string} scheme "dark", "light" or "auto"
 * @returns {boolean}
 */
export function ilabIsDark(scheme) {
  if (scheme === "dark") return true;
  if (scheme === "light") return false;
  const light = document.body && document.body.dataset ? document.body.dataset.jpThemeLight : undefined;
  if (light !== undefined) return light === "false";
  return Boolean(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);
}

/**
 * Apply the scheme class to a widget root.
 * @param {HTMLElement} root
 * @param {string} scheme
 */
export function ilabTheme(root, scheme) {
  root.classList.add("ilab-root");
  root.classList.toggle("ilab-dark", scheme === "dark");
  root.classList.toggle("ilab-light", scheme === "light");
}

/**
 * A search box (untrusted text stays in its value).
 * @param {string} placeholder
 * @param {string} ariaLabel
 * @returns {HTMLInputElement}
 */
export function ilabSearchBox(placeholder, ariaLabel) {
  const box = ilabEl("input", "ilab-search");
  box.type = "search";
  box.placeholder = placeholder;
  box.setAttribute("aria-label", ariaLabel);
  return box;
}

/**
 * A focusable container that the arrow keys move through (role grid or listbox, with a label for screen readers).
 * @param {string} cls
 * @param {string} role
 * @param {string} ariaLabel
 * @returns {HTMLDivElement}
 */
export function ilabFocusBox(cls, role, ariaLabel) {
  const box = ilabEl("div", cls);
  box.tabIndex = 0;
  box.setAttribute("role", role);
  box.setAttribute("aria-label", ariaLabel);
  return box;
}

/**
 * Stop JupyterLab from swallowing keys meant for a control inside the output.
 * @param {HTMLElement} el
 */
export function ilabKeepKeys(el) {
  el.addEventListener("keydown", (e) => e.stopPropagation());
}

/**
 * Subscribe to model events, run the first draw, and return the cleanup that unsubscribes.
 * @param {AnyModel} model
 * @param {ModelHandlers} handlers
 * @param {() => void} firstDraw
 * @returns {Cleanup}
 */
export function ilabListen(model, handlers, firstDraw) {
  for (const [event, handler] of Object.entries(handlers)) model.on(event, handler);
  firstDraw();
  return () => {
    for (const [event, handler] of Object.entries(handlers)) model.off(event, handler);
  };
}

/**
 * Set a trait from the page and send it to the kernel.
 * @param {AnyModel} model
 * @param {string} name
 * @param {unknown} value
 */
export function ilabSave(model, name, value) {
  model.set(name, value);
  model.save_changes();
}
