"""What the engine process gets from the supervisor: its environment and its TMPDIR.

Environment (issue 17: the engine was handed the supervisor's whole environment, admin
token and upstream key included). The engine gets, in this order (later wins):

1. from the supervisor's own environment, only the names in ``INHERITED`` or starting
   with a prefix in ``INHERITED_PREFIXES`` (locale, paths, CUDA/NVIDIA, PyTorch, Hugging
   Face cache settings, vLLM's own settings) and never a name that looks secret
   (``privacy.is_secret_name``: ``HF_TOKEN``, ``VLLM_API_KEY`` ...), the admin token's
   variable, the gateway's upstream key variable, nor a vLLM development-mode variable
   (``DEV_MODE_VARIABLES``);
2. ``PYTHONUNBUFFERED=1``;
3. ``engine.environment`` from the policy, verbatim: the one way to give the engine a
   secret (``HF_TOKEN: ${HF_TOKEN}``) or a development-mode switch, on purpose;
4. ``engine.api_key_file``'s key as ``VLLM_API_KEY`` (vLLM reads it like ``--api-key``,
   and it then stays out of the argument vector, which ``ps`` shows to every user), or
   ``LLAMA_API_KEY`` for llama-server (``policy.engine_flags.FlagRules.api_key_env``);
5. ``TMPDIR``: the run's private directory.

``VLLM_SERVER_DEV_MODE=1`` opens /sleep, /wake_up, /collective_rpc, /reset_prefix_cache
and more on the engine's port with no authentication (vLLM's security guide: "only for
OpenAI-compatible endpoints under /v1"; the development routes: vllm PR #30749;
llm-d-incubation/llm-d-fast-model-actuation issue #27), so it is never inherited.

TMPDIR (issue 17: the name was predictable, ``/tmp/vllm-sup-<run id>``, and an
existing directory of that name owned by another user was used): made by
``tempfile.mkdtemp`` (random suffix, mode 0700, ``O_EXCL``) under systemd's
``$RUNTIME_DIRECTORY`` when set, else under ``<state_directory>/tmp`` when that is
short enough, else under the system temp directory. vLLM binds ZMQ IPC sockets named by
a UUID in it and a UNIX socket path may not exceed 107 bytes, hence ``MAX_TMPDIR_CHARS``.
A run's directory is found again (adoption, leftovers) by its name prefix, and only if
it is a real directory owned by this user.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from agent_supervisor.policy import Policy
from agent_supervisor.policy.engine_flags import flag_rules
from agent_supervisor.privacy import is_secret_name

__all__ = [
    "DEV_MODE_VARIABLES",
    "HOST_ONLY",
    "INHERITED",
    "INHERITED_PREFIXES",
    "MAX_TMPDIR_CHARS",
    "container_environment",
    "engine_environment",
    "find_run_tmp_dirs",
    "make_run_tmp_dir",
    "remove_run_tmp_dirs",
    "tmp_base",
]

logger = logging.getLogger(__name__)

INHERITED = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY", "CC", "CXX",
    "MASTER_ADDR", "MASTER_PORT",
})
INHERITED_PREFIXES = ("LC_", "XDG_", "CUDA_", "NVIDIA_", "NCCL_", "TORCH", "PYTORCH_",
                      "TRITON_", "CUBLAS_", "CUDNN_", "NVTE_", "GLOO_", "UCX_", "OMP_", "MKL_",
                      "KMP_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "VLLM_", "FLASHINFER_",
                      "TOKENIZERS_")

#: vLLM switches that open unauthenticated control endpoints or unsafe code paths:
#: passed only when ``engine.environment`` sets them.
DEV_MODE_VARIABLES = frozenset({
    "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_TORCH_PROFILER_DIR",
    "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "VLLM_DEBUG_DUMP_PATH", "VLLM_RPC_BASE_PATH",
})

#: Longest TMPDIR we give the engine: 107 bytes (sockaddr_un.sun_path) less vLLM's
#: "/<uuid4>" socket name and some room; a run under a deep state directory failed to
#: start with "ipc path ... is longer than 107 characters".
MAX_TMPDIR_CHARS = 64

_PREFIX = "vllm-sup-"
#: What mkdtemp adds to ``vllm-sup-<run id>-``: 8 random characters.
_SUFFIX_CHARS = 8


def _inherited(name: str, policy: Policy) -> bool:
    if name in DEV_MODE_VARIABLES or is_secret_name(name):
        return False
    if name in (policy.admin.token_env, policy.gateway.upstream_api_key_env):
        return False
    return name in INHERITED or name.startswith(INHERITED_PREFIXES)


def engine_environment(policy: Policy, tmp_dir: Path,
                       environ: Mapping[str, str] | None = None, *,
                       node_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's whole environment (see the module doc for the order); ``node_env``:
    an engine across boxes, this rank's node's own variables on top
    (``agent_supervisor.act.node_argv.node_environment``; None: the head's, resolved here).

    Raises: ``PolicyError`` when ``engine.api_key_file`` cannot be read.
    """
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if _inherited(k, policy)}
    out["PYTHONUNBUFFERED"] = "1"
    out.update(policy.engine.environment)
    if node_env is None and policy.engine.nodes:
        from agent_supervisor.act.node_argv import node_environment

        node_env = node_environment(policy, 0)[0]
    out.update(node_env or {})
    key = policy.engine_api_key(env)
    if key is not None:
        out[flag_rules(policy.engine.kind).api_key_env] = key
    out["TMPDIR"] = str(tmp_dir)
    return out


