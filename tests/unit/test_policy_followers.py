"""Parts that keep state derived from the policy follow a reload themselves (issue 30,
item 4): the ``Window``'s age and the ``Alerter``'s alert section change at the
holder's swap, with no one reaching into them."""

from __future__ import annotations

from pathlib import Path

from agent_supervisor.policy import PolicyHolder
from agent_supervisor.show.alerts import Alerter
from agent_supervisor.telemetry.window import Window
from tests.helpers.policies import fake_engine_policy


def test_issue_30_window_and_alerter_follow_the_holder(tmp_path: Path) -> None:
    policy = fake_engine_policy(tmp_path)
    holder = PolicyHolder(policy)
    window = Window(policy.sampling.window_seconds)
    alerter = Alerter(policy.alerts, policy.fleet, url="http://127.0.0.1:9/unused")
    window.follow(holder)
    alerter.follow(holder)
    new = policy.model_copy(update={
        "sampling": policy.sampling.model_copy(update={"window_seconds": 123.0}),
        "alerts": policy.alerts.model_copy(update={"min_interval_seconds": 7.0})})
    assert window.max_age_seconds != 123.0 and alerter.spec.min_interval_seconds != 7.0
    holder.swap(new)
    assert window.max_age_seconds == 123.0
    assert alerter.spec is new.alerts and alerter.spec.min_interval_seconds == 7.0
