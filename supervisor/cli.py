"""The ``supervisor`` command.

::

    supervisor run --policy FILE [--record T] run the engine under the policy until SIGTERM
    supervisor calibrate --policy FILE        measure each mode under a standard agent load
    supervisor replay TRACE --policy FILE     the decisions of a recorded trace, replayed
    supervisor policy check FILE              validate a policy and print its ladder
    supervisor systemd-unit --policy FILE     print a systemd unit (Type=notify) for it
    supervisor bench                          the chaos table and the benchmark figures
    supervisor engine-env [--path DIR]        create the CPU engine's environment (idempotent)
    supervisor demo-models DIR                build the tiny local models (idempotent)
    supervisor sample --policy FILE [--watch] print Samples of the engine and the box as JSON
    supervisor incidents --policy FILE        list recorded incidents
    supervisor incident ID --policy FILE      one incident in full
    supervisor history --policy FILE          the mode timeline
    supervisor export --what W --policy FILE  records as CSV or JSON
    supervisor runs --policy FILE             list recorded engine runs

Exit status: 0 success; 1 the service gave up or a setup step failed; 2 bad usage or a
bad policy file (the message names the file, the field and the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from supervisor import __version__
from supervisor.errors import PolicyError, SetupError, StoreError
from supervisor.policy import Policy, build_argv, load_policy_file

__all__ = ["main"]

logger = logging.getLogger("supervisor")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC ISO), level, logger, message (+ exc_info)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        # Under systemd, journald stamps every line itself.
        stamp = "" if "JOURNAL_STREAM" in os.environ else "%(asctime)s "
        handler.setFormatter(logging.Formatter(stamp + "%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler])
    # APScheduler logs every job run at INFO; its warnings (missed runs) stay visible.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # httpx, and httpx2 under the OpenAI SDK the load generator uses, log every request.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="supervisor", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="json: one JSON object per line (for log shippers)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the engine under a policy until SIGTERM")
    run.add_argument("--policy", required=True, type=Path)
    run.add_argument("--record", type=Path, metavar="TRACE",
                     help="append every sample and decision to this trace (JSON Lines)")

    cal = sub.add_parser("calibrate", help="measure each mode under a standard agent load")
    cal.add_argument("--policy", required=True, type=Path)
    cal.add_argument("--modes", help="comma-separated mode names (default: all)")
    cal.add_argument("--concurrency", default="1,4", help="comma-separated (default 1,4)")
    cal.add_argument("--seconds", type=float, default=20.0, help="load per concurrency")

    rep = sub.add_parser("replay", help="run the decisions over a recorded trace")
    rep.add_argument("trace", type=Path)
    rep.add_argument("--policy", required=True, type=Path)
    rep.add_argument("--json", action="store_true", help="one JSON object per decision")
    rep.add_argument("--all", action="store_true", help="also list the holds")

    pol = sub.add_parser("policy", help="policy file tools")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    check = pol_sub.add_parser("check", help="validate a policy file and print its ladder")
    check.add_argument("file", type=Path)

    bench = sub.add_parser("bench", help="the chaos table and the benchmark figures "
                           "(real CPU engine; about 25 minutes)")
    bench.add_argument("--no-chaos", action="store_true", help="only the benchmark scripts")
    bench.add_argument("--no-scripts", action="store_true", help="only the chaos table")

    unit = sub.add_parser("systemd-unit", help="print a systemd unit file for this policy")
    unit.add_argument("--policy", required=True, type=Path)
    unit.add_argument("--user", help="User= of the service (default: root)")

    env = sub.add_parser("engine-env", help="create the CPU engine's virtual environment")
    env.add_argument("--path", type=Path, default=Path(".engine-venv"))

    models = sub.add_parser("demo-models", help="build the tiny local demo models")
    models.add_argument("dir", type=Path, nargs="?", default=Path(".demo-models"))
    models.add_argument("--engine-python", type=Path, default=Path(".engine-venv/bin/python"))
    models.add_argument("--steps", type=int, default=300)

    inc = sub.add_parser("incidents", help="list recorded incidents, newest first")
    inc.add_argument("--policy", required=True, type=Path)
    inc.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d")
    inc.add_argument("--kind", help="only this kind, e.g. engine_exited")
    inc.add_argument("--limit", type=int, default=100)
    inc.add_argument("--json", action="store_true")

    smp = sub.add_parser("sample", help="print one Sample of the engine and the box as JSON")
    smp.add_argument("--policy", required=True, type=Path)
    smp.add_argument("--watch", action="store_true", help="one JSON line per interval")
    smp.add_argument("--interval", type=float, default=None,
                     help="seconds between samples (default: the policy's tick)")
    smp.add_argument("--count", type=int, default=None, help="stop after N samples")

    one = sub.add_parser("incident", help="one incident in full: evidence, log tail, mode")
    one.add_argument("id", type=int)
    one.add_argument("--policy", required=True, type=Path)
    one.add_argument("--json", action="store_true")

    hist = sub.add_parser("history", help="the mode timeline: every transition and why")
    hist.add_argument("--policy", required=True, type=Path)
    hist.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d")
    hist.add_argument("--limit", type=int, default=200)

    exp = sub.add_parser("export", help="export records as CSV or JSON")
    exp.add_argument("--policy", required=True, type=Path)
    exp.add_argument("--what", required=True,
                     choices=["incidents", "transitions", "runs", "services", "telemetry"])
    exp.add_argument("--format", default="csv", choices=["csv", "json"])
    exp.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d "
                     "(telemetry: default 24h)")
    exp.add_argument("--kind", help="incidents of this kind only")
    exp.add_argument("--limit", type=int, default=10000)

    runs = sub.add_parser("runs", help="list recorded engine runs, newest first")
    runs.add_argument("--policy", required=True, type=Path)
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true")
    return p


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text)
    if m:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return datetime.now(UTC) - timedelta(seconds=float(m.group(1)) * unit)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SystemExit(f"--since: {text!r} is neither an ISO time nor an age like 12h") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _cmd_policy_check(path: Path) -> int:
    from supervisor.show.tables import ladder_table

    policy = load_policy_file(path)
    print(f"{path}: valid policy for fleet {policy.fleet!r}, {len(policy.modes)} modes "
          "(fastest first; * = initial)")
    argv = build_argv(policy, policy.modes[policy.initial_rung])
    print(f"engine: {' '.join(argv)}")
    print(f"  cwd {policy.working_directory}")
    print(ladder_table(policy))
    exe = Path(policy.engine_executable)
    if "/" in policy.engine_executable and not exe.exists():
        print(f"warning: engine.executable {exe} does not exist on this machine")
    return EXIT_OK


def _cmd_incident(args: argparse.Namespace) -> int:
    from supervisor.record.queries import incident, incident_transitions
    from supervisor.show.export import incident_dict
    from supervisor.show.incident import incident_detail

    store = _open_store(load_policy_file(args.policy))
    row = incident(store=store, incident_id=args.id)
    if row is None:
        print(f"error: no incident {args.id}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(incident_dict(row), indent=2, default=str))
    else:
        print(incident_detail(row, incident_transitions(store=store, incident_id=row.id)))
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from supervisor.record.queries import engine_runs, timeline
    from supervisor.record.service_runs import service_runs
    from supervisor.record.telemetry import telemetry
    from supervisor.show.export import export_rows

    store = _open_store(load_policy_file(args.policy))
    since = _since(args.since)
    match args.what:
        case "incidents":
            rows = store.incidents(since=since, kind=args.kind, limit=args.limit)
        case "transitions":
            rows = timeline(store=store, since=since, limit=args.limit)
        case "runs":
            rows = engine_runs(store=store, since=since)[:args.limit]
        case "services":
            rows = service_runs(store=store, limit=args.limit)
        case _:
            rows = telemetry(store=store, since=since or datetime.now(UTC) - timedelta(days=1)
                             )[:args.limit]
    print(export_rows(rows, what=args.what, fmt=args.format))
    return EXIT_OK


def _open_store(policy: Policy):
    from supervisor.record.store import Store

    return Store.open(policy.database_url, fleet=policy.fleet)


async def _run_service(policy: Policy, trace: Path | None = None,
                       policy_path: Path | None = None) -> int:
    from supervisor.service import Supervisor

    store = await asyncio.to_thread(_open_store, policy)
    sup = Supervisor(policy, store, trace_path=trace, policy_path=policy_path)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sup.request_stop, f"{signal.Signals(sig).name} received")
    reloads: set[asyncio.Task[bool]] = set()

    def on_hup() -> None:
        task = loop.create_task(sup.reload("SIGHUP"))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    logger.info("supervisor %s: fleet %s, %d modes, database %s", __version__, policy.fleet,
                len(policy.modes), policy.database_url)
    return await sup.run()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``supervisor`` command. Returns the exit status."""
    args = _parser().parse_args(argv)
    _setup_logging(args.log_level, args.log_format)
    if args.command != "run":
        # A reader that goes away (`| head`) ends a listing quietly, as for coreutils.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        match args.command:
            case "run":
                import uvloop

                policy = load_policy_file(args.policy)
                return uvloop.run(_run_service(policy, args.record, args.policy))
            case "bench":
                from supervisor.chaos.bench import run_bench

                return run_bench(chaos=not args.no_chaos, scripts=not args.no_scripts)
            case "systemd-unit":
                from supervisor.act.systemd import unit_file

                path = args.policy.resolve()
                print(unit_file(load_policy_file(path), path, user=args.user), end="")
                return EXIT_OK
            case "calibrate":
                from supervisor.calibrate import calibrate

                policy = load_policy_file(args.policy)
                store = _open_store(policy)
                modes = args.modes.split(",") if args.modes else None
                conc = tuple(int(c) for c in args.concurrency.split(","))
                try:
                    asyncio.run(calibrate(policy, store, modes=modes, concurrency=conc,
                                          seconds=args.seconds))
                except KeyError as exc:
                    print(f"error: no mode {exc} in {args.policy}", file=sys.stderr)
                    return EXIT_USAGE
                finally:
                    store.close()
                return EXIT_OK
            case "replay":
                from supervisor.show.timeline import replay_command

                return replay_command(args.trace, load_policy_file(args.policy),
                                      as_json=args.json, show_all=args.all)
            case "policy":
                return _cmd_policy_check(args.file)
            case "engine-env":
                from supervisor.demo.setup import create_engine_env

                create_engine_env(args.path.resolve())
                return EXIT_OK
            case "demo-models":
                from supervisor.demo.setup import build_demo_models

                report = build_demo_models(args.dir.resolve(),
                                           engine_python=args.engine_python.absolute(),
                                           steps=args.steps)
                print(f"demo models in {args.dir}: built in {report.get('total_seconds')} s")
                return EXIT_OK
            case "incidents":
                from supervisor.show.tables import incidents_json, incidents_table

                store = _open_store(load_policy_file(args.policy))
                rows = store.incidents(since=_since(args.since), kind=args.kind, limit=args.limit)
                print(incidents_json(rows) if args.json else incidents_table(rows))
                return EXIT_OK
            case "sample":
                from supervisor.commands.sample import observe

                policy = load_policy_file(args.policy)
                interval = args.interval or policy.sampling.tick_seconds
                try:
                    return asyncio.run(observe(policy, watch=args.watch, count=args.count,
                                               interval_seconds=interval))
                except KeyboardInterrupt:
                    return EXIT_OK
            case "incident":
                return _cmd_incident(args)
            case "history":
                from supervisor.record.queries import timeline
                from supervisor.show.history import history_table

                store = _open_store(load_policy_file(args.policy))
                print(history_table(timeline(store=store, since=_since(args.since),
                                             limit=args.limit)))
                return EXIT_OK
            case "export":
                return _cmd_export(args)
            case "runs":
                from supervisor.show.tables import runs_json, runs_table

                store = _open_store(load_policy_file(args.policy))
                rows = store.runs(limit=args.limit)
                print(runs_json(rows) if args.json else runs_table(rows))
                return EXIT_OK
    except PolicyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SetupError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_USAGE
