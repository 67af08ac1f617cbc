// The live dashboard: polls /metrics, keeps a short history per model and draws it on canvases;
// lists the loaded models (with memory through the admin API when its key is given) and, with
// that key, loads, replaces and unloads models.
import { ApiError, adminKey, apiKey, call, setAdminKey, setApiKey } from "./api.js";
import { bucketDelta, byModel, parseMetrics, quantile } from "./prom.js";
import { applyTheme, toggleTheme } from "./theme.js";

const $ = (id) => document.getElementById(id);
const HISTORY = 150;        // points per series
const WINDOW_MS = 60000;    // latency percentiles over the last minute

// Each chart: a title, a unit and the series it draws from a history point.
const CHARTS = [
  { id: "tps", title: "Tokens per second", unit: "tok/s", series: [["generated", "genTps", "--c1"], ["prompt", "promptTps", "--c2"]] },
  { id: "reqs", title: "Requests running / waiting", unit: "", series: [["running", "running", "--c3"], ["waiting", "waiting", "--c5"]] },
  { id: "kv", title: "KV blocks", unit: "blocks", series: [["used", "kvUsed", "--c1"], ["cached", "kvCached", "--c2"], ["total", "kvTotal", "--c3"]] },
  { id: "hit", title: "Prefix-cache hit rate", unit: "%", max: 100, series: [["hit rate", "hitRate", "--c4"]] },
  { id: "ttft", title: "Time to first token (last minute)", unit: "ms", series: [["p50", "ttft50", "--c2"], ["p90", "ttft90", "--c1"], ["p99", "ttft99", "--c4"]] },
  { id: "itl", title: "Inter-token latency (last minute)", unit: "ms", series: [["p50", "itl50", "--c2"], ["p90", "itl90", "--c1"], ["p99", "itl99", "--c4"]] },
];

const state = {
  snapshots: [],   // [{t, values, buckets}] of the last WINDOW_MS (+1)
  history: {},     // model -> [point]
  timer: null,
  models: [],      // names seen in /metrics
};

function fmt(v, digits = 1) {
  if (v == null || Number.isNaN(v)) return "–";
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString();
  return v.toFixed(digits);
}

function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; ++i; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

// One history point per model from the newest snapshot and the ones before it.
function points(now) {
  const snaps = state.snapshots;
  const prev = snaps.length > 1 ? snaps[snaps.length - 2] : null;
  const old = snaps[0] !== now ? snaps[0] : null;  // the window's start
  const out = {};
  for (const [model, v] of Object.entries(now.values)) {
    const p = { t: now.t };
    if (prev && prev.values[model]) {
      const pv = prev.values[model], dt = (now.t - prev.t) / 1000;
      p.genTps = Math.max(0, (v.ferrox_generated_tokens_total - pv.ferrox_generated_tokens_total) / dt);
      p.promptTps = Math.max(0, (v.ferrox_prompt_tokens_total - pv.ferrox_prompt_tokens_total) / dt);
      const looked = v.ferrox_prefix_cache_lookup_tokens_total - pv.ferrox_prefix_cache_lookup_tokens_total;
      const hit = v.ferrox_prefix_cache_hit_tokens_total - pv.ferrox_prefix_cache_hit_tokens_total;
      p.hitRate = looked > 0 ? (100 * hit) / looked : null;
    }
    p.running = v.ferrox_requests_running;
    p.waiting = v.ferrox_requests_waiting;
    p.kvUsed = v.ferrox_kv_blocks_used;
    p.kvCached = v.ferrox_kv_blocks_cached;
    p.kvTotal = v.ferrox_kv_blocks_total;
    p.requests = v.ferrox_requests_total;
    p.hitTotal = v.ferrox_prefix_cache_lookup_tokens_total > 0
      ? (100 * v.ferrox_prefix_cache_hit_tokens_total) / v.ferrox_prefix_cache_lookup_tokens_total : null;
    const b = now.buckets[model] || {}, ob = old ? old.buckets[model] || {} : {};
    for (const [key, h] of [["ttft", "ferrox_time_to_first_token_seconds"], ["itl", "ferrox_inter_token_latency_seconds"]]) {
      if (!b[h]) continue;
      let win = bucketDelta(ob[h], b[h]);
      p[key + "Window"] = true;
      if (!(win[win.length - 1][1] > 0)) { win = b[h]; p[key + "Window"] = false; }  // quiet minute: since start
      for (const q of [50, 90, 99]) {
        const s = quantile(q / 100, win);
        p[key + q] = s == null ? null : s * 1000;
      }
    }
    out[model] = p;
  }
  return out;
}

