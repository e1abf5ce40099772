"""Replay: run ``decide()`` over a recorded trace exactly as the live service did. Pure.

The same window, the same ladder arithmetic and the same ``decide`` as live; decisions
are taken where the live service took them (after each sample, unless the trace says it
skipped one) and operator levers are applied where they were pulled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision, as_held
from agent_supervisor.decide.ladder import LadderState, advance, apply_operator, request
from agent_supervisor.policy.model import Policy
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.baselines import Baselines, EngineUpdate
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["ReplayStep", "Scenario", "load_scenario", "replay", "replay_scenario"]


@dataclass(frozen=True)
class ReplayStep:
    """One decision of the replay, next to the one recorded live (if the trace has it)."""

    t_s: float
    decision: Decision
    recorded: dict[str, Any] | None

    @property
    def matches(self) -> bool | None:
        """Same action, rung and explanation as live; None when nothing was recorded."""
        if self.recorded is None:
            return None
        d = self.decision
        return (self.recorded.get("action"), self.recorded.get("rung"),
                self.recorded.get("explanation")) == (str(d.action), d.rung, d.explanation)


def _baselines(header: dict[str, Any]) -> Baselines:
    return {m: [tuple(b) for b in v] for m, v in (header.get("baselines") or {}).items()}


def replay(records: Iterable[dict[str, Any]], policy: Policy,
           baselines: Baselines | None = None,
           reclassify: Callable[[Sample], Sample] | None = None) -> list[ReplayStep]:
    """Decisions for every sample of ``records`` (see ``agent_supervisor.record.trace``).

    ``reclassify`` (``agent_supervisor.sense.reclassify.reclassify``) re-judges the raw log and
    kernel lines each sample carries with today's classifiers."""
    recs = list(records)
    header = next((r for r in recs if r["type"] == "header"), {})
    base = baselines if baselines is not None else _baselines(header)
    acceptance = {m: tuple(v) for m, v in (header.get("acceptance") or {}).items()}
    live = any(r["type"] in ("decision", "skip") for r in recs)
    window = Window(policy.sampling.window_seconds)
    ladder: LadderState | None = None
    steps: list[ReplayStep] = []
    pending: Sample | None = None
    update: EngineUpdate | None = None

    def take(sample: Sample, recorded: dict[str, Any] | None) -> None:
        nonlocal ladder
        assert ladder is not None
        decision = decide(window, ladder, policy, sample.t_s, base, acceptance=acceptance,
                          update=update)
        steps.append(ReplayStep(sample.t_s, decision, recorded))
        advised = recorded is not None and recorded.get("advisory") is True  # advise mode
        ladder = advance(ladder, as_held(decision) if advised else decision, policy,
                         sample.t_s)

    for rec in recs:
        kind = rec["type"]
        if kind == "sample":
            fields = {k: v for k, v in rec.items() if k != "type"}
            sample = Sample.from_dict(fields)
            if reclassify is not None:
                sample = reclassify(sample)
            if ladder is None:
                ladder = LadderState(rung=header.get("rung", policy.initial_rung),
                                     since_s=header.get("t0_s", sample.t_s),
                                     last_trouble_s=header.get("last_trouble_s"))
            window.append(sample)
            if live:
                pending = sample
            else:
                take(sample, None)
        elif kind == "decision" and pending is not None:
            take(pending, rec)
            pending = None
        elif kind == "skip":
            pending = None
        elif kind == "engine_update":
            update = EngineUpdate.from_dict(rec)
        elif kind == "operator" and ladder is not None:
            extra = {k: v for k, v in rec.items() if k not in ("type", "t_s", "action", "rung")}
            ladder = apply_operator(ladder, str(rec.get("action")), rec.get("rung"), **extra)
    return steps


# -- closed-loop scenarios ----------------------------------------------------------------
#
# A scenario says how the world answers the supervisor: what a start does (fail with this
# log line, become ready after N s), what SIGTERM and SIGKILL do (ignored; survivors for
# 30 s, stuck in state D), when memory comes back after the engine is gone, and events
# (a kernel line, an exit) at given times. The real decide() and the real ladder run
# against it, tick by tick; the world reacts to each action. Pure: the clock is the
# scenario's own. ``classify`` (agent_supervisor.sense.reclassify.reclassify) turns the raw
# lines the world prints into tags, as the sensors do live.

