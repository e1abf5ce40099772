"""Build llama.cpp's ``llama-server`` and the demo's GGUF models. Both steps are idempotent.

``llama-server`` is built from the llama.cpp source that the ``llama-cpp-python`` sdist on
PyPI vendors (``vendor/llama.cpp``, with ``tools/server``), fetched with pip and checked
against a pinned SHA-256, built with CMake and Ninja (the system's, else PyPI's ``cmake``
and ``ninja`` in a small environment of their own) into ``<root>/bin/llama-server``. The
demo models (``supervisor demo-models``: Hugging Face directories) are converted to f16
GGUF with the vendored ``convert_hf_to_gguf.py`` and ``gguf-py``, run by the engine
environment's Python (it has torch) through ``gguf_convert.py``.

``<root>/BUILD.json`` records what was built with which key; a second call with the same
key returns at once, so a clean clone builds once (CI: ``make setup``).

The build is native (``GGML_NATIVE`` on, llama.cpp's default): the cache key carries the
CPU's instruction-set flags, so a binary is never reused on a CPU that may lack them (a
SIGILL at the first matrix multiply otherwise).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path

from agent_supervisor.errors import SetupError

__all__ = ["CMAKE_ARGS", "LLAMA_CPP_PYTHON_VERSION", "SDIST_SHA256", "build_llama_cpp"]

logger = logging.getLogger(__name__)

#: The sdist whose vendored llama.cpp is built (PyPI ``llama-cpp-python``).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
TOP = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/"

#: Only the server, statically linked, no network model download (LLAMA_CURL off) and no
#: TLS (LLAMA_OPENSSL off): the engine serves local files on loopback.
CMAKE_ARGS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
              "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
              "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON")
CONVERT_SCRIPT = Path(__file__).with_name("gguf_convert.py")
#: demo model directory -> GGUF file name (the target and its draft share the tokenizer).
GGUF_MODELS = {"target": "target-f16.gguf", "draft": "draft-f16.gguf"}


def _run(step: str, argv: list[str], **kwargs: object) -> None:
    logger.info("%s: %s", step, " ".join(argv))
    proc = subprocess.run(argv, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SetupError(f"{step} failed with status {proc.returncode}: {' '.join(argv)}")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _cpu_key() -> str:
    """The CPU's instruction-set flags (``/proc/cpuinfo``), hashed: part of the cache key."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith(("flags", "Features"))), [])
    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:16]


def _fetch_source(root: Path) -> Path:
    """The sdist (pip download, checked against ``SDIST_SHA256``) extracted to
    ``root/src``. Returns its vendored llama.cpp, ``root/src/vendor/llama.cpp``."""
    sdist = root / "sdist" / SDIST
    if not sdist.exists() or _sha256(sdist) != SDIST_SHA256:
        _run("download llama-cpp-python sdist", [
            sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
            "-d", str(sdist.parent)])
    got = _sha256(sdist)
    if got != SDIST_SHA256:
        raise SetupError(f"{sdist}: SHA-256 {got} is not the pinned {SDIST_SHA256}")
    src = root / "src"
    llama = src / "vendor" / "llama.cpp"
    if not (llama / "tools" / "server").is_dir():
        shutil.rmtree(src, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            members = []
            for m in tar.getmembers():
                if m.name.startswith(TOP):
                    m.name = m.name[len(TOP):]
                    members.append(m)
            tar.extractall(src, members=members, filter="data")
    return llama


def _build_tools(root: Path) -> tuple[str, str]:
    """(cmake, ninja): the system's, else PyPI's in ``root/tools``."""
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    if cmake and ninja:
        return cmake, ninja
    tools = root / "tools"
    if not (tools / "bin" / "ninja").exists():
        venv.create(tools, with_pip=True)
        _run("install cmake and ninja from PyPI", [str(tools / "bin" / "python"), "-m", "pip",
                                                   "install", "-q", "cmake>=3.20", "ninja"])
    return cmake or str(tools / "bin" / "cmake"), ninja or str(tools / "bin" / "ninja")


def _build_server(root: Path, jobs: int) -> dict[str, object]:
    """Configure and build ``llama-server``, install it to ``root/bin``."""
    t0 = time.monotonic()
    src = _fetch_source(root)
    cmake, ninja = _build_tools(root)
    build = root / "build"
    _run("configure llama.cpp", [cmake, "-S", str(src), "-B", str(build), "-G", "Ninja",
                                 f"-DCMAKE_MAKE_PROGRAM={ninja}", *CMAKE_ARGS])
    _run("build llama-server", [cmake, "--build", str(build), "--target", "llama-server",
                                "-j", str(jobs)])
    (root / "bin").mkdir(exist_ok=True)
    binary = root / "bin" / "llama-server"
    tmp = binary.with_suffix(".new")
    shutil.copy2(build / "bin" / "llama-server", tmp)
    os.replace(tmp, binary)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             check=False, timeout=60)
    if version.returncode != 0:
        raise SetupError(f"{binary} --version failed ({version.returncode}): "
                         f"{version.stderr.strip()[-500:]}")
    return {"build_seconds": round(time.monotonic() - t0, 1), "jobs": jobs,
            "version": (version.stdout + version.stderr).strip().splitlines()[:2]}


