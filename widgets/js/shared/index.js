// @ts-check
// interplab's shared widget helpers (decoding, colour scales, number formatting, safe text, hover boxes):
// every widget imports them from here, and the linker (widgets/_bundle.py) inlines them once per widget.
export * from "./decode.js";
export * from "./dom.js";
export * from "./format.js";
export * from "./grid.js";
export * from "./scale.js";
export * from "./theme.js";
export * from "./tip.js";
export * from "./tokens.js";