GiB = 2**30
#: A scenario's length and memory sizes are bounded like a policy's (policy/base.py's
#: MAX_SECONDS and MAX_BYTES; decide/ does not import policy.base): 7 days, 1 PiB.
MAX_SECONDS = 7 * 86_400
MAX_BYTES = 2**50
#: A scenario's time (an outcome's delay, an event's time, when memory comes back):
#: [0, 1e9] s; 1e9 (31 years) reads as "never" within any scenario.
NEVER_SECONDS = 1e9
Moment = Annotated[float, Field(ge=0, le=NEVER_SECONDS)]
#: At most this many ticks per scenario (``duration_seconds / tick_seconds``): a day at
#: 1 s. ``tick_seconds: 0`` or ``-1`` looped forever, and so does a tick too small to
#: move the clock after rounding (issue 34). A tick costs up to ~7 ms with a full
#: window (measured: 10,000 ticks at 0.01 s in 65 s on a shared 2-core box), so the
#: longest scenario allowed runs minutes, not hours.
MAX_TICKS = 100_000


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StartOutcome(_Spec):
    """One start attempt: ready after ``ready_after_seconds``, or fail with ``fail_with``
    (log lines) after ``after_seconds`` (exit status ``exit_code``), or ``hang`` (no
    progress, never ready)."""

    ready_after_seconds: Moment = 30.0
    fail_with: list[str] = []
    after_seconds: Moment = 5.0
    exit_code: Annotated[int, Field(ge=-255, le=255)] = 1
    hang: bool = False


class OnSigkill(_Spec):
    """Processes of the group that outlive SIGKILL for ``survivors_seconds`` (``stuck``:
    in state D), like an EngineCore stuck in the GPU driver."""

    survivors_seconds: Moment = 0.0
    stuck: bool = True


class WorldEvent(_Spec):
    """At ``at_s``: kernel lines appear, the engine exits on its own (``exit``), NVML says
    the GPU is lost, or the operator moves the ladder to ``operator_step_to``."""

    at_s: Moment
    kernel_lines: list[str] = []
    exit: bool = False
    gpu_lost: bool = False
    operator_step_to: Annotated[int, Field(ge=0, le=1000)] | None = None


class Scenario(_Spec):
    """How the world answers; times in seconds from the scenario's start."""

    duration_seconds: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = 600.0
    tick_seconds: Annotated[float, Field(ge=0.001, le=3600)] = 1.0
    mem_total_bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)] = 128 * GiB
    mem_available_idle_bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)] = 110 * GiB
    engine_memory_bytes: Annotated[int, Field(ge=0, le=MAX_BYTES)] = 60 * GiB
    on_start: Annotated[list[StartOutcome], Field(min_length=1)] = [StartOutcome()]
    """One entry per attempt; the last one repeats."""
    on_sigterm: Literal["exit", "ignore"] = "exit"
    on_sigkill: OnSigkill = OnSigkill()
    memory_returns_after_seconds: Moment = 0.0
    """After the engine's group is gone, how long its memory stays held (a huge value:
    it never comes back)."""
    events: list[WorldEvent] = []

    @model_validator(mode="after")
    def _ticks(self) -> Scenario:
        if self.duration_seconds / self.tick_seconds > MAX_TICKS:
            raise ValueError(f"duration_seconds / tick_seconds is more than {MAX_TICKS:,} "
                             "ticks: lengthen tick_seconds or shorten duration_seconds")
        return self


