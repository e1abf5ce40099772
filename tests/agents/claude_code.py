"""Claude Code (npm ``@anthropic-ai/claude-code``, ``make agent-cli``) in print mode, run
as an operator would point it at the gateway (docs/gateway.md, "Coding agents").

``claude -p PROMPT --output-format json`` prints one JSON object when the run ends:
``type: "result"``, ``subtype: "success"`` or an error subtype, ``is_error``, ``num_turns``,
``usage`` (the last request's ``input_tokens`` ...), ``result`` (the final text) and
``api_error_status``. It speaks the Anthropic Messages API, streamed
(``POST /v1/messages?beta=true`` with ``stream: true``, its system prompt and tool
definitions in every request: 48,706 characters for 2.1.332 in print mode, 12 tools).

Environment (Claude Code's documented variables, docs.anthropic.com/en/docs/claude-code/
settings): ``ANTHROPIC_BASE_URL`` the gateway, ``ANTHROPIC_API_KEY`` the agent's key
(sent as ``x-api-key``); ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (no telemetry,
error reports, update checks: nothing leaves the box); ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``
bounds the answer (its default, 32,000, would have the tiny model generate for minutes);
``MAX_THINKING_TOKENS=0`` sends ``thinking: {type: disabled}`` (with a bounded answer it
otherwise asks for ``thinking: {type: enabled, budget_tokens: 1024}``, which vLLM refuses
with 400 when the budget is not under ``max_tokens``: vllm/entrypoints/anthropic/
protocol.py ``validate_thinking_budget``); ``HOME`` a directory of the test's own (the
session files and settings go there).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Where ``make agent-cli`` installs it (npm --prefix .agent-node).
CLAUDE = ROOT / ".agent-node" / "node_modules" / ".bin" / "claude"


@dataclass
class Turn:
    """One ``claude -p`` run: its exit status, the result object (None when stdout held
    none), stderr's tail and the wall seconds it took."""

    returncode: int
    result: dict[str, Any] | None
    stderr: str
    seconds: float


def claude_env(base_url: str, key: str, home: Path, max_output_tokens: int) -> dict[str, str]:
    """The variables a run gets: the gateway, the key, nothing nonessential."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update({
        "HOME": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_output_tokens), "MAX_THINKING_TOKENS": "0",
    })
    return env


def start_turn(prompt: str, *, model: str, env: dict[str, str], cwd: Path,
               resume: bool) -> subprocess.Popen[str]:
    """Start ``claude -p`` (``--continue``: the conversation of the last run in ``cwd``)."""
    argv = [str(CLAUDE), "-p", prompt, "--output-format", "json", "--model", model]
    if resume:
        argv.append("--continue")
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish_turn(proc: subprocess.Popen[str], started_s: float, timeout_s: float) -> Turn:
    """Wait for a run started by ``start_turn`` at ``started_s`` (``time.monotonic()``).
    Raises subprocess.TimeoutExpired after ``timeout_s``."""
    out, err = proc.communicate(timeout=timeout_s)
    result = None
    for line in reversed(out.splitlines()):
        try:
            result = json.loads(line)
            break
        except ValueError:
            continue
    return Turn(proc.returncode, result, err[-3000:], round(time.monotonic() - started_s, 1))
