"""The engine's compile and JIT caches, and moving them aside after a poisoned one.

A compile cache that a failed or interrupted compilation left corrupt is replayed at every
start: vLLM says so itself ("vLLM failed to compile the model. The most likely reason for
this is that a previous compilation failed, leading to a corrupted compilation artifact.
We recommend trying to remove ~/.cache/vllm/torch_compile_cache", vllm-project/vllm#21858;
#24915: only ``rm -rf $VLLM_CACHE_ROOT/torch_compile_cache`` let the next start through).
The supervisor renames the caches (never deletes them: the operator may want to read
them) and the engine recompiles into fresh ones (issue 29).

Where the caches are, from the engine's own environment (``engine_env.engine_environment``):

- vLLM: ``$VLLM_CACHE_ROOT`` (else ``$XDG_CACHE_HOME/vllm``, else ``~/.cache/vllm``)
  ``/torch_compile_cache`` (vllm/envs.py VLLM_CACHE_ROOT);
- Inductor: ``$TORCHINDUCTOR_CACHE_DIR`` when set (its default lives under the run's
  private TMPDIR, removed after every run);
- Triton: ``$TRITON_CACHE_DIR``, else ``~/.triton/cache``;
- FlashInfer's JIT: ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``, else
  ``~/.cache/flashinfer``.

A container engine's caches are inside its image or its mounts: only the host paths
above are moved.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["compile_cache_dirs", "move_aside"]

logger = logging.getLogger(__name__)


def compile_cache_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    """The compile/JIT cache directories an engine with environment ``env`` uses."""
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    vllm_root = Path(env.get("VLLM_CACHE_ROOT") or cache / "vllm")
    dirs = [vllm_root / "torch_compile_cache"]
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        dirs.append(Path(env["TORCHINDUCTOR_CACHE_DIR"]))
    dirs.append(Path(env.get("TRITON_CACHE_DIR") or home / ".triton" / "cache"))
    base = env.get("FLASHINFER_WORKSPACE_BASE")
    dirs.append(Path(base) / ".cache" / "flashinfer" if base else cache / "flashinfer")
    return list(dict.fromkeys(dirs))


def move_aside(dirs: list[Path], suffix: str) -> list[tuple[Path, Path]]:
    """Rename each existing directory of ``dirs`` to ``<name>.moved-<suffix>`` (a number
    added if that exists). Returns (old, new) of those moved; one that cannot be renamed
    is logged and left (the relaunch then meets it again, and the second failure holds)."""
    moved: list[tuple[Path, Path]] = []
    for d in dirs:
        if not d.is_dir():
            continue
        target, n = d.with_name(f"{d.name}.moved-{suffix}"), 1
        while target.exists():
            target, n = d.with_name(f"{d.name}.moved-{suffix}-{n}"), n + 1
        try:
            os.rename(d, target)
        except OSError as exc:
            logger.warning("compile cache %s could not be moved aside: %s", d, exc)
            continue
        logger.info("compile cache %s moved aside to %s", d, target)
        moved.append((d, target))
    return moved
