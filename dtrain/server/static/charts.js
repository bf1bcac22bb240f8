// Plain SVG drawing: line charts (training curves, GPU history), GPUs held or free, and the lineage graph.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f5fbf", "#e07b00", "#1a7f37", "#c62828", "#7b3fbf", "#00838f"];

function svgEl(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

function fmtNum(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  if (a >= 10 || Number.isInteger(v)) return v.toFixed(0);  // step 1 and a GPU held (1) are "1", not "1.00"
  return v.toPrecision(3);
}

// series: [{name, points: [[x, y], ...]}]; xfmt formats the x axis ends (step or time), yfmt the y axis ends.
function lineChart(series, opts) {
  const W = opts.width || 460, H = opts.height || 180, R = 10, T = 10, B = 24;
  const svg = svgEl("svg", {width: W, height: H, class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img"});
  const pts = series.flatMap(s => s.points).filter(p => p[1] !== null && isFinite(p[1]));
  // What a screen reader says of the drawing (it says nothing of an SVG's lines): each series' newest value
  const newest = series.map(s => [s.name, s.points.filter(p => p[1] !== null && isFinite(p[1])).pop()])
    .filter(([, p]) => p).map(([name, p]) => `${name}: ${(opts.yfmt || fmtNum)(p[1])}`);
  svg.setAttribute("aria-label", (opts.label ? opts.label + ". " : "")
    + (newest.length ? "newest " + newest.join(", ") : opts.empty || "no data yet"));
  if (!pts.length) {
    svg.appendChild(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, opts.empty || "no data yet"));
    return svg;
  }
  let [x0, x1] = [Math.min(...pts.map(p => p[0])), Math.max(...pts.map(p => p[0]))];
  let [y0, y1] = [Math.min(...pts.map(p => p[1])), Math.max(...pts.map(p => p[1]))];
  if (opts.ymin !== undefined) y0 = Math.min(y0, opts.ymin);
  if (opts.ymax !== undefined) y1 = Math.max(y1, opts.ymax);
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const yfmt = opts.yfmt || fmtNum;  // bytes in the units the tables beside them use (Gi, not G)
  const [top, low] = [yfmt(y1), yfmt(y0)];
  const L = Math.max(48, 10 + 6.5 * Math.max(top.length, low.length));  // room for the longer label ("79.5Gi")
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  svg.appendChild(svgEl("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  svg.appendChild(svgEl("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  svg.appendChild(svgEl("text", {x: L - 4, y: T + 8, "text-anchor": "end"}, top));
  svg.appendChild(svgEl("text", {x: L - 4, y: H - B, "text-anchor": "end"}, low));
  const xfmt = opts.xfmt || fmtNum;
  svg.appendChild(svgEl("text", {x: L, y: H - 6}, xfmt(x0)));
  svg.appendChild(svgEl("text", {x: W - R, y: H - 6, "text-anchor": "end"}, xfmt(x1)));
  if (opts.title) svg.appendChild(svgEl("text", {x: (L + W) / 2, y: H - 6, "text-anchor": "middle"}, opts.title));
  series.forEach((s, i) => {
    const good = s.points.filter(p => p[1] !== null && isFinite(p[1]));
    if (!good.length) return;
    const d = good.map((p, j) => (j ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join("");
    svg.appendChild(svgEl("path", {d, class: "line", stroke: COLORS[i % COLORS.length]}));
  });
  return svg;
}

// Held or free over time, one row per GPU, each sample lasting until the next: a bar in the GPU's colour where it
// was held, a thin grey line where free, nothing where unknown. Lines of 0 and 1 on one chart lay over each other,
// so of two GPUs held at once only the last one's colour showed.
function heldRows(series, opts) {
  const W = opts.width || 460, R = 10, T = 4, B = 24, ROW = 22, L = 48;
  const H = T + ROW * series.length + B;
  const svg = svgEl("svg", {width: W, height: H, class: "chart held-rows", viewBox: `0 0 ${W} ${H}`, role: "img"});
  const known = s => s.points.filter(p => p[1] !== null);
  const newest = series.map(s => [s.name, known(s).pop()]).filter(([, p]) => p)
    .map(([name, p]) => `${name}: ${p[1] ? "held" : "free"}`);
  svg.setAttribute("aria-label", (opts.label ? opts.label + ". " : "")
    + (newest.length ? "newest " + newest.join(", ") : opts.empty || "no data yet"));
  const xs = series.flatMap(known).map(p => p[0]);
  if (!xs.length) {
    svg.appendChild(svgEl("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, opts.empty || "no data yet"));
    return svg;
  }
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const sx = x => L + (x - x0) / (x1 - x0 || 1) * (W - L - R);
  const xfmt = opts.xfmt || fmtNum;
  svg.appendChild(svgEl("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  svg.appendChild(svgEl("text", {x: L, y: H - 6}, xfmt(x0)));
  svg.appendChild(svgEl("text", {x: W - R, y: H - 6, "text-anchor": "end"}, xfmt(x1)));
  series.forEach((s, i) => {
    const top = T + i * ROW, mid = top + ROW / 2;
    svg.appendChild(svgEl("text", {x: L - 6, y: mid + 4, "text-anchor": "end"}, s.name));
    // runs of equal samples, each drawn once (a rect per sample left seams between them)
    const runs = [];
    s.points.forEach((p, j) => {
      const end = j + 1 < s.points.length ? s.points[j + 1][0] : p[0];
      const last = runs[runs.length - 1];
      if (last && last.held === p[1]) last.end = end;
      else runs.push({held: p[1], start: p[0], end});
    });
    runs.filter(r => r.held !== null).forEach(r => {
      const [a, b] = [sx(r.start), Math.max(sx(r.end), sx(r.start) + 2)];  // one sample: a sliver, still seen
      if (!r.held) {
        svg.appendChild(svgEl("line", {x1: a, y1: mid, x2: b, y2: mid, class: "free"}));
        return;
      }
      const bar = svgEl("rect", {x: a, y: top + 4, width: b - a, height: ROW - 8, class: "held", fill: COLORS[i % COLORS.length]});
      bar.appendChild(svgEl("title", {}, `${s.name} held from ${xfmt(r.start)} to ${xfmt(r.end)}`));
      svg.appendChild(bar);
    });
  });
  return svg;
}

function legend(series) {
  const div = document.createElement("div");
  div.className = "legend";
  series.forEach((s, i) => {
    const span = document.createElement("span");
    span.style.color = COLORS[i % COLORS.length];
    span.textContent = "\u25A0 " + s.name;
    div.appendChild(span);
  });
  return div;
}

// `text` cut, with an ellipsis, to what `width` pixels of the graph's labels (style.css's `svg text`) hold: cut at
// 22 characters, a name of wide letters ("data-aaaa...", "wwww...") ran past its box's edge into the edge beside it.
const LABEL_FONT = "11px system-ui, sans-serif";
let measurer = null;
function fitText(text, width) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = LABEL_FONT;
  if (measurer.measureText(text).width <= width) return text;
  let n = text.length;
  while (n > 1 && measurer.measureText(text.slice(0, n) + "\u2026").width > width) n--;
  return text.slice(0, n) + "\u2026";
}

// Where an edge's label goes: the first of `spots` (points along its own edge, best first) whose box meets no
// label placed before it, else the first spot moved down a line at a time until free. Two edges crossing in one
// gap have the same midpoint, and their labels ("snapshot", "results") were drawn over each other as one word.
const ELABEL_FONT = "10px system-ui, sans-serif", ELABEL_H = 12;
function placeLabel(placed, text, spots) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = ELABEL_FONT;
  const w = measurer.measureText(text).width + 4;  // + a little air between two labels side by side
  const box = (x, y) => ({x0: x - w / 2, x1: x + w / 2, y0: y - ELABEL_H + 3, y1: y + 3});  // y: the baseline
  const free = b => !placed.some(o => o.x0 < b.x1 && b.x0 < o.x1 && o.y0 < b.y1 && b.y0 < o.y1);
  let at = spots.find(([x, y]) => free(box(x, y)));
  for (let down = ELABEL_H; !at && down <= ELABEL_H * placed.length; down += ELABEL_H) {
    if (free(box(spots[0][0], spots[0][1] + down))) at = [spots[0][0], spots[0][1] + down];
  }
  at = at || spots[0];
  placed.push(box(...at));
  return at;
}

// Lineage: a layered drawing of a small DAG. Columns are the longest path from a source.
// A job's node opens its page with its own project (the node's), else `project` (the page's filter) when given.
function lineageGraph(graph, project) {
  const depth = {}, incoming = {};
  graph.nodes.forEach(n => { depth[n.id] = 0; incoming[n.id] = 0; });
  graph.edges.forEach(e => { incoming[e.target] = (incoming[e.target] || 0) + 1; });
  for (let i = 0; i < graph.nodes.length; i++) {  // Bellman-Ford style relaxation, bounded
    let moved = false;
    graph.edges.forEach(e => {
      if (depth[e.source] !== undefined && depth[e.target] !== undefined && depth[e.target] < depth[e.source] + 1) {
        depth[e.target] = depth[e.source] + 1; moved = true;
      }
    });
    if (!moved) break;
  }
  const cols = {};
  graph.nodes.forEach(n => { (cols[depth[n.id]] = cols[depth[n.id]] || []).push(n); });
  const NW = 150, NH = 40, GX = 70, GY = 22, LANE = 18, pos = {};
  let maxRows = 0;
  Object.keys(cols).forEach(c => {
    cols[c].forEach((n, r) => { pos[n.id] = {x: 10 + c * (NW + GX), y: 10 + r * (NH + GY)}; });
    maxRows = Math.max(maxRows, cols[c].length);
  });
  const ncols = Object.keys(cols).length;
  // the lowest node's bottom in the columns strictly between two columns: an edge that skips them runs below it
  const below = (c0, c1) => Math.max(0, ...Object.keys(cols).filter(c => c > c0 && c < c1)
    .map(c => 10 + cols[c].length * (NH + GY) - GY));
  let lanes = 0, bottom = 0;
  const placed = [];  // the edge labels' boxes so far
  const W = Math.max(300, 20 + ncols * (NW + GX)), H = Math.max(80, 20 + maxRows * (NH + GY) + 26 * ncols);
  const svg = svgEl("svg", {width: W, height: H, class: "graph", id: "lineage-graph", role: "group",
                            "aria-label": "Lineage: volumes, the jobs that mounted them, their snapshots"});
  const defs = svgEl("defs");
  const marker = svgEl("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
                                  orient: "auto-start-reverse"});
  marker.appendChild(svgEl("path", {d: "M0,0L10,5L0,10z", fill: "#9aa6bd"}));
  defs.appendChild(marker);
  svg.appendChild(defs);
  graph.edges.forEach(e => {
    const a = pos[e.source], b = pos[e.target];
    if (!a || !b) return;
    const span = Math.round((b.x - a.x) / (NW + GX));
    let d, spots;
    if (span > 1) {
      // skips columns: out of the source's side into the gap, down to a lane of its own below every node of the
      // columns skipped, along it, and up in the gap before the target (a bow from the source's bottom ran
      // under the nodes beneath it, hidden, and seemed to come out of them; its label was hidden too)
      const lane = below(depth[e.source], depth[e.target]) + LANE * (1 + lanes++);
      const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2, g1 = x1 + GX / 2, g2 = x2 - GX / 2;
      d = `M${x1},${y1}C${g1},${y1} ${g1},${lane} ${x1 + GX},${lane}L${x2 - GX},${lane}C${g2},${lane} ${g2},${y2} ${x2},${y2}`;
      const run = x2 - x1 - 2 * GX;  // along the lane, between the two bends
      spots = [0.5, 0.3, 0.7, 0.15, 0.85].map(f => [x1 + GX + run * f, lane - 4]);
      bottom = Math.max(bottom, lane);
    } else if (span < 0) {  // back to an earlier column (a cycle): bow under the nodes
      const x1 = a.x + NW / 2, y1 = a.y + NH, x2 = b.x + NW / 2, y2 = b.y + NH, dip = Math.max(y1, y2) + 26 * Math.abs(span);
      d = `M${x1},${y1}C${x1},${dip} ${x2},${dip} ${x2},${y2}`;
      spots = [[(x1 + x2) / 2, dip - 8 * Math.abs(span) + 2]];
    } else {
      const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2, mx = (x1 + x2) / 2;
      d = `M${x1},${y1}C${mx},${y1} ${mx},${y2} ${x2},${y2}`;
      // points of the curve (its control points share x = mx) at fractions t of its way, above the line, kept in the gap
      const at = t => {
        const u = 1 - t, bx = u * u * u * x1 + 3 * u * t * mx + t * t * t * x2, by = (u * u * (1 + 2 * t)) * y1 + t * t * (3 - 2 * t) * y2;
        return [Math.min(Math.max(bx, x1 + GX / 2 - 10), x2 - GX / 2 + 10), by - 5];
      };
      spots = [0.5, 0.3, 0.7, 0.2, 0.8].map(at);
    }
    svg.appendChild(svgEl("path", {d, class: "edge", "marker-end": "url(#arrow)"}));
    const [lx, ly] = placeLabel(placed, e.label, spots);
    svg.appendChild(svgEl("text", {x: lx, y: ly, "text-anchor": "middle", class: "elabel"}, e.label));
  });
  graph.nodes.forEach(n => {
    const p = pos[n.id];
    const g = svgEl("g", {class: `node n-${n.kind}` + (n.status === "gone" ? " n-gone" : ""),
                          transform: `translate(${p.x},${p.y})`, "data-id": n.id});
    g.appendChild(svgEl("rect", {width: NW, height: NH}));
    const head = n.kind === "jobs" ? "jobs \u00B7 only mounted" : n.kind + (n.status ? " \u00B7 " + n.status : "");
    g.appendChild(svgEl("text", {x: 8, y: 15}, head));
    const label = fitText(n.name, NW - 16);
    const t = svgEl("text", {x: 8, y: 31, "font-weight": "600"}, label);
    t.appendChild(svgEl("title", {}, n.name));
    g.appendChild(t);
    if (n.kind === "job" && n.status !== "gone") {  // a job's node opens its page, as its name does in the tables
      const of = n.project || project;
      const a = svgEl("a", {href: "#/job/" + encodeURIComponent(n.name) + (of ? "?project=" + encodeURIComponent(of) : ""),
                            class: "node-link"});
      a.appendChild(g);
      svg.appendChild(a);
    } else svg.appendChild(g);
  });
  if (bottom + 10 > H) svg.setAttribute("height", bottom + 10);
  return svg;
}
