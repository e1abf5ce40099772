"""``supervisor status | pin | unpin | step | pause | resume | restart | act | advise |
logs``: the operator's levers, against the running service's admin API (real HTTP, httpx).

Where the service is: ``--url``, else ``$SUPERVISOR_ADMIN_URL``, else the admin host and
port of ``--policy``, else http://127.0.0.1:8081 (AdminSpec's defaults). The bearer token
(actions only; reads need it when the API listens beyond loopback): ``--token-file`` (a
token, or an environment file with ``SUPERVISOR_ADMIN_TOKEN=...``),
else ``$SUPERVISOR_ADMIN_TOKEN`` (or the policy's ``admin.token_env``), else the policy's
``admin.token_file``. A token is never printed.

Exit status (also in docs/commands.md): 0 done; 1 the service refused the lever (409: e.g. no
rung below the safest); 2 bad usage (an unknown mode: 422); 3 ``status`` only: the box
needs a reboot (issue 12: the ladder holds; a ``REBOOT REQUIRED`` line comes first);
4 not authorised (no token, a wrong one, or none configured on the service); 5 the
service is unreachable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["EXIT_REBOOT_REQUIRED", "EXIT_REFUSED", "EXIT_UNAUTHORIZED", "EXIT_UNREACHABLE",
           "add_parsers", "run"]

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAUTHORIZED, EXIT_UNREACHABLE = 0, 1, 2, 4, 5
#: ``supervisor status`` when the box needs a reboot (scripts and monitoring can test it).
EXIT_REBOOT_REQUIRED = 3
DEFAULT_URL = "http://127.0.0.1:8081"
TOKEN_ENV = "SUPERVISOR_ADMIN_TOKEN"
URL_ENV = "SUPERVISOR_ADMIN_URL"
COMMANDS = ("status", "pin", "unpin", "step", "pause", "resume", "restart", "act", "advise",
            "logs")


class LeverError(Exception):
    """A request that did not do what was asked; ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help=f"the admin API (default: ${URL_ENV}, else the admin "
                   f"host:port of --policy, else {DEFAULT_URL})")
    p.add_argument("--policy", type=Path, help="read the admin host, port and token "
                   "settings from this policy (default: none)")
    p.add_argument("--token-file", type=Path, help=f"file holding the bearer token "
                   f"(default: ${TOKEN_ENV}, else the policy's admin.token_file)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for each answer (default: 10)")


