"""Secrets never reach the store: argument vectors, environments and log text are masked.

A name looks secret when one of its words (split on ``-``, ``_``, ``.``) is, or ends in,
``token``, ``key``, ``secret``, ``password``, ``passwd``, ``credential(s)`` or ``auth``:
``--api-key``, ``--hf-token``, ``HF_TOKEN``, ``VLLM_API_KEY``, ``PGPASSWORD``,
``AWS_SECRET_ACCESS_KEY``. Whole words keep ``--max-num-batched-tokens`` and
``--tokenizer`` readable. The value becomes ``***``; the name stays, so an operator sees
that a key was passed, never which.

No prompt or completion text is stored anywhere: the tables hold numbers, names,
evidence and the engine's own log tail, which is masked with ``mask_text``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MASK", "is_secret_name", "mask_argv", "mask_env", "mask_json", "mask_text"]

MASK = "***"

_SECRET_WORD = re.compile(r"(token|key|secret|password|passwd|credentials?|auth)$", re.I)
_ENV_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
# The name's prefix is bounded (64 characters): unbounded, a 60 KB log line of "a-a-a-..."
# took 307 s to mask (every word boundary scanned to the end of the line; issue 34).
_NAME = r"[A-Za-z0-9_.-]{0,64}?(?:token|key|secret|password|passwd|credentials?|auth)"
# --api-key VALUE / --api-key=VALUE / HF_TOKEN=VALUE / 'api_key': 'VALUE' / "token": "V"
# / ['--api-key', 'VALUE'] (an argument vector printed as a Python or JSON list: issue 34,
# a traceback's "cmd=[...]" put the engine key in the incident's log tail)
_TEXT_PATTERNS = (
    re.compile(rf"""(['"]--(?=[A-Za-z]){_NAME}['"]\s*,\s*)()('[^']*'|"[^"]*")""", re.I),
    re.compile(rf"(--(?=[A-Za-z]){_NAME})([ =])(\S+)", re.I),
    # NAME=VALUE: the name's prefix is kept as it is, so it need not be matched (the
    # prefix-free form cannot scan a long line from every word boundary).
    re.compile(r"((?:token|key|secret|password|passwd|credentials?|auth))(=)(\S+)", re.I),
    re.compile(rf"""(['"]{_NAME}['"]\s*)(:\s*)(\[[^\]]*\]|'[^']*'|"[^"]*")""", re.I),
    re.compile(r"(\bBearer)( )([A-Za-z0-9._~+/=-]+)", re.I),
)


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable name looks like it holds a secret (see the module doc)."""
    words = [w for w in re.split(r"[-_.]+", name.strip("-")) if w]
    return any(_SECRET_WORD.search(w) for w in words)


def _mask_json(value: str) -> str:
    """A JSON object argument (``--speculative-config``, ``--hf-overrides``) with the
    values of secret-named keys masked; any other string unchanged."""
    if not value.lstrip().startswith("{"):
        return value
    try:
        data = json.loads(value)
    except ValueError:
        return value

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: MASK if is_secret_name(str(k)) else walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    masked = walk(data)
    return value if masked == data else json.dumps(masked, separators=(",", ":"))


def mask_argv(argv: Sequence[Any]) -> list[str]:
    """A copy of ``argv`` with secret values replaced by ``***``.

    Handles ``--api-key VALUE``, ``--api-key=VALUE``, ``NAME=VALUE`` words (an ``env``
    prefix) and JSON object values with secret-named keys. A secret flag followed by
    another flag (``--api-key --port 8000``) has no value to mask.
    """
    out: list[str] = []
    mask_next = False
    for raw in argv:
        word = str(raw)
        if mask_next and not word.startswith("--"):
            out.append(MASK)
            mask_next = False
            continue
        mask_next = False
        if word.startswith("--"):
            name, eq, _value = word.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(word)
                    mask_next = True
                continue
            if eq:
                out.append(f"{name}={_mask_json(_value)}")
                continue
            out.append(word)
            continue
        assignment = _ENV_ASSIGNMENT.match(word)
        if assignment and is_secret_name(assignment.group(1)):
            out.append(f"{assignment.group(1)}={MASK}")
            continue
        out.append(_mask_json(word))
    return out


def mask_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``env`` with the values of secret-named variables replaced by ``***``."""
    return {k: MASK if is_secret_name(k) else v for k, v in env.items()}


def mask_json(value: Any) -> Any:
    """A JSON-like value (trace records, incident findings) with secrets masked: every
    string through ``mask_text``, a list of strings first through ``mask_argv`` (an
    argument vector: ``["--api-key", "X"]``), and the string values of secret-named keys
    replaced by ``***``. Tuples become lists; other values stay as they are."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and is_secret_name(k) and isinstance(v, str)
                else mask_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, str) for v in value):
            return [mask_text(v) for v in mask_argv(value)]
        return [mask_json(v) for v in value]
    return value


def mask_text(text: str | None) -> str | None:
    """Log text with secret-looking assignments masked: ``--api-key X``, ``HF_TOKEN=X``,
    ``'api_key': 'X'`` (vLLM logs its non-default arguments this way at start-up),
    ``['--api-key', 'X']`` (an argument vector printed as a list) and ``Bearer X``. None
    stays None."""
    if not text:
        return text
    for pattern in _TEXT_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{_quoted_mask(m.group(3))}",
                           text)
    return text


def _quoted_mask(value: str) -> str:
    """``***`` in the value's own brackets and quotes, so the masked log still reads."""
    if value.startswith("["):
        return f"['{MASK}']"
    if value[:1] in ("'", '"'):
        return f"{value[0]}{MASK}{value[0]}"
    return MASK
