// The ops dashboard: polls the admin API every 2 s and draws the ladder, the engine, the
// last decision, live charts (uPlot), the incidents with their evidence and the mode
// timeline. Plain JS, no build step. Unknown values (null) stay null: gaps, never 0.
"use strict";

const POLL_MS = 2000;
const WINDOW_S = 900;               // the charts show the live window of the last 15 min
const FORECAST_S = 300;             // the memory forecast is drawn at most 5 min ahead
const TIMELINE_S = 86400;           // the mode timeline covers at most the last day
const TOKEN_KEY = "supervisor.admin-token";
const GIB = 2 ** 30;

const $ = (sel) => document.querySelector(sel);

// The test (tests/browser/test_dashboard.py) reads the chart objects from here.
const dashboard = window.dashboard = { charts: {}, polls: 0, incidents: [], transitions: [] };

// ---- formatting -----------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

const gib = (bytes) => (bytes === null ? "unknown" : `${(bytes / GIB).toFixed(2)} GiB`);

function duration(s) {
  if (s === null || s === undefined) return "unknown";
  s = Math.round(s);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

function clock(date) {
  const d = new Date(date);
  const today = d.toDateString() === new Date().toDateString();
  const time = d.toLocaleTimeString([], { hour12: false });
  return today ? time : `${d.toLocaleDateString()} ${time}`;
}

// Evidence values as the operator needs them: null is "unknown", lists and maps as JSON.
function evidenceValue(v) {
  if (v === null || v === undefined) return el("span", { class: "muted" }, "unknown");
  if (typeof v === "object") return el("code", {}, JSON.stringify(v));
  return String(v);
}

// ---- the API, with the bearer token when reads need it ---------------------------------

let tokenDeclined = false;

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const res = await fetch(path, { headers, cache: "no-store" });
  if (res.status === 401) {
    if (token) sessionStorage.removeItem(TOKEN_KEY);
    if (!tokenDeclined && askToken()) return api(path);
    $("#token-button").hidden = false;
    throw new Error("the admin API needs a valid bearer token");
  }
  if (!res.ok) throw new Error(`${res.status} ${res.statusText} on ${path}`);
  return res.json();
}

function askToken() {
  const token = (window.prompt("Admin token (the API is not on loopback, so reads need it):")
    || "").trim();
  tokenDeclined = !token;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  return Boolean(token);
}

$("#token-button").addEventListener("click", () => {
  if (askToken()) $("#token-button").hidden = true;
});

// ---- status: header, ladder, last decision ---------------------------------------------

