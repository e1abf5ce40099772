"""The NVML GPU sensor on device profiles recorded from real GB10, H200 and throttled GPUs.

The NVML double (tests/helpers/fake_nvml.py) serves snapshots of tests/fixtures/nvml/*.json
in NVML's raw units; the README there says where every value came from. Values a source did
not record reach the sensor as NVML_ERROR_NO_DATA and must come out unknown (None).
"""

from __future__ import annotations

import ctypes
import logging

import pynvml
import pytest

from agent_supervisor.sense.gpu import (
    MAX_XID_EVENTS_PER_READ,
    XID_WAIT_MS,
    GpuReading,
    GpuSensor,
    decode_clock_event_reasons,
)
from tests.helpers.fake_nvml import MIB, FakeNvml, load_profile

LOGGER = "agent_supervisor.sense.gpu"
ALL_FIELDS = {"gpu_name", "gpu_temperature_c", "gpu_power_w", "gpu_sm_clock_mhz",
              "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_memory_total_bytes",
              "gpu_clock_event_reasons", "gpu_engine_memory_used_bytes", "gpu_xid_events"}


def started(fake: FakeNvml, **kwargs: int) -> GpuSensor:
    sensor = GpuSensor(fake, **kwargs)
    assert sensor.start() is True
    return sensor


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]


# -- recorded devices ------------------------------------------------------------------


def test_h200_idle_exact_values_and_units() -> None:
    sensor = started(FakeNvml.from_profile("h200", "idle"))
    assert sensor.read(engine_pids={4242}) == GpuReading(
        gpu_name="NVIDIA H200",
        gpu_temperature_c=28.0,
        gpu_power_w=74.58,                          # NVML 74580 mW
        gpu_sm_clock_mhz=345.0,
        gpu_utilization_ratio=0.0,
        gpu_memory_used_bytes=1 * MIB,              # nvmlMemory_v2_t.used, as nvidia-smi "Used"
        gpu_memory_total_bytes=143771 * MIB,
        gpu_clock_event_reasons=("gpu_idle",),      # "Idle: Active"
        gpu_engine_memory_used_bytes=0,             # "Processes: None": the engine holds none
        gpu_xid_events=(),
        gpu_lost=False,
    )
    # The recorded nvidia-smi dump has no max clocks: the double answers Not Supported.
    assert sensor.capabilities == {**dict.fromkeys(ALL_FIELDS, True),
                                   "gpu_sm_clock_max_mhz": False}


def test_gb10_serving_memory_not_supported_and_engine_memory_from_its_process() -> None:
    fake = FakeNvml.from_profile("gb10", "serving")
    sensor = started(fake)
    reading = sensor.read(engine_pids=(2283430, 2283401))
    assert reading == GpuReading(
        gpu_name="NVIDIA GB10",
        gpu_temperature_c=45.0,
        gpu_power_w=11.0,
        gpu_sm_clock_mhz=None,                      # not in the recorded nvidia-smi table
        gpu_utilization_ratio=0.0,
        gpu_memory_used_bytes=None,                 # NVML: Not Supported (unified memory)
        gpu_memory_total_bytes=None,
        gpu_clock_event_reasons=None,               # not in the recorded nvidia-smi table
        gpu_engine_memory_used_bytes=61383 * MIB,   # VLLM::EngineCore, 61383MiB
        gpu_xid_events=(),
        gpu_lost=False,
    )
    assert sensor.read(engine_pids={1}).gpu_engine_memory_used_bytes == 0
    assert sensor.read().gpu_engine_memory_used_bytes is None


def test_gb10_desktop_percent_becomes_ratio() -> None:
    reading = started(FakeNvml.from_profile("gb10", "desktop")).read(engine_pids={4174})
    assert reading.gpu_utilization_ratio == 0.1      # "10%"
    assert reading.gpu_engine_memory_used_bytes == 0  # Xorg is a graphics process, not compute