async function poll() {
  let text;
  try {
    text = await call("metrics");
  } catch (e) {
    $("status").textContent = e instanceof ApiError && e.status === 401 ? "the API key is missing or wrong" : "cannot read /metrics: " + e.message;
    return;
  }
  const { values, buckets } = byModel(parseMetrics(text));
  const now = { t: Date.now(), values, buckets };
  state.snapshots.push(now);
  while (state.snapshots.length > 2 && now.t - state.snapshots[1].t >= WINDOW_MS) state.snapshots.shift();
  for (const [model, p] of Object.entries(points(now))) {
    const h = (state.history[model] ??= []);
    h.push(p);
    if (h.length > HISTORY) h.shift();
  }
  // Decoders have KV blocks; the embedding models have only their own counters.
  const models = Object.keys(values).filter((m) => values[m].ferrox_kv_blocks_total !== undefined).sort();
  if (models.join("\n") !== state.models.join("\n")) {
    state.models = models;
    const sel = $("dash-model"), keep = sel.value;
    sel.replaceChildren(...models.map((m) => new Option(m, m)));
    if (models.includes(keep)) sel.value = keep;
  }
  $("status").textContent = "updated " + new Date(now.t).toLocaleTimeString();
  draw();
}

function draw() {
  const model = $("dash-model").value;
  const h = state.history[model] || [];
  const p = h[h.length - 1];
  if (p) {
    $("card-gen-tps").textContent = fmt(p.genTps);
    $("card-prompt-tps").textContent = fmt(p.promptTps);
    $("card-running").textContent = `${p.running} / ${p.waiting}`;
    $("card-kv").textContent = `${p.kvUsed} / ${p.kvCached} / ${p.kvTotal}`;
    $("card-hit").textContent = p.hitTotal == null ? "–" : fmt(p.hitTotal) + " %";
    $("card-ttft").textContent = p.ttft50 == null ? "–" : `${fmt(p.ttft50, 0)} / ${fmt(p.ttft90, 0)} ms`;
    $("card-itl").textContent = p.itl50 == null ? "–" : `${fmt(p.itl50, 1)} / ${fmt(p.itl90, 1)} ms`;
    $("card-requests").textContent = fmt(p.requests, 0);
  }
  for (const c of CHARTS) drawChart(c, h);
}

function setupCharts() {
  const box = $("charts");
  for (const c of CHARTS) {
    const el = document.createElement("div");
    el.className = "chart";
    el.innerHTML = `<h3></h3><canvas id="chart-${c.id}"></canvas><div class="legend"></div>`;
    el.querySelector("h3").textContent = c.title;
    for (const [label, , color] of c.series) {
      const s = document.createElement("span");
      s.innerHTML = `<i style="background: var(${color})"></i>`;
      s.append(label);
      el.querySelector(".legend").appendChild(s);
    }
    box.appendChild(el);
  }
}

// The smallest of 1, 2, 4, 5, 8 times a power of ten that is >= v: four grid steps read well.
function niceCeil(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 4, 5, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function drawChart(c, h) {
  const canvas = $("chart-" + c.id);
  const css = getComputedStyle(document.documentElement);
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, ht = canvas.clientHeight;
  if (!w || !ht) return;
  canvas.width = w * dpr;
  canvas.height = ht * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, ht);
  const left = 44, right = 6, top = 6, bottom = 16;
  let max = c.max;
  if (!max) {
    let top = 0;
    for (const p of h) for (const [, key] of c.series) if (p[key] > top) top = p[key];
    max = niceCeil(top * 1.05);
  }
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = css.getPropertyValue("--muted");
  g.strokeStyle = css.getPropertyValue("--border");
  g.lineWidth = 1;
  for (let i = 0; i <= 4; ++i) {
    const y = top + ((ht - top - bottom) * i) / 4;
    g.beginPath();
    g.moveTo(left, y);
    g.lineTo(w - right, y);
    g.stroke();
    const v = max * (1 - i / 4);
    g.fillText(Number.isInteger(v) ? v.toString() : v.toFixed(v >= 10 ? 0 : v >= 1 ? 1 : 2), 4, y + 4);
  }
  g.fillText(c.unit, 4, ht - 3);
  const x = (i) => left + ((w - left - right) * (i + HISTORY - h.length)) / (HISTORY - 1);
  const y = (v) => top + (ht - top - bottom) * (1 - v / max);
  g.lineWidth = 2;
  for (const [, key, color] of c.series) {
    g.strokeStyle = css.getPropertyValue(color);
    g.beginPath();
    let pen = false;
    h.forEach((p, i) => {
      const v = p[key];
      if (v == null) { pen = false; return; }
      pen ? g.lineTo(x(i), y(v)) : g.moveTo(x(i), y(v));
      pen = true;
    });
    g.stroke();
  }
}

