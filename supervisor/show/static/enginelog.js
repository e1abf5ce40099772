// The engine's log, live: polls api/engine/log from the last byte offset (the reads'
// token through app.js's api()), starts over when the run changes, keeps the last
// MAX_LINES lines. Polling rather than server-sent events, so the bearer token works
// where reads need it (EventSource cannot send an Authorization header).
"use strict";

const LOG_POLL_MS = 1000;
const MAX_LINES = 400;
const engineLog = window.engineLog = { runId: null, offset: null, lines: [], partial: "" };

async function pollLog() {
  // Only after app.js's first good poll: it asks for the token, once, if reads need one.
  if (!dashboard.polls) return setTimeout(pollLog, LOG_POLL_MS);
  try {
    const q = engineLog.offset === null ? "lines=100" : `offset=${engineLog.offset}`;
    let out = await api(`api/engine/log?${q}`);
    if (engineLog.runId !== null && out.run_id !== engineLog.runId) {
      engineLog.lines.push(`--- engine run ${out.run_id} (mode ${out.mode}) ---`);
      engineLog.partial = "";
      out = await api("api/engine/log?offset=0");
    }
    engineLog.runId = out.run_id;
    engineLog.offset = out.offset;
    const chunks = (engineLog.partial + out.text).split("\n");
    engineLog.partial = chunks.pop();
    if (chunks.length) {
      engineLog.lines.push(...chunks);
      engineLog.lines.splice(0, Math.max(0, engineLog.lines.length - MAX_LINES));
      const pre = $("#engine-log");
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = engineLog.lines.join("\n");
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    $("#log-where").textContent = `run ${out.run_id}, mode ${out.mode}: ${out.path}`;
  } catch (err) {
    $("#log-where").textContent = `not updated: ${err.message}`;
  } finally {
    setTimeout(pollLog, LOG_POLL_MS);
  }
}

pollLog();
