"""The admin API: status, incidents, transitions, telemetry, operator actions, /metrics
and the dashboard, one FastAPI app (STYLE.md section 10: one router per resource)."""

from agent_supervisor.show.api.app import create_admin_app

__all__ = ["create_admin_app"]
