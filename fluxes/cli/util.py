"""Shared CLI plumbing: the error wrapper, output helpers and argument types.

Every command runs inside :func:`run_cli`, which turns any uncaught error into
a one-line message and a non-zero exit code, so users never see a traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from fluxes.errors import FluxesError
from fluxes.formats import jobid

if TYPE_CHECKING:
    from fluxes.store.instance import Instance

PROG = "fluxes"

#: Exit codes: 1 for errors a user caused or can fix, 2 for usage errors (as argparse).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(FluxesError):
    """Command-line usage error: reported on one line, exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and raise instead of exiting.

    Raising lets the in-process test driver and the wrapper handle usage errors
    exactly like other errors.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """argparse's parser, remembering its command name in the parsed namespace."""
        super().__init__(*args, **kwargs)
        # The innermost command parsed leaves its name here (a subcommand's defaults
        # overwrite its parent's), so leftovers can be blamed on the right command.
        self.set_defaults(_prog=self.prog)

    def error(self, message: str) -> NoReturn:
        """Report a usage error as one line (argparse prints usage; we do not)."""
        raise UsageError(f"{self.prog}: {message}")

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter, told the width argparse would find: argparse asks
        ``shutil`` for it (importing shutil, zlib, bz2 and lzma: ~1.5 ms of a short
        command, issue 26) on every ``add_argument``."""
        make: Callable[..., argparse.HelpFormatter] = self.formatter_class
        return make(prog=self.prog, width=help_width())


def help_width() -> int:
    """The width argparse formats help for: the terminal's columns (``$COLUMNS``
    first, 80 when unknown) less 2, as ``shutil.get_terminal_size`` finds them."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def parse_command_line(parser: argparse.ArgumentParser,
                       argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; arguments no command takes are a usage error of the command given.

    argparse reports them as the top parser's (``fluxes: unrecognized
    arguments``), which hides which command refused them.
    """
    args, extras = parser.parse_known_args(list(argv))
    if extras:
        prog = getattr(args, "_prog", parser.prog)
        raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extras)}")
    return args


def die(message: str) -> NoReturn:
    """Stop the current command with a one-line error message."""
    raise FluxesError(message)


def _describe(exc: BaseException) -> str:
    """One line describing an exception, without a traceback."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else exc.__class__.__name__
    if isinstance(exc, FluxesError | ValueError | KeyError):
        return first
    if type(exc).__name__ == "NoPermissionError":
        return f"permission denied by the instance's Redis ACL ({first})"
    from fluxes.store import reachability  # here: most commands never fail so

    if reachability.is_stall(exc):
        return reachability.explain(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return f"{exc.__class__.__name__}: {first}"


def run_cli(func: Callable[[], int], stderr: TextIO | None = None) -> int:
    """Run ``func`` and map every failure to a one-line message and an exit code."""
    err = stderr if stderr is not None else sys.stderr
    try:
        return func()
    except UsageError as exc:
        print(str(exc), file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `fluxes jobs | head`); stop quietly.
        _silence_stdout()
        return EXIT_ERROR
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_ERROR)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            _silence_stdout()
            return EXIT_ERROR
        print(f"{PROG}: {_describe(exc)}", file=err)
        return EXIT_ERROR
    except Exception as exc:  # the one place that catches everything
        if os.environ.get("FLUXES_DEBUG"):
            raise
        print(f"{PROG}: {_describe(exc)}", file=err)
        return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null so interpreter shutdown does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def print_json(obj: Any, out: TextIO | None = None) -> None:
    """Print one JSON document on one line (for ``--json`` output)."""
    stream = out if out is not None else sys.stdout
    import orjson  # here: fluxes --version and the help need no JSON

    stream.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")


def add_subcommands(parser: argparse.ArgumentParser, title: str) -> Any:
    """Add a required subcommand group to ``parser`` using our one-line-error parser."""
    return parser.add_subparsers(
        title=title, dest=f"_{title.replace(' ', '_')}", required=True,
        parser_class=ArgumentParser, metavar="COMMAND",
    )


def instance(args: argparse.Namespace) -> Instance:
    """The instance named by ``--uri`` or the environment (connected once per command).

    A command whose parser sets the default ``_lite=True`` talks through the small
    client of :mod:`fluxes.store.lite` where the URL allows (start-up time: it does
    not import redis-py); it must then use only what that client offers.
    """
    from fluxes.store.instance import Instance

    cached: Instance | None = getattr(args, "_instance", None)
    if cached is None:
        # only those commands name the option (tests stand in for connect without it)
        lite = {"lite": True} if getattr(args, "_lite", False) else {}
        cached = Instance.connect(getattr(args, "uri", None), client_name="fluxes-cli",
                                  **lite)
        args._instance = cached
    return cached


class TypedJobId(int):
    """A job id given on the command line, remembering how it was typed.

    Messages about a job that cannot be found echo :attr:`typed` (see
    :func:`fluxes.cli.display.shown_id`): ``job 12345 not found``, not the F58
    form of a number the user never wrote.
    """

    typed: str

    def __new__(cls, value: int, typed: str) -> TypedJobId:
        """The id ``value``, typed as ``typed``."""
        self = super().__new__(cls, value)
        self.typed = typed
        return self


def job_id_arg(text: str) -> int:
    """argparse type: a job id in any encoding (a :class:`TypedJobId`)."""
    try:
        return TypedJobId(jobid.parse(text), text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def time_limit_arg(text: str) -> float:
    """argparse type of ``-t``: seconds of a time limit (see :mod:`fluxes.formats.timelimit`)."""
    from fluxes.formats.timelimit import parse_time_limit

    try:
        return parse_time_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``, else a usage error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {minimum}, got {text!r}")
        return value
    return parse


def help_with_example(description: str, examples: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments for ``add_parser`` giving a description and usage examples."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    return {
        "description": description,
        "help": description.splitlines()[0],
        "epilog": epilog,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
