"""Classify vLLM's own log lines into incident tags. Pure: one line in, tags out.

One table, ``SIGNATURES``: each entry names its tag, its pattern, whether the signature points at
speculative decoding when speculation is on (illegal memory access and device-side asserts are
the known long-run spec-decode crashes: vllm-project/vllm #40756, #22755, #21986), and the
source of the text: the vLLM 0.32.0 file that raises or logs it, or the issue where the line was
seen. Recorded lines are in tests/fixtures/engine_log/ with a README giving the URL of each.

Patterns match the message text, not the "(EngineCore pid=N) ERROR MM-DD hh:mm:ss [file:line]"
prefix, so they also match lines from other log formats (docker compose, buildkite, vllm-ascend)
and from tracebacks printed without a prefix.

When EngineCore dies under a live API server, vLLM 0.32.0 logs "engine core exited
unexpectedly" (WARNING, not tagged: the same monitor thread logs it during shutdowns) and then
the EngineDeadError (tagged); a planned SIGTERM stop logged neither (both recorded in
tests/fixtures/engine_log/cpu-demo-0.32.0-*.txt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SIGNATURES", "Signature", "classify_engine_line"]

_VLLM = "vllm 0.32.0 "


@dataclass(frozen=True, slots=True)
class Signature:
    """One known line: ``tag`` when ``pattern`` is found anywhere in the line (re.search)."""

    tag: str
    pattern: re.Pattern[str]
    speculative: bool
    source: str


def _sig(tag: str, pattern: str, source: str, *, speculative: bool = False) -> Signature:
    return Signature(tag, re.compile(pattern), speculative, source)


SIGNATURES: tuple[Signature, ...] = (
    _sig(
        "cuda_illegal_memory_access",
        r"an illegal memory access was encountered|\bcudaErrorIllegalAddress\b"
        r"|\bCUDA_ERROR_ILLEGAL_ADDRESS\b",
        "CUDA runtime/driver error text for cudaErrorIllegalAddress, raised through torch as "
        "'torch.AcceleratorError: CUDA error: an illegal memory access was encountered'; seen in "
        "SystemPanic/vllm-windows#72, blazux/qwen3.8-Flash-DGX#2, vllm-project/vllm#40756",
        speculative=True,
    ),
    _sig(
        "device_side_assert",
        r"device-side assert triggered",
        "CUDA error text for cudaErrorAssert via torch ('RuntimeError: CUDA error: device-side "
        "assert triggered'); seen in vllm-project/vllm#21986 (EAGLE), #11931. Does not match "
        "torch's hint 'Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.'",
        speculative=True,
    ),
    _sig(
        "device_side_assert",
        r"\.cu:\d+: .*block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion .* failed\.",
        "the device-side assertion itself as the CUDA runtime prints it, e.g. PyTorch "
        "aten/src/ATen/native/cuda/IndexKernel.cu 'index out of bounds'; seen in "
        "kvcache-ai/ktransformers#467, huggingface/accelerate#2539",
        speculative=True,
    ),
    _sig(
        "engine_dead",
        r"\bEngineDeadError\b",
        _VLLM + "vllm/v1/engine/exceptions.py class EngineDeadError ('EngineCore encountered an "
        "issue. See stack trace (above) for the root cause.'), logged by "
        "v1/engine/async_llm.py 'AsyncLLM output_handler failed.'",
    ),
    _sig(
        "engine_dead",
        r"EngineCore encountered a fatal error\.",
        _VLLM + "vllm/v1/engine/core.py logger.exception('EngineCore encountered a fatal "
        "error.') before _send_engine_dead(); seen in vllm-project/vllm#48801",
    ),
    _sig(
        "engine_dead",
        r"Request \S+ failed \(engine dead\)\.",
        _VLLM + "vllm/v1/engine/async_llm.py logger.info('Request %s failed (engine dead).'); "
        "seen in vllm-project/vllm#22755",
    ),
    _sig(
        "engine_dead",
        r"Engine core process \S+ died unexpectedly\.",
        _VLLM + "vllm/v1/utils.py RuntimeError(f'Engine core process {name} died "
        "unexpectedly.') (multi-API-server launcher)",
    ),
    _sig(
        "worker_died",
        r"Worker proc \S+ died unexpectedly",
        _VLLM + "vllm/v1/executor/multiproc_executor.py logger.error('Worker proc %s died "
        "unexpectedly (exit code: %s), shutting down executor.'); older releases print it "
        "without the exit code (OpenPipe/ART#201, intel/llm-scaler#154)",
    ),
    _sig(
        "worker_died",
        r"RayWorkerProc rank=.* died unexpectedly",
        _VLLM + "vllm/v1/executor/ray_executor_v2.py logger.error('RayWorkerProc rank=%s died "
        "unexpectedly, shutting down executor.')",
    ),
    _sig(
        "rpc_timeout",
        r"RPC call to \w+ timed out",
        _VLLM + "vllm/v1/executor/multiproc_executor.py TimeoutError(f'RPC call to {method} "
        "timed out.'); 'sample_tokens' on DGX Spark in eugr/spark-vllm-docker#321, "
        "MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#65",
    ),
    _sig(
        "out_of_memory",
        r"\bCUDA out of memory\b|\bOutOfMemoryError\b|Failed to load model - not enough GPU memory",
        "torch.OutOfMemoryError / torch.cuda.OutOfMemoryError ('CUDA out of memory. Tried to "
        "allocate ...'; vllm-project/vllm#27508, #2140); " + _VLLM + "vllm/v1/worker/"
        "gpu_model_runner.py 'CUDA out of memory occurred when warming up sampler ...' and "
        "'Failed to load model - not enough GPU memory.'",
    ),
    _sig(
        "insufficient_memory_at_startup",
        r"on startup is less than (?:desired (?:GPU|CPU) memory utilization|the engine's budget)",
        _VLLM + "vllm/v1/worker/utils.py request_memory(): ValueError('Free memory on device "
        "{dev} ({free}/{total} GiB) on startup is less than desired GPU memory utilization "
        "({util}, {req} GiB). Decrease GPU memory utilization or reduce GPU memory used by "
        "other processes.'), v1/worker/cpu_worker.py ('... is less than desired CPU memory "
        "utilization'); seen in vllm-project/vllm#33297, pytorch/pytorch#175666. Does not match "
        "the INFO 'Free memory on device (...) on startup. Desired GPU memory utilization is' "
        "(v1/worker/gpu_worker.py)",
    ),
    _sig(
        "insufficient_memory_at_startup",
        r"No available memory for the cache blocks\.|cache is needed, which is larger than the "
        r"available KV cache memory|Cannot auto-fit max_model_len: not enough GPU memory",
        _VLLM + "vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory() and the "
        "max_model_len auto-fit ValueErrors",
    ),
)


def classify_engine_line(line: str) -> tuple[str, ...]:
    """Tags this line matches, in table order, each once; () for most lines. Never raises."""
    tags: list[str] = []
    for signature in SIGNATURES:
        if signature.tag not in tags and signature.pattern.search(line) is not None:
            tags.append(signature.tag)
    return tuple(tags)
