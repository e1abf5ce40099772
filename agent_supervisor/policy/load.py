"""Loading a policy: text or a file in, a validated ``Policy`` out.

``load_policy(text)`` is pure (text in, Policy out); ``load_policy_file(path)`` reads the
file, remembers its directory and the digest of its bytes, and applies the state
directory's default (``with_state_default``, ``policy/paths.py``). Both raise
``PolicyError`` naming the file, the field (dotted path, e.g. ``modes[1].args``), the value
and the reason. Reading the YAML safely and wording its errors is ``policy/yaml.py``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.model import Policy
from agent_supervisor.policy.paths import default_state_directory
from agent_supervisor.policy.yaml import interpolate, parse_yaml, validation_problems

__all__ = ["load_policy", "load_policy_file", "with_state_default"]


def load_policy(text: str, *, source: str = "<string>", base_dir: Path | None = None,
                environ: dict[str, str] | None = None) -> Policy:
    """Parse and validate one policy document.

    Args: ``text`` the YAML; ``source`` the name used in error messages; ``base_dir`` the
    directory relative paths are resolved against (default: the current directory);
    ``environ`` the variables ``${NAME}`` in string values is replaced from (default:
    none, so a pure call stays pure; ``load_policy_file`` passes ``os.environ``).
    Returns: a frozen ``Policy``.
    Raises: ``PolicyError`` for YAML syntax errors (with line and column), duplicate keys,
    nesting past ``MAX_YAML_DEPTH``, aliases expanding past ``MAX_YAML_NODES``, an unset
    ``${NAME}``, and every validation problem (field as a dotted path, the reason, and
    the value only where it cannot be a secret). Non-finite numbers (``inf``, ``nan``)
    are refused everywhere. Validation is strict (issue 33): a quoted number or boolean
    is refused as a string, and an integer field takes no float (``8080.0``).
    """
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise PolicyError(source, message="must be a YAML mapping with fleet, engine and modes")
    data = interpolate(data, "", source, environ or {})
    try:
        policy = Policy.model_validate(data, strict=True)
    except ValidationError as exc:
        raise PolicyError(source, validation_problems(exc)) from None
    except RecursionError:
        raise PolicyError(source, message="nested too deeply") from None
    policy._base_dir = Path(os.path.abspath(base_dir or Path.cwd()))
    return policy


def load_policy_file(path: str | Path, environ: Mapping[str, str] | None = None, *,
                     base_dir: Path | None = None) -> Policy:
    """Read and validate a policy file; relative paths resolve against its directory
    (``base_dir``: against that one instead: a policy the supervisor wrote for its gateway
    process from one given in memory, runtime/gateway_link.py), ``${NAME}`` resolves from
    the process environment; an unset state directory defaults from ``environ`` (default
    ``os.environ``; ``with_state_default``).

    Raises: ``PolicyError`` (file unreadable, not UTF-8, invalid YAML, invalid policy).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise PolicyError(str(p), message=f"cannot read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise PolicyError(str(p), message=f"not UTF-8 text: byte 0x{raw[exc.start]:02x} "
                          f"on line {line}") from None
    policy = load_policy(text, source=str(p), base_dir=base_dir or p.parent,
                         environ=dict(os.environ))
    policy._source_sha256 = hashlib.sha256(raw).hexdigest()
    return with_state_default(policy, p, environ)


def with_state_default(policy: Policy, policy_path: Path,
                       environ: Mapping[str, str] | None = None) -> Policy:
    """``policy`` with ``storage.state_directory`` set to
    ``policy.paths.default_state_directory`` (``environ``: default ``os.environ``) when the
    file left it unset and a default applies; else ``policy`` itself."""
    if "state_directory" in policy.storage.model_fields_set:
        return policy
    default = default_state_directory(policy_path, policy.fleet,
                                      os.environ if environ is None else environ)
    if default is None:
        return policy
    storage = policy.storage.model_copy(update={"state_directory": str(default)})
    return policy.model_copy(update={"storage": storage})
