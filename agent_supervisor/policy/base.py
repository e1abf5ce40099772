"""The base of every policy section, and the units the sections share.

``PolicyModel`` (its ``model_config`` is ``POLICY_CONFIG``): frozen, unknown keys refused (a
typo must fail, STYLE.md 9), and no ``inf``/``nan`` anywhere (``inf`` seconds crashed
``systemd-unit``, issue 17). Every section of every module of ``agent_supervisor/policy/``
derives from it, so no section can forget one of the three (the gateway's sections had
let ``inf`` through when each module kept its own copy of the base; issue 30 made it one).
The one exception is ``sections.TimeWindow``, a value written as a string, not a section.

Every number a policy sets has an upper bound as well (issue 34: ``heartbeat_seconds:
1e12`` passed validation, then overflowed the scheduler at ``supervisor run`` with a
traceback and left the gateway running). The maxima are far above any sensible value
and far below what breaks a timer or a loop; tests/unit/test_policy_bounds.py
checks that no numeric field of the policy is left without one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "MAX_BYTES", "MAX_COUNT", "MAX_DAYS", "MAX_SECONDS", "MAX_TOKENS", "POLICY_CONFIG",
    "Bytes", "Count", "CountOrZero", "Days", "Delay", "GiB", "PolicyModel", "Ratio", "Seconds",
    "Tokens",
]

GiB = 1024**3
#: The longest duration a policy may set: 7 days (604,800 s). The longest defaults are
#: a day (``downsample_after_seconds``, ``failed_rung_backoff_max_seconds``).
MAX_SECONDS = 7 * 86_400
#: The longest retention: ten years.
MAX_DAYS = 3650
#: The largest count (requests, connections, retries, samples, lines, drafts): a million.
MAX_COUNT = 1_000_000
#: The largest token count: a hundred million (a context is at most a few million).
MAX_TOKENS = 100_000_000
#: The largest size in bytes: 1 PiB (a GB10 box has 128 GiB).
MAX_BYTES = 2**50

#: A duration in seconds, in (0, MAX_SECONDS].
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
#: A duration in seconds that may be 0 (no wait), in [0, MAX_SECONDS].
Delay = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
#: A retention in days, in (0, MAX_DAYS].
Days = Annotated[float, Field(gt=0, le=MAX_DAYS)]
#: A count, in [1, MAX_COUNT] (narrow further with ``Annotated[Count, Field(ge=3)]``).
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
#: A count that may be 0, in [0, MAX_COUNT].
CountOrZero = Annotated[int, Field(ge=0, le=MAX_COUNT)]
#: A token count, in [1, MAX_TOKENS].
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
#: A size in bytes, in [0, MAX_BYTES].
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
#: A fraction in (0, 1].
Ratio = Annotated[float, Field(gt=0, le=1)]


#: The ``model_config`` of every policy section (``PolicyModel``'s).
#: ``use_attribute_docstrings``: each field's docstring is its description in the JSON
#: Schema, so an editor shows it on hover (issue 33: 211 properties had none).
#: ``protected_namespaces=()``: a policy key may start with ``model_`` (``gateway.model_aliases``);
#: pydantic before 2.10 warns of such a field otherwise.
POLICY_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                           use_attribute_docstrings=True, protected_namespaces=())


class PolicyModel(BaseModel):
    """The base of every policy section: ``model_config`` is ``POLICY_CONFIG`` (frozen,
    ``extra="forbid"``, no ``inf``/``nan``, field docstrings as schema descriptions)."""

    model_config = POLICY_CONFIG
