"""Policy loading: the shipped files validate, and every bad input names file, field, value."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent_supervisor.errors import PolicyError
from agent_supervisor.policy.load import load_policy, load_policy_file
from agent_supervisor.policy.model import build_argv, needs_restart

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
fleet: demo
engine: {executable: vllm, args: [serve, /models/m]}
modes:
  - name: mtp2
    args:
      --speculative-config: {method: mtp, num_speculative_tokens: 2}
      --max-num-seqs: 8
      --enforce-eager: true
      --enable-prefix-caching: false
  - name: nospec
    args: {--max-num-seqs: 8, --enforce-eager: true}
"""


@pytest.mark.parametrize("name", ["cpu-demo.yaml", "gb10-nvfp4-mtp.yaml"])
def test_shipped_policies_validate(name: str) -> None:
    policy = load_policy_file(ROOT / "policies" / name)
    assert len(policy.modes) == 4
    assert policy.modes[0].speculative and not policy.modes[-1].speculative


def test_cpu_demo_ladder_is_the_documented_one() -> None:
    policy = load_policy_file(ROOT / "policies" / "cpu-demo.yaml")
    assert [m.name for m in policy.modes] == ["mtp2", "mtp1", "nospec", "safe"]
    assert policy.modes[0].args["--speculative-config"] == {
        "method": "mtp", "num_speculative_tokens": 2}
    # Relative paths resolve against the policy file's directory, symlinks kept.
    assert policy.working_directory == ROOT
    assert policy.engine_executable == str(ROOT / ".engine-venv" / "bin" / "python")
    assert policy.state_directory == ROOT / ".supervisor" / "cpu-demo"
    assert policy.database_url == f"sqlite:///{ROOT}/.supervisor/cpu-demo/supervisor.db"


def test_gb10_policy_keeps_memory_utilization_at_most_0_85() -> None:
    policy = load_policy_file(ROOT / "policies" / "gb10-nvfp4-mtp.yaml")
    for mode in policy.modes:
        assert mode.args["--gpu-memory-utilization"] <= 0.85
    assert "modelopt_fp4" in policy.engine.args


def test_argv_is_rendered_flag_by_flag_never_a_shell_string() -> None:
    policy = load_policy(MINIMAL)
    argv = build_argv(policy, policy.modes[0])
    assert argv == [
        "vllm", "serve", "/models/m",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--max-num-seqs", "8", "--enforce-eager",
        "--host", "127.0.0.1", "--port", "8000", "--shutdown-timeout", "30",
    ]


def test_restart_needed_only_when_engine_arguments_differ() -> None:
    policy = load_policy(MINIMAL)
    a, b = policy.modes
    assert needs_restart(a, b)
    assert not needs_restart(a, a.model_copy())


def _problems(text: str) -> list[tuple[str, object, str]]:
    with pytest.raises(PolicyError) as info:
        load_policy(text, source="fleet.yaml")
    assert str(info.value).startswith("fleet.yaml")
    return info.value.problems


def test_unknown_key_is_refused_not_ignored() -> None:
    problems = _problems(MINIMAL + "restart: {start_limit_brust: 2}\n")
    assert problems[0][0] == "restart.start_limit_brust"


def test_error_names_field_value_and_reason() -> None:
    problems = _problems(MINIMAL + "restart: {start_limit_burst: 0}\n")
    assert problems == [("restart.start_limit_burst", 0,
                         "Input should be greater than or equal to 1")]


@pytest.mark.parametrize("args, field, fragment", [
    ({"--gpu-memory-utilization": 1.2}, "modes[0].args", "fraction in (0, 1]"),
    ({"--speculative-config": {"method": "mtp", "num_speculative_tokens": 0}},
     "modes[0].args", "num_speculative_tokens must be an integer >= 1"),
    ({"--speculative-config": {"num_speculative_tokens": 2}}, "modes[0].args", "needs a method"),
    ({"--max-num-seqs": "many"}, "modes[0].args", "positive integer"),
    ({"max-num-seqs": 4}, "modes[0].args", "is not a long flag"),
    ({"--port": 9000}, "modes[0].args", "set by the supervisor"),
])
def test_bad_mode_arguments(args: dict, field: str, fragment: str) -> None:
    text = f"fleet: f\nengine: {{executable: vllm}}\nmodes: [{{name: a, args: {args!r}}}]\n"
    problems = _problems(text.replace("'", '"'))
    assert problems[0][0] == field
    assert fragment in problems[0][2]


