"""Issue 19: the policy's JSON Schema shipped in policies/ is the one the models give, and
``supervisor policy schema`` prints it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pydantic
import pytest

from agent_supervisor.commands.schema import policy_schema
from agent_supervisor.policy import Policy

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "policies" / "policy.schema.json"
#: The pydantic the shipped file was generated with: the lock's. Older releases write the
#: same schema in another shape (pydantic 2.7 wraps a described ``$ref`` in ``allOf``), so
#: under ``make test-floors`` the file cannot be compared byte for byte.
LOCKED_PYDANTIC = re.search(r"^pydantic==(\S+)$", (ROOT / "requirements-dev.lock").read_text(),
                            re.M)


@pytest.mark.skipif(LOCKED_PYDANTIC is None or LOCKED_PYDANTIC[1] != pydantic.VERSION,
                    reason="the shipped schema is generated with the lock's pydantic")
def test_issue_19_shipped_schema_is_current() -> None:
    assert json.loads(SHIPPED.read_text()) == policy_schema(), (
        "policies/policy.schema.json is stale: "
        "supervisor policy schema > policies/policy.schema.json")


def test_issue_19_schema_forbids_unknown_keys_and_names_every_section() -> None:
    schema = policy_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(schema["properties"]) == set(Policy.model_fields)
    assert schema["required"] == ["fleet", "engine", "modes"]
    assert schema["additionalProperties"] is False
    assert all(d.get("additionalProperties") is False for d in schema["$defs"].values()
               if d.get("type") == "object")
    # A step-up window is written as a string in the file, and the schema says so.
    window = schema["$defs"]["TimeWindow"]
    assert window["type"] == "string" and re.fullmatch(window["pattern"], "22:00-06:00")
    assert not re.fullmatch(window["pattern"], "25:00-06:00")

