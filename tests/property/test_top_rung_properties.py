"""Issue 32 item 2: whatever the traffic does, the top rung never switches more often
than the policy's bound, and identical inputs give identical choices."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_supervisor.policy.speculative import TopRungSpec
from tests.helpers.top_rung import TICK, replay, switches

#: Segments of traffic: (minutes, code share, requests running).
SEGMENTS = st.lists(st.tuples(st.integers(1, 30), st.floats(0, 1), st.integers(0, 8)),
                    min_size=1, max_size=12)


def _schedule(segments: list[tuple[int, float, int]]):
    ends, t = [], 0.0
    for minutes, share, running in segments:
        t += minutes * 60
        ends.append((t, share, running))

    def at(t: float) -> tuple[float, int]:
        for end, share, running in ends:
            if t < end:
                return share, running
        return ends[-1][1], ends[-1][2]
    return at


@settings(max_examples=15, deadline=None)
@given(SEGMENTS, st.integers(1, 3), st.sampled_from([60.0, 120.0, 300.0]),
       st.sampled_from(["mtp", "dspark", "nospec"]))
def test_issue_32_switches_never_exceed_the_bound(segments, bound, sustain, top) -> None:
    rules = TopRungSpec(max_switches_per_hour=bound, sustain_seconds=sustain,
                        margin_ratio=0.05)
    at = _schedule(segments)
    choices = replay(0, 1.5, lambda t: at(t)[0], lambda _r, t: (float(at(t)[1]), 0.0),
                     top=top, rules=rules)
    times = [t for t, _ in switches(choices)]
    for t in times:
        assert sum(t <= u < t + 3600 for u in times) <= bound
    # A switch only ever follows sustain_seconds of the lead.
    assert all(t >= sustain for t in times)
    again = replay(0, 1.5, lambda t: at(t)[0], lambda _r, t: (float(at(t)[1]), 0.0),
                   top=top, rules=rules)
    assert [(t, c.action, c.target) for t, c in again] == \
        [(t, c.action, c.target) for t, c in choices]
    assert len(choices) == int(1.5 * 3600 / TICK)
