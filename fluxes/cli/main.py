"""Entry point of the ``fluxes`` command: builds the parser and dispatches.

Command groups live in their own modules (``cmd_*.py``), each exposing
``register(subparsers)``; handlers take the parsed namespace and return an
exit code. Tests call :func:`main` in-process with an argument list.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fluxes import __version__
from fluxes.cli import (
    cmd_account,
    cmd_admin,
    cmd_batch,
    cmd_bench,
    cmd_bulksubmit,
    cmd_drill,
    cmd_eventlog,
    cmd_exec,
    cmd_job,
    cmd_jobs,
    cmd_jobspec,
    cmd_queue,
    cmd_resource,
    cmd_resource_query,
    cmd_simulate,
    cmd_start,
    cmd_status,
    cmd_submit,
    cmd_update,
    cmd_web,
    cmd_worker,
)
from fluxes.cli.util import (
    EXIT_ERROR,
    PROG,
    ArgumentParser,
    UsageError,
    add_subcommands,
    help_with_example,
    parse_command_line,
    run_cli,
)

_GROUPS = (cmd_start, cmd_submit, cmd_bulksubmit, cmd_update, cmd_batch, cmd_jobs, cmd_job,
           cmd_queue, cmd_resource, cmd_resource_query, cmd_eventlog, cmd_jobspec, cmd_bench,
           cmd_drill, cmd_simulate,
           cmd_status, cmd_worker, cmd_admin, cmd_account, cmd_web, cmd_exec)

#: What a first session looks like: start an instance, run and watch jobs.
_EXAMPLES = (
    "fluxes start -- fluxes run -N2 -n4 hostname   # a private instance for one command",
    "eval \"$(fluxes start --detach --nodes 2)\"      # one that stays up",
    "fluxes submit -n4 -t 10m ./app                 # prints the job id",
    "fluxes jobs -a                                 # your jobs, finished ones too",
    "fluxes job attach ƒ2t6V2H                      # its output, then its exit code",
    "fluxes stop",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the full ``fluxes`` argument parser."""
    parser = ArgumentParser(
        prog=PROG,
        description="fluxes: an event-sourced batch job manager and scheduler on Redis streams.",
        epilog="examples:\n" + "\n".join(f"  {line}" for line in _EXAMPLES)
               + "\n\nRun 'fluxes COMMAND --help' for the options and examples of a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--uri", metavar="URI", default=None,
                        help="instance to talk to (default: $FLUXES_URI)")
    subparsers = add_subcommands(parser, "commands")
    for group in _GROUPS:
        group.register(subparsers)
    hp = subparsers.add_parser("help", **help_with_example(
        "Print the help of fluxes, or of a command or subcommand (as COMMAND --help).",
        ["fluxes help", "fluxes help submit", "fluxes help job attach"]))
    hp.add_argument("topic", nargs="*", metavar="COMMAND")
    hp.set_defaults(func=_help)
    return parser


def _help(args: argparse.Namespace) -> int:
    """``fluxes help [COMMAND [SUBCOMMAND]]``: that parser's help on stdout."""
    parser: argparse.ArgumentParser = build_parser()
    path = [PROG]
    for word in args.topic:
        choices = _subcommands(parser)
        if word not in choices:
            where = " ".join(path)
            known = ", ".join(sorted(choices)) if choices else "none"
            raise UsageError(f"{PROG} help: {where} has no command {word!r} "
                             f"(commands: {known})")
        parser = choices[word]
        path.append(word)
    parser.print_help()
    return 0


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser`` by name (empty for a leaf command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fluxes`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    if argv is None:  # a fluxes process of its own (not a test calling in)
        from fluxes.proc.gcpolicy import tune

        tune()  # replays and benchmarks hold large states too
    args_list = list(sys.argv[1:] if argv is None else argv)

    def dispatch() -> int:
        parser = build_parser()
        if not args_list:
            # as flux: no command prints the usage and the commands, and fails
            parser.print_help(sys.stderr)
            return EXIT_ERROR
        args = parse_command_line(parser, args_list)
        code: int = args.func(args)
        return code

    return run_cli(dispatch)


if __name__ == "__main__":
    sys.exit(main())
