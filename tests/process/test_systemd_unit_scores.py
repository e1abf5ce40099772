"""Issue 34: both shipped units checked by systemd's own scorer, the supervisor unit's
capability grant checked against the real kernel, and the start-up warning when the kernel
log cannot be read.

There is no systemd as PID 1 on the development VM, so ``systemd-run -p User=...`` cannot
run the unit; ``setpriv`` (util-linux) sets the same credentials systemd would from the
unit's ``User=``, ``NoNewPrivileges=``, ``CapabilityBoundingSet=`` and
``AmbientCapabilities=`` lines (systemd.exec(5)), and the real KernelLogFollower then opens
the real /dev/kmsg under the host's ``kernel.dmesg_restrict``. The unit's user does not
exist here; ``nobody`` stands in for it.
"""

from __future__ import annotations

import asyncio
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_supervisor.act.systemd import unit_file
from agent_supervisor.act.systemd_gateway import gateway_service_unit
from agent_supervisor.policy import load_policy_file
from agent_supervisor.sense.kernel_log import KernelLogFollower
from tests.helpers.paths import ROOT
from tests.helpers.policies import fake_engine_policy

POLICY_PATH = ROOT / "policies" / "cpu-demo.yaml"
ANALYZE = shutil.which("systemd-analyze")
SETPRIV = shutil.which("setpriv")
CAP_SYSLOG = 34  # <linux/capability.h>


def offline_security() -> bool:
    if ANALYZE is None:
        return False
    out = subprocess.run(
        [ANALYZE, "security", "--help"], capture_output=True, text=True, timeout=30
    )
    return "--offline" in out.stdout