function renderStatus(st) {
  $("#fleet").textContent = st.fleet;
  // Issue 12: the box needs a reboot; the ladder holds until then (or an operator resume).
  const banner = $("#reboot-banner");
  const reboot = st.reboot_required;
  banner.hidden = !reboot;
  if (reboot) {
    const lines = (reboot.evidence && reboot.evidence.kernel_lines) || [];
    banner.replaceChildren(
      el("strong", {}, `REBOOT REQUIRED: ${reboot.kind}`),
      " ", el("span", { class: "tag barred" }, `recommended action ${reboot.recommended_action}`),
      el("p", {}, reboot.explanation),
      ...(lines.length ? [el("pre", {}, lines.join("\n"))] : []));
  }
  const engine = $("#engine");
  const usual = st.engine_state === "starting" ? startEstimate.usual : null;
  engine.textContent = `engine ${st.engine_state} for ${duration(st.engine_seconds_in_state)}`
    + (usual && usual.usual_seconds !== null
      ? `, usually ready in ~${duration(usual.usual_seconds)}` : "")
    + (st.engine_container ? ` in container ${st.engine_container}` : "")
    + adoptText(st.adopt);                                 // issue 31: engine.adopt
  engine.className = `badge state-${st.engine_state}`;
  engine.title = `run ${st.engine_run_id ?? "none"}, pid ${st.engine_pid ?? "none"}`
    + (st.engine_container ? `, container ${st.engine_container}` : "")
    + (usual && usual.starts ? `; median of the last ${usual.starts} starts of ${usual.mode}` +
      ` on this host, the longest ${duration(usual.max_seconds)}` : "");
  const gw = st.gateway;
  $("#meta").textContent = [
    `v${st.version}`, `up ${duration(st.uptime_seconds)}`,
    `calm ${duration(st.calm_seconds)}` + (st.calm_needed_seconds == null ? ""
      : ` of ${duration(st.calm_needed_seconds)} before a step up`),
    st.probation_seconds_left ? `probation ${duration(st.probation_seconds_left)} left` : null,
    gw ? `gateway ${gw.requests_in_flight} in flight, ${gw.requests_queued} queued` +
      (gw.max_concurrency === null ? "" : ` (max ${gw.max_concurrency})`) +
      (gw.held ? ", holding new requests until the engine serves" : "") : null,
  ].filter(Boolean).join(" · ");

  $("#ladder").replaceChildren(...st.ladder.map((r) => {
    const tags = [];
    if (r.speculative) tags.push(["spec", "speculative"]);
    if (st.pinned === r.mode) tags.push(["pinned", "pinned"]);
    if (r.current && st.paused) tags.push(["paused", "paused"]);
    if (r.current && st.shed) tags.push(["shed", "shedding load"]);
    if (r.current && st.supervision === "advise") tags.push(["advise", "advise only"]);
    if (r.barred_until_seconds !== null) {
      tags.push(["barred", `barred ${duration(r.barred_until_seconds)}`]);
    }
    return el("li", { class: r.current ? "rung current" : "rung", "data-mode": r.mode },
      el("span", { class: "rung-index" }, String(r.rung)),
      el("span", { class: "rung-name" }, r.mode),
      r.description ? el("span", { class: "rung-desc" }, r.description) : null,
      el("span", { class: "tags" },
        ...tags.map(([cls, text]) => el("span", { class: `tag ${cls}` }, text))));
  }));

  const d = st.last_decision;
  $("#decision").replaceChildren(d === null
    ? el("p", { class: "muted" }, "No decision yet.")
    : el("p", {}, actionBadge(d, st), " ", d.explanation,
      ...d.findings.map((f) => el("span", { class: `finding sev-${f.severity}` },
        `${f.severity}: ${f.summary ?? f.kind}` +
        (f.recommended_action && f.recommended_action !== "NONE"
          ? ` (recommended action ${f.recommended_action})` : "")))));
}

// Issue 31: an engine the supervisor did not start (engine.adopt): adopted by which
// selector, or why it is still waiting for it.
function adoptText(adopt) {
  if (!adopt) return "";
  if (adopt.waiting) return ` · waiting for the engine to adopt (${adopt.selector}): ${adopt.waiting}`;
  return ` · ${adopt.state} (${adopt.selector})` + (adopt.log ? "" : ", no engine log");
}

// Issue 33: a green "hold" sat beside "holding requests". A hold while the gateway holds
// requests or the engine does not serve is said in the warning colour with what happens;
// a hold with all well is grey ("no change"), never green.
function actionBadge(d, st) {
  if (st.supervision === "advise" && !["hold", "start"].includes(d.action)) {
    return el("span", { class: "advice" }, `would ${d.action}`);       // issue 31
  }
  if (d.action !== "hold") return el("span", { class: `action action-${d.action}` }, d.action);
  const held = st.gateway && st.gateway.held;
  if (held || st.engine_state !== "ready") {
    return el("span", { class: "action action-holding" },
      `${held ? "holding requests" : "waiting"}: engine ${st.engine_state}`);
  }
  return el("span", { class: "action action-hold" }, "hold: no change");
}

// Issue 33: how long a start of this mode usually takes, from the recorded starts of
// earlier runs (api/engine/starts), asked once per engine run; none without history.
const startEstimate = { key: null, usual: null };

async function updateStartEstimate(st) {
  if (st.engine_state !== "starting") return;
  const key = `${st.engine_run_id}/${st.mode}`;
  if (startEstimate.key === key) return;
  startEstimate.key = key;
  startEstimate.usual = null;
  startEstimate.usual = await api(`api/engine/starts?mode=${encodeURIComponent(st.mode)}`)
    .catch(() => null);
}

// ---- charts ----------------------------------------------------------------------------

