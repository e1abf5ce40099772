"""A stand-in for the ``pynvml`` module, fed from device profiles recorded from real devices.

Profiles are tests/fixtures/nvml/<device>.json (where each value came from: the README
there). A snapshot holds what nvidia-smi printed; the double serves it the way NVML does:

- raw NVML units: power in milliwatts (nvidia-smi's W x 1000), memory and per-process
  memory in bytes (MiB x 2**20), temperature in C, clocks in MHz, utilization in percent;
- "Clocks Event Reasons" lines -> the bitmask, from pynvml's own nvmlClocksEventReason* bits;
- memory: nvmlMemory_v2_t from the recorded total/reserved/used/free, v1 with
  used = total - free (nvml.h: "Sum of Reserved and Allocated device memory");
- "not_supported" -> NVMLError_NotSupported (what GB10 answers for memory);
- null (the source did not record it) -> NVMLError_NoData, so nothing is made up;
- a process memory of null -> usedGpuMemory None (pynvml's NVML_VALUE_NOT_AVAILABLE).

The exception classes and constants are pynvml's own. ``calls`` counts every function by
NVML name (the v2 memory query as "nvmlDeviceGetMemoryInfo_v2"); ``failures`` maps such a
name to an NVMLError to raise instead of answering; ``queue_xid`` queues Xid events.
"""

from __future__ import annotations

import json
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pynvml
from pynvml import (
    NVMLError,
    NVMLError_FunctionNotFound,
    NVMLError_InvalidArgument,
    NVMLError_LibraryNotFound,
    NVMLError_NoData,
    NVMLError_NotSupported,
    NVMLError_Timeout,
    NVMLError_Uninitialized,
)

PROFILES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
MIB = 1 << 20

# nvidia-smi -q "Clocks Event Reasons" (older drivers: "Clocks Throttle Reasons") line -> bit.
SMI_REASON_BITS = {
    "Idle": pynvml.nvmlClocksEventReasonGpuIdle,
    "Applications Clocks Setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "SW Power Cap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "HW Slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "HW Thermal Slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "HW Power Brake Slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "Sync Boost": pynvml.nvmlClocksEventReasonSyncBoost,
    "SW Thermal Slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "Display Clock Setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}

_ERRORS = {
    "not_supported": NVMLError_NotSupported,
    "function_not_found": NVMLError_FunctionNotFound,
}


def load_profile(name: str) -> dict[str, Any]:
    """The parsed tests/fixtures/nvml/<name>.json."""
    return json.loads((PROFILES / f"{name}.json").read_text())


