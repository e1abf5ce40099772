"""Which speculative mode should be the top of the ladder now, chosen by the traffic. Pure.

There is no single fastest mode: on a GB10, DSpark beat MTP on code (51.5 against 34.5
tokens/s) while MTP won long essays (24.1 against 18.3) on the same weights, and on this
box n-gram k=5 gave 287 against 144 tokens/s for one request and 68 against 100 per
request at six (issue 13's field report, docs/figures.md). ``choose_top_rung`` reads calibration per
workload profile (``supervisor calibrate --profiles``: tokens/s per request by concurrency,
acceptance at draft position 0) and the live evidence of the window, and says whether the
top rung should change:

1. Evidence, averaged over ``sustain_seconds``: requests running (the load), the running
   mode's acceptance at position 0 (d accepted at 0 / d drafts; vLLM's
   ``..._num_accepted_tokens_per_pos_total``), the share of prompt tokens the gateway saw
   repeated (reported, not used: it says what the prefix cache should hit, not how a draft
   fares).
2. The mix: the running mode's live acceptance placed between the profiles' calibrated
   acceptances for that mode (linear between the two that bracket it, all weight to the
   nearer end outside them). A mode without speculation shows no acceptance: the last mix
   seen is kept (``TopRungState.mix``), at first every profile weighs the same.
3. Each mode's predicted tokens/s per request: its calibrated figures per profile at the
   live concurrency (linear between measured loads, flat beyond), weighted by the mix.
4. A switch to the best mode only when (a) it beats the current top by more than
   ``margin_ratio`` (hysteresis: going back needs the same margin the other way), (b) it
   has been the best by that margin for ``sustain_seconds``, (c) fewer than
   ``max_switches_per_hour`` switches in the last hour, (d) the predicted gain over the
   remaining stable period pays for the restart: gain x T > the target's measured start
   time, where T, the stable period still to come, is taken as long as the evidence has
   held so far (a mix that held 40 min is expected to hold about as long again), at
   most ``stable_horizon_seconds``; a target with no measured start time is never
   switched to; (e) at a calm moment (at most ``calm_max_requests`` running, none
   waiting; unknown load is never calm), waiting for one as long as (a)-(d) hold.

Live with ``top_rung.enabled``: ``supervisor run`` calls it every tick
(``decide/top_switch.py`` turns a ``switch`` into the ladder's move, its state carried by
``runtime/top_rung.py``); ``supervisor replay TRACE --top-rung`` runs it over a recorded
trace (``replay_top_rung``); tests/unit/test_top_rung.py replays it under
jitter, tests/unit/test_top_rung_live.py in a closed loop with ``decide()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Protocol

from agent_supervisor.telemetry.sample import Sample
from agent_supervisor.telemetry.window import Window

__all__ = ["TopRungChoice", "TopRungFigures", "TopRungRules", "TopRungState", "Traffic",
           "choose_top_rung", "predict", "replay_top_rung", "traffic_of"]

HOUR = 3600.0
#: Fewer drafts than this over the window say nothing about acceptance (a handful of
#: drafts of one request can read 0 or 1).
MIN_DRAFTS = 50


class TopRungRules(Protocol):
    """The policy's rules for the choice (``policy.speculative.TopRungSpec`` has these fields)."""

    max_switches_per_hour: int
    margin_ratio: float
    sustain_seconds: float
    stable_horizon_seconds: float
    calm_max_requests: int


@dataclass(frozen=True)
class TopRungFigures:
    """Calibration per workload profile.

    ``tokens_per_second``: mode -> profile -> ((concurrency, tokens/s per request), ...).
    ``acceptance``: speculative mode -> profile -> acceptance at draft position 0 (0-1).
    ``start_seconds``: mode -> measured launch-to-ready time of its engine (seconds).
    """

    tokens_per_second: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]]
    acceptance: Mapping[str, Mapping[str, float]]
    start_seconds: Mapping[str, float]

    @property
    def profiles(self) -> tuple[str, ...]:
        """Every profile some mode was measured on, sorted."""
        return tuple(sorted({p for per in self.tokens_per_second.values() for p in per}))


@dataclass(frozen=True)
class Traffic:
    """The live evidence over the last ``sustain_seconds``. None: unknown."""

    requests_running: float | None
    acceptance_pos0: float | None
    repeated_prefix_ratio: float | None


@dataclass(frozen=True)
class TopRungState:
    """The choice's memory. ``top``: the mode now at the top. ``candidate`` and
    ``candidate_since_s``: the mode beating it by the margin, and since when (monotonic
    seconds). ``switches_s``: times of the switches in the last hour. ``mix``: the last
    profile mix estimated from acceptance ((profile, weight), ...)."""

    top: str
    candidate: str | None = None
    candidate_since_s: float | None = None
    switches_s: tuple[float, ...] = ()
    mix: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class TopRungChoice:
    """What to do: ``hold``, ``wait_calm`` (a switch is due, the load is not calm) or
    ``switch`` to ``target``; ``evidence`` (values and thresholds) and ``why`` (one line)."""

    action: str
    target: str | None
    why: str
    evidence: dict[str, object] = field(default_factory=dict)


