// FeatureFlow: latents followed across layers by SAE matches. One column per layer, a node per latent,
// edges thicker and more opaque the better the match. Hover a node for its label and top tokens; click
// (or Enter) to select it: Python opens its card in a linked FeatureDashboard.

const SVG = "http://www.w3.org/2000/svg";

function svgEl(tag, cls) {
  const el = document.createElementNS(SVG, tag);
  if (cls) el.setAttribute("class", cls);
  return el;
}

function render({ model, el }) {
  const root = ilabEl("div", "ilab-root ilab-flow");
  el.appendChild(root);
  const tip = ilabTip(root, "ilab-flow-tip");
  const colW = 170;
  const rowH = 56;
  const top = 28;

  function draw() {
    ilabTheme(root, model.get("scheme"));
    root.replaceChildren();
    const columns = model.get("columns");
    const nodes = model.get("nodes");
    const edges = model.get("edges");
    const selected = model.get("selected") || {};
    const rows = Math.max(1, ...nodes.map((n) => n.row + 1));
    const svg = svgEl("svg");
    svg.setAttribute("width", String(columns.length * colW + 20));
    svg.setAttribute("height", String(top + rows * rowH + 10));
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "latents matched across layers");
    const pos = {};
    for (const n of nodes) pos[n.id] = { x: 20 + n.column * colW + 40, y: top + n.row * rowH + rowH / 2 };
    columns.forEach((name, c) => {
      const t = svgEl("text", "ilab-flow-col");
      t.setAttribute("x", String(20 + c * colW));
      t.setAttribute("y", "14");
      t.textContent = name;
      svg.appendChild(t);
    });
    for (const e of edges) {
      const a = pos[e.source];
      const b = pos[e.target];
      const path = svgEl("path", "ilab-flow-edge");
      const mid = (a.x + b.x) / 2;
      path.setAttribute("d", `M${a.x + 10},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.x - 10},${b.y}`);
      path.setAttribute("stroke-width", String(1 + 6 * e.quality));
      path.setAttribute("stroke-opacity", String(0.25 + 0.75 * e.quality));
      const title = svgEl("title");
      title.textContent = `match error ${ilabFmt(e.error)}`;
      path.appendChild(title);
      svg.appendChild(path);
    }
    for (const n of nodes) {
      const p = pos[n.id];
      const g = svgEl("g");
      const circle = svgEl("circle", "ilab-flow-node");
      circle.setAttribute("cx", String(p.x));
      circle.setAttribute("cy", String(p.y));
      circle.setAttribute("r", "10");
      circle.setAttribute("tabindex", "0");
      circle.setAttribute("role", "button");
      circle.setAttribute("aria-label", `latent ${n.latent} of ${columns[n.column]}`);
      circle.dataset.id = n.id;
      if (selected.column === n.column && selected.latent === n.latent) circle.classList.add("ilab-selected");
      const text = svgEl("text", "ilab-flow-text");
      text.setAttribute("x", String(p.x + 14));
      text.setAttribute("y", String(p.y + 4));
      const label = n.label ? ` ${n.label}` : "";
      text.textContent = `#${n.latent}${label.length > 16 ? `${label.slice(0, 15)}…` : label}`;
      const show = () => {
        const lines = [ilabEl("div", "ilab-tip-title", `latent ${n.latent} · ${columns[n.column]}`)];
        if (n.label) lines.push(ilabEl("div", "", n.label));
        const tops = n.tops.map((t) => ilabTokenText(t).text).join("  ");
        if (n.tops.length) lines.push(ilabEl("div", "ilab-muted", `top tokens: ${tops}`));
        tip.show(circle, lines);
      };
      const pick = () => {
        model.set("selected", { column: n.column, site: columns[n.column], latent: n.latent });
        model.save_changes();
      };
      circle.addEventListener("mouseenter", show);
      circle.addEventListener("focus", show);
      circle.addEventListener("mouseleave", () => tip.hide());
      circle.addEventListener("blur", () => tip.hide());
      circle.addEventListener("click", pick);
      circle.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") {
          ev.preventDefault();
          ev.stopPropagation();
          pick();
        }
      });
      g.append(circle, text);
      svg.appendChild(g);
    }
    root.appendChild(svg);
  }

  const stop = ilabListen(
    model,
    { "change:nodes": draw, "change:edges": draw, "change:selected": draw, "change:scheme": draw },
    draw,
  );
  return () => {
    stop();
    tip.remove();
  };
}

export default { render };
