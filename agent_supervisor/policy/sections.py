"""Policy sections besides the engine, its modes, the guards and the gateway: restart,
the ladder's hysteresis (with its typed step-up windows), the admin API, alerts, recovery,
sampling and storage.

Every setting has a default and a one-line reason for it. Defaults are sized for a DGX
Spark (GB10, 128 GB unified memory); the CPU demo policy scales the memory ones down. The
guards' thresholds are ``policy/guards.py``, the gateway's ``policy/gateway.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from agent_supervisor.policy.base import (
    Bytes,
    Count,
    CountOrZero,
    Days,
    Delay,
    PolicyModel,
    Ratio,
    Seconds,
)
from agent_supervisor.policy.canary import GoldenCanarySpec

__all__ = [
    "AdminSpec",
    "AlertSpec",
    "Hysteresis",
    "RecoverySpec",
    "Restart",
    "Sampling",
    "Storage",
    "TimeWindow",
]

_WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


class TimeWindow(BaseModel):
    """A daily span of local time, written "HH:MM-HH:MM" (may wrap midnight: 22:00-06:00).

    Parsed once, when the policy is validated; kept as minutes after midnight. Written
    back (``model_dump``) as the string it came from. A value, not a section: the one
    policy model not on ``PolicyModel`` (its schema is the string's).
    """

    model_config = ConfigDict(frozen=True)
    start_minute: Annotated[int, Field(ge=0, le=1440)]
    end_minute: Annotated[int, Field(ge=0, le=1440)]

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        m = _WINDOW.match(value)
        if m is None:
            raise ValueError(f"{value!r} is not a window like 22:00-06:00")
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        return {"start_minute": h1 * 60 + m1, "end_minute": h2 * 60 + m2}

    @model_serializer
    def _text(self) -> str:
        a, b = divmod(self.start_minute, 60), divmod(self.end_minute, 60)
        return f"{a[0]:02d}:{a[1]:02d}-{b[0]:02d}:{b[1]:02d}"

    def contains(self, minute: int) -> bool:
        """Whether ``minute`` after local midnight (0-1439) falls inside (end excluded)."""
        start, end = self.start_minute, self.end_minute
        return start <= minute < end if start <= end else minute >= start or minute < end


class Hysteresis(PolicyModel):
    """How the ladder avoids flapping: cooldowns, calm before stepping up, probation."""

    cooldown_seconds: Delay = 300.0
    """No graceful change within 5 min of the last one (emergencies and crashes excepted)."""
    calm_seconds: Seconds = 1800.0
    """Step up only after 30 min without a warning (agents' load comes in waves)."""
    probation_seconds: Seconds = 900.0
    """A rung reached by stepping up that fails within 15 min goes back down ..."""
    failed_rung_backoff_seconds: Seconds = 3600.0
    """... and is not retried for an hour, doubling per failure ..."""
    failed_rung_backoff_max_seconds: Seconds = 86400.0
    """... up to a day."""
    max_transitions_per_hour: Count = 4
    """Each switch restarts the engine (minutes on a GB10): more than 4 an hour is flapping."""
    step_up_windows: list[TimeWindow] = []
    """Local times when stepping up is allowed, "HH:MM-HH:MM" (may wrap midnight);
    empty: any time."""
    timezone: str = "UTC"
    """IANA time zone of ``step_up_windows`` (``Europe/Paris``)."""
    shed_factor: Ratio = 0.5
    """Shedding multiplies the mode's gateway limits by this."""
    shed_seconds: Delay = 120.0
    """After shedding, a warning that asked to shed first must persist this long before
    the engine steps down (the lower limits get their chance to help)."""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, zone: str) -> str:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {zone!r}") from exc
        return zone


class AdminSpec(PolicyModel):
    """The admin API, the supervisor's /metrics and the dashboard (one FastAPI app)."""

    enabled: bool = True
    """Serve the admin API, the supervisor's /metrics and the dashboard."""
    host: str = "127.0.0.1"
    """Loopback by default: reads are then open, actions need the token."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8081
    """The admin API's and dashboard's port."""
    token_env: str = "SUPERVISOR_ADMIN_TOKEN"
    """Environment variable holding the bearer token for actions."""
    token_file: str | None = None
    """Or a file holding it (relative to the policy file); it wins over the variable.
    Under systemd, a credential named ``admin_token`` (``LoadCredential=``, read from
    ``$CREDENTIALS_DIRECTORY``) wins over both."""
    allowed_hosts: list[str] = []
    """``Host`` names answered besides loopback and the bind address (else 421)."""


class AlertSpec(PolicyModel):
    """Webhook alerts on emergency and critical incidents and on every step down."""

    webhook_url: str | None = None
    """None: no alerts. A webhook URL usually holds its token: better ``${NAME}`` or
    ``webhook_url_file``."""
    webhook_url_file: str | None = None
    """Or a file holding it; the systemd credential ``webhook_url`` wins."""
    format: Literal["generic", "slack"] = "generic"
    """``generic`` (the incident as JSON) or ``slack`` (``{"text": ...}``)."""
    min_interval_seconds: Delay = 60.0
    """At most one alert of the same kind this often (the rest are counted, not sent)."""
    retries: CountOrZero = 3
    """Further tries of an alert whose POST failed (no answer or HTTP status 300 or more),
    0.5 s apart doubling up to 30 s; 0: one try."""
    timeout_seconds: Seconds = 5.0
    """Timeout of one webhook POST."""


class RecoverySpec(PolicyModel):
    """What a new life of the supervisor does with what the last one left, and reloads."""

    on_restart: Literal["adopt", "stop"] = "adopt"
    """``adopt``: an engine the previous life launched, still alive and launched with the
    arguments this policy gives its mode, is taken over without a restart (agents keep
    their requests); ``stop``: it is stopped and a fresh one started. Anything else of
    ours left running is stopped either way: never two engines, never an orphan."""
    watch_policy_file: bool = True
    """Reload the policy when its file changes (as on SIGHUP)."""
    watch_interval_seconds: Seconds = 5.0
    """How often the policy file is checked for a change (with ``watch_policy_file``)."""


class Restart(PolicyModel):
    """Crash handling, in systemd's words (RestartSec=, StartLimitBurst=, ...). A crash
    is any exit the supervisor did not ask for, a failed start or a dead EngineCore."""

    restart_delay_seconds: Delay = 0.0
    """Wait before the first restart after a crash (systemd's RestartSec=); each further
    crash of the same rung within ``start_limit_interval_seconds`` doubles it (from 1 s when
    0)."""
    restart_delay_max_seconds: Delay = 60.0
    """Cap of that doubling (systemd's RestartMaxDelaySec=); at least
    ``restart_delay_seconds``."""
    start_limit_burst: Count = 3
    """Crashes of one rung within ``start_limit_interval_seconds`` that step the engine down
    one rung (systemd's StartLimitBurst=); on the last rung the service gives up and exits
    1."""
    start_limit_interval_seconds: Seconds = 600.0
    """The window crashes are counted in (systemd's StartLimitIntervalSec=)."""

    @model_validator(mode="after")
    def _ordered(self) -> Restart:
        if self.restart_delay_max_seconds < self.restart_delay_seconds:
            raise ValueError("restart_delay_max_seconds must be >= restart_delay_seconds")
        return self


class Sampling(PolicyModel):
    """The tick: how often the supervisor samples the engine and decides."""

    tick_seconds: Annotated[float, Field(gt=0, le=60)] = 1.0
    """How often the engine is sampled and a decision taken (at most 60)."""
    probe_timeout_seconds: Seconds = 2.0
    """Timeout of one ``/health`` or ``/metrics`` request. A slow probe under load is
    recorded as slow, never as a dead engine."""
    window_seconds: Seconds = 600.0
    """How much history the decision window keeps."""
    canary_after_seconds: Seconds = 10.0
    """Requests running or waiting while the engine-step counter stays flat this long:
    send one canary request (at most once per this interval)."""
    canary_timeout_seconds: Seconds = 15.0
    """A canary request not answered within this long counts as failed (the engine-hung
    guard's evidence)."""
    pss_interval_seconds: Delay = 30.0
    """How often the engine's PSS is read (a smaps walk of a multi-GB process costs tens
    of ms of CPU); in between, the last value is reported. 0: every tick."""
    gpu_index: CountOrZero = 0
    """Which NVML device to read (the one the engine runs on)."""
    kernel_log: bool = True
    """Follow /dev/kmsg (or ``journalctl -k``) for Xid, NV_ERR_NO_MEMORY and OOM lines."""
    golden_canary: GoldenCanarySpec = GoldenCanarySpec()
    """A fixed greedy prompt whose recorded answer catches output that is wrong while every
    probe answers 200 (agent_supervisor/sense/golden.py)."""


class Storage(PolicyModel):
    """Where the supervisor keeps its database and the engine logs."""

    state_directory: str = ".supervisor"
    """The database and the engine logs (``logs/engine-<run>.log``), relative to the policy
    file. Unset in a file under /etc or under systemd's ``StateDirectory=``:
    ``$STATE_DIRECTORY`` or ``/var/lib/agent-supervisor/<fleet>``."""
    host_name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """The name this supervisor writes on every record (several supervisors share one
    PostgreSQL: ``supervisor fleet`` lists them by it). Default: the host name."""
    database_url: str | None = None
    """SQLAlchemy URL. Default: ``sqlite:///<state_directory>/supervisor.db``."""
    database_url_file: str | None = None
    """Or a file holding it; the systemd credential ``database_url`` wins (not both)."""
    after_host_reset: Literal["one_rung_down", "same_rung", "initial"] = "one_rung_down"
    """Where to start after the host went down with the engine running (boot id changed,
    no clean-stop marker): the engine's configuration may have been what froze it."""
    telemetry_retention_days: Days = 30.0
    """Telemetry older than this is deleted."""
    incident_retention_days: Days = 365.0
    """Incidents older than this are deleted."""
    downsample_after_seconds: Seconds = 86400.0
    """Telemetry older than this is folded from 10 s rows into 1 min rows."""
    heartbeat_seconds: Seconds = 30.0
    """How often this supervisor's run record is touched, so ``supervisor fleet`` tells a
    live supervisor from one that is gone."""
    retention_interval_seconds: Seconds = 3600.0
    """How often the retention pass (deletion past the retention days, downsampling)
    runs."""
    engine_log_max_bytes: Annotated[Bytes, Field(ge=1024)] = 100 * 1024 * 1024
    """An engine log past this is rotated (copied to .1 and truncated: the engine keeps
    its file open)."""
    engine_logs_keep: Count = 50
    """Logs of this many past engine runs are kept; older ones are deleted."""
    spool_max_bytes: Annotated[Bytes, Field(ge=1)] = 256 * 1024 * 1024
    """Writes the database refused wait in <state_directory>/spool.jsonl up to this size
    (past it, only telemetry and heartbeats are dropped)."""
