"""GPU telemetry from NVML through nvidia-ml-py (module ``pynvml``), probed once per device.

Fields, NVML source and unit (NVML API Reference, docs.nvidia.com/deploy/nvml-api, "Device
Queries"; nvml.h), converted here at the sense boundary:

- name: nvmlDeviceGetName. temperature: nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU), C.
- power: nvmlDeviceGetPowerUsage, milliwatts -> W.
- SM clock: nvmlDeviceGetClockInfo(NVML_CLOCK_SM), MHz; its maximum nvmlDeviceGetMaxClockInfo.
- utilization: nvmlDeviceGetUtilizationRates().gpu, percent of the last sample period (1/6 s to
  1 s by product) in which a kernel ran -> 0-1. A wedged kernel reads busy.
- memory: nvmlDeviceGetMemoryInfo, bytes: nvmlMemory_v2_t where the driver has it (``used``
  excludes the driver's reserved memory, as nvidia-smi's "Used"), else v1 (used = total -
  free). GB10 (DGX Spark) answers NOT_SUPPORTED to both (unified memory; NVIDIA "DGX Spark
  known issues"): the memory guard reads /proc/meminfo MemAvailable there.
- clock event reasons: nvmlDeviceGetCurrentClocksEventReasons (R535+), else the older
  nvmlDeviceGetCurrentClocksThrottleReasons; a bitmask of nvmlClocksEventReason*.
- engine memory: nvmlDeviceGetComputeRunningProcesses, ``usedGpuMemory`` in bytes (pynvml gives
  None for NVML_VALUE_NOT_AVAILABLE, e.g. under Windows WDDM). NVML reports host PIDs: the
  supervisor must share the engine's PID namespace.
- Xid: nvmlEventSetWait on a set registered for nvmlEventTypeXidCriticalError; eventData = Xid.

Errors (nvmlReturn_t, raised by pynvml as NVMLError_<Name>): NOT_SUPPORTED (3) and
FUNCTION_NOT_FOUND (13) mean this device or driver cannot answer: the field is unsupported for
good and never asked again. TIMEOUT (10) from nvmlEventSetWait means no event is pending. Any
other error (GPU_IS_LOST 15, NO_DATA 21, UNKNOWN 999, ...) makes one field unknown (None) for
one read. LIBRARY_NOT_FOUND (12), DRIVER_NOT_LOADED (9) at nvmlInit: no GPU telemetry at all.
"""

from __future__ import annotations

import importlib
import logging
import re
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuReading", "GpuSensor", "decode_clock_event_reasons"]

logger = logging.getLogger(__name__)

XID_WAIT_MS = 0
"""Timeout handed to nvmlEventSetWait. NVML returns at once when an event is pending and
otherwise sleeps at most this long (NVML API Reference, nvmlEventSetWait_v2), so 0 polls
without ever blocking the sampling tick."""

MAX_XID_EVENTS_PER_READ = 64
"""Bound on one drain, so a device that floods events cannot hold up a tick."""

# Suffixes of pynvml's nvmlClocksEventReason* (else nvmlClocksThrottleReason*) bits, nvml.h
# "ClocksEventReasons", in bit order; decoded to snake_case ("HwSlowdown" -> "hw_slowdown").
# BoardLimit and Reliability exist only as nvmlClocksThrottleReason* in nvidia-ml-py 13.
_REASONS = ("GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
            "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown",
            "DisplayClockSetting", "BoardLimit", "Reliability")

# Probe key -> the GpuReading fields it fills, and its name in log lines.
_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "name": ("name", ("gpu_name",)),
    "temperature": ("temperature", ("gpu_temperature_c",)),
    "power": ("power", ("gpu_power_w",)),
    "sm_clock": ("SM clock", ("gpu_sm_clock_mhz",)),
    "sm_clock_max": ("max SM clock", ("gpu_sm_clock_max_mhz",)),
    "utilization": ("utilization", ("gpu_utilization_ratio",)),
    "memory": ("memory", ("gpu_memory_used_bytes", "gpu_memory_total_bytes")),
    "clock_event_reasons": ("clock event reasons", ("gpu_clock_event_reasons",)),
    "processes": ("compute processes", ("gpu_engine_memory_used_bytes",)),
}
_HINTS = {"memory": " (unified memory, as on GB10: the memory guard uses MemAvailable)"}


