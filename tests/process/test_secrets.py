"""No secret anywhere it should not be (issue 17), grepped for real: ``supervisor run``
(a real process, its fake engine, SQLite) with secrets planted in its environment and
its policy; a reload refused with secrets in the new file; then the incidents API, the
supervisor's log, every file under the state directory, and the engine's
/proc/<pid>/environ are searched for each planted value. Files must be 0600 and
directories 0700 (umask 077)."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import httpx
import yaml

from agent_supervisor.record.store import Store
from tests.helpers.production import engines, policy_file, start, status, wait

SECRETS = {
    "SUPERVISOR_ADMIN_TOKEN": "planted-admin-token-91ac",
    "UPSTREAM_KEY": "planted-upstream-key-27bd",
    "HF_TOKEN": "planted-hf-token-55ce",
}
IN_POLICY = {
    "api_key": "planted-api-key-in-argv-81fa",
    "hf_token": "planted-hf-token-in-reload-6d0b",
    "webhook": "planted-webhook-token-3e1c",
    "db_password": "planted-db-password-0f9a",
}


def test_issue_17_no_planted_secret_in_incidents_logs_files_or_engine_env(
        tmp_path: Path) -> None:
    path = policy_file(tmp_path, gateway={"upstream_api_key_env": "UPSTREAM_KEY"},
                       engine={"args": [str(Path(__file__).parents[1] / "helpers" /
                                            "fake_engine.py"), "--api-key",
                                        IN_POLICY["api_key"]]})
    good = path.read_text()
    proc = start(path, SECRETS)
    try:
        wait("engine", lambda: status(path)["engine_state"] == "ready")
        (engine,) = engines(path)
        environ = Path(f"/proc/{engine}/environ").read_bytes()
        # A reload refused: the new file has secrets in values that fail validation.
        bad = yaml.safe_load(good)
        bad["engine"]["environment"] = {"HF_TOKEN": [IN_POLICY["hf_token"]]}
        bad["engine"]["args"] += ["--port", "1"]                 # reserved: refused
        bad["alerts"] = {"webhook_url": f"https://hooks.example/{IN_POLICY['webhook']}",
                         "format": "teams"}
        bad["storage"]["database_url"] = (f"postgresql://u:{IN_POLICY['db_password']}"
                                          "@127.0.0.1:1/x")
        path.write_text(yaml.safe_dump(bad))
        proc.send_signal(signal.SIGHUP)
        store = Store.open(f"sqlite:///{tmp_path}/state/supervisor.db", fleet="prod")
        wait("refusal", lambda: store.incidents(kind="policy_rejected"))
        store.close()
        port = yaml.safe_load(good)["admin"]["port"]
        api = httpx.get(f"http://127.0.0.1:{port}/api/incidents", timeout=5).text
        assert "policy_rejected" in api and "engine.args" in api
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    log = path.with_name("supervisor.log").read_bytes()
    state = tmp_path / "state"
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.name == "supervisor.db" for p in files)
    for name, value in {**SECRETS, **IN_POLICY}.items():
        needle = value.encode()
        assert needle not in api.encode(), f"{name} in /api/incidents"
        assert needle not in log, f"{name} in the supervisor's log"
        assert needle not in environ or name == "api_key", f"{name} in the engine's environ"
        if name != "api_key":          # the engine's own log may echo its argv; masked
            for p in files:
                assert needle not in p.read_bytes(), f"{name} in {p}"
    for name in ("SUPERVISOR_ADMIN_TOKEN=", "UPSTREAM_KEY=", "HF_TOKEN="):
        assert name.encode() not in environ
    # umask 077: the database, its WAL, logs, spool and traces 0600, directories 0700.
    for p in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"
    assert os.path.exists(state / "logs")
