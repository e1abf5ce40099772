"""Runs of a real agent, the OpenAI Agents SDK (``openai-agents`` from PyPI, in its own
environment ``.agent-venv``: ``make agent-venv``), against an OpenAI-compatible base URL.

Each run is a coding agent with one tool. The first turn must call it (``tool_choice:
required``); the SDK runs the tool and sends its result back in a second request (the SDK
resets the tool choice to auto after a call); a second tool call ends the run with that
tool's output. The demo model's tool calls are nonsense (arguments that are not JSON), so
the tool takes its arguments as raw text: what is tested is the traffic an agent makes
(tools, tool calls, tool results, streamed and not), not the model. Odd runs stream. Any
exception the SDK raises is an error surfaced to the agent.

Prints one JSON line: ``{"runs": N, "errors": [...], "tool_calls": N, "requests": N,
"seconds": S}`` (``requests``: model requests the SDK made, from each run's responses).

Usage: python openai_agents_runs.py BASE_URL RUNS
This file runs under the agent's environment, never under the supervisor's or pytest's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    ToolsToFinalOutputResult,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

CALLS = {"n": 0, "this_run": 0}


async def read_file(_ctx: Any, arguments: str) -> str:
    """The tool: the raw arguments text in, a file's text out."""
    CALLS["n"] += 1
    CALLS["this_run"] += 1
    return f"# main.py (asked with {arguments[:40]!r})\nprint('hello')\n"


READ_FILE = FunctionTool(
    name="read_file", description="Read a file of the project.",
    params_json_schema={"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"]},
    on_invoke_tool=read_file, strict_json_schema=False)


def second_call_ends(_ctx: Any, results: list[Any]) -> ToolsToFinalOutputResult:
    """Go on after the first tool call (its result goes back to the model); end after the
    second with that tool's output."""
    return ToolsToFinalOutputResult(is_final_output=CALLS["this_run"] >= 2,
                                    final_output=results[-1].output if results else None)


async def main(base_url: str, runs: int) -> dict[str, Any]:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    agent = Agent(
        name="coder", instructions="You are a coding agent. Read files with read_file.",
        tools=[READ_FILE], tool_use_behavior=second_call_ends,
        model=OpenAIChatCompletionsModel(model="tiny-agent", openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=128, tool_choice="required"))
    errors: list[str] = []
    requests = 0
    t0 = time.monotonic()
    for i in range(runs):
        CALLS["this_run"] = 0
        task = f"Read main.py and say what it prints (run {i})."
        try:
            if i % 2:
                streamed = Runner.run_streamed(agent, task, max_turns=4)
                async for _ in streamed.stream_events():
                    pass
                requests += len(streamed.raw_responses)
            else:
                result = await Runner.run(agent, task, max_turns=4)
                requests += len(result.raw_responses)
        except Exception as exc:  # noqa: BLE001 - every error the agent sees is counted
            errors.append(f"run {i}: {type(exc).__name__}: {exc}"[:400])
    return {"runs": runs, "errors": errors, "tool_calls": CALLS["n"], "requests": requests,
            "seconds": round(time.monotonic() - t0, 1)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))), flush=True)