const pct = (v) => (v == null ? null : v * 100);          // null and undefined stay unknown
const toGib = (v) => (v == null ? null : v / GIB);

// One entry per chart: the telemetry columns it draws, how to convert and show them.
const CHARTS = [
  { id: "memory", unit: "GiB", tick: " GiB", digits: 2, min: 0, series: [
    { field: "mem_available_bytes", label: "MemAvailable", color: "#2563eb", map: toGib },
    { label: "floor", color: "#dc2626", dash: [8, 4], points: false },
    { label: "forecast", color: "#ea580c", dash: [4, 4], points: false },
  ] },
  { id: "psi", unit: "%", tick: "%", digits: 1, min: 0, max: 100, series: [
    { field: "psi_memory_full_avg10_ratio", label: "PSI full", color: "#db2777", map: pct },
  ] },
  { id: "gpu", unit: "°C", tick: "°C", digits: 0, series: [
    { field: "gpu_temperature_c", label: "temperature", color: "#d97706" },
    { field: "gpu_power_w", label: "power", color: "#7c3aed", scale: "W", unit: "W", tick: " W" },
  ] },
  { id: "kv", unit: "%", tick: "%", digits: 1, min: 0, max: 100, series: [
    { field: "kv_cache_usage_ratio", label: "KV usage", color: "#0891b2", map: pct },
  ] },
  { id: "requests", unit: "", digits: 0, min: 0, series: [
    { field: "requests_running", label: "running", color: "#16a34a" },
    { field: "requests_waiting", label: "waiting", color: "#d97706" },
  ] },
  { id: "tokens", unit: "tok/s", digits: 1, min: 0, series: [
    { field: "generation_tokens_per_second", label: "generated", color: "#2563eb" },
  ] },
  { id: "spec", unit: "%", tick: "%", digits: 1, min: 0, max: 100, series: [
    { field: "spec_acceptance_ratio", label: "accepted", color: "#7c3aed", map: pct },
  ] },
];

function fmt(v, unit, digits) {
  if (v === null || v === undefined) return "unknown";
  return unit ? `${v.toFixed(digits)} ${unit}` : v.toFixed(digits);
}

// x-axis ticks in 24-hour local time, with seconds when the chart spans under 10 min.
function timeTicks(u, vs) {
  const seconds = u.scales.x.max - u.scales.x.min < 600 ? "2-digit" : undefined;
  return vs.map((v) => new Date(v * 1000).toLocaleTimeString([],
    { hour12: false, hour: "2-digit", minute: "2-digit", second: seconds }));
}

function yRange(min, max) {
  return (u, lo, hi) => {
    if (lo === null || hi === null) return [min ?? 0, max ?? 1];
    const top = max ?? (hi > 0 ? hi * 1.15 : 1);
    return [min ?? Math.min(lo, 0), Math.max(top, hi)];
  };
}

// Incidents as vertical lines (red: critical/emergency, amber: warning) and mode
// transitions as dotted grey lines, on every chart.
const eventMarkers = {
  hooks: {
    draw: (u) => {
      const { ctx, bbox } = u;
      const lines = [
        ...dashboard.transitions.map((t) => [Date.parse(t.at) / 1000, "#64748b", [2, 3]]),
        ...dashboard.incidents.map((i) => [Date.parse(i.started_at) / 1000,
          i.severity === "warning" || i.severity === "info" ? "#d97706" : "#dc2626", []]),
      ];
      ctx.save();
      ctx.lineWidth = 1.5 * devicePixelRatio;
      for (const [t, color, dash] of lines) {
        if (t < u.scales.x.min || t > u.scales.x.max) continue;
        const x = Math.round(u.valToPos(t, "x", true));
        ctx.strokeStyle = color;
        ctx.setLineDash(dash.map((n) => n * devicePixelRatio));
        ctx.beginPath();
        ctx.moveTo(x, bbox.top);
        ctx.lineTo(x, bbox.top + bbox.height);
        ctx.stroke();
      }
      ctx.restore();
    },
  },
};