def _convert_models(root: Path, models: Path, engine_python: Path) -> dict[str, str]:
    """The demo target and draft as f16 GGUF in ``root/models``."""
    out = root / "models"
    out.mkdir(exist_ok=True)
    paths = {}
    for name, file in GGUF_MODELS.items():
        if not (models / name / "config.json").exists():
            raise SetupError(f"no demo model at {models / name}: run `supervisor demo-models`")
        _run(f"convert {name} to GGUF", [str(engine_python), str(CONVERT_SCRIPT),
                                         str(root / "src" / "vendor" / "llama.cpp"),
                                         str(models / name), str(out / file)])
        paths[name] = str(out / file)
    return paths


def build_llama_cpp(root: Path, *, models: Path | None = None,
                    engine_python: Path | None = None, jobs: int | None = None) -> dict:
    """Build ``root/bin/llama-server`` and, given the demo models and the engine's Python,
    their GGUF files in ``root/models``; skip what ``root/BUILD.json`` says is built with
    the same key (version, pinned hash, CMake flags, CPU flags; for the models the
    converter script and the demo build).

    Returns: the build report. Raises: SetupError naming the step that failed.
    """
    root.mkdir(parents=True, exist_ok=True)
    report_path = root / "BUILD.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    server_key = {"llama_cpp_python": LLAMA_CPP_PYTHON_VERSION, "sdist_sha256": SDIST_SHA256,
                  "cmake_args": list(CMAKE_ARGS), "cpu": _cpu_key()}
    if report.get("server_key") != server_key or not (root / "bin" / "llama-server").exists():
        report = {"server_key": server_key,
                  **_build_server(root, jobs or os.cpu_count() or 1)}
        report_path.write_text(json.dumps(report, indent=2) + "\n")
        logger.info("llama-server built in %.1f s", report["build_seconds"])
    else:
        logger.info("llama-server in %s is up to date", root / "bin")
    if models is None or engine_python is None:
        return report
    demo = models / "BUILD.json"
    models_key = {"script": _sha256(CONVERT_SCRIPT)[:16],
                  "demo": _sha256(demo)[:16] if demo.exists() else None,
                  "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION}
    files_there = all((root / "models" / f).exists() for f in GGUF_MODELS.values())
    if report.get("models_key") != models_key or not files_there:
        t0 = time.monotonic()
        report["models"] = _convert_models(root, models, engine_python)
        report["models_key"] = models_key
        report["convert_seconds"] = round(time.monotonic() - t0, 1)
        report_path.write_text(json.dumps(report, indent=2) + "\n")
    else:
        logger.info("GGUF models in %s are up to date", root / "models")
    return report
