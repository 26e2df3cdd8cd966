// @ts-check
// Numbers and tokens as text.

/**
 * Format a number compactly: 3 significant digits (integers from 100 up), exponent for very small/large values.
 * @param {number | null | undefined} x
 * @returns {string}
 */
export function ilabFmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  if (!Number.isFinite(x)) return x > 0 ? "∞" : "-∞";
  const a = Math.abs(x);
  if (a === 0) return "0";
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  if (a >= 100) return String(Math.round(x)); // toPrecision(3) would write 1234 as "1.23e+3"
  const s = x.toPrecision(3);
  return s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s; // only zeros after the point go
}

/**
 * A signed number with a fixed count of decimals ("+0.52", "-1.30"): for columns of numbers that compare.
 * @param {number | null | undefined} x
 * @param {number} [digits]
 * @returns {string}
 */
export function ilabFmtSigned(x, digits = 2) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const s = Math.abs(x) >= 1e5 ? x.toExponential(1) : x.toFixed(digits);
  return x > 0 ? `+${s}` : s;
}

/**
 * @typedef {object} TokenText
 * @property {string} text what to show: whitespace made visible
 * @property {boolean} faint whether the token is only whitespace (or empty): shown muted
 * @property {boolean} newline whether the token holds a line break
 */

/**
 * Display form of a token: whitespace made visible, text otherwise unchanged.
 * @param {string} tok
 * @returns {TokenText}
 */
export function ilabTokenText(tok) {
  if (tok === "") return { text: "∅", faint: true, newline: false };
  const newline = tok.includes("\n");
  if (/^\s+$/.test(tok)) {
    const shown = tok.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/ /g, "·");
    return { text: shown, faint: true, newline };
  }
  return { text: tok.replace(/\n/g, "↵"), faint: false, newline };
}