function makeChart(cfg) {
  const box = $(`#chart-${cfg.id}`);
  const scales = { x: { time: true }, y: { range: yRange(cfg.min, cfg.max) } };
  const ticks = (suffix) => (u, vs) => vs.map((v) => `${v}${suffix ?? ""}`);
  const axes = [{ values: timeTicks }, { scale: "y", size: 60, values: ticks(cfg.tick) }];
  for (const s of cfg.series) {
    if (s.scale && !scales[s.scale]) {
      scales[s.scale] = { range: yRange(0, null) };
      axes.push({ scale: s.scale, side: 1, size: 50, grid: { show: false },
        values: ticks(s.tick) });
    }
  }
  const opts = {
    width: box.clientWidth, height: 170, scales, axes,
    cursor: { sync: { key: "supervisor" }, drag: { x: false, y: false } },
    legend: { live: true },
    plugins: [eventMarkers],
    series: [{ value: (u, v) => (v === null ? "" : clock(v * 1000)) }, ...cfg.series.map((s) => ({
      label: s.label, stroke: s.color, width: 2, dash: s.dash, scale: s.scale ?? "y",
      spanGaps: false, points: s.points === false ? { show: false } : {},
      // idx is null while the cursor is off the chart: no value to show then.
      value: (u, v, si, idx) => (idx === null ? "" : fmt(v, s.unit ?? cfg.unit, cfg.digits)),
    }))],
  };
  const chart = new uPlot(opts, [[], ...cfg.series.map(() => [])], box);
  window.addEventListener("resize", () => chart.setSize({ width: box.clientWidth, height: 170 }));
  return chart;
}

// The memory chart gets two more series: the floor (a constant) and the forecast, a
// dashed line from the newest sample along the fitted slope, ending at the floor or
// FORECAST_S ahead. Its end point is one more x value, with null for every other series.
function memoryData(tel, t, mem) {
  const floor = tel.memory_floor_bytes === null ? null : tel.memory_floor_bytes / GIB;
  const fc = tel.forecast;
  const floorCol = t.map(() => floor);
  const fcCol = t.map(() => null);
  if (fc && t.length) {
    // A third of the chart's span ahead (10 s to FORECAST_S), or less to reach the floor.
    const third = Math.min(FORECAST_S, Math.max(10, (t.at(-1) - t[0]) / 3));
    const ahead = Math.min(third, fc.seconds_to_floor ?? third);
    fcCol[fcCol.length - 1] = fc.from_bytes / GIB;
    return [[...t, fc.from_t + ahead], [...mem, null], [...floorCol, floor],
      [...fcCol, (fc.from_bytes + fc.slope_bytes_per_second * ahead) / GIB]];
  }
  return [t, mem, floorCol, fcCol];
}

function memoryNow(tel, mem) {
  const fc = tel.forecast;
  const parts = [`${fmt(mem.at(-1) ?? null, "GiB", 2)}`, `floor ${gib(tel.memory_floor_bytes)}`];
  if (fc) {
    const mibs = fc.slope_bytes_per_second / 2 ** 20;
    parts.push(fc.seconds_to_floor === null
      ? `trend ${mibs >= 0 ? "+" : ""}${mibs.toFixed(1)} MiB/s, not heading for the floor`
      : `forecast: floor in ${duration(fc.seconds_to_floor)} (${mibs.toFixed(1)} MiB/s)`);
  }
  return parts.join(" · ");
}

function renderCharts(tel) {
  const t = tel.t;
  for (const cfg of CHARTS) {
    const chart = dashboard.charts[cfg.id] ??= makeChart(cfg);
    const cols = cfg.series.filter((s) => s.field)
      .map((s) => (tel[s.field] ?? t.map(() => null)).map((v) => (s.map ? s.map(v) : v)));
    const data = cfg.id === "memory" ? memoryData(tel, t, cols[0]) : [t, ...cols];
    chart.setData(data);
    const known = cols.some((c) => c.some((v) => v !== null));
    const figure = chart.root.closest("figure");
    figure.classList.toggle("empty", !known);
    figure.querySelector(".now").textContent = cfg.id === "memory" ? memoryNow(tel, cols[0])
      : cfg.series.map((s, i) => `${s.label} ${fmt(cols[i].at(-1) ?? null, s.unit ?? cfg.unit,
        cfg.digits)}`).join(" · ");
  }
}

