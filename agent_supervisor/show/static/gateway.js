// The gateway's traffic on the dashboard: requests/s by outcome, 429s/s (rejections by
// reason) and upstream latency p50/p95, from the supervisor's own /metrics (Prometheus
// text), as differences between two polls. Plain counters only; nothing is guessed:
// before the second poll every rate is "unknown".
"use strict";

const GW_POLL_MS = 5000;
const gatewayView = window.gatewayView = { prev: null, last: null };

// {name: [{labels: {...}, value}]} of the sample lines of a Prometheus text exposition.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    (out[m[1]] ??= []).push({ labels, value: Number(m[4]) });
  }
  return out;
}

const sumOf = (series, pred = () => true) =>
  (series || []).filter((s) => pred(s.labels)).reduce((a, s) => a + s.value, 0);

// The q-quantile of the requests between two cumulative histograms (linear in a bucket).
function quantile(q, prev, cur) {
  const buckets = (cur || []).map((b) => ({ le: Number(b.labels.le), n: b.value -
    ((prev || []).find((p) => p.labels.le === b.labels.le)?.value ?? 0) }))
    .sort((a, b) => a.le - b.le);
  const total = buckets.length ? buckets.at(-1).n : 0;
  if (!total) return null;
  let lower = 0;
  let below = 0;
  for (const b of buckets) {
    if (b.n >= q * total) {
      if (!Number.isFinite(b.le)) return lower;
      return lower + (b.le - lower) * ((q * total - below) / Math.max(1e-9, b.n - below));
    }
    lower = b.le;
    below = b.n;
  }
  return null;
}

function gatewayStats(prev, cur, seconds) {
  const rate = (name, pred) => Math.max(0, sumOf(cur[name], pred) - sumOf(prev[name], pred))
    / seconds;
  return {
    requests_per_second: rate("supervisor_gateway_requests_total"),
    ok_per_second: rate("supervisor_gateway_requests_total", (l) => l.outcome === "ok"),
    rejected_429_per_second: rate("supervisor_gateway_rejections_total",
      (l) => l.reason === "queue_full" || l.reason === "queue_timeout"),
    latency_p50_seconds: quantile(0.5, prev.supervisor_gateway_upstream_latency_seconds_bucket,
      cur.supervisor_gateway_upstream_latency_seconds_bucket),
    latency_p95_seconds: quantile(0.95, prev.supervisor_gateway_upstream_latency_seconds_bucket,
      cur.supervisor_gateway_upstream_latency_seconds_bucket),
    total_requests: sumOf(cur.supervisor_gateway_requests_total),
    total_429: sumOf(cur.supervisor_gateway_rejections_total,
      (l) => l.reason === "queue_full" || l.reason === "queue_timeout"),
  };
}

async function pollGateway() {
  if (!dashboard.polls) return setTimeout(pollGateway, 1000);   // after app.js's token ask
  try {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const res = await fetch("metrics", { cache: "no-store",
      headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (!res.ok) throw new Error(`${res.status} on /metrics`);
    const now = { t: Date.now() / 1000, m: parseMetrics(await res.text()) };
    const box = $("#gateway-stats");
    if (!now.m.supervisor_gateway_requests_in_flight) {
      box.textContent = "no gateway in this policy";
    } else if (gatewayView.prev) {
      const st = gatewayView.last = gatewayStats(gatewayView.prev.m, now.m,
        now.t - gatewayView.prev.t);
      const ms = (s) => (s === null ? "unknown" : `${(s * 1000).toFixed(0)} ms`);
      box.textContent = [
        `${st.requests_per_second.toFixed(2)} req/s (${st.ok_per_second.toFixed(2)} ok)`,
        `429s ${st.rejected_429_per_second.toFixed(2)}/s`,
        `upstream latency p50 ${ms(st.latency_p50_seconds)}, p95 ${ms(st.latency_p95_seconds)}`,
        `since start: ${st.total_requests} requests, ${st.total_429} answered 429`,
      ].join(" · ");
    } else {
      box.textContent = "rates unknown until the next reading";
    }
    gatewayView.prev = now;
  } catch (err) {
    $("#gateway-stats").textContent = `not updated: ${err.message}`;
  } finally {
    setTimeout(pollGateway, GW_POLL_MS);
  }
}

pollGateway();
