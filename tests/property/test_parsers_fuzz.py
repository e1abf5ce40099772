"""Fuzz every parser of files the supervisor reads (issue 17): mutations of the real
inputs (the shipped policies, a trace recorded from the CPU engine, spool lines the
writer makes) never end in an unhandled exception, only in the parser's own clear
error. The metrics and log parsers have theirs beside their unit tests.

Bounded in time: ``max_examples`` per test (``SUPERVISOR_FUZZ_EXAMPLES``, default 400)
and a per-example ``deadline``; the figures are printed by ``pytest -s`` (examples run).
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_supervisor.act.systemd import unit_file
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy, load_policy_file
from agent_supervisor.record.records import (
    AddIncident,
    AddRun,
    Incident,
    StartService,
    Transition,
    record_from_json,
    record_to_json,
)
from agent_supervisor.record.spool import Spool
from agent_supervisor.show.timeline import replay_command

ROOT = Path(__file__).resolve().parents[2]
POLICIES = [(ROOT / "policies" / n).read_bytes() for n in ("cpu-demo.yaml", "gb10-nvfp4-mtp.yaml")]
TRACES = ROOT / "tests" / "fixtures" / "traces"
TRACE = (TRACES / "cpu-demo-spec-slower.trace.jsonl").read_bytes()
TRACE_POLICY = load_policy_file(TRACES / "cpu-demo-spec-slower.policy.yaml")
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
SPOOL_LINES = [record_to_json(r).encode() for r in (
    AddRun(run_id="r1", mode="fast", rung=0, argv=["vllm", "--api-key", "k"], pid=12, port=8000,
           log_path="/x.log", started_at=T0),
    AddIncident(incident=Incident(kind="exited", severity="critical", started_at=T0,
                                  action="restart", explanation="crash", findings=[{"a": 1}]),
                transition=Transition(at=T0, from_mode="a", to_mode="b", from_rung=0,
                                      to_rung=1, reason="r", actor="guard:x")),
    StartService(service_run_id="s", pid=1, boot_id=None, started_at=T0),
)]

#: Pieces that hit the edges the issue found: YAML anchors and aliases, flow nesting,
#: non-finite numbers, duplicate keys, bytes that are not UTF-8, JSON type confusions.
_PIECES = [b"&a ", b"*a", b"<<: *a", b"[" * 50, b"{" * 50, b".inf", b"inf", b"nan", b"-1e999",
           b"\xff\xfe", b"\xe9", b"\n", b": ", b"- ", b"'", b'"', b"null", b"true", b"[]", b"{}",
           b'{"$dt": 5}', b'"abc"', b"1e400", b"NaN", b"Infinity", b"-", b"#", b"\t", b"%"]

mutation = st.tuples(
    st.sampled_from(["delete", "insert", "replace", "duplicate", "truncate"]),
    st.floats(0, 1), st.floats(0, 1),
    st.one_of(st.sampled_from(_PIECES), st.binary(max_size=12)),
)

EXAMPLES = int(os.environ.get("SUPERVISOR_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=2000, suppress_health_check=list(HealthCheck),
                derandomize=True)
RUNS: dict[str, int] = {}


def mutate(data: bytes, muts: list[tuple[str, float, float, bytes]]) -> bytes:
    for op, a, b, piece in muts:
        i = int(a * len(data))
        j = min(len(data), i + 1 + int(b * 80))
        if op == "delete":
            data = data[:i] + data[j:]
        elif op == "insert":
            data = data[:i] + piece + data[i:]
        elif op == "replace":
            data = data[:i] + piece + data[j:]
        elif op == "duplicate":
            data = data[:j] + data[i:j] + data[j:]
        else:
            data = data[:i]
    return data


@FUZZ
@given(st.sampled_from(POLICIES), st.lists(mutation, min_size=1, max_size=4))
def test_issue_17_fuzz_policy_only_policy_errors(original: bytes, muts) -> None:
    RUNS["policy"] = RUNS.get("policy", 0) + 1
    data = mutate(original, muts)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.yaml"
        path.write_bytes(data)
        try:
            policy = load_policy_file(path)
        except PolicyError as exc:
            assert str(exc).startswith(str(path))
            return
    unit_file(policy, path, executable="/usr/bin/supervisor")   # must not crash either


@FUZZ
@given(st.lists(mutation, min_size=1, max_size=4))
def test_issue_17_fuzz_trace_replay_exits_cleanly(muts) -> None:
    RUNS["trace"] = RUNS.get("trace", 0) + 1
    data = mutate(TRACE, muts)
    err = io.StringIO()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.jsonl"
        path.write_bytes(data)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = replay_command(path, TRACE_POLICY, as_json=False, show_all=False)
    assert rc in (0, 1, 2)
    if rc == 2:
        assert err.getvalue().startswith(f"error: {path}:") and "Traceback" not in err.getvalue()


@FUZZ
@given(st.sampled_from(SPOOL_LINES), st.lists(mutation, min_size=1, max_size=3))
def test_issue_17_fuzz_spool_lines_only_value_errors(line: bytes, muts) -> None:
    RUNS["spool line"] = RUNS.get("spool line", 0) + 1
    text = mutate(line, muts).decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError):
        record_from_json(text)


@settings(max_examples=max(1, EXAMPLES * 3 // 8), deadline=5000,
          suppress_health_check=list(HealthCheck),
          derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(SPOOL_LINES), st.lists(mutation, max_size=2)),
                min_size=1, max_size=6))
def test_issue_17_fuzz_spool_file_replays_every_good_line(lines) -> None:
    """A spool file of mutated lines: replay raises nothing, and every line that still
    parses is applied (none blocked behind a bad one)."""
    RUNS["spool file"] = RUNS.get("spool file", 0) + 1
    body = b"\n".join(mutate(line, muts) if muts else line for line, muts in lines) + b"\n"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "spool.jsonl"
        path.write_bytes(body)
        spool = Spool(path)
        seen = []
        result = spool.replay(lambda r: seen.append(r) or True)
    assert result.remaining == 0 and result.applied == len(seen)
    assert result.applied + result.rejected == len(spool_lines(body))


def spool_lines(body: bytes) -> list[bytes]:
    return [x for x in body.decode("utf-8", errors="replace").encode().split(b"\n") if x.strip()]


def test_issue_17_fuzz_figures(capsys) -> None:
    """Prints how many examples the fuzz tests above ran (run them together)."""
    with capsys.disabled():
        print(f"\nfuzz examples run: {RUNS}")


def test_issue_17_load_policy_text_never_crashes_on_yaml_bombs() -> None:
    bomb = "a: &a [" + ",".join(["x"] * 10) + "]\n" + "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdefgh", "bcdefghi",
                                                                          strict=True))
    with contextlib.suppress(PolicyError):
        load_policy(bomb)
