// The graph explorer's script: it shows and hides what Python put in the page (the JSON in #data), and asks
// graphviz (Viz, compiled to WebAssembly, inside the page) to lay out what is shown. State: which modules are open,
// which phases are shown, the op selected, the backward step, the search, the colouring, each pane's zoom and the
// language of the generated source a kernel's card shows.
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const byId = Object.fromEntries(D.nodes.map(n => [n.id, n]));
const modules = D.modules;
const root = Object.keys(modules).filter(p => modules[p].depth === 0);
const open = new Set(Object.keys(modules).filter(p => modules[p].depth < Math.max(D.depth, 1)));
const steps = D.nodes.filter(n => n.order !== undefined).sort((a, b) => a.order - b.order);
let shown = D.show;
let selected = null, step = -1, query = "", colour = "none", viz = null;
let language = "c";                // the generated source a kernel's card shows: "c" or "cuda"
const scales = {};                 // phase -> the zoom chosen (times graphviz's size); none yet: fit the pane's width
const largest = {};                // phase -> the largest cost drawn, for the legend of "colour by"

const fmt = n => n.toLocaleString("en-US");
const shape = s => "(" + s.join(", ") + (s.length === 1 ? "," : "") + ")";
const human = (n, unit) => {
  for (const [p, k] of [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) if (n >= k) return (n / k).toFixed(2) + " " + p + unit;
  return fmt(n) + " " + unit;
};
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
// The DOT text is Python's (graph_dot.py): every label comes escaped (`dot`, `frame`, an edge's fifth item) and
// every style from D.style and D.dot; this script only joins them into statements. Drawn ids are quoted as they are:
// they hold only letters, digits, "_" and ":", never a name.
const q = id => '"' + id + '"';
// Drawn ids hold no names (graphviz reads \N in an id; a name may hold ":"): a module is its number here.
const paths = Object.keys(modules), numbers = new Map(paths.map((p, i) => [p, i]));
const boxId = (phase, path) => "m:" + phase + ":" + numbers.get(path);
const boxPath = id => paths[Number(id.split(":")[2])];

// The module a node is drawn inside of, collapsed: the outermost closed module on its path (none: drawn itself).
// A scope is a list of module names ('layers.3' is one name: a module in a list); a path joins them with dots.
function closedAncestor(scope) {
  for (let k = 1; k <= scope.length; k++) {
    const p = scope.slice(0, k).join(".");
    if (modules[p] && modules[p].depth > 0 && !open.has(p)) return p;
  }
  return null;
}
const drawnAs = n => {
  const m = closedAncestor(n.scope);
  return m !== null ? boxId(n.phase, m) : n.merge || n.id;     // partial sums: drawn as their chain's first
};
const inFold = n => n.scope.some((_, k) => (modules[n.scope.slice(0, k + 1).join(".")] || {}).repeat > 1);

function heat(value, max) {            // white to red, on a log scale
  if (!max || !value) return "#ffffff";
  const t = Math.log1p(value) / Math.log1p(max), c = Math.round(255 - 200 * t);
  return "#ff" + c.toString(16).padStart(2, "0").repeat(2);
}
const cost = (id, phase) => {
  if (id.startsWith("m:")) {
    const t = modules[boxPath(id)].total;
    return colour === "flops" ? t.flops[phase] : t.bytes[phase];
  }
  const n = byId[id];
  return colour === "flops" ? n.flops : (n.bytes_read || 0) + (n.bytes_written || 0);
};

// The gradient check: a backward op coloured by the largest |autograd - by hand| of the module around it that a
// pair of manual/ differentiates (a closed box: of the modules inside it); green where that is round-off.
const checked = (id, phase) => {
  if (phase !== "backward") return undefined;
  if (!id.startsWith("m:")) return byId[id].check ? D.check[byId[id].check].max : byId[id].data_kind === "op" ? null : undefined;
  const path = boxPath(id), inside = Object.keys(D.check).filter(p => p && (p === path || p.startsWith(path + ".")));
  return inside.length ? Math.max(...inside.map(p => D.check[p].max)) : null;
};
function checkColour(d) {          // null: no pair checks it; undefined: nothing to check (a tensor, the forward)
  if (d === undefined) return "#ffffff";
  if (d === null) return "#e0e0e0";
  if (d <= D.round_off) return "#a5d6a7";
  const t = Math.min(1, Math.log10(d / D.round_off) / 10), mix = (a, b) => Math.round(a + (b - a) * t);
  return "#" + [mix(0xff, 0xe5), mix(0xf1, 0x39), mix(0x76, 0x35)].map(c => c.toString(16).padStart(2, "0")).join("");
}
const checkFill = (id, phase) => checkColour(checked(id, phase));
const sci = x => x === 0 ? "0" : x.toExponential(1);
function checkRow(path) {
  const c = path !== null && path !== undefined && D.check && D.check[path];
  if (!c) return "";
  const parts = Object.entries(c.parts).map(([k, v]) => esc(k) + " " + sci(v)).join(", ");
  return row("gradient check", (path ? esc(path) + ": " : "") + "max |autograd − " + esc(c.pair) + "_backward| " +
    '<span class="check">' + sci(c.max) + "</span>" + (c.max <= D.round_off ? " (round-off)" : " (they disagree)") +
    "<br><small>" + parts + "</small>");
}

// DOT text of one phase as it stands: open modules as dashed frames, closed ones as boxes.
function dot(phase) {
  const items = new Map();                            // drawn id -> module path it sits in
  for (const n of D.nodes) if (n.phase === phase) {
    const id = drawnAs(n);
    if (!items.has(id)) items.set(id, id.startsWith("m:") ? modules[boxPath(id)].parent : n.path);
  }
  const max = colour === "none" ? 0 : Math.max(0, ...[...items.keys()].map(id => cost(id, phase)));
  largest[phase] = max;
  const decl = id => {
    const fill = colour === "none" ? "" : ', fillcolor="' + (colour === "check" ? checkFill(id, phase) :
      heat(cost(id, phase), max)) + '"';
    if (id.startsWith("m:")) return q(id) + " [" + D.style.box + ", id=" + q(id) + ', label="' + modules[boxPath(id)].dot[phase] + '"' + fill + "];";
    const n = byId[id];
    return q(id) + " [" + D.style[n.kind] + ", id=" + q(id) + ', label="' + n.dot + '"' + fill + "];";
  };
  const inside = new Map();                           // open module path -> drawn ids directly in it
  for (const [id, path] of items) {
    let p = path || "";
    while (p && !(open.has(p) && modules[p].depth > 0)) p = modules[p] ? modules[p].parent : "";
    if (!inside.has(p)) inside.set(p, []);
    inside.get(p).push(id);
  }
  const children = p => Object.keys(modules).filter(c => modules[c].parent === p && open.has(c));
  const lines = [];
  const emit = (p, indent) => {
    for (const id of inside.get(p) || []) lines.push(indent + decl(id));
    for (const c of children(p)) {
      const before = lines.length;
      lines.push(indent + "subgraph " + q("cluster_" + phase + "_" + numbers.get(c)) + " {");
      lines.push(indent + "  id=" + q("c:" + phase + ":" + numbers.get(c)) + '; label="' + modules[c].frame + '"; ' +
        D.dot.frame);
      emit(c, indent + "  ");
      if (lines.length === before + 2) lines.splice(before); else lines.push(indent + "}");
    }
  };
  for (const r of root) emit(r, "  ");
  emit("", "  ");
  const seen = new Set(), edges = [];
  for (const [s, d, , highway, label] of D.edges[phase]) {
    const a = drawnAs(byId[s]), b = drawnAs(byId[d]), key = a + ">" + b;
    if (a === b || seen.has(key)) continue;
    seen.add(key);
    edges.push("  " + q(a) + " -> " + q(b) + ' [label="' + label + '"' + (highway ? ", " + D.dot.highway : "") + "];");
  }
  return "digraph G {\n" + D.dot.head + "\n" + lines.join("\n") + "\n" + edges.join("\n") + "\n}";
}

// Drawing, and what each drawn thing answers.
// graphviz's layout of each drawing, kept by its DOT text: a click, a step or a highlight that changes no box or
// colour draws the same text again, so its layout is not computed again (a large graph takes a second or more).
const laid = new Map();
function layout(text) {
  let svg = laid.get(text);
  if (svg === undefined) {
    svg = viz.renderString(text, {format: "svg"});
    if (laid.size >= 16) laid.delete(laid.keys().next().value);      // the oldest drawing goes first
    laid.set(text, svg);
  }
  return new DOMParser().parseFromString(svg, "image/svg+xml").documentElement;
}

function render() {
  const panes = document.getElementById("panes");
  panes.replaceChildren();
  for (const phase of shown) {
    const pane = document.createElement("section");
    pane.className = "pane";
    pane.dataset.phase = phase;
    pane.innerHTML = "<h2>" + (phase === "compiled" ? "compiled: the kernels a replay runs (" + kernelCount() + ")" :
      phase === "forward" ? "forward" : "backward: the gradient flow") + "</h2>";
    const svg = layout(dot(phase));
    panes.appendChild(pane);
    pane.appendChild(svg);
    svg.dataset.width = parseFloat(svg.getAttribute("width")) * 4 / 3;        // points -> pixels
    svg.dataset.height = parseFloat(svg.getAttribute("height")) * 4 / 3;
    svg.removeAttribute("height");
    size(pane);
    pane.addEventListener("wheel", e => {          // Ctrl + wheel, and a touchpad's pinch, zoom the pane under it
      if (!e.ctrlKey) return;
      e.preventDefault();
      zoom(e.deltaY < 0 ? 1.1 : 1 / 1.1, [pane]);
    }, {passive: false});
    decorate(svg, phase);
  }
  highlight();
  legend();
}

// Zoom: each pane's graph drawn at the scale chosen for its phase; by default as wide as the pane, but no smaller
// than 3/4 of graphviz's size (text stays readable) nor larger than it.
function size(pane) {
  const svg = pane.querySelector("svg"), phase = pane.dataset.phase;
  const scale = scales[phase] ?? Math.min(1, Math.max(0.75, (pane.clientWidth - 4) / svg.dataset.width));
  svg.setAttribute("width", Math.round(svg.dataset.width * scale) + "px");
  pane.dataset.zoom = scale.toFixed(3);
  document.getElementById("zoom-text").textContent = [...document.querySelectorAll("section.pane")]
    .map(p => Math.round(100 * p.dataset.zoom) + "%").join(" · ");
}
const allPanes = () => [...document.querySelectorAll("section.pane")];
function zoom(factor, panes = allPanes()) {
  for (const pane of panes) {
    scales[pane.dataset.phase] = Math.min(4, Math.max(0.02, pane.dataset.zoom * factor));
    size(pane);
  }
}
function fit() {                   // each graph whole in its pane
  for (const pane of allPanes()) {
    const svg = pane.querySelector("svg"), title = pane.querySelector("h2");
    const room = [pane.clientWidth - 4, pane.clientHeight - title.offsetHeight - 16];
    scales[pane.dataset.phase] = Math.min(room[0] / svg.dataset.width, room[1] / svg.dataset.height);
    size(pane);
  }
}

// The legend of what the colours mean now: the kinds of node drawn, or the ramp of the cost coloured by.
const KIND_NAMES = {op: "primitive op", box: "module (click to open)", residual: "residual add",
  accumulate: "gradients add up", param: "parameter", input: "input", const: "constant", grad: "gradient (∂)",
  kernel: "kernel", fused: "fused kernel", check: "index check"};
const paint = style => {           // a node style's fill and line colours, as graphviz reads them
  const fill = /fillcolor="([^"]+)"/.exec(style), line = /(?:^|[ ,])color="([^"]+)"/.exec(style);
  return '<span class="swatch" style="background:' + (fill ? fill[1] : "#ffffff") + ";border-color:" +
    (line ? line[1] : "#777777") + '"></span>';
};
const outline = (line, what) => '<span><span class="swatch" style="border-color:' + line + ';border-width:3px">' +
  "</span>" + what + "</span>";
function legend() {
  const el = document.getElementById("legend");
  let items;
  if (colour === "none") {
    const kinds = new Set([...document.querySelectorAll("#panes g.node")].map(g =>    // the kinds drawn now
      g.id.startsWith("m:") ? "box" : byId[g.id].kind));
    items = Object.keys(KIND_NAMES).filter(k => kinds.has(k)).map(k =>
      '<span data-kind="' + k + '">' + paint(D.style[k]) + KIND_NAMES[k] + "</span>");
  } else if (colour === "check") {
    const swatch = c => '<span class="swatch" style="background:' + c + ';border-color:#777777"></span>';
    items = ["<span>largest |autograd − by hand| of each module's backward (manual/'s pairs), float64:</span>",
      '<span data-check="ok">' + swatch(checkColour(0)) + "≤ " + sci(D.round_off) + " round-off</span>",
      '<span data-check="bad">' + swatch(checkColour(D.round_off * 10)) + '<span class="ramp" style="background:' +
      "linear-gradient(to right," + checkColour(D.round_off * 10) + "," + checkColour(1) + ')"></span> ' +
      sci(D.round_off) + " … 1 and more: they disagree</span>",
      '<span data-check="none">' + swatch(checkColour(null)) + "no pair of its own</span>",
      "<span>the whole block, block_backward: " + sci(D.check[""].max) + "</span>"];
  } else {
    const unit = colour === "flops" ? "FLOPs" : "B";
    items = ['<span>' + (colour === "flops" ? "FLOPs" : "bytes read and written") + ", log scale:</span>",
      '<span>0 <span class="ramp" style="background:linear-gradient(to right,#ffffff,#ff3737)"></span> ' +
      "the largest drawn: " + shown.map(p => p + " " + human(largest[p] || 0, unit)).join(", ") + "</span>"];
  }
  el.innerHTML = "<b>colours</b> " + items.join("") + outline("#d81b60", "selected, and its ops in the other phases") +
    (steps.length ? outline("#ff6f00", "backward step") + outline("#6a1b9a", "the forward op it differentiates") : "");
}

function decorate(svg, phase) {
  for (const g of svg.querySelectorAll("g.node")) {
    const id = g.id;
    if (id.startsWith("m:")) {
      const path = boxPath(id);
      Object.assign(g.dataset, {path, kind: "module", phase, collapsed: "true"});
      g.addEventListener("click", () => { open.add(path); render(); });
      g.addEventListener("mouseenter", () => card(moduleCard(path, phase)));
    } else {
      const n = byId[id];
      Object.assign(g.dataset, {path: n.path, kind: n.data_kind, phase, collapsed: "false", id: n.id});
      g.addEventListener("click", () => { selected = selected === id ? null : id; highlight(); follow(phase); card(nodeCard(n)); });
      g.addEventListener("mouseenter", () => card(nodeCard(n)));
    }
    g.addEventListener("mouseleave", rest);
  }
  for (const g of svg.querySelectorAll("g.cluster")) {
    const path = boxPath(g.id);
    Object.assign(g.dataset, {path, kind: "module", phase, collapsed: "false"});
    const text = g.querySelector("text");
    if (text) text.addEventListener("click", () => { close(path); render(); });
    g.addEventListener("mouseenter", e => { if (e.target === g) card(moduleCard(path, phase)); });
  }
}

function close(path) {
  for (const p of [...open]) if (p === path || p.startsWith(path + ".")) open.delete(p);
}

// The ops that belong together across the phases: a forward op and the backward ops that differentiate it; a
// kernel and the primitives it runs.
function linked(id) {
  const n = byId[id];
  if (n.phase === "compiled") return [id, ...n.runs];
  const mine = n.phase === "forward" ? [id, ...(n.grads || []), ...(n.sums || [])] : [id, ...(n.source ? [n.source] : [])];
  return [...mine, ...mine.map(i => byId[i].kernel).filter(k => k)];
}
const kernelCount = () => fmt(D.program.kernels) + " kernels for " + fmt(D.program.primitives) + " primitives, " +
  fmt(D.program.fused) + " of them fused chains";
function highlight() {
  const hl = new Set(selected ? linked(selected).map(i => drawnAs(byId[i])) : []);
  const now = step >= 0 ? steps[step] : null;
  const cur = new Set(now ? linked(now.id).filter(i => i !== now.source).map(i => drawnAs(byId[i])) : []);
  const src = new Set(now && now.source ? [drawnAs(byId[now.source])] : []);     // the forward op differentiated
  const matches = new Set(), boxes = new Set();
  if (query) for (const n of D.nodes) {
    if (shown.includes(n.phase) && (n.label + " " + n.path + " " + n.step).toLowerCase().includes(query)) {
      matches.add(drawnAs(n));
      if (drawnAs(n) !== n.id) boxes.add(drawnAs(n));
    }
  }
  for (const g of document.querySelectorAll("#panes g.node")) {
    g.classList.toggle("hl", hl.has(g.id));
    g.classList.toggle("current", cur.has(g.id));
    g.classList.toggle("source", src.has(g.id));
    g.classList.toggle("match", matches.has(g.id));
    g.classList.toggle("dim", query !== "" && !matches.has(g.id));
  }
  document.getElementById("matches").textContent = query ?
    matches.size + " shown" + (boxes.size ? " (" + boxes.size + " inside closed boxes)" : "") : "";
}

function follow(phase) {          // scroll the other panes to the first op highlighted in each
  for (const pane of document.querySelectorAll("section.pane")) {
    const g = pane.dataset.phase !== phase && pane.querySelector("g.node.hl");
    if (!g) continue;
    const r = g.getBoundingClientRect(), p = pane.getBoundingClientRect();
    pane.scrollTop += r.top - p.top - pane.clientHeight / 2;
    pane.scrollLeft += r.left - p.left - pane.clientWidth / 2;
  }
}

function reveal(n) {               // open every module on the node's path, so it is drawn itself
  for (let k = 1; k <= n.scope.length; k++) open.add(n.scope.slice(0, k).join("."));
}

// The card: what a learner asks of a node or a module; back to the selected op or the step when the mouse leaves.
function rest() {
  const n = step >= 0 ? steps[step] : selected ? byId[selected] : null;
  card(n ? nodeCard(n) : EMPTY);
}
const EMPTY = '<p class="empty">Hover over a node or a box, or click an op, to read its shapes and costs here.</p>';
function card(html) {
  document.getElementById("card").innerHTML = html;
  source();
}
// A generated kernel's source, put in its block as text (never parsed as HTML), in the language chosen.
function source() {
  const pre = document.querySelector("#card pre.source");
  if (!pre) return;
  pre.textContent = byId[pre.dataset.id].source[language];
  for (const b of document.querySelectorAll("#card button[data-language]")) b.classList.toggle("on", b.dataset.language === language);
}
const row = (k, v) => "<tr><td>" + k + "</td><td>" + v + "</td></tr>";
const lesson = key => {            // the lesson and section that teach an op or a module, linked to the lesson's file
  const l = key && D.lessons[key];
  return l ? row("lesson", '<a class="lesson" target="_blank" href="' + esc(D.lesson_root + l[0]) + '">lesson ' +
    l[1] + "</a>, " + esc(l[2])) : "";
};
function hist(s) {
  const max = Math.max(...s.hist), w = 300 / s.hist.length;
  const bars = s.hist.map((c, i) => '<rect x="' + (i * w) + '" y="' + (40 - 40 * c / max) + '" width="' + (w - 1) +
    '" height="' + (40 * c / max) + '"></rect>').join("");
  return '<svg class="hist" width="300" height="44">' + bars + "</svg><br>" + num(s.min) + " … " + num(s.max);
}
const num = x => x === null ? "not finite" : x.toPrecision(3);       // null: JSON holds no inf or nan
function stats(s, what) {          // of the finite values; how many others were left out
  if (!s) return "";
  const left = s.not_finite ? row("", fmt(s.not_finite) + " of " + fmt(s.count) + " values not finite (nan, ±inf), " +
    "left out") : "";
  if (s.mean === undefined) return row(what, "no finite value") + left;
  return row(what, "mean " + num(s.mean) + ", std " + num(s.std)) + row("", hist(s)) + left;
}
function kernelCard(n) {
  const runs = n.runs.map(i => byId[i]);
  return "<h3>" + esc(n.kind === "fused" ? "fused kernel" : n.kind === "check" ? "index check" : "kernel: " + n.label) + "</h3><table>" +
    row("runs", n.kind === "check" ? "the bounds check of an index, redone at every replay" :
      runs.map(r => esc(r.label) + " <small>(" + r.phase + ", " + esc(r.path || "outside every module") + ")</small>").join("<br>")) +
    row("module", esc(n.path || "(outside every module)")) + (n.step ? row("step", esc(n.step)) : "") +
    (n.inputs.length ? row("reads", n.inputs.map(([s, d]) => shape(s) + " " + esc(d)).join("<br>")) : "") +
    row("output", '<span class="shape">' + shape(n.shape) + "</span> " + esc(n.dtype)) +
    row("FLOPs", '<span class="flops">' + fmt(n.flops) + "</span>") +
    row("bytes", "read " + fmt(n.bytes_read) + ", written " + fmt(n.bytes_written)) +
    (n.kind === "fused" ? row("fused", fmt(n.bytes_saved) + " bytes of intermediate results never written" + (n.source ? ": they stay in the loop's registers" : ": each op after the first writes in place into the first one's result")) : "") +
    (n.runs.length < n.ops.length && n.kind !== "check" ? row("folded", "runs in a layer the fold stands for; these are its counterparts") : "") +
    row("code", esc(n.code)) + lesson(n.teach) + "</table>" + (n.source ? '<div class="source"><span>' +
      '<button data-language="c">C</button><button data-language="cuda">CUDA</button></span>' +
      '<pre class="source" data-id="' + esc(n.id) + '"></pre></div>' : "");
}
function nodeCard(n) {
  if (n.phase === "compiled") return kernelCard(n);
  const other = n.phase === "forward" ? (n.grads || []).length + " backward op(s) differentiate it" +
    (n.sums ? "; its gradient adds up from several uses in " + n.sums.length + " sum(s)" : "") :
    n.source ? (n.origin === "accumulate" ? "adds up the gradients of " : "differentiates ") +
      byId[n.source].label + " (" + (byId[n.source].path || "input") + ")" : "";
  return "<h3>" + esc(n.label) + (n.note ? " <small>" + esc(n.note) + "</small>" : "") + "</h3><table>" +
    row("kind", n.data_kind + (n.kind !== n.data_kind ? " (" + n.kind + ")" : "") + ", " + n.phase) +
    row("module", esc(n.path || "(outside every module)")) + (n.step ? row("step", esc(n.step)) : "") +
    (n.inputs.length ? row("inputs", n.inputs.map(([s, d]) => shape(s) + " " + esc(d)).join("<br>")) : "") +
    row("output", '<span class="shape">' + shape(n.shape) + "</span> " + esc(n.dtype)) +
    (n.data_kind === "op" ? row("FLOPs", '<span class="flops">' + fmt(n.flops) + "</span>" +
      (n.matmul_flops ? " (all matmul)" : " (no matmul)")) +
      row("bytes", "read " + fmt(n.bytes_read) + ", written " + fmt(n.bytes_written)) : "") +
    (other ? row(n.phase === "forward" ? "backward" : "forward", esc(other)) : "") +
    (D.phases.includes("compiled") && n.data_kind === "op" ? row("compiled", n.kernel ? "run by " +
      (byId[n.kernel].kind === "fused" ? "a fused kernel: " + esc(byId[n.kernel].ops.join(" > ")) : "its own kernel") :
      "no kernel: the compiled program broadcasts on the fly") : "") +
    lesson(n.teach) + checkRow(n.check) + (n.value && inFold(n) ? row("values", "of the first layer of its identical run") : "") +
    stats(n.value, "value") + stats(n.grad, "gradient") + "</table>";
}
function moduleCard(path, phase) {
  const m = modules[path], t = m.total;
  return "<h3>" + esc(m.label) + (m.repeat > 1 ? " × " + m.repeat : "") + "</h3><table>" +
    row("module", esc(path)) + row("parameters", fmt(t.parameters)) +
    row("FLOPs forward", fmt(t.flops.forward) + " (matmul " + fmt(t.matmul_flops.forward) + ")") +
    (D.phases.includes("backward") ? row("FLOPs backward", fmt(t.flops.backward) + " (matmul " + fmt(t.matmul_flops.backward) + ")") : "") +
    (D.phases.includes("compiled") ? row("compiled", fmt(t.ops.compiled) + " kernels for " + fmt(t.ops.forward + t.ops.backward) +
      " primitives, " + fmt(t.flops.compiled) + " FLOPs") : "") +
    row("activations", human(t.activation_bytes, "B") + " written by its forward ops") +
    row("bytes moved", human(t.bytes[phase], "B") + " read and written, " + phase) +
    (m.repeat > 1 ? row("each layer", fmt(t.flops[phase] / m.repeat) + " FLOPs " + phase) : "") + lesson(m.teach) +
    checkRow(D.check && D.check[path] ? path : null) +
    "</table>";
}

// Stepping through the backward pass in autograd's order.
function go(k) {
  if (!steps.length) return;
  step = Math.max(0, Math.min(steps.length - 1, k));
  const n = steps[step];
  reveal(n);
  if (n.source) reveal(byId[n.source]);
  if (!shown.includes("backward")) shown = shown.includes("compiled") ? D.phases : ["forward", "backward"];
  document.getElementById("step-text").textContent = "op " + (step + 1) + " of " + steps.length + ": " + n.label +
    (n.origin === "accumulate" ? " (gradients add up)" : " (backward of " + n.origin + ")") + " in " + (n.path || "—") +
    (inFold(n) ? " (one layer drawn for its identical run)" : "");
  render();
  mark();
  card(nodeCard(n));
  into(drawnAs(n));
  if (n.source) into(drawnAs(byId[n.source]));
}
function into(id) {                // scroll the drawn node into the middle of its pane
  const g = document.getElementById(id);
  if (g) g.scrollIntoView({block: "center", inline: "center"});
}

const eager = D.phases.filter(p => p !== "compiled");
document.getElementById("help-compiled").hidden = !D.phases.includes("compiled");
const choices = (eager.length > 1 ? [["forward", ["forward"]], ["backward", ["backward"]], ["both", eager]] : [])
  .concat(D.phases.includes("compiled") ? [["compiled", ["compiled"]], ["all", D.phases]] : []);
function mark() {                  // the phase button that matches what is shown
  for (const [name, list] of choices) document.getElementById("phase-" + name).classList.toggle("on", list.join() === shown.join());
}

function controls() {
  const phases = document.getElementById("phases");
  for (const [name, list] of choices) {
    const b = document.createElement("button");
    b.textContent = name;
    b.id = "phase-" + name;
    b.addEventListener("click", () => { shown = list; render(); mark(); });
    phases.appendChild(b);
  }
  mark();
  document.getElementById("expand-all").addEventListener("click", () => { Object.keys(modules).forEach(p => open.add(p)); render(); });
  document.getElementById("collapse-all").addEventListener("click", () => { open.clear(); root.forEach(p => open.add(p)); render(); });
  const search = document.getElementById("search");
  search.addEventListener("input", () => { query = search.value.trim().toLowerCase(); highlight(); });
  search.addEventListener("keydown", e => {
    if (e.key !== "Enter" || !query) return;
    const n = D.nodes.find(x => shown.includes(x.phase) && (x.label + " " + x.path + " " + x.step).toLowerCase().includes(query));
    if (n) { reveal(n); selected = n.id; render(); card(nodeCard(n)); into(drawnAs(n)); }
  });
  const select = document.getElementById("colour");
  if (D.check) select.add(new Option("gradient check", "check"));
  select.addEventListener("change", e => { colour = e.target.value; render(); });
  document.getElementById("zoom-in").addEventListener("click", () => zoom(1.25));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1 / 1.25));
  document.getElementById("zoom-fit").addEventListener("click", fit);
  document.getElementById("card").addEventListener("click", e => {
    if (e.target.dataset.language) { language = e.target.dataset.language; source(); }
  });
  if (steps.length) {
    document.getElementById("stepper").hidden = false;
    document.getElementById("step-next").addEventListener("click", () => go(step + 1));
    document.getElementById("step-back").addEventListener("click", () => go(step - 1));
    document.addEventListener("keydown", e => {
      if (["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName)) return;
      if (e.key === "ArrowRight") go(step + 1);
      if (e.key === "ArrowLeft") go(step - 1);
    });
  }
}

Viz.instance().then(v => {
  viz = v;
  controls();
  render();
  card(EMPTY);
  document.body.dataset.ready = "true";
});
