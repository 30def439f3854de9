// legio dashboard: polls /metrics (Prometheus text) every second and draws the charts on canvases.
// No dependencies; served by the legio binary.
"use strict";

const POLL_MS = 1000;
const KEEP = 120; // points per series
const COLORS = ["#58a6ff", "#3fb950", "#d29922", "#f778ba", "#a371f7", "#ff7b72", "#79c0ff", "#56d4dd"];

// ---- Prometheus text format ------------------------------------------------------------------
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2];
    }
    samples.push({ name: m[1], labels, value: parseFloat(m[4]) });
  }
  return samples;
}
function sum(samples, name, filter) {
  let total = 0;
  for (const s of samples) if (s.name === name && (!filter || filter(s.labels))) total += s.value;
  return total;
}
function groupBy(samples, name, label) {
  const out = {};
  for (const s of samples) if (s.name === name) {
    const key = s.labels[label] || "-";
    out[key] = (out[key] || 0) + s.value;
  }
  return out;
}
function buckets(samples, name, filter) {
  const out = {};
  for (const s of samples) if (s.name === name + "_bucket" && (!filter || filter(s.labels))) {
    const le = s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le);
    out[le] = (out[le] || 0) + s.value;
  }
  return out;
}
// The q-quantile of the observations between two cumulative bucket snapshots (linear inside a bucket).
function quantile(now, before, q) {
  const les = Object.keys(now).map(Number).sort((a, b) => a - b);
  const counts = les.map(le => (now[le] || 0) - ((before && before[le]) || 0));
  const total = counts[counts.length - 1] || 0;
  if (total <= 0) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (let i = 0; i < les.length; i++) {
    if (counts[i] >= rank) {
      const le = les[i] === Infinity ? prevLe : les[i];
      const inBucket = counts[i] - prevCount;
      const frac = inBucket > 0 ? (rank - prevCount) / inBucket : 1;
      return prevLe + (le - prevLe) * frac;
    }
    prevLe = les[i] === Infinity ? prevLe : les[i];
    prevCount = counts[i];
  }
  return prevLe;
}

// ---- series and charts ----------------------------------------------------------------------
const charts = {};
function series(chart, name) {
  const c = charts[chart] || (charts[chart] = { series: {}, order: [] });
  if (!c.series[name]) { c.series[name] = []; c.order.push(name); }
  return c.series[name];
}
function push(chart, name, t, v) {
  const s = series(chart, name);
  s.push([t, v]);
  if (s.length > KEEP) s.shift();
}
function fmt(v, unit) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  if (unit === "s") {
    if (v < 1e-3) return (v * 1e6).toFixed(0) + " µs";
    if (v < 1) return (v * 1e3).toFixed(v < 0.01 ? 2 : 1) + " ms";
    return v.toFixed(2) + " s";
  }
  if (unit === "B") {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return v.toFixed(i ? 1 : 0) + " " + units[i];
  }
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString("en");
  return (Math.round(v * 10) / 10).toString();
}
function setup(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== w * ratio || canvas.height !== h * ratio) { canvas.width = w * ratio; canvas.height = h * ratio; }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  return { ctx, w, h };
}
function drawLines(id, unit) {
  const canvas = document.getElementById(id);
  const c = charts[id];
  if (!canvas || !c) return;
  const { ctx, w, h } = setup(canvas);
  const left = 58, right = 8, top = 8, bottom = 34;
  let tMin = Infinity, tMax = -Infinity, vMax = 0;
  for (const name of c.order) for (const [t, v] of c.series[name]) {
    tMin = Math.min(tMin, t); tMax = Math.max(tMax, t);
    if (v !== null && isFinite(v)) vMax = Math.max(vMax, v);
  }
  if (vMax <= 0) vMax = 1;
  vMax *= 1.1;
  if (!(tMax > tMin)) { tMin = (isFinite(tMax) ? tMax : 0) - 1; tMax = tMin + 1; }
  const x = t => left + (w - left - right) * (t - tMin) / (tMax - tMin);
  const y = v => top + (h - top - bottom) * (1 - v / vMax);
  ctx.strokeStyle = "#26303a"; ctx.fillStyle = "#7d8894"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = vMax * i / 4, yy = y(v);
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
    ctx.fillText(fmt(v, unit), 4, yy + 4);
  }
  c.order.forEach((name, i) => {
    const pts = c.series[name].filter(p => p[1] !== null && isFinite(p[1]));
    ctx.strokeStyle = COLORS[i % COLORS.length]; ctx.lineWidth = 1.8;
    ctx.beginPath();
    pts.forEach(([t, v], j) => { if (j) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v)); });
    ctx.stroke();
    if (pts.length === 1) { ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(x(pts[0][0]) - 2, y(pts[0][1]) - 2, 4, 4); }
  });
  let lx = left;
  c.order.forEach((name, i) => {
    const last = c.series[name][c.series[name].length - 1];
    const label = name + " " + fmt(last ? last[1] : null, unit);
    ctx.fillStyle = COLORS[i % COLORS.length]; ctx.fillRect(lx, h - 14, 10, 3);
    ctx.fillStyle = "#d7dde4"; ctx.fillText(label, lx + 14, h - 10);
    lx += ctx.measureText(label).width + 28;
  });
}
function drawBars(id, groups) {
  const canvas = document.getElementById(id);
  if (!canvas) return;
  const { ctx, w, h } = setup(canvas);
  const rows = [];
  for (const [kind, byReason] of groups) for (const [reason, v] of Object.entries(byReason)) rows.push([kind + " · " + reason, v, kind]);
  if (!rows.length) { ctx.fillStyle = "#7d8894"; ctx.fillText("no sessions yet", 8, 20); return; }
  const max = Math.max(1, ...rows.map(r => r[1]));
  const rowH = Math.min(22, (h - 6) / rows.length);
  const kinds = groups.map(g => g[0]);
  rows.forEach(([label, v, kind], i) => {
    const yy = 3 + i * rowH;
    ctx.fillStyle = "#d7dde4"; ctx.fillText(label, 6, yy + rowH * 0.65);
    const bw = (w - 200) * v / max;
    ctx.fillStyle = COLORS[kinds.indexOf(kind) % COLORS.length];
    ctx.fillRect(190, yy + 3, Math.max(bw, 1), rowH - 6);
    ctx.fillStyle = "#d7dde4"; ctx.fillText(fmt(v), 196 + bw, yy + rowH * 0.65);
  });
}

