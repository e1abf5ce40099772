// The fleet on the dashboard (issue 16): when the record holds several hosts (several
// supervisors writing to one PostgreSQL), one row per supervisor: rung and mode at its
// last heartbeat, engine state, heartbeat age, last incident and the node it named.
// With one host the card stays hidden: there is no fleet to show.
"use strict";

const FLEET_POLL_MS = 10000;
const FLEET_STALE_S = 90;
const fleetView = window.fleetView = { members: null, hosts: 0 };

function fleetState(m) {
  if (m.stopped) return "stopped";
  const age = m.heartbeat_age_seconds;
  return age === null || age > FLEET_STALE_S ? "lost" : "alive";
}

function renderFleet(data) {
  fleetView.members = data.members;
  fleetView.hosts = data.hosts;
  const section = $("#fleet-section");
  section.hidden = data.hosts < 2;
  if (section.hidden) return;
  const body = $("#fleet-rows");
  body.replaceChildren();
  for (const m of data.members) {
    const last = m.last_incident_kind === null ? "none" :
      `${m.last_incident_kind}${m.last_incident_node ? ` [${m.last_incident_node}]` : ""}` +
      ` (${m.last_incident_severity}, ${clock(Date.parse(m.last_incident_at))})`;
    const age = m.heartbeat_age_seconds === null ? "unknown" : duration(m.heartbeat_age_seconds);
    const state = fleetState(m);
    body.append(el("tr", { class: m.this ? "this" : "", "data-host": m.host },
      el("td", {}, m.host + (m.this ? " (this)" : "")), el("td", {}, m.fleet),
      el("td", {}, m.rung === null ? "unknown" : `${m.rung} ${m.mode}`),
      el("td", {}, m.engine_state ?? "unknown"), el("td", {}, age),
      el("td", { class: `fleet-${state}` }, state), el("td", {}, last)));
  }
}

async function pollFleet() {
  if (!dashboard.polls) return setTimeout(pollFleet, 1000);   // after app.js's token ask
  try {
    renderFleet(await api("api/fleet"));
  } catch (err) {
    $("#fleet-note").textContent = `not updated: ${err.message}`;
  } finally {
    setTimeout(pollFleet, FLEET_POLL_MS);
  }
}

pollFleet();
