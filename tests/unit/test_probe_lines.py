"""Issue 33: the supervisor's own probe lines, as the engines write them, are told apart
from everything else an operator needs in a log view (agent_supervisor/show/probe_lines.py)."""

from __future__ import annotations

from agent_supervisor.show.probe_lines import hide_probe_lines, is_probe_line, tail_without_probes
from tests.helpers.paths import ROOT

CORE_DIED = ROOT / "tests/fixtures/engine_log/cpu-demo-0.32.0-mimo-mtp2-core-died.txt"


def test_issue_33_the_recorded_vllm_run_loses_its_65_probe_lines_and_nothing_else() -> None:
    text = CORE_DIED.read_text()
    kept, hidden = hide_probe_lines(text)
    assert hidden == 65
    assert len(kept.splitlines()) == len(text.splitlines()) - 65
    assert 'INFO:     127.0.0.1:44516 - "POST /v1/chat/completions HTTP/1.1" 200 OK' in kept
    assert "EngineDeadError" in kept and "GET /health" not in kept and "GET /metrics" not in kept


def test_issue_33_only_a_successful_local_probe_is_a_probe_line() -> None:
    probes = [
        'INFO:     127.0.0.1:44730 - "GET /health HTTP/1.1" 200 OK',
        '(APIServer pid=7) INFO:     127.0.0.1:1 - "GET /metrics HTTP/1.1" 200 OK',
        'INFO:     ::1:1 - "GET /version HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:9 - "GET /ping HTTP/1.1" 200 OK',
        "srv  log_server_r: request: GET /health 127.0.0.1 200",
        "0.00.057.753 I srv  log_server_r: request: GET /slots 127.0.0.1 200",
        '{"tid":"1","level":"INFO","function":"log_server_request","msg":"request",'
        '"remote_addr":"127.0.0.1","remote_port":5,"status":200,"method":"GET",'
        '"path":"/metrics","params":{}}',
    ]
    others = [
        'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 503 Service Unavailable',
        'INFO:     10.0.0.7:1 - "GET /health HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK',
        "srv  log_server_r: request: POST /completion 127.0.0.1 503",
        "(APIServer pid=7557) INFO [launcher.py:195] Route: /health, Methods: GET",
    ]
    assert [is_probe_line(x) for x in probes] == [True] * len(probes)
    assert [is_probe_line(x) for x in others] == [False] * len(others)


def test_issue_33_a_tail_counts_lines_without_probes_and_keeps_an_unfinished_line() -> None:
    probe = 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK'
    text = "\n".join(["a", probe, "b", probe, probe, "c"]) + "\n"
    assert tail_without_probes(text, 2) == ("b\nc\n", 2)
    assert hide_probe_lines(f"a\n{probe}\n{probe}") == (f"a\n{probe}", 1)