// ---- polling --------------------------------------------------------------------------------
let previous = null;
function text(id, value) { const el = document.getElementById(id); if (el) el.textContent = value; }

function update(samples, t) {
  const prev = previous;
  const dt = prev ? (t - prev.t) / 1000 : 0;
  const rate = (now, before) => (prev && dt > 0 ? Math.max(0, (now - before) / dt) : null);

  const turns = groupBy(samples, "legio_turns_total", "agent");
  let allTurns = 0;
  for (const [agent, v] of Object.entries(turns)) {
    const r = rate(v, prev ? prev.turns[agent] || 0 : 0);
    if (r !== null) { push("turns", agent, t, r); allTurns += r; }
    else series("turns", agent);
  }
  text("now-turns", prev ? fmt(allTurns) + " turns/s in all; " + fmt(sum(samples, "legio_turns_total")) + " turns since start" : "");

  const lat = buckets(samples, "legio_turn_latency_seconds");
  const p50 = quantile(lat, prev && prev.lat, 0.5), p99 = quantile(lat, prev && prev.lat, 0.99);
  if (prev) { push("latency", "p50", t, p50); push("latency", "p99", t, p99); }
  text("now-latency", "p50 " + fmt(p50, "s") + ", p99 " + fmt(p99, "s") + " over the last second");

  const sent = sum(samples, "legio_context_tokens_sent_total");
  const avoided = sum(samples, "legio_context_tokens_avoided_total");
  if (prev) { push("tokens", "sent", t, rate(sent, prev.sent)); push("tokens", "avoided", t, rate(avoided, prev.avoided)); }
  const share = sent + avoided > 0 ? (100 * avoided / (sent + avoided)).toFixed(1) + "% avoided" : "";
  text("now-tokens", fmt(sent) + " sent, " + fmt(avoided) + " avoided since start " + (share ? "(" + share + ")" : ""));

  drawBars("sessions", [
    ["opened", groupBy(samples, "legio_sessions_opened_total", "reason")],
    ["suspended", groupBy(samples, "legio_sessions_suspended_total", "reason")],
    ["closed", groupBy(samples, "legio_sessions_closed_total", "reason")],
  ]);
  text("now-sessions", fmt(sum(samples, "legio_sessions_opened_total")) + " opened since start");

  const restarts = sum(samples, "legio_agent_restarts_total");
  const failed = sum(samples, "legio_agents_failed_total");
  push("restarts", "restarts", t, restarts); push("restarts", "failed agents", t, failed);
  text("now-restarts", fmt(restarts) + " restarts, " + fmt(failed) + " agents marked failed");

  const events = sum(samples, "legio_store_last_seq");
  const bytes = sum(samples, "legio_store_size_bytes");
  push("log", "events (last seq)", t, events);
  text("now-log", fmt(events) + " events, " + fmt(bytes, "B") + " on disk");

  const app = buckets(samples, "legio_store_append_latency_seconds");
  const a50 = quantile(app, prev && prev.app, 0.5), a99 = quantile(app, prev && prev.app, 0.99);
  if (prev) { push("append", "p50", t, a50); push("append", "p99", t, a99); }
  // What the commit waits on (sled's flush, the fdatasync) and the list overlay's writes, whose
  // p99 shows when a slow append came from the store's own work (docs/storage.md, metrics).
  const step = name => buckets(samples, "legio_store_commit_step_seconds", l => l.step === name);
  const parts = { flush: step("flush"), fsync: step("fdatasync"), lists: buckets(samples, "legio_store_list_write_seconds") };
  const p99s = {};
  for (const [key, now] of Object.entries(parts)) p99s[key] = quantile(now, prev && prev.parts[key], 0.99);
  if (prev) {
    push("append", "sled flush p99", t, p99s.flush);
    push("append", "fdatasync p99", t, p99s.fsync);
    push("append", "list write p99", t, p99s.lists);
  }
  text("now-append", "p50 " + fmt(a50, "s") + ", p99 " + fmt(a99, "s") + "; " + fmt(sum(samples, "legio_store_fsyncs_total")) + " fsyncs since start"
    + "; p99 of sled flush " + fmt(p99s.flush, "s") + ", fdatasync " + fmt(p99s.fsync, "s") + ", list writes " + fmt(p99s.lists, "s"));

  const actors = sum(samples, "legio_live_actors");
  push("actors", "live actors", t, actors);
  text("now-actors", fmt(actors) + " live");

  // Compactions by outcome: a failed or empty one means the turn went on without a summary
  // (issue 17: never silent); "cut to fit" counts contexts whose oldest messages were left out.
  const compactions = groupBy(samples, "legio_compactions_total", "outcome");
  const cut = sum(samples, "legio_context_left_out_total");
  for (const outcome of ["ok", "failed", "empty"]) push("compactions", outcome, t, compactions[outcome] || 0);
  push("compactions", "cut to fit", t, cut);
  const bad = (compactions.failed || 0) + (compactions.empty || 0);
  text("now-compactions", fmt(compactions.ok || 0) + " made, " + fmt(bad) + " failed" + (bad ? " (see the server's warnings)" : "") + ", " + fmt(cut) + " contexts cut to fit");

  // Heartbeats (host, operator or a [heartbeats] schedule), by outcome, since the start.
  const beats = groupBy(samples, "legio_heartbeats_total", "outcome");
  push("heartbeats", "answered", t, beats.ok || 0); push("heartbeats", "failed", t, beats.failed || 0);
  const beatAgents = Object.keys(groupBy(samples, "legio_heartbeats_total", "agent"));
  text("now-heartbeats", fmt(beats.ok || 0) + " answered, " + fmt(beats.failed || 0) + " failed since start" + (beatAgents.length ? " (" + beatAgents.join(", ") + ")" : ""));

  previous = { t, turns, lat, sent, avoided, app, parts };
  drawLines("turns"); drawLines("latency", "s"); drawLines("tokens"); drawLines("restarts");
  drawLines("log"); drawLines("append", "s"); drawLines("actors"); drawLines("compactions");
  drawLines("heartbeats");
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/metrics", { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    const samples = parseMetrics(await response.text());
    update(samples, performance.now());
    status.className = "status ok";
    status.textContent = "live · refreshed every " + POLL_MS / 1000 + " s · " + new Date().toLocaleTimeString();
  } catch (e) {
    status.className = "status bad";
    status.textContent = "cannot read /metrics: " + e.message;
  }
}
// On a cluster, /meta names this node and the conversations it owns.
async function pollNode() {
  try {
    const response = await fetch("/meta", { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) return;
    const cluster = (await response.json()).cluster;
    if (!cluster) return;
    const owned = cluster.conversations;
    document.getElementById("node").textContent = "node " + cluster.node + " · owns " + owned.length +
      " conversation" + (owned.length === 1 ? "" : "s") + (owned.length ? ": " + owned.slice(0, 8).join(", ") + (owned.length > 8 ? ", …" : "") : "");
  } catch (e) { /* the status line reports the connection */ }
}
poll();
pollNode();
setInterval(poll, POLL_MS);
setInterval(pollNode, 5 * POLL_MS);
const UNITS = { latency: "s", append: "s" };
window.addEventListener("resize", () => { for (const id of Object.keys(charts)) drawLines(id, UNITS[id]); });
