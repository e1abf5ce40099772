"""The box: memory from /proc/meminfo, memory pressure from /proc/pressure/memory (PSI),
CPU load from psutil. Parsing is pure; ``HostReader.read()`` does the I/O.

On GB10's unified memory the GPU's allocations come out of the same pool, NVML reports
device memory as Not Supported, and cgroup limits do not see GPU allocations: MemAvailable
and PSI are the memory signals that work there (DESIGN.md, "Facts").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import psutil

__all__ = ["HOST_FIELDS", "HostReader", "hottest_soc_c", "mem_available", "parse_meminfo",
           "parse_psi", "processes_rss_bytes"]

logger = logging.getLogger(__name__)

MEMINFO = Path("/proc/meminfo")
PSI_MEMORY = Path("/proc/pressure/memory")

#: /proc/meminfo key -> Sample field. Values are in kB (KiB) in the file
#: (Documentation/filesystems/proc.rst, "meminfo"); converted to bytes here.
MEMINFO_FIELDS = {
    "MemTotal": "mem_total_bytes",
    "MemAvailable": "mem_available_bytes",
    "MemFree": "mem_free_bytes",
    "SwapTotal": "swap_total_bytes",
    "SwapFree": "swap_free_bytes",
}

HOST_FIELDS = (
    *MEMINFO_FIELDS.values(),
    "psi_memory_some_avg10_ratio", "psi_memory_some_avg60_ratio",
    "psi_memory_some_total_seconds",
    "psi_memory_full_avg10_ratio", "psi_memory_full_avg60_ratio",
    "psi_memory_full_total_seconds",
    "host_cpu_usage_ratio", "host_load1", "host_temperature_c",
)

#: hwmon chips that are not the SoC/CPU: disks and network cards run at their own
#: temperatures (sparkDash #70 filters NVMe and the ConnectX-7 the same way on DGX Spark).
NOT_SOC = ("nvme", "mlx", "iwlwifi", "wifi", "ath", "r8169", "igb", "ixgbe", "drivetemp")


def parse_meminfo(text: str) -> dict[str, int | None]:
    """The ``MEMINFO_FIELDS`` of a /proc/meminfo text, in bytes; a missing key is None.

    Raises: nothing; a malformed line is skipped.
    """
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in MEMINFO_FIELDS and parts and parts[0].isdigit():
            unit = parts[1] if len(parts) > 1 else ""
            found[key] = int(parts[0]) * (1024 if unit == "kB" else 1)
    return {field: found.get(key) for key, field in MEMINFO_FIELDS.items()}


def parse_psi(text: str, resource: str = "memory") -> dict[str, float | None]:
    """A /proc/pressure/<resource> text as ratios and seconds.

    Format (Documentation/accounting/psi.rst): ``some avg10=0.22 avg60=0.17 avg300=1.11
    total=58761459`` and a ``full`` line; avgN are percentages of wall time stalled over
    the last N seconds (returned as 0-1 ratios), total is cumulative microseconds
    (returned as seconds). A missing line or value is None.
    """
    out: dict[str, float | None] = {}
    for kind in ("some", "full"):
        values: dict[str, str] = {}
        for line in text.splitlines():
            head, *pairs = line.split()
            if head == kind:
                values = dict(p.split("=", 1) for p in pairs if "=" in p)
        prefix = f"psi_{resource}_{kind}"
        for avg in ("avg10", "avg60"):
            out[f"{prefix}_{avg}_ratio"] = _number(values.get(avg), 0.01)
        out[f"{prefix}_total_seconds"] = _number(values.get("total"), 1e-6)
    return out


def _number(text: str | None, scale: float) -> float | None:
    try:
        return None if text is None else float(text) * scale
    except ValueError:
        return None


def hottest_soc_c(sensors: dict[str, list]) -> float | None:
    """The hottest SoC/CPU reading of ``psutil.sensors_temperatures()`` (chip name ->
    ``shwtemp(label, current, high, critical)``), chips in ``NOT_SOC`` left out.

    Returns degrees C, or None when no such sensor reads (never 0). On GB10 the SoC runs
    hot before the GPU reports anything: 95 C under sustained load with the GPU much
    cooler, the OS forcing a shutdown at 104.8 C (MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-
    DGX-Spark#79).
    """
    readings = [t.current for chip, temps in sensors.items()
                if not any(chip.lower().startswith(n) for n in NOT_SOC)
                for t in temps if t.current is not None and t.current > 0]
    return max(readings) if readings else None


class HostReader:
    """Reads the host fields; remembers once that PSI is missing so it says so once."""

    def __init__(self, meminfo: Path = MEMINFO, psi: Path = PSI_MEMORY) -> None:
        self.meminfo = meminfo
        self.psi = psi
        self._psi_missing_logged = False
        self._failing: set[str] = set()
        with contextlib.suppress(OSError, psutil.Error):
            psutil.cpu_percent(interval=None)  # prime: the first call has no interval

    def read(self) -> dict[str, float | int | None]:
        """All ``HOST_FIELDS``. A source that cannot be read leaves its fields None."""
        out: dict[str, float | int | None] = dict.fromkeys(HOST_FIELDS)
        try:
            out.update(parse_meminfo(self.meminfo.read_text()))
        except OSError as exc:
            logger.warning("cannot read %s: %s", self.meminfo, exc)
        try:
            out.update(parse_psi(self.psi.read_text()))
        except OSError as exc:
            if not self._psi_missing_logged:
                logger.info("no memory PSI (%s: %s): the pressure guard sees unknown",
                            self.psi, exc.strerror or exc)
                self._psi_missing_logged = True
        out["host_cpu_usage_ratio"] = self._psutil("cpu", lambda: psutil.cpu_percent(
            interval=None) / 100.0)
        out["host_load1"] = self._psutil("load", lambda: psutil.getloadavg()[0])
        read_temps = getattr(psutil, "sensors_temperatures", None)   # Linux/FreeBSD only
        out["host_temperature_c"] = self._psutil("temperature", lambda: hottest_soc_c(
            read_temps() if read_temps else {}))
        return out

    def _psutil(self, what: str, read: Callable[[], float | None]) -> float | None:
        """``read()``, or None (unknown) when /proc or /sys cannot be read now: psutil
        opens a file per call, which fails with EMFILE under a connection flood (issue
        34: the tick died of ``cpu_percent``) or ENOMEM; logged once per run of errors."""
        try:
            value = read()
        except (OSError, psutil.Error) as exc:
            if what not in self._failing:
                logger.warning("host %s unknown: %s", what, exc)
            self._failing.add(what)
            return None
        self._failing.discard(what)
        return value


def processes_rss_bytes() -> int | None:
    """Summed RSS of every process on the box (shared pages count once per process).

    What other processes hold: when it grew between an engine's launch and its stop,
    MemAvailable is not expected back in full (issue 12). None when /proc cannot be read.
    """
    total = 0
    try:
        for proc in psutil.process_iter(["memory_info"]):
            mem = proc.info.get("memory_info")
            if mem is not None:
                total += mem.rss
    except (OSError, psutil.Error):
        return None
    return total


def mem_available() -> int | None:
    """MemAvailable now (psutil reads /proc/meminfo), or None when it cannot be read."""
    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):
        return None
