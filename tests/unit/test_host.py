"""Parsers of /proc/meminfo and /proc/pressure/memory on real captures, and the reader."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agent_supervisor.sense.host import HOST_FIELDS, HostReader, parse_meminfo, parse_psi

PROC = Path(__file__).parents[1] / "fixtures" / "proc"


def test_meminfo_in_bytes() -> None:
    values = parse_meminfo((PROC / "meminfo.2core-24g.txt").read_text())
    assert values == {
        "mem_total_bytes": 24684096 * 1024,
        "mem_available_bytes": 22199836 * 1024,
        "mem_free_bytes": 19268184 * 1024,
        "swap_total_bytes": 0,
        "swap_free_bytes": 0,
    }


def test_meminfo_missing_key_is_unknown() -> None:
    assert parse_meminfo("MemTotal: 100 kB\nbogus line\n")["mem_available_bytes"] is None


def test_psi_percentages_become_ratios_and_microseconds_seconds() -> None:
    values = parse_psi((PROC / "pressure-memory.stalled.txt").read_text())
    assert values["psi_memory_some_avg10_ratio"] == pytest.approx(0.3149)
    assert values["psi_memory_full_avg60_ratio"] == pytest.approx(0.1012)
    assert values["psi_memory_some_total_seconds"] == pytest.approx(53.819238)
    assert values["psi_memory_full_total_seconds"] == pytest.approx(45.120111)


def test_psi_idle_and_missing() -> None:
    idle = parse_psi((PROC / "pressure-memory.idle.txt").read_text())
    assert idle["psi_memory_full_avg10_ratio"] == 0.0
    assert parse_psi("some avg10=1.00\n")["psi_memory_full_avg10_ratio"] is None


def test_reader_without_psi_reports_unknown_once(tmp_path: Path, caplog) -> None:
    caplog.set_level("INFO")
    reader = HostReader(psi=tmp_path / "absent")
    first, second = reader.read(), reader.read()
    assert set(first) == set(HOST_FIELDS)
    assert first["psi_memory_full_avg10_ratio"] is None
    assert first["mem_available_bytes"] > 0
    assert 0.0 <= second["host_cpu_usage_ratio"] <= 1.0
    assert sum("no memory PSI" in r.message for r in caplog.records) == 1


def test_issue_13_hottest_soc_sensor_leaves_out_disks_and_network_cards() -> None:
    from agent_supervisor.sense.host import hottest_soc_c

    def shwtemp(label, current, high, critical):   # psutil's sensors_temperatures() tuple
        return SimpleNamespace(label=label, current=current, high=high, critical=critical)
    sensors = {"acpitz": [shwtemp("", 53.0, None, None), shwtemp("", 95.5, None, None)],
               "nvme": [shwtemp("Composite", 99.0, 84.8, 84.8)],
               "mlx5": [shwtemp("", 101.0, 105.0, 115.0)]}
    assert hottest_soc_c(sensors) == 95.5
    assert hottest_soc_c({"nvme": [shwtemp("Composite", 40.0, None, None)]}) is None
    assert hottest_soc_c({}) is None