// ---- incidents -------------------------------------------------------------------------

let selectedIncident = null;

function renderIncidents(list) {
  const box = $("#incidents");
  const key = JSON.stringify(list.map((i) => [i.id, i.outcome, i.ended_at]));
  if (box.dataset.key === key) return;          // unchanged: keep the scroll and the focus
  box.dataset.key = key;
  if (!list.length) {
    box.replaceChildren(el("li", { class: "muted" }, "No incidents recorded."));
    return;
  }
  // An advise-mode decision (action would_*: recorded, not carried out) in its own colour.
  const advised = (i) => i.action.startsWith("would_");
  box.replaceChildren(...list.map((i) => el("li", {
    class: `incident sev-${i.severity}${advised(i) ? " advisory" : ""}` +
      `${i.id === selectedIncident ? " selected" : ""}`,
    "data-id": i.id, "data-kind": i.kind, tabindex: "0",
    onclick: () => showIncident(i.id),
    onkeydown: (e) => { if (e.key === "Enter") showIncident(i.id); },
  },
  el("div", { class: "incident-head" },
    el("span", { class: `sev sev-${i.severity}` }, i.severity),
    el("b", {}, i.kind), advised(i) ? el("span", { class: "advice" }, "advice") : null,
    el("span", { class: "muted" }, `#${i.id} · ${clock(i.started_at)}`)),
  el("div", { class: "incident-line" },
    `${i.mode ?? "no mode"} → ${i.action}${i.outcome ? `: ${i.outcome}` : ""}`))));
}

async function showIncident(id) {
  selectedIncident = id;
  for (const li of document.querySelectorAll("#incidents li[data-id]")) {
    li.classList.toggle("selected", Number(li.dataset.id) === id);
  }
  const detail = $("#incident-detail");
  let inc;
  try {
    inc = await api(`api/incidents/${id}`);
  } catch (err) {
    detail.replaceChildren(el("p", { class: "error" }, String(err.message)));
    return;
  }
  const when = clock(inc.started_at) + (inc.ended_at ? ` – ${clock(inc.ended_at)}` : "");
  const facts = [["when", when], ["mode", inc.mode], ["action", inc.action],
    ["outcome", inc.outcome], ["engine run", inc.run_id]];
  const none = () => el("p", { class: "muted" }, "none");
  detail.replaceChildren(
    el("h3", {}, el("span", { class: `sev sev-${inc.severity}` }, inc.severity), " ", inc.kind,
      el("span", { class: "muted" }, ` #${inc.id}`)),
    el("p", { class: "explanation" }, inc.explanation),
    el("dl", { class: "facts" },
      ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, evidenceValue(v))])),
    el("h4", {}, "Findings"),
    ...(inc.findings.length ? inc.findings.map(finding) : [none()]),
    el("h4", {}, "Kernel lines"),
    inc.kernel_lines?.length ? el("pre", { class: "kernel" }, inc.kernel_lines.join("\n")) : none(),
    el("h4", {}, "Engine log tail", inc.log_tail_probe_lines_hidden ? el("span",
      { class: "muted probes-hidden" }, ` · ${inc.log_tail_probe_lines_hidden} probe lines ` +
      "hidden (the supervisor's own /health, /metrics)") : null),
    inc.log_tail ? el("pre", { class: "log" }, inc.log_tail) : none());
  const log = detail.querySelector("pre.log");
  if (log) log.scrollTop = log.scrollHeight;   // the end of the log is where it died
}

