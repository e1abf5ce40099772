"""The demo models' chat template (issue 33): tools, assistant tool calls and tool results
render in the Hermes format that vLLM's ``hermes`` tool parser reads, and a conversation
without tools renders as the plain ChatML of earlier builds. Rendered by the engine's own
template compiler (transformers, in the engine environment), as vLLM renders it."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent_supervisor.demo.build_models import CHAT_TEMPLATE
from tests.helpers.paths import ROOT

ENGINE_PYTHON = ROOT / ".engine-venv" / "bin" / "python"

RENDER = """
import json, sys
from transformers.utils.chat_template_utils import _compile_jinja_template
case = json.load(sys.stdin)
template = _compile_jinja_template(case["template"])
print(json.dumps(template.render(messages=case["messages"], tools=case["tools"],
                                 add_generation_prompt=True)))
"""

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


def render(messages: list[dict], tools: list[dict] | None) -> str:
    if not ENGINE_PYTHON.exists():
        pytest.skip("no engine environment (make setup builds .engine-venv)")
    out = subprocess.run([str(ENGINE_PYTHON), "-c", RENDER], capture_output=True, text=True,
                         input=json.dumps({"template": CHAT_TEMPLATE, "messages": messages,
                                           "tools": tools}), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_without_tools_the_template_is_plain_chatml() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert render(messages, None) == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                                      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_an_agent_turn_with_tools_renders_in_the_hermes_format() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is in main.py?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "main.py"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
    ]
    text = render(messages, TOOLS)
    system, user, assistant, tool, prompt = text.split("<|im_start|>")[1:]
    assert system.startswith("system\nBe brief.\n\n# Tools\n<tools>\n")
    assert json.loads(system.split("<tools>\n")[1].split("\n</tools>")[0]) == TOOLS[0]
    assert user == "user\nWhat is in main.py?<|im_end|>\n"
    call = assistant.removeprefix("assistant\n<tool_call>").removesuffix(
        "</tool_call><|im_end|>\n")
    assert json.loads(call) == {"name": "read_file", "arguments": {"path": "main.py"}}
    assert tool == "tool\nprint(1)<|im_end|>\n" and prompt == "assistant\n"
