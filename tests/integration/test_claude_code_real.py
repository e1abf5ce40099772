"""Issue 33: a real coding agent CLI through the gateway across a crash. Claude Code
(npm ``@anthropic-ai/claude-code``, ``make agent-cli``) in print mode, pointed at the
gateway as docs/gateway.md says (``ANTHROPIC_BASE_URL``, an agent key under
``auth: keys``, the model name it knows mapped by ``gateway.model_aliases``), runs three
turns of one conversation against the demo policy's real CPU engine; the EngineCore is
SIGKILLed while the first turn's request is in flight. Every turn ends as a success for
the agent (exit 0, ``is_error: false``), its prompt is Claude Code's own system prompt and
tool definitions (over 30,000 tokens of the demo vocabulary: the demo models' 65,536-token
context holds it), and the crash and the restart are on record.

The tiny model's answers are nonsense and it calls no tool here; the traffic shape
(long prompts, a dozen tools, Messages streaming, a token count under the alias, a
conversation continued from Claude Code's own session file) is what is tested.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.agents.claude_code import CLAUDE, claude_env, finish_turn, start_turn
from tests.helpers.paths import ROOT
from tests.helpers.real_engine import demo_policy, engine_core_pid
from tests.helpers.scrape import metric

#: The name Claude Code is configured with; the gateway maps it to the demo's model. Not a
#: Claude model name: for one (claude-sonnet-4-5) Claude Code loads more tools up front, and
#: its first request is 59,333 tokens of the demo vocabulary (33,358 for this name).
MODEL = "coding-model"
KEY = "agent-claude-code"
#: The answer's bound (CLAUDE_CODE_MAX_OUTPUT_TOKENS): the demo model's answers end well before.
MAX_OUTPUT_TOKENS = 256
TURNS = ("List the files in this directory.", "Now read the first one.",
         "Summarise what you found.")


def _policy(tmp_path: Path) -> Path:
    guards = yaml.safe_load((ROOT / "policies" / "cpu-demo.yaml").read_text())["guards"]
    # Other test runs share this box: a memory floor for the box, not for them.
    guards["memory_floor"]["min_available_bytes"] = 512 * 1024**2
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    return demo_policy(tmp_path, restart={"start_limit_burst": 10}, guards=guards,
                       gateway={"auth": "keys", "api_keys": [{"name": "claude-code",
                                                              "sha256": digest}],
                                "model_aliases": {MODEL: "tiny-agent"}})


@pytest.mark.long
def test_issue_33_claude_code_through_the_gateway_across_a_crash(
        tmp_path: Path, service_factory) -> None:
    assert CLAUDE.exists(), "no Claude Code: make agent-cli (make test-long builds it)"
    t_start = time.monotonic()
    svc = service_factory(_policy(tmp_path))
    run1 = [r for r in svc.ready_runs(1) if r.ready_at][-1]
    base = f"http://127.0.0.1:{svc.gateway_port}"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    (work / "main.py").write_text("def main():\n    return 0\n")
    env = claude_env(base, KEY, home, MAX_OUTPUT_TOKENS)

    # Turn 1: the EngineCore is killed while Claude Code's request is in flight.
    t0 = time.monotonic()
    proc = start_turn(TURNS[0], model=MODEL, env=env, cwd=work, resume=False)
    deadline = time.monotonic() + 120
    while httpx.get(base + "/gateway/status", timeout=10).json()["requests_in_flight"] < 1:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no request from Claude Code"
        time.sleep(0.05)
    os.kill(engine_core_pid(run1.pid), signal.SIGKILL)
    killed_s = time.monotonic() - t0
    turns = [finish_turn(proc, t0, timeout_s=900)]
    svc.ready_runs(2)
    # Turns 2 and 3: the same conversation, continued from Claude Code's session file.
    for prompt in TURNS[1:]:
        t = time.monotonic()
        turns.append(finish_turn(start_turn(prompt, model=MODEL, env=env, cwd=work,
                                            resume=True), t, timeout_s=900))
    for n, turn in enumerate(turns, 1):
        r = turn.result or {}
        print(f"turn {n}: exit {turn.returncode} in {turn.seconds} s; subtype "
              f"{r.get('subtype')}, is_error {r.get('is_error')}, input tokens "
              f"{(r.get('usage') or {}).get('input_tokens')}, api_error_status "
              f"{r.get('api_error_status')}")
        assert turn.returncode == 0, turn.stderr
        assert r.get("type") == "result" and r.get("subtype") == "success", r
        assert r.get("is_error") is False and r.get("api_error_status") is None, r
        # Claude Code's own prompt: its system prompt and tools, in the demo vocabulary.
        assert r["usage"]["input_tokens"] > 30_000, r["usage"]
    # The crash and the restart on record. The request the kill cut was either re-sent
    # whole by the gateway (cut before its first byte) or, cut mid-stream, ended with an
    # error event: a stream that offers tools is not resumed (agent_supervisor/gateway/
    # streaming.py), and Claude Code re-sent it on its own, held until the new engine
    # served (first run here, 2026-12-03: the cut came mid-stream; the turn still ended
    # with is_error false).
    assert "engine_core_died" in [i.kind for i in svc.store.incidents()]
    resent = metric(svc, "supervisor_gateway_retries_total")
    broken = metric(svc, 'supervisor_gateway_requests_total{outcome="broken_stream"}')
    print(f"gateway: {resent:.0f} re-sent whole, {broken:.0f} streams ended with an error "
          "event (offering tools: not resumed)")
    assert resent + broken >= 1
    assert metric(svc, 'supervisor_gateway_requests_total{outcome="upstream_error"}') == 0
    print(f"Claude Code: 3 turns, EngineCore killed {killed_s:.1f} s into the first; "
          f"{time.monotonic() - t_start:.0f} s in all")
    assert svc.stop() == 0
