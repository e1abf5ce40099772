"""Guard ``answer_overrun``: answers the gateway counted clearly past their ``max_tokens``.

llama-server can ignore a request's ``max_tokens``/``n_predict`` after a context shift
(ggml-org/llama.cpp #25026, like #18432: the stop position was not moved with the
shift) and generate until the client gives up; vLLM with EAGLE-3 near the context window
generated endlessly (vllm #21269). The gateway counts each answer's tokens against what
its request asked for, with a margin (agent_supervisor/gateway/overrun.py), ends such a
stream itself and counts it (``gateway_overrun_answers_total``). The engine still serves
the other requests, so this guard records it (a warning with the count), never a restart:
the gateway has already ended the answer. A long answer within its ``max_tokens`` is not
counted (its control). Pure.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity

__all__ = ["GUARD", "SPAN_SECONDS", "check"]

GUARD = "answer_overrun"
#: Answers past their bound are counted over this long.
SPAN_SECONDS = 600.0


def check(sit: Situation) -> list[Finding]:
    """A warning (record) while such answers rose in the last ``SPAN_SECONDS``."""
    s = sit.latest
    if s is None:
        return []
    grown = sit.window.increase("gateway_overrun_answers_total", sit.now_s - SPAN_SECONDS,
                                sit.now_s)
    if grown is None or grown[0] <= 0:
        return []
    return [Finding(GUARD, "answer_past_max_tokens", Severity.WARNING,
                    f"{grown[0]:g} answers ran clearly past their request's max_tokens in "
                    f"{grown[1]:.0f} s (llama-server after a context shift: llama.cpp "
                    "#25026); the gateway ended the streams; recorded, no restart",
                    {"answers": grown[0], "seconds": round(grown[1], 1),
                     "mode": sit.mode.name, "run_id": s.engine_run_id},
                    s.engine_run_id, Response.RECORD)]
