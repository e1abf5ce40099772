"""The golden canary: a fixed greedy prompt whose answer a good run recorded (issue 29).

Every probe can answer 200 while the engine's text is wrong: speculation producing
garbage (vllm #36872: MTP, acceptance falling from 61% to 0.9% with incoherent text;
vllm #10559: gibberish after some tokens without eager mode), a KV-cache fault. So, once
per run when the engine first serves, after any change of rung, and every
``sampling.golden_canary.interval_seconds`` while no stall is suspected, the sensors send
one greedy completion (``temperature`` 0, the policy's ``seed`` and ``max_tokens``,
through ``probes.complete``: the canary's HTTP path) and compare its text with the golden
answer for the same key:

- **the key**: the served model id, the mode's name and a digest of its whole launch
  (argv and environment: model, flags, speculation; not where it listens), the engine's
  version (vLLM
  ``/version``; llama-server ``/props`` ``build_info``), the size and mtime of the model
  files named in the argv (weights replaced in place), and the prompt, seed and
  max_tokens. Greedy output legitimately differs between modes (speculation is lossless
  in exact arithmetic, but fp16/bf16 kernels and batch shapes change the numerics; on the
  CPU engine it is deterministic), and after an engine update or new weights: a key seen
  for the first time records its first answer as golden, quietly (the control);
- **the record**: ``<state_directory>/golden_canary.json`` (key -> answer and what the
  key was made of), written atomically; delete an entry to record it again;
- **the verdict** is not taken here: the Sample carries the result
  (``golden_canary_match``, ``golden_canary_mismatches`` in a row in this run,
  ``golden_canary_finished_s``, ``golden_canary_note``) and the ``corrupted_output``
  guard decides. After a mismatch the next canary goes out at once, to confirm it;
- **the comparison**: the first ``compare_chars`` characters (24; 0: all), since greedy
  text can part ways late where two tokens were nearly tied under another batch size
  (vLLM is not batch-invariant by default), while corrupted output is wrong at once.

A second, long prompt (``long_prompt_tokens``, 3,000 by default) goes out with the short
one where the run's context allows it (``sense/golden_long.py``); it is judged the same
way under its own key, and either answer differing is the mismatch. A context too small
for it (under ``golden_long.LONG_MIN_TOKENS`` left) skips it, said in the note.

Privacy: the prompt and answers are the policy's own text, never a client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from agent_supervisor.policy.model import Policy, build_argv
from agent_supervisor.sense.golden_long import long_prompt
from agent_supervisor.sense.probes import complete, engine_version, served_model
from agent_supervisor.states import EngineState, EngineStatus

__all__ = ["STORE_NAME", "GoldenCanary", "GoldenStore", "files_fingerprint", "golden_key",
           "running_version"]

logger = logging.getLogger(__name__)

#: The golden answers' file in the state directory.
STORE_NAME = "golden_canary.json"
#: Characters of an answer quoted in a note (the log and the finding's evidence).
QUOTE_CHARS = 60


class GoldenStore:
    """``<state_directory>/golden_canary.json``: key -> {"answer", "recorded_at", ...}.

    A file that cannot be read or parsed counts as empty (logged once); writes go to a
    temporary file renamed over the old one. Raises OSError when the write fails.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, dict[str, Any]]:
        """Every recorded entry ({} when the file is absent or unreadable)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("golden canary: %s unreadable (%s): recording afresh", self.path,
                           exc)
            return {}
        return data if isinstance(data, dict) else {}

    def answer(self, key: str) -> str | None:
        """The golden answer recorded for ``key``, or None."""
        entry = self.read().get(key)
        value = entry.get("answer") if isinstance(entry, dict) else None
        return value if isinstance(value, str) else None

    def record(self, key: str, answer: str, about: dict[str, Any]) -> None:
        """Record ``answer`` for ``key`` with what the key was made of (``about``)."""
        data = self.read()
        data[key] = {"answer": answer, "recorded_at": datetime.now(UTC).isoformat(), **about}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


#: Files named in the argv that hold weights (a directory counts whole: a model's).
WEIGHT_SUFFIXES = frozenset({".gguf", ".safetensors", ".bin", ".pt", ".pth"})


def files_fingerprint(argv: list[str]) -> str:
    """A digest of the size and mtime of the local weights the argv names (a directory:
    its top-level files; a file: when its suffix is in ``WEIGHT_SUFFIXES``), so weights
    replaced in place make a new key. Paths that do not exist here (inside a container
    image, a hub id) add nothing."""
    parts: list[str] = []
    for arg in argv[1:]:
        for value in (arg, arg.partition("=")[2]):
            path = Path(value) if value.startswith(("/", ".")) else None
            if path is None or not path.exists() or (
                    path.is_file() and path.suffix not in WEIGHT_SUFFIXES):
                continue
            files = sorted(path.iterdir()) if path.is_dir() else [path]
            for f in files:
                with contextlib.suppress(OSError):
                    st = f.stat()
                    parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def golden_key(policy: Policy, rung: int, model: str, version: str | None,
               files: str, prompt: str | None = None) -> tuple[str, dict[str, Any]]:
    """The golden answer's key for ``rung`` and what it is made of (see the module
    docstring); ``prompt``: the long prompt (default: the policy's short one). Raises
    IndexError for a rung the policy does not have."""
    mode = policy.modes[rung]
    spec = policy.sampling.golden_canary
    launch = json.dumps([_without_address(build_argv(policy, mode)),
                         policy.engine.environment], sort_keys=True, default=str)
    about = {"model": model, "mode": mode.name, "engine_version": version or "unknown",
             "launch": hashlib.sha256(launch.encode()).hexdigest()[:16], "files": files,
             "request": hashlib.sha256(json.dumps(
                 [prompt or spec.prompt, spec.seed, spec.max_tokens]).encode()).hexdigest()[:16]}
    key = "|".join(str(about[k]) for k in ("model", "mode", "engine_version", "launch",
                                             "files", "request"))
    return key, about


#: Flags that say where the engine listens, not what it answers (left out of the key).
ADDRESS_FLAGS = frozenset({"--host", "--port"})


def _without_address(argv: list[str]) -> list[str]:
    """``argv`` without ``--host``/``--port`` and their values (either spelling)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ADDRESS_FLAGS:
            skip = True
            continue
        if arg.partition("=")[0] in ADDRESS_FLAGS:
            continue
        out.append(arg)
    return out


@dataclass
class _Run:
    """What the golden canary knows of one engine run."""

    run_id: str
    rung: int | None = None
    """The rung the last canary was sent on (a change sends the next at once)."""
    task: asyncio.Task[tuple[bool | None, str]] | None = None
    match: bool | None = None
    mismatches: int = 0
    finished_s: float | None = None
    """When the last judged canary (matched or not) finished."""
    done_s: float | None = None
    """When the last canary finished, judged or not (the interval counts from it)."""
    note: str | None = None


class GoldenCanary:
    """Sends the golden canary when due and reports the last result as Sample fields.

    ``client`` gives the sensors' HTTP client (None before ``Sensors.start``);
    ``policy`` the policy in force (read on use). ``fields`` is called once a tick.
    """

    def __init__(self, policy: Callable[[], Policy],
                 client: Callable[[], httpx.AsyncClient | None]) -> None:
        self._policy = policy
        self._client = client
        self._run: _Run | None = None

    def fields(self, now_s: float, status: EngineStatus, calm: bool) -> dict[str, Any]:
        """Collect a finished canary, start one if due (``calm``: no stall suspected);
        the Sample's ``golden_canary_*`` fields (all None while none finished this run)."""
        r = self._run
        if r is None or r.run_id != status.run_id:
            if r is not None and r.task is not None:
                r.task.cancel()
            r = self._run = _Run(run_id=status.run_id or "")
        if r.task is not None and r.task.done():
            r.done_s = now_s
            failed = None if r.task.cancelled() else r.task.exception()
            if failed is not None:
                logger.warning("golden canary failed: %s: %s", type(failed).__name__, failed)
            elif not r.task.cancelled():
                match, r.note = r.task.result()
                if match is not None:
                    r.match, r.finished_s = match, now_s
                    r.mismatches = 0 if match else r.mismatches + 1
            r.task = None
        if r.task is None and self._due(r, now_s, status, calm):
            r.rung = status.rung
            r.task = asyncio.get_running_loop().create_task(self._send(status))
        return {"golden_canary_match": r.match,
                "golden_canary_mismatches": r.mismatches if r.finished_s is not None
                else None,
                "golden_canary_finished_s": r.finished_s, "golden_canary_note": r.note}

    def close(self) -> None:
        """Cancel a canary on its way."""
        if self._run is not None and self._run.task is not None:
            self._run.task.cancel()

    def _due(self, r: _Run, now_s: float, status: EngineStatus, calm: bool) -> bool:
        spec = self._policy().sampling.golden_canary
        if not spec.enabled or status.state is not EngineState.READY or status.rung is None \
                or not status.run_id or self._client() is None:
            return False
        if r.rung != status.rung:
            return True                          # the run's first, or a new rung
        if r.match is False and r.mismatches < spec.mismatches:
            return True                          # confirm a mismatch at once
        return calm and r.done_s is not None and now_s - r.done_s >= spec.interval_seconds

    async def _send(self, status: EngineStatus) -> tuple[bool | None, str]:
        """One golden canary: (matched the golden answer, a note); None: no verdict (no
        answer, or the answer became the golden one)."""
        policy, client = self._policy(), self._client()
        assert client is not None and status.rung is not None   # checked in _due
        spec, eng = policy.sampling.golden_canary, policy.engine
        base = f"http://{eng.host}:{eng.port}"
        model = await served_model(client, base, spec.timeout_seconds)
        if model is None:
            return None, "no model id from /v1/models"
        version = await running_version(client, base, spec.timeout_seconds)
        argv = build_argv(policy, policy.modes[status.rung])
        files = await asyncio.to_thread(files_fingerprint, argv)
        short = await self._one(policy, status, client, base, model, spec.prompt, version,
                                files)
        if not spec.long_prompt_tokens or (short[0] is None and short[1].startswith("no ")):
            return short
        prompt, tokens, note = await long_prompt(
            client, base, model, argv, want_tokens=spec.long_prompt_tokens,
            max_tokens=spec.max_tokens, tail=spec.prompt, timeout_s=spec.timeout_seconds)
        if prompt is None:
            return short[0], f"{short[1]}; {note}"
        long = await self._one(policy, status, client, base, model, prompt, version, files,
                               tokens)
        results = (short[0], long[0])
        match = False if False in results else True if True in results else None
        return match, f"{short[1]}; {note}: {long[1]}"

    async def _one(self, policy: Policy, status: EngineStatus, client: httpx.AsyncClient,
                   base: str, model: str, prompt: str, version: str | None, files: str,
                   prompt_tokens: int | None = None) -> tuple[bool | None, str]:
        """One golden prompt sent and judged against its own golden answer (see
        ``_send``); ``prompt_tokens``: the long prompt's measured length (recorded)."""
        spec = policy.sampling.golden_canary
        assert status.rung is not None
        body = {"model": model, "prompt": prompt, "max_tokens": spec.max_tokens,
                "temperature": 0, "seed": spec.seed}
        text, took, error = await complete(client, base, body, spec.timeout_seconds)
        if text is None:
            return None, f"no answer: {error}"
        key, about = golden_key(policy, status.rung, model, version, files, prompt)
        if prompt_tokens is not None:
            about["prompt_tokens"] = prompt_tokens
        store = GoldenStore(policy.state_directory / STORE_NAME)
        golden = await asyncio.to_thread(store.answer, key)
        if golden is None:
            await asyncio.to_thread(store.record, key, text, about)
            logger.info("golden canary: recorded the golden answer of %s (mode %s, engine "
                        "%s) in %.2f s", model, about["mode"], about["engine_version"], took)
            return None, f"recorded a new golden answer for mode {about['mode']}, engine " \
                f"{about['engine_version']}"
        n = spec.compare_chars or max(len(text), len(golden))
        if text[:n] == golden[:n]:
            logger.info("golden canary of run %s: matched the golden answer in %.2f s",
                        status.run_id, took)
            return True, f"matched the golden answer in {took:.2f} s"
        logger.warning("golden canary of run %s: the answer differs from the golden one "
                       "(mode %s, engine %s)", status.run_id, about["mode"],
                       about["engine_version"])
        return False, f"expected {golden[:QUOTE_CHARS]!r}, got {text[:QUOTE_CHARS]!r}"


async def running_version(client: httpx.AsyncClient, base_url: str,
                          timeout_seconds: float) -> str | None:
    """The serving engine's version: vLLM's ``GET /version``, else llama-server's ``GET
    /props`` ``build_info``; None when neither answers."""
    return await engine_version(client, base_url, timeout_seconds) \
        or await _build_info(client, base_url, timeout_seconds)


async def _build_info(client: httpx.AsyncClient, base_url: str,
                      timeout_seconds: float) -> str | None:
    """llama-server's build (``GET /props`` ``build_info``, tools/server/server-context.cpp
    props handler), or None."""
    try:
        resp = await client.get(base_url + "/props", timeout=timeout_seconds)
        value = resp.json().get("build_info") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return value[:64] if isinstance(value, str) else None
