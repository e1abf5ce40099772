"""Issue 31 item 5: the policy's ``gateway.fallbacks`` and ``gateway.failover_after_seconds``
are validated strictly (a clear error naming the field; the key never in it), and the
readiness verdict while advising (``advised_verdict``) names a hang the advised
decision found."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_supervisor.decide.decision import Action, Decision
from agent_supervisor.decide.findings import Finding, Severity
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.gateway import FALLBACK_APIS
from agent_supervisor.runtime.gateway_record import advised_verdict, failover_incident
from tests.helpers.policies import fake_engine_policy


def with_fallbacks(tmp_path: Path, *fallbacks: dict, **gateway):
    return fake_engine_policy(tmp_path, gateway={"fallbacks": list(fallbacks), **gateway})


def refused(tmp_path: Path, *fallbacks: dict, **gateway) -> str:
    with pytest.raises(PolicyError) as exc:
        with_fallbacks(tmp_path, *fallbacks, **gateway)
    return str(exc.value)


def test_issue_31_a_fallback_is_read_with_its_defaults(tmp_path: Path) -> None:
    policy = with_fallbacks(tmp_path, {"name": "spare", "url": "https://spare.example:8443/",
                                       "api_key_env": "SPARE_KEY"})
    spec = policy.gateway
    assert spec.failover_after_seconds == 30.0
    (fb,) = spec.fallbacks
    assert (fb.name, fb.url, fb.api_key_env, fb.api_key_file, fb.model) == (
        "spare", "https://spare.example:8443", "SPARE_KEY", None, None)
    assert tuple(fb.apis) == FALLBACK_APIS
    assert fake_engine_policy(tmp_path).gateway.fallbacks == []


@pytest.mark.parametrize("url", ["ftp://spare.example", "spare.example:8000", "http://",
                                 "http://spare.example:99999", "http://u:p@spare.example",
                                 "http://spare.example/?key=1"])
def test_issue_31_a_bad_url_is_refused_naming_the_field(tmp_path: Path, url: str) -> None:
    why = refused(tmp_path, {"name": "spare", "url": url, "api_key_env": "K"})
    assert "gateway.fallbacks[0].url" in why


@pytest.mark.parametrize("keys", [{}, {"api_key_env": "K", "api_key_file": "spare.key"}])
def test_issue_31_exactly_one_key_source(tmp_path: Path, keys: dict) -> None:
    why = refused(tmp_path, {"name": "spare", "url": "http://127.0.0.1:9", **keys})
    assert "gateway.fallbacks[0]" in why
    assert "exactly one of api_key_env and api_key_file" in why


def test_issue_31_names_apis_and_bound_are_checked(tmp_path: Path) -> None:
    one = {"url": "http://127.0.0.1:9", "api_key_env": "K"}
    assert "more than once" in refused(tmp_path, {"name": "a", **one}, {"name": "a", **one})
    assert "gateway.fallbacks[0].name" in refused(tmp_path, {"name": "Bad Name", **one})
    assert "gateway.fallbacks[0].apis" in refused(tmp_path, {"name": "a", "apis": [], **one})
    assert "gateway.fallbacks[0].apis" in refused(
        tmp_path, {"name": "a", "apis": ["embeddings"], **one})
    assert "gateway.fallbacks[0].typo" in refused(tmp_path, {"name": "a", "typo": 1, **one})
    assert "gateway.failover_after_seconds" in refused(tmp_path, failover_after_seconds=0)


def test_issue_31_the_key_is_never_in_an_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARE_KEY", "sk-secret-value")
    (tmp_path / "spare.key").write_text("sk-secret-value\n")
    for keys in ({"api_key_env": "SPARE_KEY"}, {"api_key_file": "spare.key"}):
        why = refused(tmp_path, {"name": "spare", "url": "ftp://x", **keys})
        assert "gateway.fallbacks[0].url" in why
        assert "sk-secret-value" not in why


def hang(action: Action, kind: str = "engine_hang_suspected") -> Decision:
    return Decision(action, 0, "no progress", findings=(Finding(
        guard="hang", kind=kind, severity=Severity.WARNING, summary="flat"),))


def test_issue_31_ready_says_a_hang_while_advising() -> None:
    assert advised_verdict(True, hang(Action.SHED)) == (
        "engine hang suspected (advise mode: the supervisor would shed, and does nothing)")
    assert advised_verdict(True, hang(Action.RESTART, "engine_hung")).startswith(
        "engine hung (advise mode: the supervisor would restart")
    assert advised_verdict(False, hang(Action.SHED)) is None      # acting: the ladder says
    assert advised_verdict(True, None) is None
    assert advised_verdict(True, hang(Action.HOLD)) is None
    assert advised_verdict(True, hang(Action.RESTART, "engine_exited")) is None


def test_issue_31_failover_entries_become_incidents() -> None:
    started = failover_incident({"seq": 1, "at": 1.0e9, "event": "started", "held_seconds":
                                 2.5, "reason": "restart: engine_exited",
                                 "fallbacks": ["spare"]}, "fast")
    assert (started.kind, started.severity, started.outcome) == ("failover", "warning",
                                                                 "started")
    assert "restart: engine_exited" in started.explanation
    ended = failover_incident({"seq": 2, "at": 1.0e9 + 9, "started_at": 1.0e9 + 2,
                               "event": "ended", "reason": "restart: engine_exited",
                               "requests": 4, "failures": 1, "fallbacks": ["spare"],
                               "held_seconds": 9.0}, "fast")
    assert (ended.kind, ended.severity, ended.outcome) == ("failover", "info", "ended")
    assert "4 requests were served by spare, 1 tries" in ended.explanation
    assert ended.ended_at is not None and ended.started_at < ended.ended_at
