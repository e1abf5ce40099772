"""The base of every policy section, and the units the sections share.

``POLICY_CONFIG``: frozen, unknown keys refused (a typo must fail, STYLE.md 9), and no
``inf``/``nan`` anywhere (``inf`` seconds crashed ``systemd-unit``, issue 17). Every section
of ``policy.py``, ``policy_guards.py``, ``policy_thresholds.py`` and ``policy_gateway.py``
uses it, so no section can forget one of the three (the gateway's sections had let
``inf`` through).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

__all__ = ["POLICY_CONFIG", "GiB", "Ratio", "Seconds"]

GiB = 1024**3
#: A duration in seconds, > 0.
Seconds = Annotated[float, Field(gt=0)]
#: A fraction in (0, 1].
Ratio = Annotated[float, Field(gt=0, le=1)]


#: The ``model_config`` of every policy section (each module's ``_Model`` base uses it).
POLICY_CONFIG = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
