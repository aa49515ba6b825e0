"""Entry point of the ``fluxes`` command: builds the parser and dispatches.

Command groups live in their own modules (``cmd_*.py``), each exposing
``register(subparsers)``; handlers take the parsed namespace and return an
exit code. Tests call :func:`main` in-process with an argument list.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import NoReturn

from fluxes import __version__
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

#: The command modules (``fluxes/cli/<name>.py``), in the order of the help.
_GROUPS = ("cmd_start", "cmd_submit", "cmd_bulksubmit", "cmd_update", "cmd_batch", "cmd_jobs",
           "cmd_job", "cmd_queue", "cmd_resource", "cmd_resource_query", "cmd_eventlog",
           "cmd_jobspec", "cmd_bench", "cmd_drill", "cmd_simulate",
           "cmd_status", "cmd_worker", "cmd_admin", "cmd_account", "cmd_web", "cmd_exec")

#: The module that registers each command: ``fluxes submit`` imports cmd_submit (and
#: what it imports) only, not every command's dependencies (start-up time, see
#: docs/cli.md). A command missing here still works: the whole parser is built for it
#: (tests/cli/test_cli_imports.py keeps the table complete).
_COMMANDS = {
    "start": "cmd_start", "stop": "cmd_start",
    "submit": "cmd_submit", "run": "cmd_submit", "cancel": "cmd_submit",
    "bulksubmit": "cmd_bulksubmit", "update": "cmd_update",
    "batch": "cmd_batch", "alloc": "cmd_batch", "proxy": "cmd_batch",
    "instance-child": "cmd_batch", "pstree": "cmd_batch", "top": "cmd_batch",
    "jobs": "cmd_jobs", "job": "cmd_job", "queue": "cmd_queue", "resource": "cmd_resource",
    "resource-query": "cmd_resource_query", "eventlog": "cmd_eventlog",
    "jobspec": "cmd_jobspec", "bench": "cmd_bench", "drill": "cmd_drill",
    "simulate": "cmd_simulate", "status": "cmd_status", "worker": "cmd_worker",
    "admin": "cmd_admin", "account": "cmd_account", "web": "cmd_web", "exec": "cmd_exec",
}

#: Options of ``fluxes`` itself that take a value (skipped when looking for the command).
_VALUED = ("--uri",)

#: What a first session looks like: start an instance, run and watch jobs.
_EXAMPLES = (
    "fluxes start -- fluxes run -N2 -n4 hostname   # a private instance for one command",
    "eval \"$(fluxes start --detach --nodes 2)\"      # one that stays up",
    "fluxes submit -n4 -t 10m ./app                 # prints the job id",
    "fluxes jobs -a                                 # your jobs, finished ones too",
    "fluxes job attach ƒ2t6V2H                      # its output, then its exit code",
    "fluxes stop",
)


def build_parser(groups: Sequence[str] = _GROUPS) -> argparse.ArgumentParser:
    """Build the ``fluxes`` argument parser: every command, or those the modules
    named in ``groups`` register (see :func:`command_word`)."""
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
    for group in groups:
        import_module(f"fluxes.cli.{group}").register(subparsers)
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


def command_word(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option of ``fluxes``
    itself), or None."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
    return None


def _groups_for(argv: Sequence[str]) -> Sequence[str]:
    """The command modules parsing ``argv`` needs: the command's own; none for
    ``fluxes --version`` and the like; all of them for the help and the unknown."""
    word = command_word(argv)
    if word is None:
        wants_help = not argv or "-h" in argv or "--help" in argv
        return _GROUPS if wants_help else ()
    group = _COMMANDS.get(word)
    return (group,) if group is not None else _GROUPS


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fluxes`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    A ``fluxes`` process of its own (``argv`` None) running a short command ends
    through :func:`quick_exit` instead of returning.
    """
    if argv is None:  # a fluxes process of its own (not a test calling in)
        from fluxes.proc.gcpolicy import tune

        tune()  # replays and benchmarks hold large states too
    args_list = list(sys.argv[1:] if argv is None else argv)
    # whether the command may skip the interpreter's teardown (the parser's _quick_exit
    # default; fluxes --version, which parses no command, may too)
    quick = command_word(args_list) is None

    def dispatch() -> int:
        nonlocal quick
        parser = build_parser(_groups_for(args_list))
        if not args_list:
            # as flux: no command prints the usage and the commands, and fails
            parser.print_help(sys.stderr)
            return EXIT_ERROR
        args = parse_command_line(parser, args_list)
        quick = bool(getattr(args, "_quick_exit", False))
        code: int = args.func(args)
        return code

    code = run_cli(dispatch)
    if argv is None and quick:
        quick_exit(code)
    return code


def quick_exit(code: int) -> NoReturn:
    """End this process with ``code`` now, without the interpreter's teardown, when
    nothing needs it; else as ``sys.exit``.

    Tearing down the modules a command imported costs a short command ~10-15% of
    its CPU (issue 26), for nothing: the kernel frees the memory and closes the
    sockets. What the teardown would do that matters is flushing stdout and stderr
    (done here), running atexit callbacks and joining threads: with either pending,
    the process exits the ordinary way. Only commands that open no file they leave
    to the teardown to close take this path (their parser's ``_quick_exit``).
    """
    import atexit

    threading = sys.modules.get("threading")  # no threads were started if never imported
    pending = getattr(atexit, "_ncallbacks", lambda: 1)()
    if pending or (threading is not None and threading.active_count() > 1):
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            # the reader went away (fluxes jobs | head): as run_cli, quietly
            code = code or EXIT_ERROR
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
