"use strict";
// The dashboard's logic: poll /dashboard/data every POLL_MS and draw what it says. Text from
// the server (prompts, namespaces) only ever goes in through textContent, never as markup.
const POLL_MS = 2000;
const KEY_STORE = "radixrt-dashboard-key"; // sessionStorage: this tab only
const DATA_URL = location.pathname.replace(/\/+$/, "") + "/data";
const SVG = "http://www.w3.org/2000/svg";
const QUEUE_POINTS = 300; // the queue's history is kept by the page, one point per poll
const queueHistory = [];
const $ = (id) => document.getElementById(id);
let timer = null;

const CAUSES = {
  hit: "the whole prompt is cached",
  diverged: "the prompt differs from the cached prefix here",
  evicted: "this prefix was cached, then evicted",
  never_seen: "nothing of the prompt was cached in its namespace",
  new_suffix: "the cached prefix ends here; the rest was never sent",
  other_namespace: "another namespace (tenant or cache_salt) holds more of it",
  page_boundary: "it agrees with a cached page for less than a page",
  cache_off: "the server runs without a prefix cache",
};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  node.append(...children);
  return node;
}

function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const pct = (x, digits = 1) => (x === null || x === undefined ? "–" : (100 * x).toFixed(digits) + "%");

function secs(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1) return Math.round(s * 1000) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function age(s) {
  if (s < 1) return "now";
  return s < 60 ? Math.round(s) + " s" : secs(s);
}
const oneLine = (text) => text.replace(/\r?\n/g, "↵");

function drawChart(svg, series, { tMin, tMax, yMax, yFmt }) {
  const [, , W, H] = svg.getAttribute("viewBox").split(" ").map(Number);
  const L = 40, R = 6, T = 6, B = 14;
  const x = (t) => L + ((t - tMin) / Math.max(1e-9, tMax - tMin)) * (W - L - R);
  const y = (v) => T + (1 - Math.min(v, yMax) / yMax) * (H - T - B);
  const parts = [];
  for (const f of [0, 0.5, 1]) {
    parts.push(svgEl("line", { class: "grid-line", x1: L, x2: W - R, y1: y(f * yMax), y2: y(f * yMax) }));
    parts.push(svgEl("text", { x: L - 4, y: y(f * yMax) + 3, "text-anchor": "end" }, yFmt(f * yMax)));
  }
  parts.push(svgEl("text", { x: L, y: H - 2 }, "-" + age(tMax - tMin)));
  parts.push(svgEl("text", { x: W - R, y: H - 2, "text-anchor": "end" }, "now"));
  for (const s of series) {
    const pts = s.points.filter(([t, v]) => v !== null && t >= tMin);
    if (pts.length > 1) {
      const d = pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      parts.push(svgEl("polyline", { class: "line", points: d, style: `stroke:${s.color}` }));
    }
    for (const [t, v] of pts.slice(-60)) {
      parts.push(svgEl("circle", { class: "dot", cx: x(t), cy: y(v), r: 2, style: `fill:${s.color}` }));
    }
    if (s.label) {
      parts.push(svgEl("text", { x: W - R, y: T + 10 + 11 * series.indexOf(s), "text-anchor": "end", style: `fill:${s.color}` }, s.label));
    }
  }
  svg.replaceChildren(...parts);
}

function timeWindow(data) {
  const points = data.series.points;
  const tMax = data.time;
  const first = points.length ? points[0].t : tMax;
  const span = Math.min(600, Math.max(60, tMax - first + data.series.bucket_s));
  return { tMin: tMax - span, tMax };
}

function renderRates(data) {
  const win = timeWindow(data);
  const mid = data.series.bucket_s / 2;
  const pts = data.series.points;
  $("hit-rate").textContent = pct(data.counters.cache_hit_rate);
  $("hit-rate-recent").textContent = pct(data.recent.hit_rate);
  drawChart($("hit-chart"), [{ color: "var(--evictable)", points: pts.map((p) => [p.t + mid, p.hit_rate]) }],
    { ...win, yMax: 1, yFmt: (v) => pct(v, 0) });
  $("ttft-p50").textContent = secs(data.recent.ttft_p50);
  $("ttft-p90").textContent = secs(data.recent.ttft_p90);
  $("ttft-p99").textContent = secs(data.recent.ttft_p99);
  const top = Math.max(0.01, ...pts.map((p) => p.ttft_p90 || 0)) * 1.15;
  drawChart($("ttft-chart"), [
    { color: "var(--p50)", label: "p50", points: pts.map((p) => [p.t + mid, p.ttft_p50]) },
    { color: "var(--p90)", label: "p90", points: pts.map((p) => [p.t + mid, p.ttft_p90]) },
  ], { ...win, yMax: top, yFmt: secs });
}