def _lever(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A lever's options: ``--json`` and the common ones."""
    p.add_argument("--json", action="store_true", help="one JSON object (the service's "
                   "answer: action, mode, pinned, requested, paused) instead of a line")
    _common(p)
    return p


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the lever subcommands to the ``supervisor`` parser."""
    st = sub.add_parser("status", help="where the ladder stands, why, calm, probation, "
                        "memory and requests in flight (from the running service)")
    st.add_argument("--json", action="store_true", help="one JSON object instead of text "
                    "(default: text)")
    _common(st)
    pin = sub.add_parser("pin", help="pin the ladder to MODE (no automatic steps until unpin; "
                         "crash restarts and emergencies still act)")
    pin.add_argument("mode", help="a mode name of the running policy")
    _lever(pin)
    _lever(sub.add_parser("unpin", help="let the ladder move by itself again"))
    step = sub.add_parser("step", help="move one rung, once: down (safer) or up (faster)")
    step.add_argument("direction", choices=["up", "down"], help="up: a faster mode; down: "
                      "a safer one")
    _lever(step)
    _lever(sub.add_parser("pause", help="stop automatic graceful steps (crash restarts and "
                          "emergencies still act)"))
    _lever(sub.add_parser("resume", help="undo pause"))
    _lever(sub.add_parser("restart", help="drain and restart the engine in the current mode"))
    _lever(sub.add_parser("advise", help="advisory mode: decide, record and alert, carry "
                          "nothing out (no kill, restart, step or shed) until `act`"))
    _lever(sub.add_parser("act", help="carry decisions out again (from the next tick: a "
                          "crashed or hung engine is restarted then)"))
    logs = sub.add_parser("logs", help="the engine's log (the running run's file)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing what the "
                      "engine writes, across restarts, until Ctrl-C (default: print and exit)")
    logs.add_argument("-n", "--lines", type=int, default=50,
                      help="how many of the last lines to print first (default: 50)")
    logs.add_argument("--interval", type=float, default=0.5,
                      help="seconds between reads when following (default: 0.5)")
    _common(logs)


@dataclass
class Target:
    url: str
    token: str | None


def target(args: argparse.Namespace) -> Target:
    """The service's URL and the token, from the options, the environment, the policy."""
    policy = None
    if args.policy is not None:
        from agent_supervisor.policy import load_policy_file

        policy = load_policy_file(args.policy)
    url = args.url or os.environ.get(URL_ENV)
    if url is None and policy is not None:
        host = policy.admin.host
        host = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
        url = f"http://{host}:{policy.admin.port}"
    token = None
    env_name = policy.admin.token_env if policy else TOKEN_ENV
    if args.token_file is not None:
        try:
            token = token_of(args.token_file.read_text(), env_name)
        except OSError as exc:
            raise LeverError(f"--token-file {args.token_file}: {exc.strerror}",
                             EXIT_USAGE) from exc
    if token is None:
        token = os.environ.get(env_name) or None
    if token is None and policy is not None and policy.admin.token_file:
        path = policy.resolve(policy.admin.token_file)
        try:
            token = path.read_text().strip() or None
        except OSError as exc:
            raise LeverError(f"{args.policy}: admin.token_file {path}: {exc.strerror}",
                             EXIT_UNAUTHORIZED) from exc
    return Target(url=(url or DEFAULT_URL).rstrip("/"), token=token)


def token_of(text: str, env_name: str = TOKEN_ENV) -> str | None:
    """The token in a token file: the whole text stripped, or, in an environment file
    (``supervisor install`` writes ``/etc/agent-supervisor/<fleet>.env``), the value of
    ``env_name=``."""
    for line in text.splitlines():
        if line.startswith(f"{env_name}="):
            return line.split("=", 1)[1].strip() or None
    return text.strip() or None


def _request(client: httpx.Client, t: Target, method: str, path: str,
             **kw: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {t.token}"} if t.token else {}
    try:
        resp = client.request(method, t.url + path, headers=headers, **kw)
    except httpx.HTTPError as exc:
        raise LeverError(f"the service at {t.url} is unreachable: {exc.__class__.__name__}: "
                         f"{exc}", EXIT_UNREACHABLE) from exc
    if resp.status_code < 300:
        return resp.json()
    try:
        message = resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = resp.text[:200]
    if resp.status_code in (401, 403) or (resp.status_code == 503 and "token" in message):
        hint = "" if t.token else f" (no token given: --token-file or ${TOKEN_ENV})"
        raise LeverError(f"not authorised: {message}{hint}", EXIT_UNAUTHORIZED)
    code = EXIT_USAGE if resp.status_code in (404, 422) else EXIT_REFUSED
    raise LeverError(f"{method} {path}: HTTP {resp.status_code}: {message}", code)


def run(args: argparse.Namespace) -> int:
    """Carry out one lever subcommand. Returns the exit status."""
    try:
        t = target(args)
        with httpx.Client(timeout=args.timeout) as client:
            match args.command:
                case "status":
                    return _status(client, t, as_json=args.json)
                case "logs":
                    return _logs(client, t, args)
                case _:
                    return _act(client, t, args)
    except LeverError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code


def _act(client: httpx.Client, t: Target, args: argparse.Namespace) -> int:
    action = f"step-{args.direction}" if args.command == "step" else args.command
    body = {"mode": args.mode} if args.command == "pin" else None
    out = _request(client, t, "POST", f"/api/actions/{action}", json=body)
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    flags = [f"pinned to {out['pinned']}" if out.get("pinned") else None,
             f"stepping to {out['requested']}" if out.get("requested") else None,
             "paused" if out.get("paused") else None,
             f"supervision {out['supervision']}" if out.get("supervision") == "advise"
             or action in ("act", "advise") else None]
    print(f"{action}: done; mode {out['mode']}"
          + "".join(f", {f}" for f in flags if f))
    return EXIT_OK


def _latest(tel: dict[str, Any], field: str) -> float | None:
    return next((v for v in reversed(tel.get(field) or []) if v is not None), None)


def status_view(client: httpx.Client, t: Target) -> dict[str, Any]:
    """/api/status plus the newest memory and load values of /api/telemetry."""
    st = _request(client, t, "GET", "/api/status")
    tel = _request(client, t, "GET", "/api/telemetry", params={"seconds": 60})
    mem, floor = _latest(tel, "mem_available_bytes"), tel.get("memory_floor_bytes")
    st["memory"] = {"mem_available_bytes": mem, "memory_floor_bytes": floor,
                    "headroom_bytes": None if mem is None or floor is None else mem - floor}
    st["in_flight"] = {"engine_requests_running": _latest(tel, "requests_running"),
                       "engine_requests_waiting": _latest(tel, "requests_waiting"),
                       "gateway": st.get("gateway")}
    return st


def _gib(v: float | None) -> str:
    return "unknown" if v is None else f"{v / 2**30:.1f} GiB"


def _n(v: float | None) -> str:
    return "unknown" if v is None else f"{v:g}"


def _cap(v: int | None) -> str:
    """The gateway's concurrency cap as said (None: gateway.max_concurrency unset)."""
    return "no concurrency cap" if v is None else f"max {v}"


def status_text(st: dict[str, Any]) -> str:
    """The text form of ``status_view`` (unknown values said as such, never 0)."""
    d = st.get("last_decision") or {}
    ago = st.get("last_decision_seconds_ago")
    calm_of = st.get("calm_needed_seconds")
    probation = st.get("probation_seconds_left")
    mem, inf = st["memory"], st["in_flight"]
    gw = inf.get("gateway")
    reboot = st.get("reboot_required")
    lines = [f"REBOOT REQUIRED: {reboot['kind']} - recommended action "
             f"{reboot['recommended_action']}: {reboot['explanation']}"] if reboot else []
    if st.get("supervision") == "advise":     # issue 31
        lines.append("ADVISE MODE: decisions are recorded as what they would have done, "
                     "not carried out (`supervisor act` to act)")
    if adopt := st.get("adopt"):              # issue 31: engine.adopt
        lines.append(f"ADOPTED ENGINE ({adopt['selector']}): " + (
            f"waiting for the engine to adopt: {adopt['waiting']}" if adopt.get("waiting")
            else f"{adopt['state']}, log: {adopt.get('log') or 'none'}"))
    lines += [
        f"fleet {st['fleet']}: mode {st['mode']} (rung {st['rung']} of "
        f"{len(st['ladder']) - 1}), engine {st['engine_state']} for "
        f"{st['engine_seconds_in_state']:g} s (run {st['engine_run_id'] or '-'}, "
        f"pid {st['engine_pid'] or '-'}"
        + (f", container {st['engine_container']}" if st.get("engine_container") else "")
        + f"), up {st['uptime_seconds']:g} s",
        f"why: {d.get('explanation', 'no decision yet')}"
        + (f" ({ago:g} s ago)" if ago is not None else ""),
        f"calm {st['calm_seconds']:g} s" + (f" of {calm_of:g} s before a step up"
                                            if calm_of else "")
        + f"; probation: {f'{probation:g} s left' if probation else 'none'}"
        + f"; pinned: {st['pinned'] or 'no'}; paused: {'yes' if st['paused'] else 'no'}"
        + (f"; step to {st['requested']} pending" if st.get("requested") else "")
        + ("; shedding load" if st.get("shed") else ""),
        f"memory: MemAvailable {_gib(mem['mem_available_bytes'])}, floor "
        f"{_gib(mem['memory_floor_bytes'])}, headroom {_gib(mem['headroom_bytes'])}",
        f"in flight: engine {_n(inf['engine_requests_running'])} running, "
        f"{_n(inf['engine_requests_waiting'])} waiting"
        + (f"; gateway {gw['requests_in_flight']} in flight, {gw['requests_queued']} "
           f"queued ({_cap(gw['max_concurrency'])})" if gw else "; no gateway"),
        "ladder:",
    ]
    for r in st["ladder"]:
        barred = (f" (barred {r['barred_until_seconds']:g} s)"
                  if r.get("barred_until_seconds") else "")
        lines.append(f"  {'*' if r['current'] else ' '} {r['rung']} {r['mode']}"
                     f"{' (speculative)' if r['speculative'] else ''}{barred}"
                     f"{': ' + r['description'] if r['description'] else ''}")
    return "\n".join(lines)


def _status(client: httpx.Client, t: Target, *, as_json: bool) -> int:
    st = status_view(client, t)
    print(json.dumps(st, indent=2) if as_json else status_text(st))
    return EXIT_REBOOT_REQUIRED if st.get("reboot_required") else EXIT_OK


def _logs(client: httpx.Client, t: Target, args: argparse.Namespace) -> int:
    out = _request(client, t, "GET", "/api/engine/log", params={"lines": args.lines})
    _write(out["text"])
    if not args.follow:
        return EXIT_OK
    run_id, offset = out["run_id"], out["offset"]
    try:
        while True:
            time.sleep(args.interval)
            out = _request(client, t, "GET", "/api/engine/log", params={"offset": offset})
            if out["run_id"] != run_id:
                run_id = out["run_id"]
                print(f"--- engine run {run_id} (mode {out['mode']}): {out['path']} ---",
                      file=sys.stderr, flush=True)
                out = _request(client, t, "GET", "/api/engine/log", params={"offset": 0})
            _write(out["text"])
            offset = out["offset"]
    except KeyboardInterrupt:
        return EXIT_OK


def _write(text: str) -> None:
    """As read: a line the engine has not finished goes on when the rest comes."""
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
