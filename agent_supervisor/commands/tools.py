"""The other commands: ``policy check``, ``systemd-unit``, ``calibrate``, ``replay``,
``bench``, ``engine-env``, ``demo-models``, ``sample``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent_supervisor.commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, store_of
from agent_supervisor.policy.load import load_policy_file
from agent_supervisor.policy.model import Policy, build_argv
from agent_supervisor.privacy import mask_argv

__all__ = ["bench", "calibrate", "demo_models", "engine_env", "policy_check", "replay",
           "sample", "systemd_unit"]


def policy_check(args: argparse.Namespace) -> int:
    """``supervisor policy check FILE``: validate and print the ladder (``--json``: one
    JSON object, ``valid`` false and the error for a bad file, still exit 2)."""
    from agent_supervisor.show.tables import ladder_table

    path: Path = args.file
    if getattr(args, "json", False):
        return _policy_check_json(path)
    policy = load_policy_file(path)
    print(f"{path}: valid policy for fleet {policy.fleet!r}, {len(policy.modes)} modes "
          "(fastest first; * = initial)")
    argv = build_argv(policy, policy.modes[policy.initial_rung])
    print(f"engine: {' '.join(mask_argv(argv))}")   # never a key on a terminal (issue 34)
    print(f"  cwd {policy.working_directory}")
    box = policy.engine.container
    if box is not None:
        print(f"  in a container: image {box.image}, API {box.api_socket}, network "
              f"{box.network_mode}, GPUs {box.gpus}, IPC {box.ipc_mode}, "
              f"{len(box.mounts)} mounts, devices {', '.join(box.devices) or 'none'}")
    print(ladder_table(policy))
    exe = Path(policy.engine_executable)
    if box is None and "/" in policy.engine_executable and not exe.exists():
        print(f"warning: engine.executable {exe} does not exist on this machine")
    return EXIT_OK


def _policy_check_json(path: Path) -> int:
    from agent_supervisor.errors import PolicyError
    from agent_supervisor.show.tables import ladder_dicts

    try:
        policy = load_policy_file(path)
    except PolicyError as exc:
        print(json.dumps({"file": str(path), "valid": False, "error": str(exc)}, indent=2))
        return EXIT_USAGE
    box = policy.engine.container
    exe = Path(policy.engine_executable)
    warnings = [f"engine.executable {exe} does not exist on this machine"] \
        if box is None and "/" in policy.engine_executable and not exe.exists() else []
    print(json.dumps({
        "file": str(path), "valid": True, "fleet": policy.fleet,
        "initial_rung": policy.initial_rung, "runtime": policy.engine.runtime,
        "engine_argv": mask_argv(build_argv(policy, policy.modes[policy.initial_rung])),
        "working_directory": str(policy.working_directory),
        "container_image": None if box is None else box.image,
        "ladder": ladder_dicts(policy), "warnings": warnings}, indent=2))
    return EXIT_OK


def systemd_unit(args: argparse.Namespace) -> int:
    """``supervisor systemd-unit``: print a unit file (Type=notify)."""
    from agent_supervisor.act.systemd import unit_file
    from agent_supervisor.act.systemd_gateway import gateway_service_unit, gateway_socket_unit

    path = args.policy.resolve()
    policy = load_policy_file(path)
    unit = getattr(args, "unit", "service")
    if unit == "gateway-socket":
        print(gateway_socket_unit(policy, user=args.user), end="")
    elif unit == "gateway-service":
        print(gateway_service_unit(policy, path, user=args.user), end="")
    else:
        print(unit_file(policy, path, user=args.user), end="")
    return EXIT_OK


def calibrate(args: argparse.Namespace) -> int:
    """``supervisor calibrate``: measure each mode under a standard agent load."""
    from agent_supervisor.calibrate import calibrate as run_calibration

    policy = load_policy_file(args.policy)
    modes = args.modes.split(",") if args.modes else None
    conc = tuple(int(c) for c in args.concurrency.split(","))
    if getattr(args, "draft_lengths", None):
        return _calibrate_draft_lengths(args, policy, modes, conc)
    with store_of(policy) as store:
        try:
            profiles = tuple(p for p in args.profiles.split(",") if p)
            asyncio.run(run_calibration(policy, store, modes=modes, concurrency=conc,
                                        seconds=args.seconds, profiles=profiles))
        except KeyError as exc:
            print(f"error: no mode or profile {exc} in {args.policy}", file=sys.stderr)
            return EXIT_USAGE
        except ValueError as exc:          # the fleet profile without its opt-in
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return EXIT_OK


def _calibrate_draft_lengths(args: argparse.Namespace, policy: Policy, modes: list[str] | None,
                             conc: tuple[int, ...]) -> int:
    """``calibrate --draft-lengths``: one mode's draft length by batch size (issue 32)."""
    from agent_supervisor.calibrate import calibrate_draft_lengths

    if not modes or len(modes) != 1:
        print("error: --draft-lengths needs exactly one mode in --modes", file=sys.stderr)
        return EXIT_USAGE
    try:
        ks = tuple(int(k) for k in args.draft_lengths.split(",") if k)
        if any(k < 0 for k in ks):
            raise ValueError(f"--draft-lengths must be integers >= 0, got {args.draft_lengths}")
        result = asyncio.run(calibrate_draft_lengths(policy, modes[0], ks, concurrency=conc,
                                                     seconds=args.seconds))
    except KeyError as exc:
        print(f"error: no mode {exc} in {args.policy}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK if result["proposal"] is not None else EXIT_FAILED


def replay(args: argparse.Namespace) -> int:
    """``supervisor replay TRACE``: the decisions of a recorded trace, replayed; with
    ``--scenario FILE``: a closed-loop scenario (issue 12)."""
    from agent_supervisor.show.timeline import replay_command, scenario_command

    if (args.trace is None) == (args.scenario is None):
        print("error: give a TRACE or --scenario FILE", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "top_rung", False):
        return _replay_top_rung(args)
    if args.scenario is not None:
        return scenario_command(args.scenario, load_policy_file(args.policy),
                                as_json=args.json, show_all=args.all)
    return replay_command(args.trace, load_policy_file(args.policy), as_json=args.json,
                          show_all=args.all)


def _replay_top_rung(args: argparse.Namespace) -> int:
    """``replay TRACE --top-rung``: the top-rung choice along a recorded trace (issue 32).
    Prints each switch and each wait for a calm moment with its reason; exit 2 when the
    trace cannot be read or has no trace."""
    from agent_supervisor.decide.top_rung import replay_top_rung
    from agent_supervisor.decide.top_switch import top_figures
    from agent_supervisor.record.baselines import load_top_rung_figures
    from agent_supervisor.record.trace import read_trace
    from agent_supervisor.telemetry.sample import Sample

    policy = load_policy_file(args.policy)
    if args.trace is None:
        print("error: --top-rung needs a TRACE", file=sys.stderr)
        return EXIT_USAGE
    try:
        records = read_trace(args.trace, rungs=len(policy.modes))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with store_of(policy) as store:
        stored = load_top_rung_figures(store, policy)
    # The figures the live choice reads: the database's over the policy's own (the replay
    # read the database's alone, so a policy's top_rung.figures were never replayed).
    figures = top_figures(policy.model_copy(update={"top_rung": policy.top_rung.model_copy(
        update={"enabled": True})}), stored) or stored
    samples = [Sample.from_dict({k: v for k, v in r.items() if k != "type"})
               for r in records if r["type"] == "sample"]
    names = [m.name for m in policy.modes]
    choices = replay_top_rung(samples, names, figures, policy.top_rung, names[0],
                              policy.sampling.window_seconds)
    shown = [(t, c) for t, c in choices if c.action != "hold" or args.all]
    for t, c in shown:
        print(json.dumps({"t_s": t, "action": c.action, "target": c.target, "why": c.why,
                          "evidence": c.evidence}, default=str) if args.json
              else f"{t:10.1f}  {c.action:9s} {c.target or '-':12s} {c.why}")
    if not args.json:
        print(f"{len(samples)} samples, {sum(c.action == 'switch' for _, c in choices)} "
              f"switches; figures for {sorted(figures.tokens_per_second) or 'no mode'} "
              f"(supervisor calibrate --profiles), start times for "
              f"{sorted(figures.start_seconds) or 'no mode'}")
    return EXIT_OK


def bench(args: argparse.Namespace) -> int:
    """``supervisor bench``: the chaos table and the benchmark figures; ``--day``: the
    day of agent work under faults, three arms (``agent_supervisor.chaos.day``);
    ``--load-day``: the day whose load changes (``agent_supervisor.chaos.day_load``)."""
    if args.day:
        from agent_supervisor.chaos.day import main_day

        return main_day(short=args.short, seed=args.seed, base=args.dir)
    if getattr(args, "load_day", False):
        from agent_supervisor.chaos.day_load import main_load_day

        return main_load_day(short=args.short, seed=args.seed, base=args.dir)

    from agent_supervisor.chaos.bench import run_bench

    return run_bench(chaos=not args.no_chaos, scripts=not args.no_scripts)


def engine_env(args: argparse.Namespace) -> int:
    """``supervisor engine-env``: the CPU engine's environment, or llama-server and its
    GGUF demo models (``--kind llama_cpp``); idempotent."""
    if args.kind == "llama_cpp":
        from agent_supervisor.demo.llamacpp import build_llama_cpp

        models = (args.models.resolve() if not args.server_only
                  and (args.models / "target").is_dir() else None)
        report = build_llama_cpp((args.path or Path(".llamacpp")).resolve(), models=models,
                                 engine_python=args.engine_python.absolute())
        print(f"llama-server: {' '.join(report.get('version', []))}; models: "
              f"{', '.join(report.get('models', {}).values()) or 'not converted'}")
        return EXIT_OK
    from agent_supervisor.demo.setup import create_engine_env

    create_engine_env((args.path or Path(".engine-venv")).resolve())
    return EXIT_OK


def demo_models(args: argparse.Namespace) -> int:
    """``supervisor demo-models DIR``: the tiny local models (idempotent)."""
    from agent_supervisor.demo.setup import build_demo_models

    report = build_demo_models(args.dir.resolve(), engine_python=args.engine_python.absolute(),
                               steps=args.steps)
    print(f"demo models in {args.dir}: built in {report.get('total_seconds')} s")
    return EXIT_OK


def sample(args: argparse.Namespace) -> int:
    """``supervisor sample``: Samples of an engine the service does not run, as JSON."""
    from agent_supervisor.commands.sample import observe

    policy = load_policy_file(args.policy)
    interval = args.interval or policy.sampling.tick_seconds
    try:
        return asyncio.run(observe(policy, watch=args.watch, count=args.count,
                                   interval_seconds=interval))
    except KeyboardInterrupt:
        return EXIT_OK
