"""Unclean stops and host resets: what the previous life of the service left behind.

At start-up, the previous ``service_runs`` row of this fleet on this host without the
clean-stop marker (``stopped_at``) means that life was killed (SIGKILL, OOM killer, a
crash of the supervisor itself): incident ``unclean_stop``, warning. When its boot id
differs from the current one the host itself went down in between: incident
``host_reset``, critical when an engine run was still open (the host went down with the
engine running; on a GB10 that is how a unified-memory exhaustion ends), warning
otherwise. One incident, the more specific kind.

After a host reset with the engine running, the policy's
``storage.after_host_reset`` picks the first rung (``decide/startup.py``).
The incident and the transition carry a key derived from the previous life, so a start
that fails and is retried does not report it twice.

``assess_previous_life`` is pure; ``read_boot_id`` and ``check_previous_life`` do the
reading.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.decide.lifecycle import rung_after_unclean_start
from agent_supervisor.decide.startup import AfterHostReset, rung_of, start_rung_after_reset
from agent_supervisor.record.records import AddIncident
from agent_supervisor.record.service_runs import last_engine_run, previous_service_run
from agent_supervisor.record.store import Store

__all__ = [
    "BOOT_ID_PATH",
    "PreviousLife",
    "assess_previous_life",
    "check_previous_life",
    "read_boot_id",
]

#: Random per boot, set by the kernel: a different value means the host rebooted.
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


class _ServiceRun(Protocol):
    service_run_id: str
    pid: int
    boot_id: str | None
    started_at: datetime
    heartbeat_at: datetime | None
    stopped_at: datetime | None
    policy_path: str | None


class _EngineRun(Protocol):
    run_id: str
    mode: str
    rung: int
    ended_at: datetime | None
    ready_at: datetime | None


@dataclass(frozen=True)
class PreviousLife:
    """The verdict on the previous life.

    ``kind``: None (clean, or a first start), ``unclean_stop`` or ``host_reset``.
    ``start_rung``: the rung to start on, or None for the policy's initial rung.
    ``record``: the incident (and transition) to write, or None.
    """

    kind: str | None
    start_rung: int | None
    record: AddIncident | None
    explanation: str


def read_boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """This boot's id (a uuid string), or None where the file cannot be read."""
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _rung_of(run: _EngineRun, modes: Sequence[str]) -> int:
    return rung_of(run.mode, run.rung, modes)


def _evidence(previous: _ServiceRun, boot_id: str | None, last_run: _EngineRun | None,
              engine_running: bool) -> dict[str, Any]:
    last_seen = previous.heartbeat_at or previous.started_at
    return {
        "service_run_id": previous.service_run_id, "pid": previous.pid,
        "started_at": previous.started_at.isoformat(), "last_seen_at": last_seen.isoformat(),
        "previous_boot_id": previous.boot_id, "boot_id": boot_id,
        "policy_path": previous.policy_path, "engine_run_open": engine_running,
        "engine_run_id": last_run.run_id if last_run is not None else None,
        "engine_mode": last_run.mode if last_run is not None else None,
    }


def _below_a_start(running: _EngineRun | None, modes: Sequence[str], start_rung: int | None,
                   now: datetime) -> tuple[int, Transition] | None:
    """Issue 12: the previous life ended while the engine was still starting (it never
    became ready): the first start goes below the rung that was starting."""
    if running is None or running.ready_at is not None:
        return None
    starting = _rung_of(running, modes)
    below = rung_after_unclean_start(len(modes), start_rung, starting, False)
    if below is None or below == start_rung:
        return None
    return below, Transition(
        at=now, from_mode=running.mode, to_mode=modes[below], from_rung=starting,
        to_rung=below, actor="startup", reason="the last life ended while the engine was "
        "starting: the first start goes below the rung that was starting")


