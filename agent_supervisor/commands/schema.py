"""``supervisor policy schema``: the policy file's JSON Schema, from the pydantic models.

Editors validate and complete policy YAML with it (the YAML language server reads a
``# yaml-language-server: $schema=policy.schema.json`` first line). The copy shipped as
policies/policy.schema.json is kept current by tests/unit/test_policy_schema_shipped.py;
regenerate it with ``supervisor policy schema > policies/policy.schema.json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agent_supervisor.policy import Policy
from agent_supervisor.policy.sections import _WINDOW, TimeWindow

__all__ = ["add_parser", "policy_schema", "run"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (pydantic's ``model_json_schema``, validation
    mode: what a file may contain)."""
    schema = Policy.model_json_schema(mode="validation")
    # Types parsed from a string keep that string's form in the file (pydantic describes
    # the parsed fields instead): a step-up window is "22:00-06:00".
    if "TimeWindow" in schema.get("$defs", {}):
        schema["$defs"]["TimeWindow"] = {
            "type": "string", "pattern": _WINDOW.pattern, "title": "TimeWindow",
            "description": (TimeWindow.__doc__ or "").split("\n")[0]}
    return {"$schema": DIALECT, "title": "agent-serving-supervisor policy", **{
        k: v for k, v in schema.items() if k != "title"}}


def add_parser(policy_sub: argparse._SubParsersAction) -> None:
    """Add ``schema`` under ``supervisor policy``."""
    policy_sub.add_parser("schema", help="print the policy file's JSON Schema (for editors; "
                          "policies/policy.schema.json is a copy)")


def run(_args: argparse.Namespace) -> int:
    print(json.dumps(policy_schema(), indent=2, sort_keys=True))
    return 0
