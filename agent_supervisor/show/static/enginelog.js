// The engine's log, live: server-sent events from api/engine/log/stream, read with
// fetch() and a ReadableStream so the bearer token goes in the Authorization header
// (EventSource cannot send one). A "run" event starts the view over (a new engine run:
// its last lines), "append" events add what the engine wrote since. Keeps the last
// MAX_LINES lines; reconnects RETRY_MS after the stream ends or fails. The API leaves out
// the supervisor's own probe lines (GET /health, /metrics from 127.0.0.1: issue 33) and
// says how many in each event; the count shows beside the run.
"use strict";

const RETRY_MS = 1000;
const MAX_LINES = 400;
const engineLog = window.engineLog = {
  runId: null, offset: null, lines: [], partial: "", events: 0, connected: false,
  probesHidden: 0, where: "",
};

function showWhere() {
  const n = engineLog.probesHidden;
  $("#log-where").textContent = engineLog.where +
    (n ? ` · ${n} probe line${n === 1 ? "" : "s"} hidden (the supervisor's own /health, ` +
      "/metrics)" : "");
}

function showLines(chunks) {
  engineLog.lines.push(...chunks);
  engineLog.lines.splice(0, Math.max(0, engineLog.lines.length - MAX_LINES));
  const pre = $("#engine-log");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = engineLog.lines.join("\n");
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

function onLogEvent(name, data) {
  engineLog.events += 1;
  if (name === "run") {
    if (engineLog.runId !== null && data.run_id !== engineLog.runId) {
      engineLog.lines.push(`--- engine run ${data.run_id} (mode ${data.mode}) ---`);
    }
    engineLog.partial = "";
    engineLog.runId = data.run_id;
    engineLog.probesHidden = 0;
    engineLog.where = `run ${data.run_id}, mode ${data.mode}: ${data.path}`;
  }
  engineLog.probesHidden += data.probe_lines_hidden || 0;
  showWhere();
  engineLog.offset = data.offset;
  const chunks = (engineLog.partial + data.text).split("\n");
  engineLog.partial = chunks.pop();
  if (chunks.length) showLines(chunks);
}

// One SSE frame ("event: x\ndata: {...}"); comments (": keepalive") carry nothing.
function parseFrame(frame) {
  let name = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (data.length) onLogEvent(name, JSON.parse(data.join("\n")));
}

async function streamLog() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const res = await fetch("api/engine/log/stream?lines=100", { headers, cache: "no-store" });
  if (res.status === 401) throw new Error("the admin API needs a valid bearer token");
  if (!res.ok) throw new Error(`${res.status} ${res.statusText} on the log stream`);
  engineLog.connected = true;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      parseFrame(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
}

async function followLog() {
  // Only after app.js's first good poll: it asks for the token, once, if reads need one.
  if (!dashboard.polls) return setTimeout(followLog, RETRY_MS);
  try {
    await streamLog();
  } catch (err) {
    $("#log-where").textContent = `not updated: ${err.message}`;
  } finally {
    engineLog.connected = false;
    setTimeout(followLog, RETRY_MS);
  }
}

followLog();