class FakeNvml(types.ModuleType):
    """pynvml's API over one snapshot of one device (index 0)."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_NoData = NVMLError_NoData
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, snapshot: dict[str, Any] | None = None, *,
                 init_error: NVMLError | None = None,
                 clocks_event_reasons_api: str | None = None,
                 xid_event_api: str | None = None) -> None:
        """``clocks_event_reasons_api`` / ``xid_event_api``: None (works), "absent" (not in
        this pynvml), "function_not_found" or "not_supported" (what the driver answers)."""
        super().__init__("fake_nvml")
        self.snapshot = snapshot or {}
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.failures: dict[str, NVMLError] = {}
        self.initialized = False
        self.xid_event_api = xid_event_api
        self.clocks_event_reasons_api = clocks_event_reasons_api
        self.event_sets: list[object] = []
        self.freed: list[object] = []
        self.wait_timeouts_ms: list[int] = []
        self._pending_xid: list[int] = []
        if clocks_event_reasons_api == "absent":
            self.nvmlDeviceGetCurrentClocksEventReasons = None

    @classmethod
    def from_profile(cls, name: str, snapshot: str, **kwargs: Any) -> FakeNvml:
        """A double for snapshot ``snapshot`` of tests/fixtures/nvml/<name>.json."""
        profile = load_profile(name)
        kwargs.setdefault("clocks_event_reasons_api", profile.get("clocks_event_reasons_api"))
        return cls(profile["snapshots"][snapshot], **kwargs)

    def queue_xid(self, *codes: int) -> None:
        """Xid events the event set will deliver, oldest first."""
        self._pending_xid.extend(codes)

    # -- helpers -----------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if not self.initialized:
            raise NVMLError_Uninitialized()
        if name in self.failures:
            raise self.failures[name]

    def _value(self, key: str) -> Any:
        value = self.snapshot.get(key)
        if isinstance(value, str) and value in _ERRORS:
            raise _ERRORS[value]()
        if value is None:
            raise NVMLError_NoData()
        return value

    # -- pynvml API --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index != 0:
            raise NVMLError_InvalidArgument()
        return "handle-0"

    def nvmlDeviceGetName(self, handle: str) -> str:
        self._enter("nvmlDeviceGetName")
        return self._value("name")

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return self._value("temperature_c")

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return round(self._value("power_draw_w") * 1000)

    def nvmlDeviceGetClockInfo(self, handle: str, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo")
        if clock_type != self.NVML_CLOCK_SM:
            raise NVMLError_InvalidArgument()
        return self._value("sm_clock_mhz")

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock_type: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo")
        if clock_type != self.NVML_CLOCK_SM:
            raise NVMLError_InvalidArgument()
        if "sm_clock_max_mhz" not in self.snapshot:      # not recorded: as if not supported
            raise pynvml.NVMLError_NotSupported()
        return self._value("sm_clock_max_mhz")

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates")
        return types.SimpleNamespace(gpu=self._value("utilization_gpu_percent"),
                                     memory=self.snapshot.get("utilization_memory_percent"))

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None
                                ) -> types.SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
        mem = self._value("memory")
        total, free = mem["total_mib"] * MIB, mem["free_mib"] * MIB
        if version:
            return types.SimpleNamespace(version=version, total=total, free=free,
                                         reserved=mem["reserved_mib"] * MIB,
                                         used=mem["used_mib"] * MIB)
        return types.SimpleNamespace(total=total, free=free, used=total - free)

    def _reasons(self, name: str) -> int:
        self._enter(name)
        reasons = self._value("clocks_event_reasons")
        return sum(SMI_REASON_BITS[line] for line, state in reasons.items() if state == "Active")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        if self.clocks_event_reasons_api in _ERRORS:
            self.calls["nvmlDeviceGetCurrentClocksEventReasons"] += 1
            raise _ERRORS[self.clocks_event_reasons_api]()
        return self._reasons("nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return self._reasons("nvmlDeviceGetCurrentClocksThrottleReasons")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[types.SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return [types.SimpleNamespace(
                    pid=p["pid"],
                    usedGpuMemory=None if p["used_gpu_memory_mib"] is None
                    else p["used_gpu_memory_mib"] * MIB)
                for p in self._value("compute_processes")]

    def nvmlEventSetCreate(self) -> object:
        self._enter("nvmlEventSetCreate")
        event_set = object()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: str, event_types: int, event_set: object) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        if self.xid_event_api in _ERRORS:
            raise _ERRORS[self.xid_event_api]()
        if event_types != self.nvmlEventTypeXidCriticalError:
            raise NVMLError_InvalidArgument()

    def nvmlEventSetWait(self, event_set: object, timeoutms: int) -> types.SimpleNamespace:
        self._enter("nvmlEventSetWait")
        self.wait_timeouts_ms.append(timeoutms)
        if event_set in self.freed or event_set not in self.event_sets:
            raise NVMLError_InvalidArgument()
        if not self._pending_xid:
            raise NVMLError_Timeout()
        return types.SimpleNamespace(device="handle-0",
                                     eventType=self.nvmlEventTypeXidCriticalError,
                                     eventData=self._pending_xid.pop(0),
                                     gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._enter("nvmlEventSetFree")
        if event_set in self.freed:
            raise NVMLError_InvalidArgument()
        self.freed.append(event_set)


for _name in dir(pynvml):
    if _name.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason")):
        setattr(FakeNvml, _name, getattr(pynvml, _name))
