"""The fleet policy: one YAML file per agent fleet, validated by frozen pydantic models.

The YAML keys are the field names (snake_case, no aliases); unknown keys are an error, so
a typo fails instead of being ignored. Durations are float seconds named ``*_seconds``.
Relative paths in the file (``engine.working_directory``, ``storage.state_directory``, a
``sqlite:///`` database path) are relative to the directory holding the policy file;
``engine.executable`` and relative paths inside the engine's arguments are relative to
``engine.working_directory``.

The modules, lowest first (each imports only those above it in this list; none imports
this package, so ``tests/unit/test_layers.py`` sees no cycle through it):

- ``base.py``: ``PolicyModel``, the one base of every section (frozen, unknown keys
  refused, no ``inf``/``nan``), and the bounded number types every section uses.
- ``speculative.py``: the checks of the ladder's flags (``--speculative-config``, the
  sequence and token caps) and the ``top_rung`` section.
- ``engine_flags.py``: what each engine's command line means (``FlagRules`` per
  ``engine.kind``).
- ``nodes.py``, ``container.py``, ``adopt.py``: where the engine runs (``engine.nodes`` and
  ``engine.distributed``, ``engine.container``, ``engine.adopt``).
- ``engine.py``: the ``engine`` section (``EngineSpec``).
- ``canary.py``, ``gateway.py``, ``guards.py``, ``sections.py``: the golden canary, the
  gateway and its limits per mode, the guards' thresholds (``Guards``, ``LifecycleSpec``),
  and the other sections (restart, hysteresis, admin, alerts, recovery, sampling, storage).
- ``model.py``: ``Mode``, ``Policy`` and the argument vector built from a mode.
- ``yaml.py`` (safe YAML, ``${NAME}``, what an error may show), ``paths.py`` (the state
  directory's default), then ``load.py`` on top: ``load_policy`` (pure) and
  ``load_policy_file``.
- ``holder.py`` (the one current policy of a running service) and ``urls.py`` (the
  gateway's URL as the supervisor's own clients reach it).

This package re-exports the five names most callers need; everything else is imported
from its module. ``decide/`` imports the modules themselves (``model``, ``sections``), never
this package, so the pure decision reaches no file loading (``test_layers.py`` checks).
"""

from __future__ import annotations

from agent_supervisor.policy.holder import PolicyHolder
from agent_supervisor.policy.load import load_policy, load_policy_file
from agent_supervisor.policy.model import Mode, Policy

__all__ = ["Mode", "Policy", "PolicyHolder", "load_policy", "load_policy_file"]
