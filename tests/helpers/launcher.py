"""The engine launcher on the fake engine: ``launcher_for(tmp_path, *fake_args, **sections)``
gives an ``EngineLauncher`` and the list of states it moved through; ``core_pid(pid)`` is the
pid of the ``VLLM::EngineCore`` child of an engine API server."""

from __future__ import annotations

from pathlib import Path

import psutil

from agent_supervisor.act.launcher import EngineLauncher
from agent_supervisor.states import EngineState
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for  # noqa: F401  (moved; importers use tests.helpers)


def launcher_for(tmp_path: Path, *fake_args: str, **sections):
    changes: list[EngineState] = []
    policy = fake_engine_policy(tmp_path, fake_args=list(fake_args), **sections)
    launcher = EngineLauncher(policy, on_change=lambda run, state: changes.append(state))
    return launcher, changes


def core_pid(pid: int) -> int:
    (core,) = [c for c in psutil.Process(pid).children()
               if c.cmdline()[:1] == ["VLLM::EngineCore"]]
    return core.pid
