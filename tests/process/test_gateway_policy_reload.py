"""Issue 30 item 2: a reload reaches the gateway process with the digest (sha256) of the
bytes the supervisor validated; the gateway refuses a file whose bytes differ, keeps its
policy, and the refusal is an incident (recorded, counted, alerted). Real gateway
process (``supervisor gateway --owner supervisor``, started by the ``GatewayLink``), real
SQLite store, real webhook receiver; the supervisor's side is wired as
``Supervisor._policy_swapped`` wires it (the holder's swap sends the policy on)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from agent_supervisor.policy import PolicyHolder, load_policy_file
from agent_supervisor.record.store import Store
from agent_supervisor.runtime.gateway_link import GatewayLink
from agent_supervisor.runtime.levers import Ladder
from agent_supervisor.runtime.recorder import Recorder
from agent_supervisor.runtime.reload import Reloader
from tests.helpers.alerts import Receiver
from tests.helpers.gateway_process import control
from tests.helpers.production import policy_file
from tests.helpers.recorder import make_recorder, sample_value
from tests.helpers.waiting import wait_for


def with_limit(path: Path, max_concurrency: int, secret: str | None = None) -> None:
    """Rewrite ``path`` with the first mode's gateway limit (and a description that
    stands in for a secret the incident must not carry)."""
    data = yaml.safe_load(path.read_text())
    data["modes"][0]["gateway"] = {"max_concurrency": max_concurrency}
    if secret is not None:
        data["modes"][0]["description"] = secret
    path.write_text(yaml.safe_dump(data))


def gateway_limit(state: Path) -> int | None:
    return control(state, "GET", "/control/state")[1]["summary"]["max_concurrency"]


async def wired(path: Path, recorder: Recorder) -> tuple[PolicyHolder, GatewayLink, Reloader]:
    holder = PolicyHolder(load_policy_file(path), path)
    ladder = Ladder(holder)
    link = GatewayLink(holder, path, CollectorRegistry(), recorder)
    holder.on_swap(lambda old, new: link.apply_policy(new, ladder.rung))
    await link.start()
    return holder, link, Reloader(holder, ladder, recorder, poke=lambda: None)


async def test_issue_30_the_gateway_refuses_a_file_changed_after_validation(
        tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    with_limit(path, 4)
    state = tmp_path / "state"
    state.mkdir()
    policy = load_policy_file(path)
    store = Store.open(policy.database_url, fleet=policy.fleet)
    receiver = Receiver()
    recorder, registry = make_recorder(store, tmp_path, receiver.url)
    recorder.writer.start()
    recorder.alerter.start()
    holder, link, reloader = await wired(path, recorder)
    try:
        assert await asyncio.to_thread(gateway_limit, state) == 4
        # 1. A good reload: the gateway reads the bytes the supervisor validated.
        with_limit(path, 6)
        assert await reloader.reload("test") is True
        await link._flush()
        assert await asyncio.to_thread(gateway_limit, state) == 6
        assert store.incidents(kind="gateway_policy_refused") == []
        # 2. The file changes between the supervisor's validation and the gateway's
        # read: the first swap listener rewrites it (the link's request goes later,
        # from its send queue), as an editor saving twice would.
        validated: list[str | None] = []

        def edit_again(old, new) -> None:
            validated.append(new.source_sha256)
            with_limit(path, 9, secret="hunter2-not-in-the-record")
        holder._listeners.insert(0, edit_again)
        with_limit(path, 8)
        assert await reloader.reload("test") is True
        await link._flush()                    # the gateway answered the reload
        await recorder.writer.flush()
        rows = store.incidents(kind="gateway_policy_refused")
        await wait_for(lambda: receiver.bodies, 20, "the alert")
        # The gateway still runs its previous policy (6), not the validated one (8) nor
        # the file it read (9).
        assert await asyncio.to_thread(gateway_limit, state) == 6
    finally:
        await link.stop()
        await recorder.alerter.close()
        await recorder.writer.close()
        receiver.close()
    # The supervisor runs the policy it validated (8).
    current = holder.current.modes[0].gateway.max_concurrency
    assert current == 8 and holder.current.source_sha256 == validated[0]
    (row,) = rows
    (evidence,) = row.findings
    assert evidence["sha256_validated"] == validated[0]
    assert evidence["sha256_read"] == load_policy_file(path).source_sha256 != validated[0]
    assert "changed after the supervisor validated it" in evidence["reason"]
    assert row.severity == "warning" and "keeps its previous one" in row.explanation
    assert "hunter2" not in json.dumps([row.explanation, row.findings, receiver.bodies])
    assert sample_value(registry, "supervisor_incidents_total",
                        kind="gateway_policy_refused", severity="warning") == 1.0
    assert [b["kind"] for b in receiver.bodies] == ["gateway_policy_refused"]
