"""Guard ``gpu_lost``: the GPU is gone; restarting the engine cannot help.

Evidence, any of: an Xid after which the GPU is unusable until a reset or a reboot (79
"GPU has fallen off the bus", 109 context-switch timeout, 119 GSP RPC timeout; NVSentinel
marks them FATAL), Xid 154 whose new recovery action is a reset or a reboot, the
"fallen off the bus" driver message printed without any Xid number (NVSentinel #155,
gpud PR #1209), or NVML answering GPU_IS_LOST. Public: NVIDIA/open-gpu-kernel-modules
#1151 (RTX 5080/5090: "Xid 79 with zero precursor ... Recovery requires a full reboot"),
#1080, #1353 (Xid 119 x3 -> Xid 154). Response: kill what is left of the engine, hold
the ladder, alert ``gpu_lost_reboot_required`` with the kernel lines, no restart loop.
Xids that an engine restart clears (13, 31, 43, 45 ...) are not this guard's.
"""

from __future__ import annotations

from agent_supervisor.decide.context import Situation
from agent_supervisor.decide.findings import Finding, Response, Severity
from agent_supervisor.decide.recommended import FATAL_XIDS, xid_action

__all__ = ["GUARD", "check"]

GUARD = "gpu_lost"

#: Kernel lines kept as evidence.
EVIDENCE_LINES = 12


def check(sit: Situation) -> list[Finding]:
    """One finding when any sample of the window says the GPU is gone."""
    tags: list[str] = []
    actions: list[str] = []
    lines: list[str] = []
    nvml_lost = False
    for x in sit.window:
        hit = False
        for tag in x.kernel_events or ():
            action = xid_action(tag)
            if action is not None:
                tags.append(tag)
                actions.append(action)
                hit = True
        for code in x.gpu_xid_events or ():
            if code in FATAL_XIDS:
                tags.append(f"xid:{code}")
                actions.append(FATAL_XIDS[code])
                hit = True
        if x.gpu_lost:
            nvml_lost = hit = True
            actions.append("RESTART_BM")
        if hit:
            lines += x.kernel_lines
    if not actions:
        return []
    s = sit.latest
    assert s is not None
    action = "RESTART_BM" if "RESTART_BM" in actions else actions[0]
    what = ", ".join(dict.fromkeys(tags)) or "NVML: GPU is lost"
    evidence = {"kernel_events": list(dict.fromkeys(tags)), "nvml_gpu_is_lost": nvml_lost,
                "kernel_lines": lines[-EVIDENCE_LINES:], "run_id": s.engine_run_id,
                "recommended_action": action}
    return [Finding(GUARD, "gpu_lost_reboot_required", Severity.EMERGENCY,
                    f"the GPU is gone ({what}): no restart; "
                    f"{'reboot' if action == 'RESTART_BM' else 'reset the GPU or reboot'}",
                    evidence, s.engine_run_id, Response.REBOOT_REQUIRED, action)]