function renderSpec(data) {
  const spec = data.recent.spec;
  $("spec-card").hidden = !spec;
  if (!spec) return;
  const fixed = (x) => (x === null || x === undefined ? "–" : x.toFixed(2));
  $("spec-k").textContent = `up to ${spec.draft_tokens} drafted tokens per step`;
  $("spec-per-step").textContent = fixed(spec.tokens_per_step);
  $("spec-acceptance").textContent = pct(spec.acceptance_rate);
  $("spec-per-step-all").textContent = data.counters.spec_drafted_tokens ? fixed(data.counters.spec_tokens_per_step) : "–";
  const mid = data.series.bucket_s / 2;
  drawChart($("spec-chart"), [{ color: "var(--held)", label: "tokens per step",
    points: data.series.points.map((p) => [p.t + mid, p.spec_tokens_per_step]) }],
  { ...timeWindow(data), yMax: spec.draft_tokens + 1, yFmt: (v) => v.toFixed(1) });
  drawBars($("spec-dist"), spec.distribution);
}

// Requests per histogram bucket (`le`: its upper bound; null: above the last), as bars.
function drawBars(svg, bins) {
  const [, , W, H] = svg.getAttribute("viewBox").split(" ").map(Number);
  const T = 12, B = 14, w = W / Math.max(1, bins.length);
  const most = Math.max(1, ...bins.map((b) => b.requests));
  const parts = [];
  bins.forEach((b, i) => {
    const h = ((H - T - B) * b.requests) / most;
    parts.push(svgEl("rect", { x: i * w + 1, y: H - B - h, width: w - 2, height: h, style: "fill:var(--evictable)" }));
    if (b.requests) parts.push(svgEl("text", { x: i * w + w / 2, y: H - B - h - 2, "text-anchor": "middle" }, num(b.requests)));
    parts.push(svgEl("text", { x: i * w + w / 2, y: H - 2, "text-anchor": "middle" }, b.le === null ? "more" : "≤" + b.le));
  });
  svg.replaceChildren(...parts);
}

function renderPool(pool) {
  const states = ["evictable", "locked", "pinned", "held", "free"];
  $("pool-bar").replaceChildren(...states.filter((s) => s !== "free").map((s) =>
    el("div", { class: s, style: `width:${(100 * pool[s]) / Math.max(1, pool.total)}%`, title: `${s}: ${num(pool[s])}` })));
  for (const s of states) {
    $("pool-" + s).textContent = num(pool[s]);
    $("pool-" + s).nextElementSibling.textContent = pct(pool[s] / Math.max(1, pool.total));
  }
  $("pool-total").textContent = num(pool.total);
  $("pool-pins").textContent = `${num(pool.num_pins)} pin${pool.num_pins === 1 ? "" : "s"}`;
  $("pool-total-label").textContent = `${num(pool.total)} tokens`;
}

function renderQueue(data) {
  $("queue-running").textContent = num(data.queue.running);
  $("queue-waiting").textContent = num(data.queue.waiting);
  queueHistory.push([data.time, data.queue.running, data.queue.waiting]);
  if (queueHistory.length > QUEUE_POINTS) queueHistory.shift();
  const most = Math.max(...queueHistory.map(([, r, w]) => Math.max(r, w)));
  const top = Math.max(2, 2 * Math.ceil(most / 2)); // even: the middle line is a whole number
  drawChart($("queue-chart"), [
    { color: "var(--held)", label: "running", points: queueHistory.map(([t, r]) => [t, r]) },
    { color: "var(--locked)", label: "waiting", points: queueHistory.map(([t, , w]) => [t, w]) },
  ], { tMin: queueHistory[0][0], tMax: data.time, yMax: top, yFmt: (v) => num(Math.round(v)) });
}

function renderCounters(data) {
  const c = data.counters;
  const rows = [["requests finished", c.requests]];
  for (const [reason, n] of Object.entries(c.requests_by_finish).sort()) rows.push([`  finish: ${reason}`, n]);
  rows.push(["prompt tokens", c.prompt_tokens], ["  served from the cache", c.cached_tokens],
    ["generated tokens", c.generated_tokens], ["misses (under half cached)", data.misses.total],
    ["radix tree nodes", data.tree.num_nodes]);
  if (c.spec_drafted_tokens) {
    rows.push(["speculation: drafted tokens", c.spec_drafted_tokens], ["  accepted", c.spec_accepted_tokens],
      ["  acceptance rate", c.spec_acceptance_rate.toFixed(2)], ["  tokens per step", c.spec_tokens_per_step.toFixed(2)]);
  }
  $("counters").replaceChildren(...rows.map(([k, v]) => el("tr", {}, el("td", { text: k }), el("td", { text: num(v) }))));
}

