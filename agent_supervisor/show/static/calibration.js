// The calibration card (issue 13): tokens/s per rung per workload profile, as
// `supervisor calibrate --profiles` stored them; the best rung of each profile in bold.
// Rows measured with other engine arguments than the policy's now are marked stale.
// Hidden while nothing was calibrated on profiles.
"use strict";

const CALIBRATION_POLL_MS = 30000;

function renderCalibration(data) {
  const section = $("#calibration-section");
  section.hidden = data.rows.length === 0;
  if (section.hidden) return;
  const body = $("#calibration-rows");
  body.replaceChildren();
  for (const r of data.rows) {
    const best = data.best[r.profile] === r.mode;
    const acc = r.acceptance_by_position ?
      r.acceptance_by_position.map((a) => a.toFixed(2)).join(" ") : "-";
    body.append(el("tr", { class: (best ? "best" : "") + (r.current ? "" : " stale"),
                           "data-profile": r.profile, "data-mode": r.mode },
      el("td", {}, r.profile), el("td", {}, r.mode + (r.current ? "" : " (stale)")),
      el("td", {}, String(r.concurrency)),
      el("td", {}, r.tokens_per_second_per_request.toFixed(1)),
      el("td", {}, r.tokens_per_second_total.toFixed(1)),
      el("td", {}, r.ttft_seconds === null ? "-" : r.ttft_seconds.toFixed(3)),
      el("td", {}, acc), el("td", {}, clock(Date.parse(r.measured_at)))));
  }
}

async function pollCalibration() {
  if (!dashboard.polls) return setTimeout(pollCalibration, 1000);  // after the token ask
  try {
    renderCalibration(await api("api/calibration"));
  } catch (err) {
    $("#calibration-note").textContent = `not updated: ${err.message}`;
  } finally {
    setTimeout(pollCalibration, CALIBRATION_POLL_MS);
  }
}

pollCalibration();
