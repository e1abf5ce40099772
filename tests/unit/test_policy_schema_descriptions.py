"""Issue 33, "Config": the policy's JSON Schema describes every field (an editor shows the
text on hover), and loading agrees with the schema on numbers and booleans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_supervisor.cli import main as cli_main
from agent_supervisor.commands.schema import policy_schema
from agent_supervisor.errors import PolicyError
from agent_supervisor.policy import load_policy, load_policy_file

POLICIES = Path(__file__).resolve().parents[2] / "policies"


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


BASE = "fleet: f\nengine: {executable: vllm}\nmodes: [{name: a}]\n"
MODE_FIRST = "fleet: f\nengine: {executable: vllm}\n"

#: A quoted number or boolean: a string to the JSON Schema, and now to the loader too (it
#: was converted by pydantic's lax mode), with the field named; a boolean where a number
#: belongs and a number where a boolean belongs alike.
QUOTED = [
    (BASE + 'gateway: {port: "8080"}\n', "gateway.port", "8080"),
    (BASE + 'sampling: {tick_seconds: "2"}\n', "sampling.tick_seconds", "2"),
    (BASE + "storage: {heartbeat_seconds: '1e2'}\n", "storage.heartbeat_seconds", "1e2"),
    (BASE + 'hysteresis: {shed_factor: "0.5"}\n', "hysteresis.shed_factor", "0.5"),
    (BASE + 'restart: {start_limit_burst: "3"}\n', "restart.start_limit_burst", "3"),
    (BASE + 'guards: {memory_floor: {min_available_bytes: "2147483648"}}\n',
     "guards.memory_floor.min_available_bytes", "2147483648"),
    (BASE + 'guards: {speculative: {crash_xids: [13, "31"]}}\n',
     "guards.speculative.crash_xids[1]", "31"),
    (BASE + 'gateway: {enabled: "yes"}\n', "gateway.enabled", "yes"),
    (BASE + 'gateway: {resume: "true"}\n', "gateway.resume", "true"),
    (BASE + 'sampling: {kernel_log: "off"}\n', "sampling.kernel_log", "off"),
    (MODE_FIRST + 'modes: [{name: a, gateway: {max_concurrency: "4"}}]\n',
     "modes[0].gateway.max_concurrency", "4"),
    ('fleet: f\nengine: {executable: vllm, port: "8000"}\nmodes: [{name: a}]\n',
     "engine.port", "8000"),
    (BASE + "restart: {start_limit_burst: true}\n", "restart.start_limit_burst", True),
    (BASE + "gateway: {enabled: 1}\n", "gateway.enabled", 1),
]


def _schema_types(dotted: str) -> set[str]:
    """The JSON types the shipped schema allows at ``dotted`` (``a.b[0].c``)."""
    schema = policy_schema()
    node: dict[str, Any] = schema
    for part in dotted.replace("]", "").replace("[", ".").split("."):
        while "$ref" in node or "anyOf" in node or "allOf" in node:
            # allOf: older pydantic (2.7) wraps a $ref that has a description (make test-floors)
            node = (schema["$defs"][node["$ref"].removeprefix("#/$defs/")] if "$ref" in node
                    else node["allOf"][0] if "allOf" in node
                    else next(n for n in node["anyOf"] if n.get("type") != "null"))
        node = node["items"] if part.isdigit() else node["properties"][part]
    return {n.get("type") for n in node.get("anyOf", [node])} - {"null"}


@pytest.mark.parametrize(("text", "field", "value"), QUOTED,
                         ids=[f"{f}={v!r}" for _, f, v in QUOTED])
def test_issue_33_a_quoted_number_or_boolean_is_refused_as_the_schema_does(
        text: str, field: str, value: object) -> None:
    wanted = _schema_types(field)
    assert wanted <= {"integer", "number", "boolean"}, wanted
    with pytest.raises(PolicyError) as info:
        load_policy(text, source="fleet.yaml")
    err = info.value
    assert (err.field, err.value) == (field, value)
    assert err.reason.startswith("Input should be a valid ")
    if isinstance(value, str):
        assert "a quoted value is a string: write it without quotes" in err.reason


def test_issue_33_real_numbers_and_booleans_still_load() -> None:
    """YAML's numbers as written: ints, floats, ints in float fields, and an exponent
    without a dot (``1e3``: a float in YAML 1.2 and to the schema, a string in PyYAML's
    YAML 1.1 rules until issue 33)."""
    policy = load_policy(BASE + "storage: {incident_retention_days: 1e3, heartbeat_seconds: 10,"
                         " telemetry_retention_days: 2.5}\n"
                         "guards: {speculative: {prefix_max_hit_ratio: 5E-3}}\n"
                         "sampling: {tick_seconds: 1.0e+0, kernel_log: false}\n"
                         "gateway: {port: 8090, enabled: true}\n")
    assert (policy.storage.incident_retention_days, policy.storage.heartbeat_seconds,
            policy.storage.telemetry_retention_days) == (1000.0, 10.0, 2.5)
    assert policy.guards.speculative.prefix_max_hit_ratio == 0.005
    assert (policy.sampling.tick_seconds, policy.sampling.kernel_log) == (1.0, False)
    assert (policy.gateway.port, policy.gateway.enabled) == (8090, True)
    # Quoted, it stays a string wherever a string belongs.
    assert load_policy(BASE.replace("fleet: f", "fleet: '1e3'")).fleet == "1e3"


@pytest.mark.parametrize("path", sorted(POLICIES.glob("*.yaml")), ids=lambda p: p.name)
def test_issue_33_shipped_policies_load_strictly(path: Path) -> None:
    assert load_policy_file(path).fleet


def test_issue_33_policy_check_names_file_field_and_quoted_value(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(BASE + 'gateway: {port: "8080"}\n')
    assert cli_main(["policy", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: gateway.port: Input should be a valid integer; a quoted value is a " \
           "string: write it without quotes (got '8080')" in err


#: Fields of a fixed set of values: the schema's ``enum`` is the set loading accepts, and a
#: misspelling is refused by both (``auth: key`` passed the schema and failed to load: the
#: field was a ``str`` with a validator, which the schema cannot see).
KEYS = ", api_keys: [{name: a, sha256: " + "a" * 64 + "}]"   # auth: keys needs one
CHOICES = [("gateway", "GatewaySpec", "auth", ("passthrough", "keys"), "key"),
           ("alerts", "AlertSpec", "format", ("generic", "slack"), "slak"),
           ("recovery", "RecoverySpec", "on_restart", ("adopt", "stop"), "adpot")]


@pytest.mark.parametrize(("section", "model", "field", "values", "typo"), CHOICES,
                         ids=[f"{c[0]}.{c[2]}" for c in CHOICES])
def test_issue_33_a_field_of_fixed_values_is_an_enum_in_the_schema(
        section: str, model: str, field: str, values: tuple[str, ...], typo: str) -> None:
    prop = policy_schema()["$defs"][model]["properties"][field]
    assert prop.get("enum") == list(values), prop
    for value in values:
        extra = KEYS if (section, value) == ("gateway", "keys") else ""
        loaded = load_policy(BASE + f"{section}: {{{field}: {value}{extra}}}\n")
        assert getattr(getattr(loaded, section), field) == value
    with pytest.raises(PolicyError) as info:
        load_policy(BASE + f"{section}: {{{field}: {typo}}}\n", source="fleet.yaml")
    assert info.value.field == f"{section}.{field}"
    assert all(repr(v) in info.value.reason for v in values), info.value.reason
