// @ts-check
// ESLint for the widget JavaScript (widgets/js): the recommended rules, small files and functions, and no
// markup from strings (token text is untrusted: it goes in through textContent only). `make lint` runs it.
import js from "@eslint/js";
import globals from "globals";

const NO_MARKUP = [
  {
    selector: "MemberExpression[property.name=/^(innerHTML|outerHTML)$/]",
    message: "Set text with textContent (ilabEl): token text is untrusted.",
  },
  {
    selector: "CallExpression[callee.property.name=/^(insertAdjacentHTML|write|writeln|createContextualFragment)$/]",
    message: "No markup from strings: build elements with ilabEl and set text with textContent.",
  },
  {
    selector: "ImportExpression",
    message: "No import(): a widget loads nothing at run time (it must render offline).",
  },
];

export default [
  {
    ignores: ["node_modules/", ".venv/", ".ndif-venv/", ".ref/", "docs/", "build/", "dist/", ".scratch/", ".make/"],
  },
  js.configs.recommended,
  {
    files: ["widgets/js/**/*.js", "tests/browser/**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.browser },
    rules: {
      "max-lines": ["error", { max: 250 }],
      "max-lines-per-function": ["error", { max: 60 }],
      "no-restricted-syntax": ["error", ...NO_MARKUP],
      "no-unused-vars": ["error", { args: "after-used", caughtErrors: "none" }],
      eqeqeq: ["error", "always"],
      "prefer-const": "error",
      "no-var": "error",
    },
  },
  {
    files: ["eslint.config.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
  },
];
