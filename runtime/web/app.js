// The LOKG audit page: ask /v1/ask (on a server with several stores, the chosen store's
// /v1/stores/<name>/ask; GET /v1/stores lists those the token may read), then show the answer,
// which path produced it, the triples read with their granularity and token cost, the entity
// paths as an SVG graph, citations and timings. Served by the service itself; no libraries.
// Every string from an answer goes in through textContent or an SVG text node, never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const MAX_EDGES = 24;  // a readable graph; the table lists every triple
const NODE_W = 150, NODE_H = 26, COL = 270, ROW = 60;  // the graph's grid, in pixels
const NODE_CHARS = 21, EDGE_CHARS = 18;

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function clip(text, n) {
  const s = String(text);
  return s.length > n ? s.slice(0, n - 1) + "…" : s;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function fill(target, nodes) { target.replaceChildren(...nodes); }

// ---------------------------------------------------------------- the stores

let several = false;  // the server serves several stores: every call names the chosen one

// The route of the chosen store: "/ask" → /v1/stores/<name>/ask (several stores) or /v1/ask.
function storeRoute(route) {
  if (several) return "/v1/stores/" + encodeURIComponent($("store").value) + route;
  return route === "/readyz" ? "/readyz" : "/v1" + route;
}

function storeOption(s) {
  const option = el("option", s.name + (s.ready ? "" : " (no build loaded)"));
  option.value = s.name;
  return option;
}

// The stores this token may read, into the select (shown only when there are several).
async function loadStores() {
  try {
    const resp = await fetch("/v1/stores", { headers: headers() });
    if (resp.status === 401) {  // the server needs a token: asked again when one is typed
      $("build").textContent = "enter the API token";
      return;
    }
    if (resp.ok) {
      const body = await resp.json();
      const chosen = $("store").value;
      several = Boolean(body.several);
      fill($("store"), (body.stores || []).map(storeOption));
      if ((body.stores || []).some((s) => s.name === chosen)) $("store").value = chosen;
    }
  } catch (_) { /* an older server: no /v1/stores; /v1/ask serves its one store */ }
  $("store-field").hidden = !several;
  showBuild();
}

// ---------------------------------------------------------------- asking

function requestBody() {
  const body = { question: $("question").value, budget: Number($("budget").value) || 2048,
                 llm: $("llm").value };
  if ($("policy").value) body.policy = $("policy").value;
  return body;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

function errorText(status, body) {
  const detail = body && body.detail !== undefined ? body.detail : body;
  return "HTTP " + status + ": " + (typeof detail === "string" ? detail : JSON.stringify(detail));
}

async function ask(event) {
  event.preventDefault();
  $("error").hidden = true;
  $("busy").hidden = false;
  $("submit").disabled = true;
  try {
    const resp = await fetch(storeRoute("/ask"), { method: "POST", headers: headers(),
                                                   body: JSON.stringify(requestBody()) });
    const text = await resp.text();
    let body;
    try { body = JSON.parse(text); } catch (_) { body = text; }
    if (!resp.ok) throw new Error(errorText(resp.status, body));
    show(body);
  } catch (err) {
    $("error").textContent = String(err.message || err);
    $("error").hidden = false;
  } finally {
    $("busy").hidden = true;
    $("submit").disabled = false;
  }
}

async function showBuild() {
  try {
    const resp = await fetch(storeRoute("/readyz"), { headers: headers() });
    const body = await resp.json();
    $("build").textContent = resp.status === 401 || resp.status === 403
      ? "build: enter a token for this store" : body.build_id ? "build: " + body.build_id
      : body.ready ? "ready" : "no build loaded yet";
  } catch (_) {
    $("build").textContent = "build: unknown";
  }
}

// ---------------------------------------------------------------- the answer

function show(a) {
  showAnswer(a);
  showTokens(a.tokens || {});
  drawGraph($("graph"), a.triples || [], a);
  showTriples(a.triples || []);
  showCitations(a.citations || []);
  showTimings(a.timings || {});
  fill($("linked"), (a.linked || []).map(
    (e) => el("li", e.name + " — “" + e.span + "” (" + e.method + ", " + e.score + ")")));
  $("raw").textContent = JSON.stringify(a, null, 2);
  $("build").textContent = "build: " + a.build_id;
  $("result").hidden = false;
}

function pathOf(a) {
  if (a.route && a.route.source) return a.route.source;
  if (!(a.answers || []).length) return "nothing (" + a.status + ")";
  if (a.fallback) return "retrieval";
  return a.llm_calls > 0 ? "llm" : "retrieval";
}

function pathDetail(a) {
  const route = a.route || {};
  const parts = ["policy " + a.policy, "reader " + ((a.llm || {}).backend || "?"),
                 "retrieval " + a.retrieval, a.llm_calls + " LLM call(s)"];
  if (route.chain) parts.push("chain " + route.chain.join(" → "));
  if (route.reason) parts.push(route.reason);
  const calibration = (route.gate || {}).calibration;
  if (calibration) parts.push(calibrationText(calibration));
  if (a.fallback_reason) parts.push("fallback: " + a.fallback_reason);
  return "· " + parts.join(" · ");
}

// How the zero-call gate was calibrated: what a "derived from the graph" answer rests on.
function calibrationText(c) {
  if (c.by === "none") return "zero-call gate: no labelled questions calibrated it, it derives nothing";
  const ci = c.precision_95ci ? " (95% CI " + c.precision_95ci.join("–") + ")" : "";
  return "zero-call gate calibrated on " + c.questions + " dev questions of this store: " +
         c.passed + " passed at precision " + c.precision + ci;
}

function showAnswer(a) {
  const answers = a.answers || [];
  fill($("answers"), answers.length ? answers.map((x) => el("li", x))
                                    : [el("li", "no answer", "muted")]);
  $("status").textContent = a.status;
  $("status").className = "badge " + (a.status === "ok" ? "ok" : "warn");
  $("message").textContent = a.message || "";
  $("path").textContent = pathOf(a);
  $("path-detail").textContent = pathDetail(a);
}

function showTokens(t) {
  const used = Number(t.knowledge) || 0;
  const budget = Number(t.budget) || 0;
  const share = budget > 0 ? Math.min(1, used / budget) : 0;
  $("token-fill").style.width = (share * 100).toFixed(1) + "%";
  const tcr = typeof t.tcr === "number" ? t.tcr.toFixed(2) : "?";
  $("token-text").textContent = "knowledge " + used + " of " + budget + " budget (" +
    (share * 100).toFixed(0) + "%) · naive " + t.naive + " · TCR " + tcr + " · prompt " +
    t.prompt + " · completion " + t.completion;
}

function tripleLine(t) {
  return t.line ? t.line.trim() : [t.s, t.r, t.o].join(" | ");
}

function showTriples(triples) {
  $("triple-count").textContent = "(" + triples.length + ")";
  fill($("triples").tBodies[0], triples.map((t, i) => row([
    String(i + 1), t.granularity || "derived", String(t.cost ?? 0),
    el("td", tripleLine(t), "line")])));
}

function citationSource(c) {
  const ids = [c.doc_id, c.chunk_id, c.sentence_id].filter((x) => x !== undefined && x !== null);
  return (c.title || "") + (ids.length ? " [" + ids.join(" / ") + "]" : "");
}

function showCitations(citations) {
  $("citations-card").hidden = citations.length === 0;
  fill($("citations").tBodies[0], citations.map((c) => row([
    el("td", c.triple, "line"), citationSource(c), c.sentence || "",
    typeof c.score === "number" ? c.score.toFixed(3) : String(c.score ?? "")])));
}

function showTimings(timings) {
  const steps = Object.entries(timings).filter(([, ms]) => Number.isFinite(Number(ms)));
  const total = Number(timings.total) || Math.max(1, ...steps.map(([, ms]) => Number(ms)));
  fill($("timings").tBodies[0], steps.map(([step, ms]) => {
    const bar = el("div", null, "tbar");
    bar.style.width = Math.min(100, (100 * Number(ms)) / total).toFixed(1) + "%";
    const cell = el("td", null, "tcell");
    cell.appendChild(bar);
    return row([step, Number(ms).toFixed(1) + " ms", cell]);
  }));
}

// ---------------------------------------------------------------- the entity graph

// Columns by distance from the linked entities (breadth-first over the triples, both ways).
function layers(triples, roots) {
  const next = new Map();
  const link = (a, b) => { if (!next.has(a)) next.set(a, []); next.get(a).push(b); };
  for (const t of triples) { link(t.s, t.o); link(t.o, t.s); }
  const depth = new Map();
  const starts = roots.filter((r) => next.has(r)).concat([...next.keys()]);
  for (const start of starts) {
    if (depth.has(start)) continue;
    depth.set(start, 0);
    const queue = [start];
    while (queue.length) {
      const at = queue.shift();
      for (const b of next.get(at)) {
        if (!depth.has(b)) { depth.set(b, depth.get(at) + 1); queue.push(b); }
      }
    }
  }
  return depth;
}

function place(depth) {
  const pos = new Map();
  const rows = [];
  for (const [name, d] of depth) {
    rows[d] = (rows[d] || 0) + 1;
    pos.set(name, { x: 10 + d * COL, y: 24 + (rows[d] - 1) * ROW });
  }
  return { pos, width: 20 + (rows.length - 1) * COL + NODE_W + 60,
           height: 24 + Math.max(...rows) * ROW };
}

function drawEdge(g, a, b, label) {
  const same = a.x === b.x, forward = a.x < b.x;
  const x1 = a.x + (same || forward ? NODE_W : 0), y1 = a.y + NODE_H / 2;
  const x2 = b.x + (same || !forward ? NODE_W : 0), y2 = b.y + NODE_H / 2;
  const cx = same ? x1 + 50 : (x1 + x2) / 2, cy = (y1 + y2) / 2 - (same || y1 === y2 ? 0 : 8);
  g.appendChild(svg("path", { d: `M${x1},${y1} Q${cx},${cy} ${x2},${y2}`, class: "edge",
                              "marker-end": "url(#arrow)" }));
  const lx = 0.25 * x1 + 0.5 * cx + 0.25 * x2, ly = 0.25 * y1 + 0.5 * cy + 0.25 * y2 - 4;
  const text = svg("text", { x: lx, y: ly, class: "elabel", "text-anchor": "middle" },
                   clip(label.split(".").pop(), EDGE_CHARS));
  text.appendChild(svg("title", {}, label));
  g.appendChild(text);
}

function drawNode(g, name, p, kind) {
  const group = svg("g", { class: "node " + kind });
  group.appendChild(svg("rect", { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 6 }));
  group.appendChild(svg("text", { x: p.x + NODE_W / 2, y: p.y + 17, "text-anchor": "middle" },
                        clip(name, NODE_CHARS)));
  group.appendChild(svg("title", {}, name));
  g.appendChild(group);
}

function drawGraph(target, triples, a) {
  const shown = triples.slice(0, MAX_EDGES);
  if (!shown.length) { fill(target, [el("p", "no triples read", "muted")]); return; }
  const roots = (a.linked || []).map((e) => e.name);
  const answers = new Set(a.answers || []);
  const { pos, width, height } = place(layers(shown, roots));
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                            "aria-label": "entity paths" });
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                                 markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.appendChild(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow" }));
  root.appendChild(svg("defs")).appendChild(marker);
  for (const t of shown) drawEdge(root, pos.get(t.s), pos.get(t.o), t.r);
  for (const [name, p] of pos) {
    drawNode(root, name, p, answers.has(name) ? "answer" : roots.includes(name) ? "topic" : "");
  }
  const nodes = [root];
  if (triples.length > shown.length) {
    nodes.push(el("p", "showing the first " + shown.length + " of " + triples.length +
                  " triples", "muted"));
  }
  fill(target, nodes);
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", ask);
  $("token").addEventListener("change", loadStores);
  $("store").addEventListener("change", showBuild);
  loadStores();
});
