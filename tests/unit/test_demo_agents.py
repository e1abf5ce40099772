"""Issue 33, "Real agents": the demo lets a real coding agent in. Measured against
``make demo``: the OpenAI Agents SDK failed every run with 400 ('"auto" tool choice
requires --enable-auto-tool-choice and --tool-call-parser to be set'), and the demo's
1,024-token context could not hold Claude Code's or Codex CLI's system prompt and tools.

Checked here without an engine: the demo policies' arguments (tool calling on, with a
parser the demo models' chat template writes for; every rung's context, and the gateway's
prompt limit, above Claude Code's first request; within the models' positions), and, where
the engine environment is built, that the installed vLLM has that parser and the access-log
flag the policy passes. The real engine runs them in tests/integration/
(test_gateway_real.py step 6: the Agents SDK; test_claude_code_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.demo.build_models import CHAT_TEMPLATE, MAX_POSITIONS
from agent_supervisor.policy import load_policy_file

ROOT = Path(__file__).resolve().parents[2]
#: Claude Code 2.1.332's first request in print mode (system prompt, 12 tools, the user's
#: turn) in the demo models' vocabulary (docs/gateway.md), and the answer bound its test sets.
CLAUDE_CODE_PROMPT_TOKENS = 33_358
ANSWER_TOKENS = 256


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _vllm_site() -> Path:
    found = sorted((ROOT / ".engine-venv" / "lib").glob("python3*/site-packages/vllm"))
    if not found:
        pytest.skip("no engine environment (make setup builds .engine-venv)")
    return found[0]


def test_issue_33_the_vllm_demo_enables_tool_calling_with_the_templates_parser() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    args = list(policy.engine.args)
    assert "--enable-auto-tool-choice" in args
    assert _flag(args, "--tool-call-parser") == "hermes"
    # The template writes Hermes tool calls, the parser's format.
    assert "<tool_call>" in CHAT_TEMPLATE and "</tool_call>" in CHAT_TEMPLATE
    for mode in policy.modes:       # no rung turns it off
        assert not {"--enable-auto-tool-choice", "--tool-call-parser"} & set(mode.args)


def test_issue_33_every_vllm_demo_rung_holds_a_coding_agents_prompt() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    for mode in policy.modes:
        context = int(mode.args["--max-model-len"])
        assert CLAUDE_CODE_PROMPT_TOKENS + ANSWER_TOKENS <= context <= MAX_POSITIONS, mode.name
        limit = mode.gateway.max_prompt_tokens
        assert limit is None or CLAUDE_CODE_PROMPT_TOKENS <= limit < context, mode.name


def test_issue_33_every_llamacpp_demo_slot_holds_a_coding_agents_prompt() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo-llamacpp.yaml")
    for mode in policy.modes:
        per_slot = int(mode.args["--ctx-size"]) // int(mode.args["--parallel"])
        assert CLAUDE_CODE_PROMPT_TOKENS + ANSWER_TOKENS <= per_slot <= MAX_POSITIONS, mode.name


def test_issue_33_the_installed_vllm_has_the_parser_and_the_access_log_flag() -> None:
    site = _vllm_site()
    assert (site / "tool_parsers" / "hermes_tool_parser.py").is_file()
    assert '"hermes"' in (site / "tool_parsers" / "__init__.py").read_text()
    cli_args = (site / "entrypoints" / "launchers" / "cli_args.py").read_text()
    assert "disable_access_log_for_endpoints" in cli_args
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    probes = _flag(list(policy.engine.args), "--disable-access-log-for-endpoints")
    assert probes is not None and {"/health", "/metrics"} <= set(probes.split(","))