def test_unsupported_field_is_probed_once_and_never_called_again(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeNvml.from_profile("gb10", "serving")
    sensor = started(fake)
    for _ in range(3):
        assert sensor.read().gpu_memory_used_bytes is None
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 4  # probe + 3 reads
    caps = sensor.capabilities
    assert caps["gpu_memory_used_bytes"] is caps["gpu_memory_total_bytes"] is False
    assert caps["gpu_temperature_c"] is True
    assert caps["gpu_sm_clock_mhz"] is True  # NO_DATA is not NOT_SUPPORTED: asked every read
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert info.count("GPU memory: Not Supported (unified memory, as on GB10: "
                      "the memory guard uses MemAvailable)") == 1


def test_old_driver_falls_back_to_throttle_reasons_and_decodes_the_power_brake() -> None:
    fake = FakeNvml.from_profile("v100-sxm2-power-brake", "throttled")
    sensor = started(fake)
    reading = sensor.read()
    assert reading.gpu_clock_event_reasons == ("hw_slowdown", "hw_power_brake_slowdown")
    assert reading.gpu_sm_clock_mhz == 382.0
    assert reading.gpu_name == "Tesla V100-SXM2-32GB"
    assert reading.gpu_power_w is None and reading.gpu_temperature_c is None  # not recorded
    sensor.read()
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # FUNCTION_NOT_FOUND
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    assert sensor.capabilities["gpu_clock_event_reasons"] is True


def test_pynvml_without_the_event_reasons_function_uses_throttle_reasons() -> None:
    fake = FakeNvml.from_profile("h200", "idle", clocks_event_reasons_api="absent")
    assert started(fake).read().gpu_clock_event_reasons == ("gpu_idle",)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_sw_power_cap_under_load() -> None:
    reading = started(FakeNvml.from_profile("sw-power-cap-ollama-6163", "under_load")).read()
    assert reading.gpu_clock_event_reasons == ("sw_power_cap",)
    assert reading.gpu_temperature_c == 77.0
    assert reading.gpu_name is None


def test_wddm_process_memory_not_available_is_unknown_not_zero() -> None:
    sensor = started(FakeNvml.from_profile("wddm-ollama-10393", "wddm"))
    reading = sensor.read(engine_pids={27124})
    assert reading.gpu_engine_memory_used_bytes is None
    assert reading.gpu_memory_used_bytes == 8415 * MIB
    assert reading.gpu_memory_total_bytes == 16376 * MIB


def test_memory_v1_fallback_counts_reserved_memory_as_used() -> None:
    fake = FakeNvml.from_profile("h200", "idle")
    fake.failures["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVMLError_FunctionNotFound()
    reading = started(fake).read()
    assert reading.gpu_memory_used_bytes == (143771 - 143072) * MIB  # total - free
    assert reading.gpu_memory_total_bytes == 143771 * MIB
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1


# -- errors ----------------------------------------------------------------------------


def test_nvml_error_in_one_field_leaves_the_others(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml.from_profile("h200", "idle")
    sensor = started(fake)
    healthy = sensor.read()
    fake.failures["nvmlDeviceGetPowerUsage"] = pynvml.NVMLError_GpuIsLost()
    first, second = sensor.read(), sensor.read()
    assert first == second == GpuReading(**{
        **{f: getattr(healthy, f) for f in ALL_FIELDS}, "gpu_power_w": None,
        "gpu_lost": True})   # issue 12: NVML's GPU_IS_LOST is the GPU-gone evidence
    assert warnings_of(caplog) == [
        "GPU power: NVMLError_GpuIsLost: GPU is lost (unknown while it lasts; logged once)"]
    del fake.failures["nvmlDeviceGetPowerUsage"]
    back = sensor.read()
    assert back.gpu_power_w == 74.58 and back.gpu_lost is False
    assert sensor.capabilities["gpu_power_w"] is True


def test_error_at_probe_other_than_not_supported_keeps_the_field() -> None:
    fake = FakeNvml.from_profile("h200", "idle")
    fake.failures["nvmlDeviceGetTemperature"] = pynvml.NVMLError_Unknown()
    sensor = started(fake)
    assert sensor.capabilities["gpu_temperature_c"] is True
    assert sensor.read().gpu_temperature_c is None
    del fake.failures["nvmlDeviceGetTemperature"]
    assert sensor.read().gpu_temperature_c == 28.0


def test_no_library_gives_one_warning_and_an_all_unknown_reading(
        caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(init_error=pynvml.NVMLError_LibraryNotFound())
    sensor = GpuSensor(fake)
    assert sensor.start() is False
    assert sensor.available is False
    assert sensor.capabilities == {}
    assert sensor.read() == GpuReading()
    sensor.close()
    sensor.close()
    assert warnings_of(caplog) == ["no GPU telemetry: NVML Shared Library Not Found"]
    assert len(caplog.records) == 1
    assert fake.calls["nvmlShutdown"] == 0


def test_no_device_at_index_shuts_nvml_down(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml.from_profile("h200", "idle")
    assert GpuSensor(fake, index=1).start() is False
    assert warnings_of(caplog) == ["no GPU telemetry: GPU 1: Invalid Argument"]
    assert fake.calls["nvmlShutdown"] == 1 and fake.initialized is False


def test_close_is_idempotent() -> None:
    fake = FakeNvml.from_profile("h200", "idle")
    sensor = started(fake)
    sensor.close()
    sensor.close()
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.calls["nvmlEventSetFree"] == 1
    assert fake.initialized is False
    assert sensor.available is False
    assert sensor.read() == GpuReading()


# -- Xid events --------------------------------------------------------------------------


def test_xid_events_are_drained_and_reported_once() -> None:
    fake = FakeNvml.from_profile("gb10", "serving")
    sensor = started(fake)
    codes = load_profile("gb10")["xid_events"]["codes"]
    fake.queue_xid(*codes)
    assert sensor.read().gpu_xid_events == (31, 31, 31, 31, 31, 31)
    assert fake.calls["nvmlEventSetWait"] == len(codes) + 1  # the last one timed out
    assert sensor.read().gpu_xid_events == ()
    assert set(fake.wait_timeouts_ms) == {XID_WAIT_MS} == {0}


def test_xid_drain_is_bounded_per_read() -> None:
    fake = FakeNvml.from_profile("gb10", "serving")
    sensor = started(fake)
    fake.queue_xid(*([31] * (MAX_XID_EVENTS_PER_READ + 3)))
    assert len(sensor.read().gpu_xid_events) == MAX_XID_EVENTS_PER_READ
    assert sensor.read().gpu_xid_events == (31, 31, 31)


def test_event_api_not_supported_means_no_xid_capability(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeNvml.from_profile("h200", "idle", xid_event_api="not_supported")
    sensor = started(fake)
    assert sensor.capabilities["gpu_xid_events"] is False
    assert len(fake.freed) == 1  # the event set it could not register is freed at once
    assert sensor.read().gpu_xid_events == ()
    assert fake.calls["nvmlEventSetWait"] == 0
    assert "GPU Xid events: Not Supported (the kernel log still reports Xids)" in [
        r.getMessage() for r in caplog.records]


# -- decoding ------------------------------------------------------------------------------


def test_decode_names_every_documented_bit_and_flags_unknown_ones() -> None:
    # Synthetic masks (not device readings): every nvml.h bit once, and bits nvml.h lacks.
    assert decode_clock_event_reasons(0x1FF, pynvml) == (
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
        "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
        "hw_power_brake_slowdown", "display_clock_setting")
    assert decode_clock_event_reasons(0, pynvml) == ()
    assert decode_clock_event_reasons(0x60 | 0x1000, pynvml) == (
        "sw_thermal_slowdown", "hw_thermal_slowdown", "unknown_0x1000")


# -- the real pynvml -----------------------------------------------------------------------


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_start_read_close_never_raise() -> None:
    sensor = GpuSensor()
    ok = sensor.start()
    try:
        assert sensor.available is ok
        assert isinstance(sensor.read(), GpuReading)
    finally:
        sensor.close()
        sensor.close()


@pytest.mark.skipif(_nvml_library_present(), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_gpu_reports_no_telemetry(
        caplog: pytest.LogCaptureFixture) -> None:
    sensor = GpuSensor()
    assert sensor.start() is False
    assert sensor.read() == GpuReading()
    sensor.close()
    assert warnings_of(caplog) == ["no GPU telemetry: NVML Shared Library Not Found"]
