// The operator's levers on the dashboard: pin, unpin, step down, step up, pause, resume,
// restart, advise only and act, each through POST api/actions/{action} with the bearer token. The token is asked
// once and kept for this tab only (sessionStorage, shared with app.js's reads); every
// button first says what will happen and asks to confirm. Tested by
// tests/browser/test_levers.py against a running service.
"use strict";

const levers = window.levers = { last: null };

// What each lever does, in the operator's words; `st` is the newest /api/status.
const LEVERS = [
  { action: "step-down", label: "Step down", enabled: (st) => st.rung < st.ladder.length - 1,
    says: (st) => `Step down from ${st.mode} to ${st.ladder[st.rung + 1].mode}: the engine ` +
      "is drained and restarted in the safer mode, once; the ladder then moves by itself." },
  { action: "step-up", label: "Step up", enabled: (st) => st.rung > 0,
    says: (st) => `Step up from ${st.mode} to ${st.ladder[st.rung - 1].mode}: the engine ` +
      "is drained and restarted in the faster mode, once, with a probation." },
  { action: "pin", label: "Pin", enabled: () => true, mode: true,
    says: (st, mode) => `Pin the ladder to ${mode}: the engine moves there and stays; ` +
      "no automatic steps until you unpin (crash restarts and emergencies still act)." },
  { action: "unpin", label: "Unpin", enabled: (st) => st.pinned !== null,
    says: (st) => `Unpin ${st.pinned}: the ladder moves by itself again.` },
  { action: "pause", label: "Pause", enabled: (st) => !st.paused,
    says: () => "Pause the ladder: no automatic graceful steps (crash restarts and " +
      "emergencies still act) until you resume." },
  { action: "resume", label: "Resume", enabled: (st) => st.paused,
    says: () => "Resume the ladder: automatic steps again." },
  { action: "restart", label: "Restart", enabled: () => true,
    says: (st) => `Restart the engine in ${st.mode}: requests in flight are drained, the ` +
      "engine stops and starts again in the same mode." },
  // Issue 31: advise mode records what each decision would have done and does nothing.
  { action: "advise", label: "Advise only", enabled: (st) => st.supervision !== "advise",
    says: () => "Advise only: the supervisor keeps deciding, recording and alerting, but " +
      "carries nothing out (no kill, restart, step or shed) until you switch back to act." },
  { action: "act", label: "Act", enabled: (st) => st.supervision === "advise",
    says: () => "Act: decisions are carried out again from the next tick (a crashed or " +
      "hung engine is restarted then)." },
];

// Issue 33: the mode the Pin menu offers until the operator picks one. It used to offer
// the first rung, the fastest, which at 3 a.m. is usually the one that just crashed. Now:
// the current rung while its engine serves (pinning then means "stay as you are"), else
// the nearest safer rung that is not barred (the current one crashed or is not serving
// yet), at the bottom the safest rung itself; never a barred rung while another exists.
function safePin(st) {
  const free = (r) => r.barred_until_seconds === null || r.barred_until_seconds === undefined;
  const here = st.ladder[st.rung];
  if (st.engine_state === "ready" && free(here)) return here.mode;
  const safer = st.ladder.slice(st.rung + 1).find(free);
  if (safer) return safer.mode;
  if (free(here)) return here.mode;
  return (st.ladder.slice(0, st.rung).reverse().find(free) || here).mode;
}

function pinLabel(st, r) {
  const notes = [r.rung === st.rung ? `current, engine ${st.engine_state}` : null,
    r.barred_until_seconds != null ? "barred: failed recently" : null].filter(Boolean);
  return notes.length ? `${r.mode} (${notes.join("; ")})` : r.mode;
}

function leverToken() {
  let token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    token = (window.prompt("Admin token (actions need it; kept for this tab only):") || "")
      .trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
  }
  return token || null;
}

async function pull(lever) {
  const st = levers.status;
  const mode = lever.mode ? $("#lever-mode").value : null;
  if (!window.confirm(lever.says(st, mode))) return;
  const token = leverToken();
  if (!token) return note("not done: no admin token given", true);
  const res = await fetch(`api/actions/${lever.action}`, {
    method: "POST", cache: "no-store",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(mode ? { mode } : {}),
  });
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) sessionStorage.removeItem(TOKEN_KEY);      // ask again next time
  if (!res.ok) {
    return note(`${lever.label}: not done: ${body.error ? body.error.message : res.status}`,
      true);
  }
  levers.last = body;
  if (lever.mode) delete $("#lever-mode").dataset.chosen;    // the next default is safePin
  note(`${lever.label}: done; mode ${body.mode}` +
    (body.requested ? `, stepping to ${body.requested}` : "") +
    (body.pinned ? `, pinned to ${body.pinned}` : "") + (body.paused ? ", paused" : "") +
    (body.supervision === "advise" ? ", advise only" : ""));
}

function note(text, error = false) {
  const out = $("#lever-note");
  out.textContent = text;
  out.className = error ? "lever-note error" : "lever-note";
}

// Called by app.js after each status poll: enable what makes sense now.
function renderLevers(st) {
  levers.status = st;
  const box = $("#levers");
  if (!box.dataset.built) {
    box.dataset.built = "1";
    box.append(...LEVERS.map((lever) => {
      const button = el("button", { type: "button", id: `lever-${lever.action}`,
        onclick: () => pull(lever).catch((err) => note(`${lever.label}: ${err.message}`, true)) },
      lever.label);
      return lever.mode ? el("span", { class: "lever-pin" }, button,
        el("select", { id: "lever-mode", "aria-label": "mode to pin",
          onchange: (e) => { e.target.dataset.chosen = e.target.value; } })) : button;
    }), el("span", { id: "lever-note", class: "lever-note" }));
  }
  const select = $("#lever-mode");
  const labels = st.ladder.map((r) => pinLabel(st, r));
  if ([...select.options].map((o) => o.textContent).join("\n") !== labels.join("\n")) {
    select.replaceChildren(...st.ladder.map((r, i) =>
      el("option", { value: r.mode }, labels[i])));
  }
  const chosen = select.dataset.chosen;       // the operator's pick stands until used
  select.value = chosen && st.ladder.some((r) => r.mode === chosen) ? chosen : safePin(st);
  for (const lever of LEVERS) $(`#lever-${lever.action}`).disabled = !lever.enabled(st);
}
