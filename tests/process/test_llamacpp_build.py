"""Issue 15: `supervisor engine-env --kind llama_cpp` is idempotent over what `make setup`
built (.llamacpp/BUILD.json), and refuses an sdist whose hash is not the pinned one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_supervisor.demo import llamacpp
from agent_supervisor.errors import SetupError
from tests.helpers.paths import ROOT

LLAMACPP = ROOT / ".llamacpp"


def test_a_second_build_returns_at_once_and_touches_nothing() -> None:
    if not (LLAMACPP / "BUILD.json").exists():
        pytest.fail("no .llamacpp/BUILD.json: run `make setup` first")
    binary = LLAMACPP / "bin" / "llama-server"
    before = (binary.stat().st_mtime_ns, json.loads((LLAMACPP / "BUILD.json").read_text()))
    out = subprocess.run([sys.executable, "-m", "agent_supervisor", "engine-env", "--kind",
                          "llama_cpp", "--path", str(LLAMACPP)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    assert "up to date" in out.stderr and "llama-server: version:" in out.stdout
    after = (binary.stat().st_mtime_ns, json.loads((LLAMACPP / "BUILD.json").read_text()))
    assert after == before
    assert before[1]["server_key"]["cpu"] == llamacpp._cpu_key()


def test_an_sdist_with_another_hash_is_refused(tmp_path: Path, monkeypatch) -> None:
    sdist = tmp_path / "sdist" / llamacpp.SDIST
    sdist.parent.mkdir()
    sdist.write_bytes(b"not the sdist")
    # pip would be asked for the real one; here it is not reachable, so the download
    # step fails or the hash check does: either way nothing is built from these bytes.
    monkeypatch.setattr(llamacpp, "_run", lambda step, argv, **kw: None)
    with pytest.raises(SetupError, match="is not the pinned"):
        llamacpp._fetch_source(tmp_path)


def test_server_only_converts_no_models(tmp_path: Path) -> None:
    """`make setup` builds llama-server beside the demo models with --server-only: the
    command must not convert a models directory that is there (perhaps half built)."""
    if not (LLAMACPP / "BUILD.json").exists():
        pytest.fail("no .llamacpp/BUILD.json: run `make setup` first")
    (tmp_path / "target").mkdir()              # a demo build under way: no config.json yet
    before = json.loads((LLAMACPP / "BUILD.json").read_text())
    out = subprocess.run([sys.executable, "-m", "agent_supervisor", "engine-env", "--kind",
                          "llama_cpp", "--path", str(LLAMACPP), "--server-only",
                          "--models", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True)
    assert "up to date" in out.stderr and "convert" not in out.stderr
    assert json.loads((LLAMACPP / "BUILD.json").read_text()) == before
