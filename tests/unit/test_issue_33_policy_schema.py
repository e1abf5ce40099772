"""Issue 33, "Config": the policy's JSON Schema describes every field (an editor shows the
text on hover), and loading agrees with the schema on numbers and booleans."""

from __future__ import annotations

from typing import Any

from agent_supervisor.commands.schema import policy_schema


def _described(prop: dict[str, Any], defs: dict[str, Any]) -> bool:
    """A property has its own description, or every ``$ref`` it holds (directly, in
    ``anyOf``/``allOf``/``oneOf`` or as ``items``) names a described definition."""
    if prop.get("description"):
        return True
    refs = [prop] + [p for key in ("anyOf", "allOf", "oneOf") for p in prop.get(key, [])]
    refs += [p["items"] for p in refs if isinstance(p.get("items"), dict)]
    names = [p["$ref"].removeprefix("#/$defs/") for p in refs if "$ref" in p]
    return bool(names) and all(defs[name].get("description") for name in names)


def test_issue_33_every_policy_property_has_a_description() -> None:
    schema = policy_schema()
    defs = schema["$defs"]
    objects = {"Policy": schema, **defs}
    missing = [f"{name}.{key}" for name, obj in objects.items()
               for key, prop in obj.get("properties", {}).items()
               if not _described(prop, defs)]
    assert not missing, ("properties without a description: give each field an attribute "
                         "docstring (a string right under it): " + ", ".join(missing))
    assert all(d.get("description") for d in defs.values()), "a section without a docstring"
