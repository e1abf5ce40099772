"""The ground floor: the value types every other part reads.

``Sample`` (one instant of telemetry), ``Window`` (recent samples, increases and rates
with counter resets handled), ``EngineRates`` (rates derived from a window), ``load_of``
(requests the engine holds) and ``Baselines`` (calibrated throughput per mode). Pure:
no I/O, no clock reads. ``sense/``, ``decide/``, ``act/``, ``record/`` and ``show/`` import
from here; this package imports nothing above it (only ``agent_supervisor.states``).
"""
