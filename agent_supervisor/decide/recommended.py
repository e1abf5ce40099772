"""What an operator should do about each finding, in NVIDIA NVSentinel's words. Pure.

NVSentinel (github.com/NVIDIA/NVSentinel) gives every health event ``isFatal`` and a
``RecommendedAction`` (data-models protos: NONE, COMPONENT_RESET, CONTACT_SUPPORT,
RESTART_VM, RESTART_BM, REPLACE_VM, UNKNOWN) and its Xid table adds RESTART_APP for
errors an application restart clears (distros/kubernetes/nvsentinel/charts/
gpu-health-monitor/xiderrorsmapping.csv: ``79,ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS,
RESTART_BM,FATAL``; ``109,ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR,RESET_GPU,FATAL``;
``119,GSP_RPC_TIMEOUT,RESET_GPU,FATAL``; ``31,..._MMU_ERR_FLT,RESTART_APP,NONFATAL``).
Xid 154 carries the driver's own verdict in its text, read as NVSentinel's syslog
health monitor reads it (health-monitors/syslog-health-monitor/pkg/xid/parser/csv.go):
"Node Reboot Required" -> RESTART_BM, "GPU Reset Required" / "Drain and Reset" ->
COMPONENT_RESET, "None" -> NONE.

Our findings get the same words so the dashboard and the alert say what to do: the
supervisor itself restarts the engine (RESTART_APP) and needs the operator only for
COMPONENT_RESET and RESTART_BM.
"""

from __future__ import annotations

import dataclasses

from agent_supervisor.decide.findings import Finding

__all__ = ["FATAL_XIDS", "RECOMMENDED", "XID_154_ACTIONS", "recommend", "xid_action"]

#: finding kind -> (RecommendedAction, fatal for the box, what it means here).
RECOMMENDED: dict[str, tuple[str, bool, str]] = {
    "gpu_lost_reboot_required": ("RESTART_BM", True, "reboot the host: the GPU is gone"),
    "gpu_wedged_reboot_required": ("RESTART_BM", True,
                                   "reboot the host: engine processes survive SIGKILL"),
    "memory_pinned_reboot_required": ("RESTART_BM", True,
                                      "reboot the host: memory did not come back after the "
                                      "engine stopped"),
    "orphan_engine_core": ("NONE", False, "the supervisor killed the orphaned processes"),
    "sigterm_ignored": ("NONE", False, "the supervisor killed the group after the grace"),
    "memory_not_back": ("NONE", False, "the next start waits for memory to come back"),
    "memory_floor_start_held": ("NONE", False, "the next start waits until what holds the "
                                "memory lets it go (find the other process)"),
    "engine_leftovers": ("NONE", False, "the next start waits for the old processes to go"),
    "engine_bad_argument": ("NONE", False, "fix the flag in the policy; no retry helps"),
    "engine_model_not_found": ("NONE", False, "fix the model path in the policy"),
    "engine_nccl_init_failed": ("RESTART_APP", False, "restarted; check the NCCL network"),
    "engine_model_files_corrupt": ("NONE", False, "fetch the model files again; no rung "
                                   "serves other files"),
    "engine_checkpoint_incompatible": ("NONE", False, "use a checkpoint this engine version "
                                       "loads, or an image that loads it"),
    "engine_driver_mismatch": ("NONE", False, "reboot after the driver update, or use an "
                               "image built for this driver"),
    "engine_compile_cache_corrupt": ("RESTART_APP", False, "relaunched once with the compile "
                                     "caches moved aside"),
    "engine_nccl_fabric": ("NONE", False, "fix NCCL_IB_GID_INDEX, NCCL_IB_HCA or "
                           "NCCL_SOCKET_IFNAME"),
    "startup_insufficient_memory": ("RESTART_APP", False, "retried with less memory"),
    "startup_cuda_graph_oom": ("RESTART_APP", False, "retried with smaller CUDA graphs"),
    "startup_out_of_memory": ("RESTART_APP", False, "retried with less memory"),
}

#: Xids after which the GPU cannot be used without a reset or a reboot: no restart loop.
FATAL_XIDS: dict[int, str] = {79: "RESTART_BM", 109: "COMPONENT_RESET",
                              119: "COMPONENT_RESET"}

#: Xid 154's recovery action (as our kernel tag spells it) -> NVSentinel's action.
XID_154_ACTIONS: dict[str, str] = {"node_reboot_required": "RESTART_BM",
                                   "gpu_reset_required": "COMPONENT_RESET",
                                   "drain_and_reset": "COMPONENT_RESET", "none": "NONE"}


def xid_action(tag: str) -> str | None:
    """NVSentinel's action for one kernel tag (``xid:79``, ``xid:154:node_reboot_required``,
    ``gpu_lost``) when it is fatal for the GPU, else None."""
    if tag == "gpu_lost":
        return "RESTART_BM"
    parts = tag.split(":")
    if parts[0] != "xid" or len(parts) < 2 or not parts[1].isdigit():
        return None
    code = int(parts[1])
    if code == 154 and len(parts) == 3:
        action = XID_154_ACTIONS.get(parts[2], "CONTACT_SUPPORT")
        return None if action == "NONE" else action
    return FATAL_XIDS.get(code)


def recommend(finding: Finding) -> Finding:
    """``finding`` with its recommended action filled in (kept if the guard set one).

    Kinds not in the table are engine-level troubles the supervisor answers by restarting
    or stepping down: RESTART_APP for critical and emergency ones, NONE for the rest.
    """
    if finding.recommended_action is not None:
        return finding
    known = RECOMMENDED.get(finding.kind)
    if known is not None:
        action = known[0]
    else:
        action = "RESTART_APP" if finding.severity.rank >= 2 else "NONE"
    return dataclasses.replace(finding, recommended_action=action)