// One finding: severity, kind, guard, summary, its other keys (response, run), and the
// evidence as a table of values and thresholds; fields unknown for this kind (null) are
// folded into one line under the table (issue 19).
function finding(f) {
  const entries = Object.entries(f.evidence ?? {});
  const unknown = entries.filter(([, v]) => v === null || v === undefined).map(([k]) => k);
  const rows = entries.filter(([, v]) => v !== null && v !== undefined).map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", {}, evidenceValue(v))));
  const extra = Object.entries(f)
    .filter(([k]) => !["guard", "kind", "severity", "summary", "evidence"].includes(k))
    .map(([k, v]) => `${k}: ${JSON.stringify(v)}`);
  return el("div", { class: `finding-detail sev-border-${f.severity}` },
    el("p", {}, el("span", { class: `sev sev-${f.severity}` }, f.severity), " ",
      el("b", {}, f.kind ?? ""),
      f.guard ? el("span", { class: "muted" }, ` (guard ${f.guard})`) : null,
      f.summary ? `: ${f.summary}` : ""),
    extra.length ? el("p", { class: "muted" }, extra.join(" · ")) : null,
    rows.length ? el("table", { class: "evidence" }, el("tbody", {}, ...rows)) : null,
    unknown.length ? el("details", { class: "unknown-evidence" },
      el("summary", { class: "muted" }, `${unknown.length} unknown for this kind`),
      el("p", { class: "muted" }, unknown.join(", "))) : null);
}

// ---- mode timeline ---------------------------------------------------------------------

function renderTimeline(transitions, st) {
  const rungOf = Object.fromEntries(st.ladder.map((r) => [r.mode, r.rung]));
  const now = Date.now() / 1000;
  const start = Math.max(now - TIMELINE_S, Math.min(now - st.uptime_seconds,
    transitions.length ? Date.parse(transitions[0].at) / 1000 : now));
  const segments = [];
  let mode = transitions.length ? transitions[0].from_mode ?? transitions[0].to_mode : st.mode;
  let from = start;
  for (const tr of transitions) {
    const at = Date.parse(tr.at) / 1000;
    segments.push([mode, from, at]);
    [mode, from] = [tr.to_mode, at];
  }
  segments.push([mode, from, now]);
  const span = Math.max(now - start, 1);
  const last = st.ladder.length - 1 || 1;
  const hue = (m) => 140 - 140 * (rungOf[m] ?? last) / last;   // green fastest, red safest
  $("#timeline").replaceChildren(
    el("div", { class: "strip" }, ...segments.filter(([, a, b]) => b > a).map(([m, a, b]) =>
      el("div", {
        class: "segment", style: `flex-grow: ${(b - a) / span}; background: hsl(${hue(m)} 55% 42%)`,
        title: `${m}: ${clock(a * 1000)} – ${clock(b * 1000)} (${duration(b - a)})`,
      }, m))),
    el("div", { class: "strip-axis" }, el("span", {}, clock(start * 1000)), el("span", {}, "now")));
  const newest = [...transitions].reverse().slice(0, 20);
  $("#transitions").replaceChildren(...newest.map((tr) => el("li", {},
    el("span", { class: "muted" }, clock(tr.at)), " ",
    el("b", {}, `${tr.from_mode ?? "—"} → ${tr.to_mode}`), ` by ${tr.actor}: ${tr.reason}`,
    tr.incident_id === null ? null : el("a", {
      href: "#incidents-section", onclick: () => showIncident(tr.incident_id),
    }, ` incident #${tr.incident_id}`))));
  if (!newest.length) {
    $("#transitions").append(el("li", { class: "muted" },
      `No mode transitions recorded; on ${st.mode} since the start.`));
  }
}

// ---- the poll loop ---------------------------------------------------------------------

async function poll() {
  try {
    const st = await api("api/status");      // first alone: a 401 asks for the token once
    await updateStartEstimate(st);
    const since = new Date(Date.now() - TIMELINE_S * 1000).toISOString();
    const [tel, incidents, transitions] = await Promise.all([
      api(`api/telemetry?seconds=${WINDOW_S}`), api("api/incidents?limit=50"),
      api(`api/transitions?limit=1000&since=${encodeURIComponent(since)}`),
    ]);
    dashboard.incidents = incidents;
    dashboard.transitions = transitions;
    renderStatus(st);
    if (window.renderLevers) window.renderLevers(st);
    renderCharts(tel);
    renderIncidents(incidents);
    renderTimeline(transitions, st);
    dashboard.polls += 1;
    $("#conn").textContent = `updated ${clock(Date.now())}`;
    $("#conn").className = "conn";
  } catch (err) {
    $("#conn").textContent = `not updated: ${err.message}`;
    $("#conn").className = "conn error";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