function renderTree(tree) {
  const rows = tree.subtrees.map((r) => {
    const lead = r.depth > 1 ? `└ after ${num(r.offset)} tokens: ` : "";
    const text = el("span", { class: "text", text: oneLine(r.text) });
    const cells = [el("td", {}, el("span", { class: "dim", text: lead }), text),
      el("td", { text: (r.namespace || "(default)") + (r.replica ? ` @${r.replica}` : "") })];
    for (const v of [r.tokens, r.nodes, r.hits]) cells.push(el("td", { class: "num", text: num(v) }));
    cells.push(el("td", { class: "num", text: age(r.idle_s) }));
    cells.push(el("td", { class: "num", text: num(r.pinned_tokens) }), el("td", { class: "num", text: num(r.locked_tokens) }));
    return el("tr", { class: r.depth > 1 ? "child" : "top" }, ...cells);
  });
  if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: 8, text: "nothing cached yet" })));
  $("tree-table").tBodies[0].replaceChildren(...rows);
  const walked = tree.truncated ? `, walk stopped after ${num(tree.walked_nodes)}` : "";
  $("tree-info").textContent = `${num(tree.num_nodes)} nodes${walked}`;
}

function side(label, before, after) {
  return el("div", { class: "text" }, el("span", { class: "side", text: label }), "…" + oneLine(before),
    el("span", { class: "cut", text: "┃" }), oneLine(after) + "…");
}

function renderMisses(misses, now) {
  const rows = misses.recent.map((m) => {
    const e = m.explanation;
    const where = el("td", {}, el("div", { class: "dim", text: CAUSES[e.cause] || e.cause }));
    if (e.divergence !== null && e.prompt_side) {
      where.append(el("div", { class: "dim", text: `at token ${num(e.divergence)}` }));
      where.append(side("prompt: ", e.prompt_side.before, e.prompt_side.after));
      if (e.cached_side) where.append(side("cache:  ", e.cached_side.before, e.cached_side.after));
    }
    if (e.evicted_at) where.append(el("div", { text: `evicted ${age(now - e.evicted_at)} ago` }));
    if (e.other_namespace_tokens) where.append(el("div", { text: `another namespace holds ${num(e.other_namespace_tokens)} tokens` }));
    return el("tr", {}, el("td", { text: age(now - m.at) + (now - m.at < 1 ? "" : " ago") }),
      el("td", { text: (m.namespace || "(default)") + (m.replica ? ` @${m.replica}` : "") }),
      el("td", { class: "num", text: `${num(m.cached_tokens)} / ${num(m.prompt_tokens)}` }),
      el("td", {}, el("span", { class: "cause " + e.cause, text: e.cause })), where);
  });
  if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: 5, text: "no misses yet" })));
  $("miss-table").tBodies[0].replaceChildren(...rows);
  const causes = Object.entries(misses.by_cause).map(([k, v]) => `${k} ${num(v)}`).join(", ");
  $("miss-info").textContent = `${num(misses.total)} since start` + (causes ? ` · explained: ${causes}` : "");
}

function render(data) {
  $("model").textContent = data.model;
  renderRates(data);
  renderSpec(data);
  renderPool(data.pool);
  renderQueue(data);
  renderCounters(data);
  renderTree(data.tree);
  renderMisses(data.misses, data.time);
}

function setStatus(kind, text) {
  $("status").className = "status " + kind;
  $("status").textContent = text;
}

function askForKey(reason) {
  $("auth-reason").textContent = reason;
  $("auth").hidden = false;
  $("auth-key").focus();
}

async function poll() {
  clearTimeout(timer);
  const key = sessionStorage.getItem(KEY_STORE);
  try {
    const r = await fetch(DATA_URL, { headers: key ? { Authorization: "Bearer " + key } : {}, cache: "no-store" });
    if (r.status === 401 || r.status === 403) {
      const reason = r.status === 403 ? "That key is not an admin key." :
        key ? "That key was not accepted." : "This server needs an admin key.";
      askForKey(reason);
      setStatus("error", "needs an admin key");
      return; // polling resumes once a key is given
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    $("auth").hidden = true;
    setStatus("live", "live · " + new Date().toLocaleTimeString());
    document.body.dataset.state = "live";
  } catch (err) {
    setStatus("error", "no data: " + err.message);
  }
  timer = setTimeout(poll, POLL_MS);
}

$("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY_STORE, $("auth-key").value.trim());
  $("auth-key").value = "";
  poll();
});
poll();
