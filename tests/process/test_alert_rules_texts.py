"""Issue 33, alert rules: an operator's own step down never pages, the rules' texts name
policy keys that exist, and every rule links its section of the runbook."""

from __future__ import annotations

import re
import subprocess
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from agent_supervisor.act.incident import Incident, Transition
from agent_supervisor.policy import Policy
from agent_supervisor.policy.sections import AlertSpec
from agent_supervisor.record.store import Store
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.show.metrics import TRANSITION_CAUSES
from tests.helpers.alert_rules import RULES, promtool, rules
from tests.helpers.recorder import make_recorder, sample_value


def _step_down_case(cause: str) -> dict:
    """A promtool test case: rung 0 -> 1 at 3m by ``cause``; every other cause's series
    at 0 from the first scrape, as the supervisor exports them."""
    series = [{"series": 'supervisor_rung{job="s", instance="a"}', "values": "0 0 0 1x12"}]
    for c in TRANSITION_CAUSES:
        series.append({
            "series": f'supervisor_rung_changes_total{{job="s", instance="a", '
                      f'direction="down", cause="{c}"}}',
            "values": "0 0 0 1x12" if c == cause else "0x15"})
    return {"name": f"a step down by {cause}", "interval": "1m", "input_series": series}


def _fired(rung: int) -> list[dict]:
    """StepDown as it fires on instance ``a`` at ``rung`` (its annotations rendered)."""
    (rule,) = [r for r in rules() if r["alert"] == "StepDown"]
    rendered = {k: v.replace("{{ $labels.instance }}", "a").replace("{{ $value }}", str(rung))
                for k, v in rule["annotations"].items()}
    return [{"exp_labels": {"severity": "warning", "job": "s", "instance": "a"},
             "exp_annotations": rendered}]


