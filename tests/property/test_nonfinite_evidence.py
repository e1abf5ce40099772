"""Issue 34: decide() fed NaN/Inf telemetry made decisions whose evidence carried
NaN/Inf; PostgreSQL refused those incidents (JSON), so they went to the rejected spool.
Now evidence is JSON-ready (non-finite values are None) and the incident is on record."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import typing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_supervisor.act.incident import Incident
from agent_supervisor.decide.decide import decide
from agent_supervisor.decide.decision import Decision
from agent_supervisor.decide.ladder import LadderState, advance
from agent_supervisor.policy import load_policy
from agent_supervisor.record.store import Store
from agent_supervisor.record.writer import RecordWriter
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

POLICY = load_policy("fleet: t\nengine: {executable: vllm}\nmodes: [{name: a}, {name: b}]\n")
_HINTS = typing.get_type_hints(Sample)
FLOAT_FIELDS = sorted(f.name for f in dataclasses.fields(Sample)
                      if str(_HINTS[f.name]) in ("float | None", "float") and f.name != "t_s")
NON_FINITE = [math.nan, math.inf, -math.inf]


def play(fields: dict[str, list[float]], ticks: int = 40) -> list[Decision]:
    """A ready engine whose ``fields`` take the given values tick after tick."""
    window, ladder, out = Window(), LadderState.initial(POLICY), []
    for i in range(ticks):
        t = float(i)
        window.append(Sample(
            t_s=t, engine_state=EngineState.READY, engine_run_id="r1", engine_rung=0,
            mem_total_bytes=128 << 30, mem_available_bytes=100 << 30,
            **{name: values[i % len(values)] for name, values in fields.items()}))
        decision = decide(window, ladder, POLICY, t)
        out.append(decision)
        ladder = advance(ladder, decision, POLICY, t)
    return out


@settings(max_examples=150)
@given(st.dictionaries(st.sampled_from(FLOAT_FIELDS), st.lists(
    st.sampled_from([*NON_FINITE, 0.0, 1.0, 1e9]), min_size=1, max_size=4),
    min_size=1, max_size=5))
def test_issue_34_evidence_is_json_whatever_the_readings(fields) -> None:
    for decision in play(fields):
        for finding in decision.findings:
            json.dumps(finding.to_dict(), allow_nan=False)   # ValueError on NaN/Inf


# Two cases the review's fuzzing found (memory_pressure on an infinite PSI ratio,
# corrupted_output on a NaN counter), checked by the probe of this test's history.
CASES = {
    "memory_pressure": {"psi_memory_full_avg10_ratio": [math.inf],
                        "psi_memory_full_avg60_ratio": [math.inf]},
    "corrupted_output": {"corrupted_requests_total": [math.nan, 1.0],
                         "generation_tokens_total": [1.0, 2.0, 3.0]},
}


def incidents_of(decisions: list[Decision]) -> list[Incident]:
    return [Incident(kind=d.findings[0].kind, severity=str(d.findings[0].severity),
                     started_at=datetime.now(UTC), action=str(d.action),
                     explanation=d.explanation, findings=[f.to_dict() for f in d.findings])
            for d in decisions if d.findings]


@pytest.mark.postgres
def test_issue_34_nonfinite_evidence_lands_in_postgresql_not_the_spool(
        pg_url: str, tmp_path: Path) -> None:
    store = Store.open(pg_url, fleet="t")
    writer = RecordWriter(store, spool_path=tmp_path / "spool.jsonl")
    incidents = []
    for kind, fields in CASES.items():
        found = [i for i in incidents_of(play(fields)) if i.kind == kind]
        assert found, f"{kind}: the case no longer raises its finding"
        incidents.append(found[0])
    # An incident built elsewhere with a raw non-finite value: the record's boundary.
    incidents.append(Incident(kind="policy_rejected", severity="warning",
                              started_at=datetime.now(UTC), action="keep_policy",
                              explanation="x", findings=[{"ratio": math.nan,
                                                          "limit": [math.inf, 1.5]}]))

    async def write() -> None:
        from agent_supervisor.record.records import AddIncident
        writer.start()
        for incident in incidents:
            writer.submit(AddIncident(incident=incident))
        await writer.flush()
        await writer.close()

    asyncio.run(write())
    assert writer.rejected == 0 and writer.spooled == 0
    assert not list(tmp_path.glob("spool*rejected*"))
    rows = {row.kind: row for row in store.incidents()}
    assert set(rows) == {*CASES, "policy_rejected"}
    pressure = rows["memory_pressure"].findings[0]["evidence"]
    assert pressure["psi_memory_full_avg10_ratio"] is None
    assert rows["corrupted_output"].findings[0]["evidence"]["corrupted_requests"] is None
    assert rows["policy_rejected"].findings == [{"ratio": None, "limit": [None, 1.5]}]
    store.close()