def test_reserved_flag_in_engine_args_is_refused() -> None:
    problems = _problems("fleet: f\nengine: {executable: vllm, args: [serve, m, --port=9]}\n"
                         "modes: [{name: a}]\n")
    assert problems[0][0] == "engine.args"
    assert "--port is set by the supervisor" in problems[0][2]


def test_duplicate_mode_names_and_unknown_initial_mode() -> None:
    dup = _problems("fleet: f\nengine: {executable: v}\nmodes: [{name: a}, {name: a}]\n")
    assert "repeated: a" in dup[0][2]
    init = _problems("fleet: f\nengine: {executable: v}\nmodes: [{name: a}]\ninitial_mode: b\n")
    assert "initial_mode 'b' is not one of the modes" in init[0][2]


def test_empty_ladder_is_refused() -> None:
    assert _problems("fleet: f\nengine: {executable: v}\nmodes: []\n")[0][0] == "modes"


def test_yaml_syntax_error_gives_line_and_column() -> None:
    with pytest.raises(PolicyError, match=r"fleet.yaml: not valid YAML: line 3, column"):
        load_policy("fleet: f\nmodes:\n  - name: a: b\n", source="fleet.yaml")


def test_not_a_mapping() -> None:
    with pytest.raises(PolicyError, match="must be a YAML mapping"):
        load_policy("- a\n- b\n")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy_file(tmp_path / "missing.yaml")


def test_absolute_and_postgres_urls_are_kept(tmp_path: Path) -> None:
    pol = load_policy(MINIMAL + "storage: {database_url: 'postgresql+psycopg://db/x'}\n",
                      base_dir=tmp_path)
    assert pol.database_url == "postgresql+psycopg://db/x"
    rel = load_policy(MINIMAL + "storage: {database_url: 'sqlite:///data/s.db'}\n",
                      base_dir=tmp_path)
    assert rel.database_url == f"sqlite:///{tmp_path}/data/s.db"


def test_rungs_with_fewer_sequences_are_found_from_mode_or_engine_args(tmp_path) -> None:
    from agent_supervisor.policy import load_policy

    policy = load_policy("""
fleet: t
engine: {executable: vllm, args: [--max-num-seqs, "8"]}
modes:
  - {name: fast}
  - {name: same, args: {--max-num-seqs: 8}}
  - {name: four, args: {--max-num-seqs: 4}}
""")
    assert [policy.max_num_seqs(i) for i in range(3)] == [8, 8, 4]
    assert policy.first_rung_with_fewer_sequences_below(0) == 2
    assert policy.first_rung_with_fewer_sequences_below(2) is None


# -- issue 17: bad input refused with a clear error, no value that may be secret -----------