def tmp_base(policy: Policy, environ: Mapping[str, str] | None = None) -> Path:
    """The directory runs' TMPDIRs are made in (see the module doc)."""
    env = os.environ if environ is None else environ
    room = MAX_TMPDIR_CHARS - len(_PREFIX) - 21 - _SUFFIX_CHARS   # run ids are 20 chars
    runtime = env.get("RUNTIME_DIRECTORY", "").split(":")[0]
    for base in (runtime, str(policy.state_directory / "tmp")):
        if base and len(base) + 1 <= room:
            return Path(base)
    return Path(tempfile.gettempdir())


def make_run_tmp_dir(policy: Policy, run_id: str,
                     environ: Mapping[str, str] | None = None) -> Path:
    """A fresh private TMPDIR for run ``run_id`` (mode 0700, a name no one can guess).

    Raises: OSError when it cannot be made, or when the base directory we made for it
    (``<state>/tmp``) is owned by another user (PermissionError).
    """
    base = tmp_base(policy, environ)
    if base != Path(tempfile.gettempdir()):
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.lstat()
        if st.st_uid != os.geteuid() or not base.is_dir() or base.is_symlink():
            raise PermissionError(f"{base} is owned by uid {st.st_uid}, not by this "
                                  f"user ({os.geteuid()}): refusing it as the engine's TMPDIR")
    return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{run_id}-", dir=base))


def find_run_tmp_dirs(policy: Policy, run_id: str,
                      environ: Mapping[str, str] | None = None) -> list[Path]:
    """The TMPDIRs run ``run_id`` was given, if still there: real directories owned by
    this user only (another user's directory of that name is logged and left alone)."""
    found = []
    bases = {tmp_base(policy, environ), Path(tempfile.gettempdir()), Path("/tmp")}
    for base in bases:
        try:
            candidates = list(base.glob(f"{_PREFIX}{run_id}*"))
        except OSError:
            continue
        for path in candidates:
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_symlink() or not path.is_dir() or st.st_uid != os.geteuid():
                logger.warning("%s looks like run %s's TMPDIR but is not a directory of "
                               "this user (uid %d): left alone", path, run_id, st.st_uid)
                continue
            found.append(path)
    return sorted(found)


def remove_run_tmp_dirs(policy: Policy, run_id: str) -> None:
    """Remove what ``find_run_tmp_dirs`` finds for run ``run_id``."""
    for path in find_run_tmp_dirs(policy, run_id):
        shutil.rmtree(path, ignore_errors=True)


#: Inherited names that describe the supervisor's host, not the image: a container keeps
#: its image's PATH, HOME, library path and temp directory.
HOST_ONLY = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LD_LIBRARY_PATH",
                       "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY", "CC", "CXX",
                       "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"})


def container_environment(policy: Policy,
                          environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the engine's container (``engine.runtime: container``): the
    same allow-list, secret rules, ``engine.environment`` and API key as a process gets
    (``engine_environment``), less what names the supervisor's own host (``HOST_ONLY``,
    ``XDG_*``: the image has its own), and no private TMPDIR (the container has its own
    /tmp). Raises: ``PolicyError`` when ``engine.api_key_file`` cannot be read."""
    env = engine_environment(policy, Path("/tmp"), environ)
    own = policy.engine.environment
    return {k: v for k, v in env.items()
            if k in own or not (k in HOST_ONLY or k.startswith("XDG_"))}
