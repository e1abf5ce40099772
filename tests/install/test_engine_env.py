"""Issue 28: the product installed beside vLLM and supervisord, then uninstalled, leaves
supervisord whole.

vLLM 0.32 pulls in supervisord (PyPI ``supervisor``, import name ``supervisor``), so every
vLLM environment has a ``site-packages/supervisor/``. The import package used to be
``supervisor`` too: installing this product there overwrote supervisord's ``__init__.py``
and uninstalling it deleted that file. Reproduced honestly, without touching
.engine-venv: a fresh environment T whose own site-packages holds a copy of the engine
environment's supervisord (every file its RECORD names), with the engine environment's
site-packages after it on sys.path (a .pth line: vLLM and its dependencies importable).
``pip install WHEEL`` there writes into the directory supervisord lives in, and takes from
the index only what of ours the engine environment lacks (alembic, APScheduler,
SQLAlchemy, nvidia-ml-py and theirs), as a ``pip install`` into the engine's environment
would.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
from pathlib import Path

import pytest

from tests.helpers.install import PIP_TIMEOUT_S, clean_env, make_venv, run, site_packages
from tests.helpers.paths import ROOT

ENGINE_VENV = ROOT / ".engine-venv"
needs_engine_env = pytest.mark.skipif(
    not (ENGINE_VENV / "bin" / "python").exists(),
    reason="no .engine-venv (the CPU vLLM environment; `make setup` builds it)")


def _dist_infos(site: Path) -> list[Path]:
    return sorted(site.glob("*.dist-info"))


def top_level_names(site: Path) -> set[str]:
    """Every top-level import name the distributions in ``site`` install: their
    top_level.txt, else the first part of each path in their RECORD."""
    names: set[str] = set()
    for info in _dist_infos(site):
        top = info / "top_level.txt"
        if top.exists():
            names |= {n.strip().split("/")[0] for n in top.read_text().splitlines() if n.strip()}
            continue
        for line in (info / "RECORD").read_text().splitlines() if (info / "RECORD").exists() \
                else []:
            first = line.split(",")[0].split("/")[0]
            if first and not first.startswith("..") and not first.endswith(
                    (".dist-info", ".pth", ".data")) and first != "__pycache__":
                names.add(first.removesuffix(".py"))
    return names


def _supervisord(site: Path) -> tuple[Path, list[tuple[str, str]]]:
    """supervisord's dist-info in ``site`` and its RECORD's (path, sha256) inside ``site``."""
    (info,) = site.glob("supervisor-*.dist-info")
    files = []
    for line in (info / "RECORD").read_text().splitlines():
        path, digest, _size = line.rsplit(",", 2)
        if not path.startswith("..") and digest:
            files.append((path, digest.removeprefix("sha256=")))
    return info, files


def _intact(site: Path, files: list[tuple[str, str]]) -> list[str]:
    """The RECORD entries missing from ``site`` or changed there."""
    bad = []
    for path, digest in files:
        f = site / path
        seen = (base64.urlsafe_b64encode(hashlib.sha256(f.read_bytes()).digest())
                .rstrip(b"=").decode() if f.exists() else None)
        if seen != digest:
            bad.append(f"{path}: {'missing' if seen is None else 'changed'}")
    return bad


@needs_engine_env
def test_issue_28_no_engine_package_uses_our_import_name() -> None:
    names = top_level_names(site_packages(ENGINE_VENV))
    assert {"vllm", "supervisor"} <= names           # the collision the old name had
    assert "agent_supervisor" not in names


@needs_engine_env
def test_issue_28_install_beside_vllm_and_supervisord_then_uninstall(
        wheel: Path, tmp_path: Path) -> None:
    engine_site = site_packages(ENGINE_VENV)
    before = sorted(p.name for p in engine_site.iterdir())
    venv = make_venv(tmp_path / "T")
    site, env, py = site_packages(venv), clean_env(venv), venv / "bin" / "python"
    info, files = _supervisord(engine_site)
    for path, _digest in files:
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(engine_site / path, site / path)
    shutil.copy2(info / "RECORD", site / info.name / "RECORD")
    (site / "engine-env.pth").write_text(f"{engine_site}\n")
    out = run([py, "-m", "pip", "install", wheel], cwd=tmp_path, env=env,
              timeout=PIP_TIMEOUT_S)
    added = next(ln for ln in out.stdout.splitlines() if ln.startswith("Successfully"))
    assert "vllm" not in added.lower() and "fastapi" not in added.lower(), added
    assert (site / "agent_supervisor").is_dir() and (site / "supervisor").is_dir()
    assert _intact(site, files) == []
    both = run([py, "-c", "import vllm, supervisor.supervisord, agent_supervisor; "
                "print(vllm.__version__, supervisor.__file__)"], cwd=tmp_path, env=env)
    assert both.stdout.split() == ["0.32.0", str(site / "supervisor" / "__init__.py")]
    assert run([py, "-m", "supervisor.supervisord", "--version"], cwd=tmp_path,
               env=env).stdout.strip() == "4.3.0"
    assert run([venv / "bin" / "supervisor", "--version"], cwd=tmp_path,
               env=env).stdout.strip() == "supervisor 0.1.0"
    run([venv / "bin" / "supervisor", "policy", "init", "--from", "cpu-demo"],
        cwd=tmp_path, env=env)
    run([venv / "bin" / "supervisor", "policy", "check", "cpu-demo.yaml"], cwd=tmp_path,
        env=env)
    run([py, "-m", "pip", "uninstall", "-y", "agent-serving-supervisor"], cwd=tmp_path,
        env=env)
    assert not (site / "agent_supervisor").exists()
    assert _intact(site, files) == []                    # supervisord's __init__.py too
    assert run([py, "-m", "supervisor.supervisord", "--version"], cwd=tmp_path,
               env=env).stdout.strip() == "4.3.0"
    assert sorted(p.name for p in engine_site.iterdir()) == before   # never written
