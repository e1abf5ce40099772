"""Issue 34: the engine key still reached the record and the terminal: an argument
vector printed as a list, the trace files, and ``policy check``'s output."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.cli import main as cli_main
from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.privacy import mask_json, mask_text
from agent_supervisor.record.trace import TraceWriter, read_trace
from agent_supervisor.states import EngineState
from agent_supervisor.telemetry.sample import Sample

KEY = "sk-live-0123456789abcdef"


@pytest.mark.parametrize("text", [
    f"cmd=['vllm', 'serve', '--api-key', '{KEY}', '--port', '8000']",
    f'cmd=["vllm", "serve", "--api-key", "{KEY}"]',
    f"args=('--hf-token', '{KEY}')",
    f"['--api-key' ,  '{KEY}']",
    f"['--api-key={KEY}', '--port', '1']",
])
def test_issue_34_list_forms_are_masked(text: str) -> None:
    masked = mask_text(text)
    assert KEY not in masked and "***" in masked


def test_issue_34_list_form_keeps_the_rest_readable() -> None:
    assert mask_text(f"['vllm', '--api-key', '{KEY}', '--port', '8000']") == \
        "['vllm', '--api-key', '***', '--port', '8000']"
    assert mask_json({"argv": ["vllm", "--api-key", KEY], "api_key": KEY, "n": 1.5}) == \
        {"argv": ["vllm", "--api-key", "***"], "api_key": "***", "n": 1.5}


def test_issue_34_trace_files_are_masked(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    writer.header(fleet="f", t0_s=0.0, baselines={})
    writer.sample(Sample(t_s=1.0, engine_state=EngineState.READY, engine_log_lines=(
        f"INFO non-default args: {{'api_key': ['{KEY}']}}",
        f"ERROR Command ['vllm', '--api-key', '{KEY}'] failed")))
    writer.decision(1.0, Decision(Action.HOLD, 0, "x", (Finding(
        "g", "k", Severity.INFO, f"launched with --api-key {KEY}",
        evidence={"argv": ["vllm", "--api-key", KEY]}),)))
    writer.close()
    text = path.read_text()
    assert KEY not in text and text.count("***") == 4
    records = read_trace(path)          # still a trace replay reads
    assert [r["type"] for r in records] == ["header", "sample", "decision"]


def test_issue_34_policy_check_prints_no_secret(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"""fleet: f
engine:
  executable: vllm
  args: ["--api-key", "{KEY}"]
modes:
  - {{name: a, args: {{"--hf-token": "{KEY}"}}}}
  - {{name: b, args: {{"--speculative-config": {{"method": "mtp",
      "num_speculative_tokens": 2, "api_key": "{KEY}"}}}}}}
""")
    assert cli_main(["policy", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert KEY not in out
    assert "vllm --api-key *** --hf-token ***" in out
    assert '"api_key":"***"' in out