def _refused(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_policy(text, source="p.yaml")
    return info.value


def test_issue_17_a_duplicate_key_is_refused_with_its_line() -> None:
    err = _refused(MINIMAL + "gateway: {port: 9000}\ngateway: {port: 9001}\n")
    assert "duplicate key 'gateway'" in str(err) and "line" in str(err)


def test_issue_17_billion_laughs_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    text = MINIMAL + "description: x\n" + "\n".join("x" + line for line in lines) + "\n"
    t = time.monotonic()
    err = _refused(text)
    assert time.monotonic() - t < 2
    assert "expands to more than" in str(err)


def test_issue_17_deep_nesting_is_refused_not_a_recursion_error() -> None:
    for text in (MINIMAL + "description: " + "[" * 10_000 + "]" * 10_000 + "\n",
                 MINIMAL + "description:\n" + "".join("  " * i + "- \n" for i in range(3000))):
        err = _refused(text)
        assert "nested deeper than" in str(err) or "nested too deeply" in str(err)


def test_issue_17_a_non_utf8_file_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(MINIMAL.encode() + b"description: caf\xe9\n")
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert "not UTF-8 text: byte 0xe9 on line" in str(info.value)


@pytest.mark.parametrize("value", ["inf", ".inf", "-.inf", "nan", ".nan", "1e999"])
def test_issue_17_non_finite_numbers_are_refused(value: str) -> None:
    err = _refused(MINIMAL + f"sampling: {{canary_timeout_seconds: {value}}}\n")
    assert err.field == "sampling.canary_timeout_seconds" and "finite" in err.reason


@pytest.mark.parametrize(("section", "field"), [
    ("gateway: {drain_timeout_seconds: .inf}", "gateway.drain_timeout_seconds"),
    ("gateway: {header_timeout_seconds: .inf}", "gateway.header_timeout_seconds"),
    ("gateway: {hold_timeout_seconds: .nan}", "gateway.hold_timeout_seconds"),
    ("restart: {restart_delay_max_seconds: .inf}", "restart.restart_delay_max_seconds"),
])
def test_issue_17_every_policy_section_refuses_non_finite_numbers(section: str,
                                                                  field: str) -> None:
    # The gateway's sections were built on a base without allow_inf_nan=False and let
    # ``inf`` through: every section now derives from policy/base.py's PolicyModel.
    err = _refused(MINIMAL + section + "\n")
    assert err.field == field and "finite" in err.reason


SECRET = "hunter2-s3cr3t-value"


@pytest.mark.parametrize("extra", [
    f"alerts: {{webhook_url: 'https://hooks.example/T0/{SECRET}', format: teams}}\n",
    f"alerts: {{webhook_url: 'https://hooks.example/T0/{SECRET}', retries: -1}}\n",
    f"storage: {{database_url: 'postgresql://u:{SECRET}@db/x', bogus: 1}}\n",
    f"storage: {{database_url: ['postgresql://u:{SECRET}@db/x']}}\n",
    f"admin: {{token_env: ['{SECRET}']}}\n",
    f"gateway: {{auth: keys}}\nalerts: {{webhook_url: 'https://h/{SECRET}'}}\n",
    f"gateway: {{port: 9000}}\nalerts: {{webhook_url: 'https://h/{SECRET}'}}\n"
    "admin: {port: 9000}\n",
])
def test_issue_17_policy_errors_never_echo_a_secret(extra: str) -> None:
    err = _refused(MINIMAL + extra)
    assert SECRET not in str(err) and SECRET not in repr(err.problems)
    assert str(err).startswith("p.yaml: ")


def test_issue_17_engine_argument_errors_do_not_echo_the_arguments() -> None:
    text = MINIMAL.replace("args: [serve, /models/m]",
                           f"args: [serve, /models/m, --api-key, {SECRET}, --port, '1']")
    err = _refused(text)
    assert err.field == "engine.args" and SECRET not in str(err)


def test_issue_17_env_interpolation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(MINIMAL + "alerts: {webhook_url: 'https://h/${HOOK_TOKEN}/x$${literal}'}\n")
    monkeypatch.setenv("HOOK_TOKEN", SECRET)
    assert load_policy_file(path).alerts.webhook_url == f"https://h/{SECRET}/x${{literal}}"
    monkeypatch.delenv("HOOK_TOKEN")
    with pytest.raises(PolicyError) as info:
        load_policy_file(path)
    assert info.value.field == "alerts.webhook_url"
    assert "environment variable HOOK_TOKEN is not set" in str(info.value)
    # load_policy stays pure: no environment unless one is given.
    with pytest.raises(PolicyError):
        load_policy(path.read_text())


def test_issue_17_secrets_from_files_and_systemd_credentials(tmp_path: Path) -> None:
    (tmp_path / "db.url").write_text(f"postgresql://u:{SECRET}@db/x\n")
    (tmp_path / "hook").write_text("https://hooks.example/T0/file\n")
    path = tmp_path / "p.yaml"
    path.write_text(MINIMAL + "storage: {database_url_file: db.url}\n"
                    "alerts: {webhook_url_file: hook}\n")
    policy = load_policy_file(path)
    assert policy.database_url == f"postgresql://u:{SECRET}@db/x"
    assert policy.webhook_url == "https://hooks.example/T0/file"
    assert policy.engine_api_key({}) is None
    # A systemd credential (LoadCredential=NAME:PATH -> $CREDENTIALS_DIRECTORY/NAME) wins.
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "engine_api_key").write_text("from-credential\n")
    (creds / "database_url").write_text("sqlite:////var/lib/x.db")
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    assert policy.engine_api_key(env) == "from-credential"
    assert policy.secret("database_url", policy.storage.database_url_file, env) == \
        "sqlite:////var/lib/x.db"
    # A missing file: the option and the file named, nothing of a value.
    (tmp_path / "db.url").unlink()
    with pytest.raises(PolicyError) as info:
        _ = policy.database_url
    assert "db.url" in str(info.value) and "database_url: cannot read the secret file" in str(
        info.value)


def test_issue_17_database_url_and_its_file_are_exclusive() -> None:
    err = _refused(MINIMAL + "storage: {database_url: 'sqlite:///x', database_url_file: f}\n")
    assert "set one, not both" in str(err) and "sqlite:///x" not in str(err)