def load_scenario(data: dict[str, Any], *, source: str) -> Scenario:
    """A validated scenario; raises ValueError naming ``source``, the field and the reason."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise ValueError(f"{source}: {where}: {err['msg']}") from None


@dataclass
class _World:
    spec: Scenario
    state: EngineState = EngineState.STOPPED
    since_s: float = 0.0
    run: int = 0
    attempts: int = 0
    rung: int = 0
    was_ready: bool = False
    crash_reason: str | None = None
    exit_code: int | None = None
    outcome: StartOutcome | None = None
    before_launch: int | None = None
    sigterm_ignored: bool = False
    survivors_until: float = -1.0
    memory_back_at: float = 0.0
    pending_lines: list[str] = field(default_factory=list)
    lines_total: int = 0
    stop_at: float | None = None

    @property
    def run_id(self) -> str | None:
        return f"r{self.run}" if self.run else None

    def holding_memory(self, t: float) -> bool:
        return self.state in (EngineState.STARTING, EngineState.READY,
                              EngineState.STOPPING) or t < self.memory_back_at \
            or t < self.survivors_until

    def advance_to(self, t: float) -> None:
        """What happens on its own up to ``t``: starts finishing, stops finishing."""
        o = self.outcome
        if self.state is EngineState.STARTING and o is not None and not o.hang:
            if o.fail_with and t - self.since_s >= o.after_seconds:
                self.pending_lines += o.fail_with
                self._end(t, EngineState.CRASHED, "start_failed", o.exit_code)
            elif not o.fail_with and t - self.since_s >= o.ready_after_seconds:
                self.state, self.since_s, self.was_ready = EngineState.READY, t, True
        if self.state is EngineState.STOPPING and self.stop_at is not None and t >= self.stop_at:
            self.sigterm_ignored = self.spec.on_sigterm == "ignore"
            self._gone(t, sigkill=self.sigterm_ignored)

    def _end(self, t: float, state: EngineState, reason: str | None, code: int | None) -> None:
        self.state, self.since_s, self.crash_reason, self.exit_code = state, t, reason, code

    def _gone(self, t: float, *, sigkill: bool) -> None:
        self.state, self.since_s, self.stop_at = EngineState.STOPPED, t, None
        if sigkill and self.spec.on_sigkill.survivors_seconds > 0:
            self.survivors_until = t + self.spec.on_sigkill.survivors_seconds
        gone = max(t, self.survivors_until)
        self.memory_back_at = gone + self.spec.memory_returns_after_seconds

    def start(self, t: float, rung: int) -> None:
        self.run += 1
        self.attempts += 1
        ons = self.spec.on_start
        self.outcome = ons[min(self.attempts, len(ons)) - 1]
        self.before_launch = self.mem_available(t)
        self.state, self.since_s, self.rung, self.was_ready = EngineState.STARTING, t, rung, False
        self.crash_reason = self.exit_code = None
        self.sigterm_ignored = False

    def clear(self, t: float, decision: Decision, policy: Policy) -> None:
        """Stop what runs the way the executor would: a drain for a graceful step (SIGTERM,
        then SIGKILL after the grace), SIGKILL of the group otherwise."""
        if self.state not in (EngineState.STARTING, EngineState.READY, EngineState.CRASHED):
            return
        worst = decision.findings[0] if decision.findings else None
        graceful = decision.action in (Action.STEP_DOWN, Action.STEP_UP, Action.RELOAD,
                                       Action.PLANNED_RESTART) and \
            self.state is EngineState.READY and (worst is None or worst.severity.rank < 2)
        if graceful:
            eng = policy.engine
            self.state, self.since_s = EngineState.STOPPING, t
            self.stop_at = t + (eng.shutdown_timeout_seconds + eng.stop_grace_seconds
                                if self.spec.on_sigterm == "ignore" else 1.0)
            return
        self._gone(t, sigkill=True)

    def mem_available(self, t: float) -> int:
        held = self.spec.engine_memory_bytes if self.holding_memory(t) else 0
        return max(0, self.spec.mem_available_idle_bytes - held)

    def sample(self, t: float, events: list[WorldEvent]) -> Sample:
        lines, self.pending_lines = self.pending_lines, []
        if self.state is EngineState.STARTING and not (self.outcome and self.outcome.hang):
            lines = [*lines, f"INFO loading ({t - self.since_s:.0f} s)"]
        self.lines_total += len(lines)
        kernel = [ln for e in events for ln in e.kernel_lines]
        survivors = t < self.survivors_until
        return Sample(
            t_s=t, engine_state=self.state, engine_state_since_s=self.since_s,
            engine_run_id=self.run_id, engine_rung=self.rung, engine_pid=1000 + self.run,
            engine_was_ready=self.was_ready if self.run else None,
            engine_crash_reason=self.crash_reason, engine_exit_code=self.exit_code,
            engine_sigterm_ignored=self.sigterm_ignored if self.run else None,
            mem_available_before_launch_bytes=self.before_launch,
            mem_total_bytes=self.spec.mem_total_bytes,
            mem_available_bytes=self.mem_available(t),
            engine_leftover_pids=(2000 + self.run,) if survivors else (),
            engine_leftover_stuck_pids=(2000 + self.run,) if survivors and
            self.spec.on_sigkill.stuck else (),
            engine_leftover_roles=("VLLM::EngineCore",) if survivors else (),
            engine_log_lines=tuple(lines), engine_log_lines_total=self.lines_total,
            engine_progress_s=t if lines and self.state is EngineState.STARTING else None,
            kernel_lines=tuple(kernel), kernel_events=() if not kernel else None,
            gpu_lost=True if any(e.gpu_lost for e in events) else None,
            requests_running=0.0 if self.state is EngineState.READY else None,
            requests_waiting=0.0 if self.state is EngineState.READY else None)


def replay_scenario(spec: Scenario, policy: Policy,
                    classify: Callable[[Sample], Sample] | None = None) -> list[ReplayStep]:
    """Run the real decide() and ladder against the world ``spec`` describes, one decision
    per tick, until ``duration_seconds`` or a give-up. Returns every decision."""
    world = _World(spec)
    window = Window(policy.sampling.window_seconds)
    ladder = LadderState.initial(policy)
    world.rung = ladder.rung
    steps: list[ReplayStep] = []
    t = 0.0
    while t <= spec.duration_seconds + 1e-9:
        world.advance_to(t)
        due = [e for e in spec.events if t - spec.tick_seconds < e.at_s <= t]
        if any(e.exit for e in due) and world.state is EngineState.READY:
            world._end(t, EngineState.CRASHED, "exited", 0)
        for e in due:
            if e.operator_step_to is not None:
                ladder = request(ladder, e.operator_step_to)
        sample = world.sample(t, due)
        window.append(classify(sample) if classify is not None else sample)
        decision = decide(window, ladder, policy, t)
        steps.append(ReplayStep(t, decision, None))
        ladder = advance(ladder, decision, policy, t)
        if decision.action is Action.START:
            world.start(t, decision.rung)
        elif decision.action not in (Action.HOLD, Action.SHED):
            world.clear(t, decision, policy)
            if decision.action is Action.GIVE_UP:
                break
        t = round(t + spec.tick_seconds, 6)
    return steps