def assess_previous_life(
    *, previous: _ServiceRun | None, boot_id: str | None, last_run: _EngineRun | None,
    modes: Sequence[str], after_host_reset: str | AfterHostReset, now: datetime,
) -> PreviousLife:
    """Decide what the previous life means for this one. Pure.

    ``previous``: the newest earlier service run of this fleet and host (or None);
    ``boot_id``: this boot's (None: unknown, so no host reset can be told);
    ``last_run``: the newest engine run of this fleet and host; ``modes``: the policy's
    mode names, fastest first; ``now``: UTC. Raises ValueError for an unknown setting.
    """
    setting = AfterHostReset(after_host_reset)
    if previous is None or previous.stopped_at is not None:
        return PreviousLife(None, None, None, "the previous life stopped cleanly"
                            if previous is not None else "first start on this host")
    last_seen = previous.heartbeat_at or previous.started_at
    running = last_run if last_run is not None and last_run.ended_at is None else None
    evidence = _evidence(previous, boot_id, last_run, running is not None)
    reset = boot_id is not None and previous.boot_id is not None and boot_id != previous.boot_id
    start_rung = transition = None
    if not reset:
        kind, severity = "unclean_stop", "warning"
        what = "the supervisor was stopped without its clean-stop marker (killed or crashed)"
    elif running is None:
        kind, severity = "host_reset", "warning"
        what = "the host went down while the supervisor ran (no engine running)"
    else:
        kind, severity = "host_reset", "critical"
        what = f"the host went down with the engine running (mode {running.mode})"
        evidence["after_host_reset"] = str(setting)
        start_rung = start_rung_after_reset(running.mode, running.rung, modes, setting)
        if start_rung is not None and start_rung != _rung_of(running, modes):
            transition = Transition(
                at=now, from_mode=running.mode, to_mode=modes[start_rung],
                from_rung=_rung_of(running, modes), to_rung=start_rung, actor="startup",
                reason=f"host reset with the engine running (storage.after_host_reset: "
                       f"{setting})")
    below = _below_a_start(running, modes, start_rung, now)
    if below is not None and running is not None:
        start_rung, transition = below
        what += f", while mode {running.mode} was still starting"
        evidence["engine_was_starting"] = True
        severity = "critical"
    explanation = f"{what}: pid {previous.pid} last seen {last_seen:%Y-%m-%d %H:%M:%S} UTC"
    if start_rung is not None:
        how = "below the rung that was starting" if evidence.get("engine_was_starting") \
            else str(setting)
        explanation += f"; starting in {modes[start_rung]} ({how})"
    incident = Incident(
        kind=kind, severity=severity, started_at=last_seen, ended_at=now,
        action="step_down" if transition is not None else "none", explanation=explanation,
        mode=last_run.mode if last_run is not None else None,
        rung=last_run.rung if last_run is not None else None,
        run_id=running.run_id if running is not None else None,
        findings=[{"guard": "startup", "kind": kind, "severity": severity, "summary": what,
                   "evidence": evidence, "run_id": None, "response": "record"}])
    key = str(uuid.uuid5(uuid.NAMESPACE_URL, f"supervisor:{kind}:{previous.service_run_id}"))
    return PreviousLife(kind, start_rung, AddIncident(key=key, incident=incident,
                                                      transition=transition), explanation)


def check_previous_life(
    *, store: Store, boot_id: str | None, modes: Sequence[str],
    after_host_reset: str | AfterHostReset, now: datetime,
    exclude_service_run_id: str | None = None,
) -> PreviousLife:
    """Read the previous service run and the last engine run of this fleet and host
    and assess them. Call it before this life's own start is recorded (or pass its id
    as ``exclude_service_run_id``) and before leftover engine runs are closed.
    Writes nothing: submit ``verdict.record`` to the writer. Raises StoreError."""
    previous = previous_service_run(store=store,
                                    exclude_service_run_id=exclude_service_run_id)
    last = last_engine_run(store=store)
    return assess_previous_life(previous=previous, boot_id=boot_id, last_run=last,
                                modes=modes, after_host_reset=after_host_reset, now=now)