def traffic_of(window: Window, now_s: float, seconds: float) -> Traffic:
    """The evidence of the last ``seconds`` of ``window`` (see the module doc)."""
    recent = [s for s in window.since(now_s - seconds) if s.t_s <= now_s]
    running = [s.requests_running for s in recent if s.requests_running is not None]
    since = now_s - seconds
    drafts = window.increase("spec_decode_num_drafts_total", since, now_s)
    by_pos = window.increase_by_position("spec_decode_accepted_per_position_total", since,
                                         now_s)
    acceptance = None
    if drafts is not None and by_pos and drafts[0] >= MIN_DRAFTS:
        acceptance = by_pos[0] / drafts[0]
    prompt = window.increase("prompt_tokens_total", since, now_s)
    repeated = window.increase("gateway_repeated_prefix_tokens_total", since, now_s)
    ratio = repeated[0] / prompt[0] if prompt and repeated and prompt[0] > 0 else None
    return Traffic(sum(running) / len(running) if running else None, acceptance, ratio)


def _mix(figures: TopRungFigures, running: str, acceptance: float | None,
         last: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """Profile weights from the running mode's live acceptance (module doc, step 2)."""
    known = figures.acceptance.get(running) or {}
    points = sorted((a, p) for p, a in known.items() if p in figures.profiles)
    if acceptance is None or len(points) < 2:
        if last:
            return last
        return tuple((p, 1.0 / len(figures.profiles)) for p in figures.profiles)
    if acceptance <= points[0][0]:
        return ((points[0][1], 1.0),)
    if acceptance >= points[-1][0]:
        return ((points[-1][1], 1.0),)
    for (a0, p0), (a1, p1) in pairwise(points):
        if a0 <= acceptance <= a1:
            w1 = (acceptance - a0) / (a1 - a0) if a1 > a0 else 0.5
            return tuple(sorted(((p0, 1.0 - w1), (p1, w1))))
    return last      # unreachable: the points bracket the acceptance


def _at(points: Sequence[tuple[float, float]], concurrency: float) -> float:
    """Linear between measured concurrencies, flat beyond them."""
    pts = sorted(points)
    if concurrency <= pts[0][0]:
        return pts[0][1]
    for (c0, v0), (c1, v1) in pairwise(pts):
        if concurrency <= c1:
            return v0 + (v1 - v0) * (concurrency - c0) / (c1 - c0)
    return pts[-1][1]


def predict(figures: TopRungFigures, mode: str, mix: Sequence[tuple[str, float]],
            concurrency: float) -> float | None:
    """Tokens/s per request of ``mode`` under ``mix`` at ``concurrency``; None when the
    mode lacks a profile the mix weighs."""
    per = figures.tokens_per_second.get(mode) or {}
    if any(w > 0 and not per.get(p) for p, w in mix):
        return None
    return sum(w * _at(per[p], concurrency) for p, w in mix if w > 0)


def choose_top_rung(state: TopRungState, window: Window, running: str,
                    figures: TopRungFigures, rules: TopRungRules,
                    now_s: float) -> tuple[TopRungState, TopRungChoice]:
    """One tick of the choice (module doc). ``running``: the mode the engine runs now
    (its acceptance is the evidence). Returns the new state and the choice. Pure."""
    switches = tuple(t for t in state.switches_s if now_s - t < HOUR)
    traffic = traffic_of(window, now_s, rules.sustain_seconds)
    mix = _mix(figures, running, traffic.acceptance_pos0, state.mix)
    state = dataclasses.replace(state, switches_s=switches, mix=mix)
    if traffic.requests_running is None:
        return _reset(state), TopRungChoice("hold", None, "load unknown")
    load = max(traffic.requests_running, 1.0)
    rates = {m: r for m in figures.tokens_per_second
             if (r := predict(figures, m, mix, load)) is not None}
    top_rate = rates.get(state.top)
    if not rates or not top_rate:
        return _reset(state), TopRungChoice("hold", None,
                                            f"no calibration of {state.top} for this mix")
    best = max(sorted(rates), key=lambda m: rates[m])
    gain = rates[best] / top_rate - 1.0
    ev = _evidence(traffic, mix, running, best, gain, rates, state.top)
    if best == state.top or gain <= rules.margin_ratio:
        return _reset(state), TopRungChoice(
            "hold", None, f"{state.top} stays on top ({best} +{gain:.0%}, margin "
                          f"{rules.margin_ratio:.0%})", ev)
    if state.candidate != best:
        state = dataclasses.replace(state, candidate=best, candidate_since_s=now_s)
    since = state.candidate_since_s
    held = 0.0 if since is None else now_s - since
    return _gate(state, best, gain, held, ev, _mix_text(mix, traffic, running), figures,
                 rules, window, now_s)


def _gate(state: TopRungState, best: str, gain: float, held: float, ev: dict[str, object],
          mix_text: str, figures: TopRungFigures, rules: TopRungRules, window: Window,
          now_s: float) -> tuple[TopRungState, TopRungChoice]:
    """Steps 4 (b)-(e) of the module doc for a candidate beating the top by the margin."""
    start = figures.start_seconds.get(best)
    stable = min(held, rules.stable_horizon_seconds)
    ev.update(held_seconds=held, start_seconds=start, stable_seconds=stable,
              switches_last_hour=len(state.switches_s),
              max_switches_per_hour=rules.max_switches_per_hour)
    if held < rules.sustain_seconds:
        return state, TopRungChoice("hold", None, f"{best} leads for {held:.0f} s of "
                                    f"{rules.sustain_seconds:.0f} s", ev)
    if len(state.switches_s) >= rules.max_switches_per_hour:
        return state, TopRungChoice("hold", None, f"{len(state.switches_s)} switches in the "
                                    "last hour: at the bound", ev)
    if start is None:
        return state, TopRungChoice("hold", None, f"start time of {best} not measured", ev)
    if gain * stable <= start:
        return state, TopRungChoice(
            "hold", None, f"+{gain:.0%} for {stable:.0f} s does not pay a {start:.0f} s "
                          "restart yet", ev)
    span = f"{stable / 60:.0f} min" if stable >= 120 else f"{stable:.0f} s"
    why = (f"{mix_text}, predicted +{gain:.0%} tokens/s per request with {best} for "
           f"{span}, switch costs {start:.0f} s")
    if not _calm(window.latest, rules.calm_max_requests):
        return state, TopRungChoice("wait_calm", best, why + "; waiting for a calm moment", ev)
    new = TopRungState(top=best, switches_s=(*state.switches_s, now_s), mix=state.mix)
    return new, TopRungChoice("switch", best, why, ev)


def _reset(state: TopRungState) -> TopRungState:
    return dataclasses.replace(state, candidate=None, candidate_since_s=None)


def _calm(sample: Sample | None, max_running: int) -> bool:
    """At most ``max_running`` requests running and none waiting; unknown is not calm."""
    if sample is None or sample.requests_running is None:
        return False
    waiting = (sample.requests_waiting or 0) + (sample.gateway_requests_queued or 0)
    return sample.requests_running <= max_running and waiting == 0


def _evidence(traffic: Traffic, mix: Sequence[tuple[str, float]], running: str, best: str,
              gain: float, rates: Mapping[str, float], top: str) -> dict[str, object]:
    return {"requests_running": traffic.requests_running, "running_mode": running,
            "acceptance_pos0": traffic.acceptance_pos0,
            "repeated_prefix_ratio": traffic.repeated_prefix_ratio,
            "mix": dict(mix), "predicted_tokens_per_second_per_request": dict(rates),
            "top": top, "best": best, "gain_ratio": gain}


def _mix_text(mix: Sequence[tuple[str, float]], traffic: Traffic, running: str) -> str:
    """"code share 70%, dspark accepts 0.62 at position 0": the evidence in words."""
    lead, weight = max(sorted(mix), key=lambda pw: pw[1])
    text = f"{lead} share {weight:.0%}"
    if traffic.acceptance_pos0 is not None:
        text += f", {running} accepts {traffic.acceptance_pos0:.2f} at position 0"
    return text


def replay_top_rung(samples: Iterable[Sample], modes: Sequence[str], figures: TopRungFigures,
                    rules: TopRungRules, top: str,
                    window_seconds: float) -> list[tuple[float, TopRungChoice]]:
    """``choose_top_rung`` after each sample of a recorded trace (``supervisor replay TRACE
    --top-rung``). The running mode is the one at the sample's ``engine_rung`` in ``modes``
    (the chosen top when unknown); a switch moves only the choice's own top: the recorded
    engine ran what it ran. Returns (monotonic seconds, choice) per sample. Pure."""
    window = Window(window_seconds)
    state = TopRungState(top=top)
    out: list[tuple[float, TopRungChoice]] = []
    for sample in samples:
        window.append(sample)
        rung = sample.engine_rung
        running = modes[rung] if rung is not None and 0 <= rung < len(modes) else state.top
        state, choice = choose_top_rung(state, window, running, figures, rules, sample.t_s)
        out.append((sample.t_s, choice))
    return out
