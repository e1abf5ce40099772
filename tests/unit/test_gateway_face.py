"""Issue 30 item 2, one gateway face: ``GatewayLink`` (the gateway's own process) and
``Gateway`` (in-process) both have ``GatewayFace`` with the same signatures, the service's
wiring never asks which one it holds, and a policy given in memory is written for the
gateway process so that it loads as the same policy (its relative paths where the
policy's own resolve)."""

from __future__ import annotations

import ast
import hashlib
import inspect
import stat
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent_supervisor.gateway.server import Gateway
from agent_supervisor.policy import PolicyHolder, load_policy
from agent_supervisor.policy.load import load_policy_file
from agent_supervisor.runtime.gateway_face import GatewayFace
from agent_supervisor.runtime.gateway_link import WRITTEN_POLICY, GatewayLink, make_gateway
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy

FACE = [n for n, v in vars(GatewayFace).items() if inspect.isfunction(v) and
        not n.startswith("_")]


def test_the_face_names_what_the_service_uses() -> None:
    assert sorted(FACE) == ["apply_policy", "follow", "gateway_load", "hold", "refresh",
                            "release", "set_shed", "start", "stop", "summary"]


@pytest.mark.parametrize("kind", ["link", "in-process"])
def test_issue_30_both_have_the_one_face(tmp_path: Path, kind: str) -> None:
    policy = fake_engine_policy(tmp_path)
    gw = GatewayLink(PolicyHolder(policy), None, CollectorRegistry()) if kind == "link" \
        else Gateway(policy, rung=0, registry=CollectorRegistry())
    assert isinstance(gw, GatewayFace)
    for name in FACE:
        theirs = inspect.signature(getattr(type(gw), name)).parameters
        ours = list(inspect.signature(getattr(GatewayFace, name)).parameters)
        extra = [p for n, p in theirs.items() if n not in ours]
        assert list(theirs)[:len(ours)] == ours, (name, theirs)   # more only with defaults
        assert all(p.default is not inspect.Parameter.empty for p in extra), (name, theirs)
        assert inspect.iscoroutinefunction(getattr(type(gw), name)) == \
            inspect.iscoroutinefunction(getattr(GatewayFace, name)), name


def test_issue_30_the_service_runs_the_gateway_process_even_without_a_file(
        tmp_path: Path) -> None:
    policy = fake_engine_policy(tmp_path)
    assert isinstance(make_gateway(PolicyHolder(policy), CollectorRegistry(), None),
                      GatewayLink)
    off = fake_engine_policy(tmp_path, gateway={"enabled": False})
    assert make_gateway(PolicyHolder(off), CollectorRegistry(), None) is None


def test_issue_30_no_branching_on_which_gateway() -> None:
    """No ``isinstance(x, Gateway)`` or ``GatewayLink`` in the service and runtime/ (the
    wiring had two, the listeners and the status one each)."""
    files = [ROOT / "agent_supervisor" / "service.py",
             *sorted((ROOT / "agent_supervisor" / "runtime").glob("*.py"))]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                if names & {"Gateway", "GatewayLink", "GatewayFace"}:
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_issue_30_a_policy_in_memory_is_written_for_the_gateway_process(tmp_path: Path) -> None:
    base = tmp_path / "fleet"
    base.mkdir()
    text = ("fleet: f\nengine: {executable: python, port: 9001, working_directory: run}\n"
            "modes: [{name: fast, gateway: {max_concurrency: 3}}, {name: safe}]\n"
            "gateway: {port: 9002, hold_timeout_seconds: 7, auth: keys, api_keys: "
            f"[{{name: a, sha256: {'a' * 64}}}]}}\nadmin: {{port: 9003}}\n"
            "storage: {state_directory: state}\n"
            "hysteresis: {step_up_windows: [22:00-06:00]}\n")
    policy = load_policy(text, base_dir=base)
    link = GatewayLink(PolicyHolder(policy), None, CollectorRegistry())
    assert link.policy_path == base / "state" / WRITTEN_POLICY
    (base / "state").mkdir()
    digest = link._write(policy)
    raw = link.policy_path.read_bytes()
    assert digest == hashlib.sha256(raw).hexdigest()
    assert stat.S_IMODE(link.policy_path.stat().st_mode) == 0o600
    read = load_policy_file(link.policy_path, base_dir=base)
    assert read.model_dump() == policy.model_dump()
    assert read.state_directory == policy.state_directory == base / "state"
    assert read.working_directory == base / "run"
    assert read.source_sha256 == digest
    # A reload writes the file again; the digest sent is the new file's.
    swapped = policy.model_copy(update={"description": "reloaded"})
    assert link._write(swapped) == hashlib.sha256(link.policy_path.read_bytes()).hexdigest()
    assert load_policy_file(link.policy_path, base_dir=base).description == "reloaded"