@pytest.mark.skipif(
    not offline_security(), reason="systemd-analyze with security --offline (systemd 250+) not here"
)
def test_issue_34_both_units_score_at_most_3(tmp_path: Path) -> None:
    policy = load_policy_file(POLICY_PATH)
    units = {
        "supervisor-demo.service": unit_file(policy, POLICY_PATH, executable="/bin/true"),
        "supervisor-demo-gateway.service": gateway_service_unit(
            policy, POLICY_PATH, executable="/bin/true"
        ),
    }
    scores = {}
    for name, text in units.items():
        (tmp_path / name).write_text(text)
        out = subprocess.run(
            [ANALYZE, "security", "--offline=yes", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
        assert found, out.stdout[-500:] + out.stderr[-500:]
        scores[name] = float(found.group(1))
    print(f"systemd-analyze security --offline=yes: {scores}")
    assert max(scores.values()) <= 3.0  # the gateway's was 8.7 EXPOSED


def unit_credentials(text: str, user: str) -> list[str]:
    """setpriv arguments for the unit's credential lines (``user`` stands in for User=)."""
    account = pwd.getpwnam(user)
    value = {k: v for k, _, v in (x.partition("=") for x in text.splitlines()) if _}
    caps = [c.removeprefix("CAP_").lower() for c in value["AmbientCapabilities"].split()]
    bounding = [c.removeprefix("CAP_").lower() for c in value["CapabilityBoundingSet"].split()]
    args = [
        f"--reuid={account.pw_uid}",
        f"--regid={account.pw_gid}",
        "--clear-groups",
        "--bounding-set=" + ",".join(["-all", *(f"+{c}" for c in bounding)]),
    ]
    if caps:
        plus = ",".join(f"+{c}" for c in caps)
        args += [f"--inh-caps={plus}", f"--ambient-caps={plus}"]
    if value["NoNewPrivileges"] == "yes":
        args.append("--no-new-privs")
    return args


CHILD = """
import subprocess, sys
from agent_supervisor.act.processes import ENGINE_SCHEDULING
from agent_supervisor.sense.kernel_log import KernelLogFollower
follower = KernelLogFollower(journalctl=sys.argv[1])
print("source", follower.start())
print("warning", follower.warning)
follower.close()
for name, pre in (("engine", ENGINE_SCHEDULING.apply), ("plain", None)):
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True,
                            preexec_fn=pre).stdout
    caps = dict(line.split(":\\t") for line in status.splitlines() if line.startswith("Cap"))
    print(name, caps["CapAmb"], caps["CapEff"])
"""


def restricted() -> str | None:
    if SETPRIV is None:
        return "setpriv not installed"
    if (
        not Path("/proc/sys/kernel/dmesg_restrict").exists()
        or Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1"
    ):
        return "kernel.dmesg_restrict is not 1 here: any user may read /dev/kmsg"
    if subprocess.run([SETPRIV, "--reuid=nobody", "true"], capture_output=True).returncode:
        return "cannot change user here (needs root)"
    return None


@pytest.mark.skipif(restricted() is not None, reason=str(restricted()))
def test_issue_34_the_units_grant_opens_dev_kmsg_and_stays_with_the_supervisor(
    tmp_path: Path,
) -> None:
    text = unit_file(load_policy_file(POLICY_PATH), POLICY_PATH, executable="/bin/true")
    granted = unit_credentials(text, "nobody")
    bare = unit_credentials(text.replace("=CAP_SYSLOG", "="), "nobody")
    outs = {}
    journalctl = shutil.which("journalctl")
    runs = [("unit", granted, "no-journalctl"), ("without CAP_SYSLOG", bare, "no-journalctl")]
    if journalctl is not None:  # the fallback, as a user outside the journal's groups
        runs.append(("journalctl", bare, journalctl))
    for name, creds, journal in runs:
        out = subprocess.run(
            [SETPRIV, *creds, sys.executable, "-c", CHILD, str(tmp_path / journal)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        outs[name] = dict(line.split(" ", 1) for line in out.stdout.splitlines())
        print(name, " ".join(creds), outs[name])
    unit, without = outs["unit"], outs["without CAP_SYSLOG"]
    assert (unit["source"], unit["warning"]) == ("kmsg", "None")
    syslog_bit = f"{1 << CAP_SYSLOG:016x}"
    assert unit["plain"] == f"{syslog_bit} {syslog_bit}"  # what a child would inherit ...
    assert unit["engine"] == f"{0:016x} {0:016x}"  # ... and what the engine gets
    assert without["source"] == "unavailable"
    assert "Operation not permitted" in without["warning"]
    assert "AmbientCapabilities=CAP_SYSLOG" in without["warning"]
    if journalctl is not None:
        fallback = outs["journalctl"]
        assert fallback["source"] == "journalctl"
        assert "cannot read the system journal" in fallback["warning"]
        assert "CAP_SYSLOG" in fallback["warning"]


async def test_issue_34_an_unreadable_kernel_log_is_a_warning_incident_at_start(
    tmp_path: Path,
) -> None:
    """The real service with a kernel log it cannot read (no such device, no journalctl):
    the warning naming the fix is logged and reaches the alert webhook as an incident."""
    from agent_supervisor.record.store import Store
    from agent_supervisor.service import Supervisor
    from tests.helpers.alerts import Receiver

    rx = Receiver()
    policy = fake_engine_policy(
        tmp_path,
        sampling={"tick_seconds": 0.3},
        alerts={"webhook_url": rx.url, "format": "generic"},
    )
    sup = Supervisor(policy, Store.open(policy.database_url, fleet=policy.fleet))
    sup.sensors.kernel = KernelLogFollower(
        kmsg_path=str(tmp_path / "kmsg"), journalctl=str(tmp_path / "no-journalctl")
    )
    task = asyncio.create_task(sup.run())
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while not any(b.get("kind") == "kernel_log_unreadable" for b in rx.bodies):
            assert asyncio.get_running_loop().time() < deadline, rx.bodies
            assert not task.done(), task
            await asyncio.sleep(0.1)
    finally:
        sup.request_stop()
        await asyncio.wait_for(task, 60)
        rx.close()
    alert = next(b for b in rx.bodies if b["kind"] == "kernel_log_unreadable")
    print(alert)
    assert alert["severity"] == "warning"
    assert "AmbientCapabilities=CAP_SYSLOG" in str(alert)