#: nvmlReturn_t NVML_ERROR_GPU_IS_LOST (nvml.h).
NVML_ERROR_GPU_IS_LOST = 15


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One read of the GPU; every field None when unknown (never 0). Units in the names."""

    gpu_name: str | None = None
    gpu_temperature_c: float | None = None
    gpu_power_w: float | None = None
    gpu_sm_clock_mhz: float | None = None
    gpu_sm_clock_max_mhz: float | None = None
    """nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM): the clock the GPU can reach (GB10: 3003 MHz,
    NVIDIA/open-gpu-kernel-modules#1358), for a clock stuck low."""
    gpu_utilization_ratio: float | None = None
    gpu_memory_used_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    gpu_clock_event_reasons: tuple[str, ...] | None = None
    """Active reasons, decoded (``decode_clock_event_reasons``); () when none is active."""
    gpu_engine_memory_used_bytes: int | None = None
    """Sum of ``usedGpuMemory`` over the compute processes whose pid is one of the engine's;
    0 when NVML lists none of them; None when not readable or no engine pid was given."""
    gpu_xid_events: tuple[int, ...] = ()
    """Xid codes NVML's event API delivered since the previous read."""
    gpu_lost: bool | None = None
    """True when an NVML call of this read failed with NVML_ERROR_GPU_IS_LOST (15: "the GPU
    has fallen off the bus or has otherwise become inaccessible", nvml.h); nvidia-smi then
    prints "GPU is lost. Reboot the system to recover this GPU"."""


def decode_clock_event_reasons(mask: int, nvml: types.ModuleType) -> tuple[str, ...]:
    """Decode a clock event (throttle) reasons bitmask with ``nvml``'s constants.

    Returns: snake_case names in bit order, e.g. ("sw_power_cap", "hw_thermal_slowdown");
    a set bit ``nvml`` does not name becomes "unknown_0x...". () for 0.
    """
    names: dict[int, str] = {}
    for suffix in _REASONS:
        bit = getattr(nvml, "nvmlClocksEventReason" + suffix, None)
        if bit is None:
            bit = getattr(nvml, "nvmlClocksThrottleReason" + suffix, None)
        if bit:
            names.setdefault(int(bit), re.sub(r"(?<!^)(?=[A-Z])", "_", suffix).lower())
    found = [names.get(1 << i, f"unknown_{1 << i:#x}") for i in range(mask.bit_length())
             if mask & (1 << i)]
    return tuple(found)


class GpuSensor:
    """NVML reader for one GPU: ``start()`` once, ``read()`` every tick, ``close()`` at the end.

    Blocking: every call is a synchronous NVML query (microseconds to milliseconds); none
    waits for events. Not thread-safe; one sensor per process is enough.
    """

    def __init__(self, nvml: types.ModuleType | None = None, *, index: int = 0) -> None:
        """``nvml``: the pynvml module or a double with its API (default: imported in start)."""
        self._nvml = nvml
        self._index = index
        self._initialized = False
        self._handle: Any = None
        self._getters: dict[str, Callable[[], Any] | None] = {}
        self._event_set: Any = None
        self._logged: set[tuple[str, str]] = set()
        self._lost = False

    @property
    def available(self) -> bool:
        """True between a successful ``start()`` and ``close()``."""
        return self._handle is not None

    @property
    def capabilities(self) -> dict[str, bool]:
        """GpuReading field name -> supported by this device; {} while not available."""
        if not self.available:
            return {}
        caps = {field: self._getters.get(key) is not None
                for key, (_, fields) in _FIELDS.items() for field in fields}
        caps["gpu_xid_events"] = self._event_set is not None
        return caps

    def start(self) -> bool:
        """1. nvmlInit; 2. handle of device ``index``; 3. probe each field once; 4. register
        for Xid events where the event API works.

        Returns: True when telemetry is on. On no library, no driver, no such device or any
        init error: one WARNING "no GPU telemetry: <reason>" and False. Each field found
        unsupported is logged once at INFO. Idempotent while started.
        """
        if self.available:
            return True
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                return self._no_telemetry(f"nvidia-ml-py is not installed ({exc})")
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return self._no_telemetry(str(exc))
        self._initialized = True
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(self._index)
        except nvml.NVMLError as exc:
            self.close()
            return self._no_telemetry(f"GPU {self._index}: {exc}")
        self._handle = handle
        self._getters = {key: self._probe(key, thunks) for key, thunks in self._candidates()}
        self._register_xid()
        supported = sum(self.capabilities.values())
        logger.info("GPU %d: NVML telemetry on, %d of %d fields supported",
                    self._index, supported, len(self.capabilities))
        return True

    def read(self, engine_pids: Collection[int] = ()) -> GpuReading:
        """Read every supported field once and drain pending Xid events.

        Returns: a GpuReading (all None when not available). Raises: nothing from NVML; an
        NVMLError in one field makes that field None for this read (logged once per field and
        error kind) while the others are still read. Unsupported fields are never asked.
        """
        if not self.available:
            return GpuReading()
        self._lost = False
        raw = {key: self._call(key) for key in _FIELDS}
        util, mem, mask = raw["utilization"], raw["memory"], raw["clock_event_reasons"]
        return GpuReading(
            gpu_name=_text(raw["name"]),
            gpu_temperature_c=_number(raw["temperature"]),
            gpu_power_w=None if raw["power"] is None else raw["power"] / 1000.0,
            gpu_sm_clock_mhz=_number(raw["sm_clock"]),
            gpu_sm_clock_max_mhz=_number(raw["sm_clock_max"]),
            gpu_utilization_ratio=None if util is None else util.gpu / 100.0,
            gpu_memory_used_bytes=None if mem is None else int(mem.used),
            gpu_memory_total_bytes=None if mem is None else int(mem.total),
            gpu_clock_event_reasons=(
                None if mask is None else decode_clock_event_reasons(int(mask), self._nvml)),
            gpu_engine_memory_used_bytes=_engine_memory(raw["processes"], engine_pids),
            gpu_xid_events=self._drain_xid(),
            gpu_lost=self._lost,
        )

    def close(self) -> None:
        """nvmlEventSetFree, then nvmlShutdown. Safe to call twice, or without ``start()``."""
        nvml = self._nvml
        self._free_event_set()
        self._handle = None
        self._getters = {}
        if self._initialized and nvml is not None:
            self._initialized = False
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                logger.debug("GPU: nvmlShutdown: %s", exc)

    # -- probing -------------------------------------------------------------------------

    def _candidates(self) -> list[tuple[str, list[Callable[[], Any] | None]]]:
        """Per probe key, the NVML calls that can answer it, preferred first."""
        nvml, handle = self._nvml, self._handle

        def call(name: str, *args: Any, **kwargs: Any) -> Callable[[], Any] | None:
            fn = getattr(nvml, name, None)
            return None if fn is None else (lambda: fn(handle, *args, **kwargs))

        mem_v2 = getattr(nvml, "nvmlMemory_v2", None)
        return [
            ("name", [call("nvmlDeviceGetName")]),
            ("temperature", [call("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)]),
            ("power", [call("nvmlDeviceGetPowerUsage")]),
            ("sm_clock", [call("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)]),
            ("sm_clock_max", [call("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM)]),
            ("utilization", [call("nvmlDeviceGetUtilizationRates")]),
            ("memory", [call("nvmlDeviceGetMemoryInfo", version=mem_v2) if mem_v2 else None,
                        call("nvmlDeviceGetMemoryInfo")]),
            ("clock_event_reasons", [call("nvmlDeviceGetCurrentClocksEventReasons"),
                                     call("nvmlDeviceGetCurrentClocksThrottleReasons")]),
            ("processes", [call("nvmlDeviceGetComputeRunningProcesses")]),
        ]

    def _probe(self, key: str, thunks: list[Callable[[], Any] | None]
               ) -> Callable[[], Any] | None:
        """Call each candidate once; keep the first that is not NOT_SUPPORTED/FUNCTION_NOT_FOUND.

        Any other error keeps the candidate (the failure may pass) and is logged once.
        """
        reason = "not in this nvidia-ml-py"
        for thunk in thunks:
            if thunk is None:
                continue
            try:
                thunk()
            except self._nvml.NVMLError as exc:
                if self._unsupported(exc):
                    reason = str(exc)
                    continue
                self._log_error(key, exc)
            return thunk
        logger.info("GPU %s: %s%s", _FIELDS[key][0], reason, _HINTS.get(key, ""))
        return None

    def _unsupported(self, exc: Exception) -> bool:
        nvml = self._nvml
        return isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound))

    def _register_xid(self) -> None:
        """nvmlEventSetCreate + nvmlDeviceRegisterEvents(XidCriticalError); INFO if refused."""
        nvml = self._nvml
        xid = getattr(nvml, "nvmlEventTypeXidCriticalError", None)
        if xid is None or not hasattr(nvml, "nvmlEventSetCreate"):
            logger.info("GPU Xid events: not in this nvidia-ml-py")
            return
        try:
            self._event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(self._handle, xid, self._event_set)
        except nvml.NVMLError as exc:
            logger.info("GPU Xid events: %s (the kernel log still reports Xids)", exc)
            self._free_event_set()

    def _free_event_set(self) -> None:
        if self._event_set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._event_set)
            except self._nvml.NVMLError as exc:
                logger.debug("GPU: nvmlEventSetFree: %s", exc)
            self._event_set = None

    # -- reading -------------------------------------------------------------------------

    def _call(self, key: str) -> Any:
        getter = self._getters.get(key)
        if getter is None:
            return None
        try:
            return getter()
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST:
                self._lost = True
            self._log_error(key, exc)
            return None

    def _drain_xid(self) -> tuple[int, ...]:
        """nvmlEventSetWait(XID_WAIT_MS) until NVML_ERROR_TIMEOUT; the Xid codes, oldest first."""
        if self._event_set is None:
            return ()
        nvml = self._nvml
        xid = nvml.nvmlEventTypeXidCriticalError
        codes: list[int] = []
        for _ in range(MAX_XID_EVENTS_PER_READ):
            try:
                data = nvml.nvmlEventSetWait(self._event_set, XID_WAIT_MS)
            except nvml.NVMLError_Timeout:
                break
            except nvml.NVMLError as exc:
                self._log_error("xid", exc)
                break
            if int(data.eventType) & xid:
                codes.append(int(data.eventData))
        return tuple(codes)

    def _log_error(self, key: str, exc: Exception) -> None:
        kind = type(exc).__name__
        if (key, kind) not in self._logged:
            self._logged.add((key, kind))
            label = _FIELDS[key][0] if key in _FIELDS else "Xid events"
            logger.warning("GPU %s: %s: %s (unknown while it lasts; logged once)",
                           label, kind, exc)

    @staticmethod
    def _no_telemetry(reason: str) -> bool:
        logger.warning("no GPU telemetry: %s", reason)
        return False


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _engine_memory(processes: Any, engine_pids: Collection[int]) -> int | None:
    """Bytes held by the engine's compute processes; None if unknown (see GpuReading)."""
    if processes is None or not engine_pids:
        return None
    pids = set(engine_pids)
    total = 0
    for proc in processes:
        if proc.pid in pids:
            if proc.usedGpuMemory is None:
                return None
            total += int(proc.usedGpuMemory)
    return total
