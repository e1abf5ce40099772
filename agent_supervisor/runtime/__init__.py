"""The running service's collaborators, each the owner of its state: ``Recorder`` (every
incident and transition -> record, metric, alert), ``Ladder`` (the ladder state and the
operator's levers), ``StartUp`` (the previous life, leftovers, adoption), ``Reloader``
(policy reload), ``Upkeep`` (heartbeat, retention, spool, telemetry, log rotation),
``EngineEvents``, ``StatusView`` (the admin API's read model) and ``InstanceLock``.
``service.Supervisor`` wires them."""