def _run_rule_test(tmp_path: Path, cases: list[dict]) -> subprocess.CompletedProcess:
    (tmp_path / RULES.name).write_text(RULES.read_text())
    (tmp_path / "t.yml").write_text(yaml.safe_dump({
        "rule_files": [RULES.name], "evaluation_interval": "1m", "tests": cases}))
    return subprocess.run([promtool(), "test", "rules", "t.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_issue_33_an_operator_step_down_does_not_fire_step_down(tmp_path: Path) -> None:
    quiet = _step_down_case("operator")
    quiet["alert_rule_test"] = [{"eval_time": t, "alertname": "StepDown", "exp_alerts": []}
                                for t in ("3m", "4m", "8m", "14m")]
    paged = _step_down_case("guard")
    paged["alert_rule_test"] = [{"eval_time": "4m", "alertname": "StepDown",
                                 "exp_alerts": _fired(1)}]
    run = _run_rule_test(tmp_path, [quiet, paged])
    assert run.returncode == 0, run.stdout + run.stderr
    # A startup step down (the previous life crashed the host) pages like a guard's.
    startup = _step_down_case("startup")
    startup["alert_rule_test"] = paged["alert_rule_test"]
    run = _run_rule_test(tmp_path, [startup])
    assert run.returncode == 0, run.stdout + run.stderr


def test_issue_33_recorder_counts_rung_changes_by_direction_and_cause(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}", fleet="test")
    recorder, registry = make_recorder(store, tmp_path, "http://127.0.0.1:9/")
    # Every series is there at 0 before the first change (for increase()).
    for direction in ("down", "up"):
        for cause in TRANSITION_CAUSES:
            assert registry.get_sample_value("supervisor_rung_changes_total", {
                "direction": direction, "cause": cause}) == 0.0, (direction, cause)
    now = datetime.now(UTC)
    for actor, frm, to in (("operator", 0, 1), ("guard:memory_floor", 1, 2),
                           ("schedule", 2, 1), ("startup", 0, 1), ("operator", 1, 1)):
        recorder.incident(Incident(kind="step_down", severity="info", started_at=now,
                                   action="step_down", explanation="test"),
                          Transition(at=now, from_mode=f"m{frm}", to_mode=f"m{to}",
                                     from_rung=frm, to_rung=to, reason="test", actor=actor))
    values = {(d, c): sample_value(registry, "supervisor_rung_changes_total",
                                   direction=d, cause=c)
              for d in ("down", "up") for c in TRANSITION_CAUSES}
    assert {k: v for k, v in values.items() if v} == {
        ("down", "operator"): 1.0, ("down", "guard"): 1.0, ("up", "schedule"): 1.0,
        ("down", "startup"): 1.0}
    # The transitions counter keeps its series and labels.
    assert sample_value(registry, "supervisor_transitions_total", from_mode="m1",
                        to_mode="m2", actor="guard:memory_floor") == 1.0


#: A dotted policy key as the rules' texts name it: ``guards.memory_floor.min_available_bytes``,
#: ``modes[].gateway`` (a list's items written ``[]``).
_KEY = re.compile(r"(?<![\w.])([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)+)(?![\w])")


def policy_key_exists(key: str) -> bool:
    """Whether ``key`` resolves field by field in the Policy model (pydantic)."""
    model: Any = Policy
    for part in key.split("."):
        name = part.removesuffix("[]")
        fields = getattr(model, "model_fields", None)
        if fields is None or name not in fields:
            return False
        annotation = fields[name].annotation
        models = [a for a in (annotation, *_args_deep(annotation))
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        model = models[0] if models else None
    return True


def _args_deep(tp: Any) -> list[Any]:
    out: list[Any] = []
    for arg in typing.get_args(tp):
        out += [arg, *_args_deep(arg)]
    return out


def policy_keys_named(text: str) -> set[str]:
    """The dotted words of ``text`` whose first part is a top-level policy key."""
    return {k for k in _KEY.findall(text)
            if k.split(".", 1)[0].removesuffix("[]") in Policy.model_fields}


def test_issue_33_policy_key_resolution_tells_real_keys_from_made_up_ones() -> None:
    assert policy_key_exists("guards.memory_floor.min_available_bytes")
    assert policy_key_exists("restart.start_limit_burst")
    assert policy_key_exists("hysteresis.calm_seconds")
    assert policy_key_exists("modes[].gateway.max_concurrency")
    assert not policy_key_exists("hysteresis.step_up_after_seconds")
    assert not policy_key_exists("guards.memory_floor.min_available")
    assert policy_keys_named("after hysteresis.step_up_after_seconds of calm; see "
                             "supervisor.rules.yml and prometheus.yml") == {
        "hysteresis.step_up_after_seconds"}


def test_issue_33_every_policy_key_a_rule_names_exists() -> None:
    named = {(r["alert"], key) for r in rules() for text in r["annotations"].values()
             for key in policy_keys_named(text)}
    assert named, "no rule names a policy key"
    assert [(alert, key) for alert, key in sorted(named) if not policy_key_exists(key)] == []


RUNBOOK = RULES.parent / "runbook.md"


def github_anchors(markdown: str) -> list[str]:
    """The anchors GitHub (and most Markdown renderers) give the headings: lower case,
    punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    return [re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in markdown.splitlines() if re.match(r"#{1,6} ", line)]


def test_issue_33_every_rule_links_its_runbook_section() -> None:
    text = RUNBOOK.read_text()
    anchors = github_anchors(text)
    assert github_anchors("## StepDown\n## What it means, now\n") == [
        "stepdown", "what-it-means-now"]
    sections = {a: body for a, body in zip(
        anchors[1:], re.split(r"^## .*$", text, flags=re.M)[1:], strict=True)}
    for rule in rules():
        url = rule["annotations"].get("runbook_url")
        assert url, f"{rule['alert']} has no runbook_url"
        path, _, anchor = url.partition("#")
        assert (RULES.parent / path).resolve() == RUNBOOK.resolve(), url
        assert anchor == rule["alert"].lower() and anchor in anchors, url
        # What it means, what the supervisor already did, what is left to the operator.
        for part in ("**Means**", "**The supervisor did**", "**Do**"):
            assert part in sections[anchor], (rule["alert"], part)
    # No section for an alert that does not exist.
    assert set(sections) == {r["alert"].lower() for r in rules()}
    for link in re.findall(r"\]\(#([\w-]+)\)", text):
        assert link in anchors, link


def test_issue_33_every_policy_key_the_runbook_names_exists() -> None:
    named = policy_keys_named(RUNBOOK.read_text())
    assert {"hysteresis.calm_seconds", "guards.memory_floor.min_available_bytes"} <= named
    assert sorted(k for k in named if not policy_key_exists(k)) == []


def test_issue_33_an_operator_step_down_sends_no_webhook_alert_a_guards_does() -> None:
    alerter = Alerter(AlertSpec(webhook_url="http://127.0.0.1:9/", min_interval_seconds=0),
                      "test")
    now = datetime.now(UTC)

    def step(actor: str, frm: int, to: int, severity: str = "info") -> bool:
        return alerter.notify(
            Incident(kind="step_down" if to > frm else "step_up", severity=severity,
                     started_at=now, action="step_down", explanation="test"),
            Transition(at=now, from_mode=f"m{frm}", to_mode=f"m{to}", from_rung=frm,
                       to_rung=to, reason="test", actor=actor))

    assert not step("operator", 0, 1)
    assert not step("operator", 1, 0)
    assert step("guard:memory_pressure", 0, 1, "warning")
    assert step("startup", 0, 1, "warning")
    # An operator's move while a critical finding stands still alerts on the finding.
    assert step("operator", 1, 2, "critical")