// ---- models and admin actions --------------------------------------------------------------

async function loadModels() {
  const rows = [];
  let admin = null;
  let models = [];
  try {
    models = (await call("v1/models")).data || [];
  } catch (e) {
    $("models-note").textContent = "cannot list the models: " + e.message;
  }
  if (adminKey()) {
    try {
      admin = (await call("admin/models", { key: adminKey() })).data || [];
    } catch (e) {
      $("models-note").textContent = "admin API: " + e.message;
    }
  }
  $("admin").hidden = !admin;
  const meta = Object.fromEntries(models.map((m) => [m.id, m.meta || {}]));
  if (admin) {
    for (const a of admin) rows.push({ id: a.id, kind: meta[a.id]?.kind, state: a.state, ctx: meta[a.id]?.n_ctx,
      weights: a.weight_bytes, kv: a.kv_bytes, running: a.requests_running, waiting: a.requests_waiting, path: a.path });
    $("models-note").textContent = "";
  } else {
    for (const m of models) rows.push({ id: m.id, kind: m.meta?.kind, state: "ready", ctx: m.meta?.n_ctx });
    // /props describes the default model's KV cache without the admin key.
    try {
      const props = await call("props");
      const r = rows.find((x) => x.id === props.model_alias);
      if (r && props.kv_cache) r.kv = props.kv_cache.bytes;
    } catch (_) { /* an embeddings-only server */ }
    if (!$("models-note").textContent) $("models-note").textContent = "Weights' memory and the load / unload actions need the admin key (--admin-key).";
  }
  const tbody = $("models");
  tbody.replaceChildren();
  for (const r of rows) {
    const last = state.history[r.id]?.slice(-1)[0];
    const tr = document.createElement("tr");
    tr.dataset.model = r.id;
    const cells = [r.id, r.kind || "", r.state, r.ctx ?? "–", bytes(r.weights), bytes(r.kv),
      r.running ?? last?.running ?? "–", r.waiting ?? last?.waiting ?? "–"];
    for (const v of cells) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(td);
    }
    const td = document.createElement("td");
    if (admin && r.state !== "draining") {
      for (const [label, fn] of [["Replace", () => replaceModel(r)], ["Unload", () => unloadModel(r.id)]]) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "small";
        b.textContent = label;
        b.addEventListener("click", fn);
        td.appendChild(b);
      }
    }
    tr.appendChild(td);
    tbody.appendChild(tr);
  }
}

async function adminCall(path, body, what) {
  $("admin-status").textContent = what + "…";
  try {
    await call(path, { method: "POST", body, key: adminKey() });
    $("admin-status").textContent = what + ": done";
  } catch (e) {
    $("admin-status").textContent = what + ": " + e.message;
  }
  loadModels();
}

function unloadModel(id) {
  if (confirm(`Unload ${id}? Requests in progress finish first.`)) adminCall("admin/models/unload", { alias: id }, "unload " + id);
}

function replaceModel(r) {
  const path = prompt(`Replace ${r.id} with the model at this path (on the server):`, r.path || "");
  if (path) adminCall("admin/models/load", { path, alias: r.id, replace: true }, "replace " + r.id);
}

function restart() {
  clearInterval(state.timer);
  state.timer = setInterval(poll, Number($("interval").value));
}

function main() {
  applyTheme();
  setupCharts();
  $("theme").addEventListener("click", () => { toggleTheme(); draw(); });
  $("dash-model").addEventListener("change", draw);
  $("interval").addEventListener("change", restart);
  $("api-key").value = apiKey();
  $("admin-key").value = adminKey();
  $("api-key").addEventListener("change", (e) => { setApiKey(e.target.value.trim()); poll(); loadModels(); });
  $("admin-key").addEventListener("change", (e) => { setAdminKey(e.target.value.trim()); loadModels(); });
  $("load-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const body = { path: $("load-path").value.trim(), replace: $("load-replace").checked };
    if ($("load-alias").value.trim()) body.alias = $("load-alias").value.trim();
    adminCall("admin/models/load", body, "load " + body.path);
  });
  addEventListener("resize", draw);
  poll().then(loadModels);
  setInterval(loadModels, 10000);
  restart();
  document.body.dataset.ready = "1";
}

main();
