// @ts-check
// Following JupyterLab's theme: a canvas keeps the colours it was painted with, so widgets that paint one
// repaint when the page's theme changes (JupyterLab sets data-jp-theme-light / data-jp-theme-name on <body>
// once the new theme's stylesheet is in), and read the theme's colours from their root's CSS variables.

/**
 * Call `repaint` whenever the page's theme changes (JupyterLab's body attributes, or the system's
 * light/dark preference); returns the cleanup that stops listening. A change repaints at once and
 * again on the next frame, when the new stylesheet's variables have been computed.
 * @param {() => void} repaint
 * @returns {Cleanup}
 */
export function ilabOnThemeChange(repaint) {
  const run = () => {
    repaint();
    requestAnimationFrame(repaint);
  };
  const observer = new MutationObserver(run);
  observer.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (media) media.addEventListener("change", run);
  return () => {
    observer.disconnect();
    if (media) media.removeEventListener("change", run);
  };
}

/**
 * What a canvas paints with, read from a widget root's CSS variables (shared.css sets them per theme).
 * @typedef {object} Palette
 * @property {string} bg the background
 * @property {string} fg text and lines
 * @property {string} pos "r, g, b" of values above the centre
 * @property {string} neg "r, g, b" of values below the centre
 * @property {number} alpha the strongest alpha of a cell
 * @property {number} lin 1: a cell's alpha grows linearly with its value (light themes); 0: with its square
 *   root (dark themes, where a translucent colour on black stays dim: mid values need more)
 */

/**
 * The palette in force for a widget root.
 * @param {HTMLElement} root
 * @returns {Palette}
 */
export function ilabPalette(root) {
  const css = getComputedStyle(root);
  /** @param {string} name @param {string} fallback */
  const read = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    bg: read("--ilab-bg", "#ffffff"),
    fg: read("--ilab-fg", "#1f1f1f"),
    pos: read("--ilab-cell-pos", "230, 85, 13"),
    neg: read("--ilab-cell-neg", "49, 130, 189"),
    alpha: Number(read("--ilab-cell-alpha", "0.85")) || 0.85,
    lin: Number(read("--ilab-cell-lin", "1")),
  };
}
