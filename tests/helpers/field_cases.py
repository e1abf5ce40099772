"""Field cases: replayable situations built from public failure reports.

A case is one YAML file under ``tests/fixtures/field/<kind>/<name>.yaml``::

    source:                 # required: each public report and what was taken from it
      - {url: https://github.com/vllm-project/vllm/issues/40756, took: "..."}
    kind: spec_acceptance_anomaly   # the finding kind (a control: the kind it must NOT raise)
    control: false          # true: a negative control, must stay quiet
    summary: one line
    report_values: [field, ...]     # Sample fields whose values come from the report
    filler: what was invented, and why
    base_policy: gb10-llamacpp.yaml   # optional: another shipped policy as the base
    policy: {}              # deep-merged into the base policy (BASE_POLICY below)
    ladder: {rung: 0}       # LadderState fields at the start
    baselines: {mode: [[concurrency, tokens/s per request]]}
    acceptance: {mode: [position 0, position 1, ...]}   # usual acceptance by position
    update: {run_id: r1, mode: m, version: "0.12.0", previous: {version: "0.10.2",
             acceptance_by_position: [...], tokens_per_second_per_request: 60,
             concurrency: 1, measured_at: "..."}}   # the last good run on another version
    segments:               # consecutive spans of Samples (a READY engine unless fields say)
      - to_s: 120           # end of the span, trace seconds (the first span starts at 0)
                            # (a field in both ``fields`` and ``rates`` drifts from that
                            # value at that rate: a gauge such as MemAvailable creeping)
        dt_s: 1             # cadence (default: the previous span's, else 1)
        fields: {requests_running: 4}          # constants (lists become tuples)
        rates: {generation_tokens_total: 50}   # counters growing per second; a list for a
                                               # per-position counter
        once: {engine_log_tags: [spec_illegal_memory_access]}  # first sample of the span only
    expect:
      action: restart       # the first non-hold action; ``hold``: none over the whole trace
                            # (a control may name the action another guard rightly takes
                            # on the look-alike; it must still never raise its kind)
      finding: kind|null    # a finding of this kind must be among its findings (with
                            # ``action: hold``: present on some tick by ``by_s``)
      by_s: 130             # deadline, trace seconds
      not_before_s: 60      # optional: no action before this
      rung: 2               # optional: the target rung of that action
      allow_before: [shed]  # optional: actions that may come first (the judged action is
                            # the first one not listed; e.g. a shed on a suspected hang)
      start_args: {--enforce-eager: true}   # optional: flags the action's start carries
      explains: "--bogus-flag"               # optional: a text its explanation must hold
      never: [step_down]    # optional: actions that must not come at all over the trace

A control (``control: true``) normally expects no action at all; one that must act in the
end in some other way (memory that comes back slowly: ``action: start``,
``not_before_s: 60``) says so in ``expect``, and the kind must still never be raised.

Raw evidence: ``engine_log_lines`` and ``kernel_lines`` in ``fields``/``once`` are
classified with today's classifiers (``agent_supervisor.sense.reclassify``) into
``engine_log_tags`` and ``kernel_events``, exactly as replay re-judges a recorded trace.

Worker nodes of an engine across boxes (``fields: {nodes: [{name: spark-2, ...}]}``): each
entry holds ``NodeSample`` fields. ``silent_from_s``: from that trace time on the node's
agent no longer answers (its age grows from there, its values stay the last ones);
before it the node answers every sample (age 0.2 s, its clock ``wall_s`` the sample's
time). ``rank_log_lines``: the rank's raw log lines, classified into ``rank_log_tags`` with
today's classifier, as the agent does.

Counters carry over from span to span (a new ``engine_run_id`` in ``fields`` resets them to
0, as an engine restart resets vLLM's counters; ``null`` in ``fields`` makes one unknown,
as when ``/metrics`` stops answering). ``engine_state`` defaults to ready since
t=0; give ``engine_state``/``engine_state_since_s`` in ``fields`` to say otherwise.

``play_case`` runs the real ``decide()`` after every sample and advances the ladder with
the real ``advance()``, exactly as replay does (open loop: the trace does not react to the
actions; the first action is what is judged).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.policy import Policy, load_policy
from agent_supervisor.sense.engine_log import classify_engine_line
from agent_supervisor.sense.reclassify import reclassify
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.baselines import EngineUpdate
from agent_supervisor.telemetry.node_sample import NodeSample
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["FIELD", "FieldCase", "all_cases", "build_samples", "case_samples", "first_action",
           "load_case",
           "play_case"]

ROOT = Path(__file__).resolve().parents[2]
FIELD = ROOT / "tests" / "fixtures" / "field"
#: The base policy of every case: the shipped GB10 example (NVFP4, MTP k=5 -> k=2 ->
#: no speculation -> safe), which is the configuration the public reports are about.
BASE_POLICY = ROOT / "policies" / "gb10-nvfp4-mtp.yaml"
REQUIRED = ("source", "kind", "segments", "expect")


@dataclass(frozen=True)
class FieldCase:
    """One loaded case: its samples built, its policy validated."""

    path: Path
    kind: str
    control: bool
    source: list[dict[str, str]]
    policy: Policy
    ladder: LadderState
    baselines: dict[str, list[tuple[float, float]]]
    samples: list[Sample]
    expect: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    acceptance: dict[str, list[float]] = field(default_factory=dict)
    update: EngineUpdate | None = None
    """``update:``: the last good run of the mode on another engine version (issue 29)."""

    @property
    def name(self) -> str:
        """``<kind dir>/<file stem>``, for test ids."""
        return f"{self.path.parent.name}/{self.path.stem}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _policy(over: dict[str, Any], source: str, base_file: Path = BASE_POLICY) -> Policy:
    base = yaml.safe_load(base_file.read_text())
    return load_policy(yaml.safe_dump(_merge(base, over)), source=source,
                       base_dir=base_file.parent)


def _tuple(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _node(entry: dict[str, Any], t: float) -> NodeSample:
    """One worker node at trace time ``t`` (see the module docstring)."""
    data = {k: _tuple(v) for k, v in entry.items()}
    silent = data.pop("silent_from_s", None)
    lines = data.pop("rank_log_lines", ())
    if lines:
        data["rank_log_tags"] = tuple(tag for ln in lines for tag in classify_engine_line(ln))
    if silent is None or t < float(silent):
        data.setdefault("age_seconds", 0.2)
        data.setdefault("wall_s", t)
    else:
        data.setdefault("age_seconds", round(t - float(silent), 6))
        data.setdefault("wall_s", float(silent))
    data.setdefault("clock_skew_seconds", 0.0)
    return NodeSample(**data)


def build_samples(segments: list[dict[str, Any]], *, source: str = "<case>") -> list[Sample]:
    """The Samples of ``segments`` (see the module docstring).

    Raises: ValueError naming the span and the key for a span that does not move forward,
    an unknown key, or a Sample field that does not exist.
    """
    out: list[Sample] = []
    t, dt = 0.0, 1.0
    counters: dict[str, Any] = {}
    fields: dict[str, Any] = {"engine_state": EngineState.READY, "engine_state_since_s": 0.0,
                              "engine_run_id": "r1", "engine_rung": 0}
    for i, seg in enumerate(segments):
        unknown = set(seg) - {"to_s", "dt_s", "fields", "rates", "once"}
        if unknown:
            raise ValueError(f"{source}: segments[{i}]: unknown keys {sorted(unknown)}")
        end = float(seg["to_s"])
        dt = float(seg.get("dt_s", dt))
        if end <= t and out:
            raise ValueError(f"{source}: segments[{i}].to_s: {end} is not after {t}")
        new = {k: _tuple(v) for k, v in (seg.get("fields") or {}).items()}
        if "engine_state" in new and new["engine_state"] is not None:
            new["engine_state"] = EngineState(new["engine_state"])
        if "engine_run_id" in new and new["engine_run_id"] != fields.get("engine_run_id"):
            counters = {k: (tuple(0.0 for _ in v) if isinstance(v, tuple) else 0.0)
                        for k, v in counters.items()}
        fields.update(new)
        for k in [k for k, v in new.items() if v is None]:
            counters.pop(k, None)     # a counter set to null is unknown from here on
        rates = {k: _tuple(v) for k, v in (seg.get("rates") or {}).items()}
        for k, v in rates.items():
            # A rate on a field also given in ``fields`` starts from that value (a gauge
            # that drifts, e.g. MemAvailable creeping down); a counter starts from 0.
            start = fields.pop(k, None)
            counters.setdefault(k, start if start is not None else
                                tuple(0.0 for _ in v) if isinstance(v, tuple) else 0.0)
        once = {k: _tuple(v) for k, v in (seg.get("once") or {}).items()}
        first = True
        step = 0.0 if not out else dt
        t_next = t + step
        while t_next <= end + 1e-9:
            span = t_next - t
            for k, v in rates.items():
                c = counters[k]
                counters[k] = (tuple(a + b * span for a, b in zip(c, v, strict=True))
                               if isinstance(v, tuple) else c + v * span)
            t = t_next
            values = {**fields, **counters, **(once if first else {})}
            if values.get("nodes"):
                values["nodes"] = tuple(_node(n, t) for n in values["nodes"])
            try:
                out.append(Sample(t_s=round(t, 6), **values))
            except TypeError as exc:
                raise ValueError(f"{source}: segments[{i}]: {exc}") from exc
            first = False
            t_next = t + dt
    return out


def case_samples(segments: list[dict[str, Any]], *, source: str = "<case>") -> list[Sample]:
    """``build_samples`` with each sample's raw log and kernel lines classified by today's
    classifiers (``agent_supervisor.sense.reclassify``), as a case is played.

    Raises: ValueError as ``build_samples``.
    """
    return [reclassify(x) for x in build_samples(segments, source=source)]


def load_case(path: Path) -> FieldCase:
    """Load and build one case file.

    Raises: ValueError naming the file and the missing or bad key; PolicyError for bad
    policy overrides.
    """
    raw = yaml.safe_load(path.read_text())
    name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise ValueError(f"{name}: missing keys {missing}")
    if not raw["source"] or not all(isinstance(s, dict) and s.get("url") for s in
                                    raw["source"]):
        raise ValueError(f"{name}: source: each entry needs a url")
    base_file = BASE_POLICY.parent / raw["base_policy"] if raw.get("base_policy") else BASE_POLICY
    policy = _policy(raw.get("policy") or {}, name, base_file)
    ladder_fields = dict(raw.get("ladder") or {})
    ladder_fields.setdefault("rung", 0)
    samples = case_samples(raw["segments"], source=name)
    ladder_fields.setdefault("since_s", samples[0].t_s if samples else 0.0)
    ladder = LadderState(**{k: _tuple(v) for k, v in ladder_fields.items()})
    baselines = {m: [tuple(b) for b in v] for m, v in (raw.get("baselines") or {}).items()}
    acceptance = {m: [float(a) for a in v] for m, v in (raw.get("acceptance") or {}).items()}
    return FieldCase(path=path, kind=raw["kind"], control=bool(raw.get("control", False)),
                     source=raw["source"], policy=policy, ladder=ladder,
                     baselines=baselines, samples=samples, expect=dict(raw["expect"]),
                     raw=raw, acceptance=acceptance, update=_update(raw.get("update"), name))


def _update(raw: dict[str, Any] | None, name: str) -> EngineUpdate | None:
    """A case's ``update:`` (``EngineUpdate.to_dict``'s form).

    Raises: ValueError naming the file and the bad key."""
    if raw is None:
        return None
    try:
        return EngineUpdate.from_dict(raw)
    except ValueError as exc:
        raise ValueError(f"{name}: update: {exc}") from exc


def all_cases(root: Path = FIELD) -> Iterator[Path]:
    """Every case file under ``root``, sorted."""
    yield from sorted(root.rglob("*.yaml"))


def play_case(case: FieldCase) -> list[tuple[float, Decision]]:
    """``decide()`` after every sample, the ladder advanced as live: (t_s, Decision)."""
    window = Window(case.policy.sampling.window_seconds)
    ladder = case.ladder
    out = []
    for s in case.samples:
        window.append(s)
        d = decide(window, ladder, case.policy, s.t_s, case.baselines,
                   acceptance=case.acceptance, update=case.update)
        out.append((s.t_s, d))
        ladder = advance(ladder, d, case.policy, s.t_s)
    return out


def first_action(steps: list[tuple[float, Decision]],
                 skip: tuple[str, ...] | list[str] = ()) -> tuple[float, Decision] | None:
    """The first decision that is not HOLD (nor one of the actions in ``skip``), or None."""
    skipped = {Action(a) for a in skip}
    return next(((t, d) for t, d in steps
                 if d.action is not Action.HOLD and d.action not in skipped), None)
