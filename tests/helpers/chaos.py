"""``record(res)``: keeps a chaos ``Result`` in ``RESULTS`` and prints its one-line summary
(detected, serving again, requests failed) under the test."""

from __future__ import annotations

from agent_supervisor.chaos.harness import Result

RESULTS: list[Result] = []


def record(res: Result) -> Result:
    RESULTS.append(res)
    print(f"\n{res.scenario}: detected {res.detected_seconds}, serving again "
          f"{res.serving_again_seconds}, failed {res.requests_failed}/{res.requests_total}, "
          f"{res.extra}")
    return res
