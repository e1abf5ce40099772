"""Webhook alerts against a real HTTP receiver: what is sent, the Slack shape, the rate
limit, retries, and that a dead webhook never holds anything up."""

from __future__ import annotations

import asyncio

import pytest

from agent_supervisor.policy.sections import AlertSpec
from agent_supervisor.show.alerts import Alerter
from tests.helpers.alerts import STEP, Receiver, incident
from tests.helpers.ports import free_port
from tests.helpers.waiting import until


async def test_critical_incidents_and_step_downs_are_sent_rate_limited() -> None:
    rx = Receiver()
    alerter = Alerter(AlertSpec(webhook_url=rx.url, min_interval_seconds=60), "fleet-a")
    alerter.start()
    try:
        assert alerter.notify(incident(), None)
        assert not alerter.notify(incident(), None)                  # same kind: suppressed
        assert not alerter.notify(incident("memory_creep", "info"), None)   # info: no alert
        assert alerter.notify(incident("spec_slower_than_plain", "warning"), STEP)  # step down
        # A crash of the same kind that steps down is sent despite the rate limit.
        assert alerter.notify(incident(), STEP)
        await until(lambda: len(rx.bodies) == 3)
        first, step, crash_step = rx.bodies
        assert (crash_step["kind"], crash_step["transition"]["to_mode"]) == (
            "engine_core_died", "mtp1")
        assert (first["fleet"], first["kind"], first["severity"], first["src"]) == (
            "fleet-a", "engine_core_died", "critical", "supervisor")
        assert step["transition"] == {"from_mode": "mtp2", "to_mode": "mtp1",
                                      "actor": "guard:engine_dead", "reason": "2 crashes"}
    finally:
        await alerter.close()
        rx.close()


async def test_slack_payload_and_retries() -> None:
    rx = Receiver(fail=2)
    alerter = Alerter(AlertSpec(webhook_url=rx.url, format="slack", retries=3), "fleet-b")
    alerter.start()
    try:
        alerter.notify(incident("memory_floor", "emergency"), STEP)
        await until(lambda: rx.bodies, timeout=15)
        (body,) = rx.bodies
        assert set(body) == {"text"} and "EMERGENCY memory_floor" in body["text"]
        assert "mtp2 -> mtp1" in body["text"]
    finally:
        await alerter.close()
        rx.close()


async def test_a_dead_webhook_never_blocks() -> None:
    alerter = Alerter(AlertSpec(webhook_url=f"http://127.0.0.1:{free_port()}/none",
                                retries=1, min_interval_seconds=0), "fleet-c")
    alerter.start()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for i in range(50):
        alerter.notify(incident(f"kind{i}"), None)
    assert loop.time() - t0 < 0.1                    # queued, not sent inline
    await alerter.close()


@pytest.mark.parametrize("fmt", ["teams"])
def test_unknown_format_is_refused(fmt: str) -> None:
    with pytest.raises(ValueError, match="Input should be 'generic' or 'slack'"):
        AlertSpec(webhook_url="http://x", format=fmt)


async def test_issue_13_a_crash_precursor_warning_is_alerted_though_nothing_acts() -> None:
    rx = Receiver()
    alerter = Alerter(AlertSpec(webhook_url=rx.url, min_interval_seconds=60), "fleet-a")
    alerter.start()
    try:
        assert alerter.notify(incident("spec_acceptance_anomaly", "warning"), None)
        assert not alerter.notify(incident("spec_structured_output", "warning"), None)
        await until(lambda: len(rx.bodies) == 1)
        assert (rx.bodies[0]["kind"], rx.bodies[0]["severity"]) == (
            "spec_acceptance_anomaly", "warning")
    finally:
        await alerter.close()
        rx.close()
