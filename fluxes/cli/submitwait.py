"""What ``submit`` and ``bulksubmit`` do after submitting (flux's options).

``--quiet`` prints no ids; ``--log=FILE``/``--log-stderr=FILE`` send what would
go to the terminal (ids; messages) to files; ``--wait`` waits for every job to
end, ``--wait-event=NAME`` until each job has had the event NAME, ``--watch``
prints the jobs' output as ``fluxes run`` does; the exit code is then the
largest of the jobs' exit codes (flux's rule: 1 for a job ended by an
exception whose tasks exited 0 or never ran).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from fluxes.cli.display import fmt_id, shown_id
from fluxes.cli.util import print_json
from fluxes.errors import FluxesError

if TYPE_CHECKING:
    from fluxes.store.instance import Instance


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    """``--quiet``, ``--wait``, ``--wait-event``, ``--watch``, ``--log``, ``--log-stderr``."""
    group = parser.add_argument_group("after submitting")
    group.add_argument("--quiet", action="store_true", help="do not print the job ids")
    group.add_argument("--wait", action="store_true",
                       help="wait for the jobs to end; exit with the largest exit code")
    group.add_argument("--wait-event", metavar="NAME", type=wait_event_name,
                       help="wait until each job has had the event NAME (e.g. start; "
                            "exec.NAME: see docs/compat.md)")
    group.add_argument("--watch", action="store_true",
                       help="print the jobs' output as they run (implies --wait)")
    group.add_argument("--log", metavar="FILE", help="print the job ids to FILE")
    group.add_argument("--log-stderr", metavar="FILE", help="print error messages to FILE")


#: Flux's exec eventlog events (``--wait-event=exec.NAME``) and the main eventlog's
#: event that marks the same moment or a later one: fluxes keeps no exec eventlog
#: (its ``start`` is posted once the tasks run, ``finish`` when they all ended,
#: ``release`` when the exec is done with the job), and a wait must never end early.
EXEC_STAND_INS = {"init": "start", "starting": "start", "shell.init": "start",
                  "shell.start": "start", "complete": "finish", "done": "release"}


def wait_event_name(text: str) -> str:
    """The main-eventlog event ``--wait-event`` waits for (``exec.NAME``: its stand-in);
    a usage error for an exec event with none."""
    if not text.startswith("exec."):
        return text
    stand_in = EXEC_STAND_INS.get(text.removeprefix("exec."))
    if stand_in is None:
        known = ", ".join(f"exec.{name}" for name in EXEC_STAND_INS)
        raise argparse.ArgumentTypeError(f"{text}: not an exec event fluxes can wait for "
                                         f"({known})")
    return stand_in


def add_cc_options(parser: argparse.ArgumentParser) -> None:
    """``--cc`` and ``--bcc``: one copy of the job per id of an idset."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cc", metavar="IDSET", help="submit one copy per id ({cc} in the "
                       "command and output paths is replaced; FLUXES_JOB_CC=ID is set)")
    group.add_argument("--bcc", metavar="IDSET",
                       help="like --cc, but FLUXES_JOB_CC is not set")


@contextlib.contextmanager
def _opened(path: str | None, default: TextIO) -> Iterator[TextIO]:
    if path is None:
        yield default
        return
    try:
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 -- closed below
    except OSError as exc:
        raise FluxesError(f"{path}: {exc.strerror}") from None
    with handle:
        yield handle


def finish(args: argparse.Namespace, inst: Instance, results: Sequence[int | str],
           as_json: bool = False) -> int:
    """Print each submission's id or error (unless ``--quiet``), then wait as asked;
    the command's exit code."""
    with _opened(getattr(args, "log", None), sys.stdout) as out, \
            _opened(getattr(args, "log_stderr", None), sys.stderr) as err:
        ids = [r for r in results if isinstance(r, int)]
        failed = len(results) - len(ids)
        for result in results:
            if isinstance(result, int):
                if as_json:
                    print_json({"id": result}, out)
                elif not args.quiet:
                    print(fmt_id(result), file=out, flush=True)
            elif as_json:
                print_json({"error": result}, out)
            else:
                print(f"fluxes: {result}", file=err)
        code = 1 if failed else 0
        if ids and (args.watch or args.wait or args.wait_event):
            code = max(code, _wait(args, inst, ids, err))
        return code


def _wait(args: argparse.Namespace, inst: Instance, ids: list[int], err: TextIO) -> int:
    from fluxes.cli.attach import Outcome

    worst = 0

    def report(outcome: Outcome) -> None:
        nonlocal worst
        message = outcome.message()
        if message:
            print(f"fluxes: {message}", file=err)
        worst = max(worst, outcome.exit_code)

    if args.wait_event and not (args.wait or args.watch):
        return wait_event(inst, ids, args.wait_event, err)
    if args.watch:
        from fluxes.cli.attach import follow_interruptible

        for jobid in ids:
            report(follow_interruptible(inst, jobid))
        return worst
    from fluxes.cli.waitjobs import wait_jobs

    wait_jobs(inst, ids, report)
    return worst


def wait_event(inst: Instance, ids: list[int], name: str, err: TextIO) -> int:
    """Block until each job has had the event ``name`` (1 when a job's eventlog
    ended without it, or a fatal exception came first, as flux)."""
    code = 0
    for jobid in ids:
        problem = _await_event(inst, jobid, name)
        if problem:
            print(f"fluxes: job {shown_id(jobid)}: {problem}", file=err)
            code = 1
    return code


def _await_event(inst: Instance, jobid: int, name: str) -> str | None:
    from fluxes.store.groups import read_streams
    from fluxes.store.jobfacts import EventlogFollower

    follower = EventlogFollower(inst.redis, inst.keys, jobid)
    want = name.encode()
    entries = follower.history
    while True:
        for _sid, fields in entries:
            found = _check_entry(fields, want)
            if found is not None:
                return found or None
        entries = [e for _stream, got in read_streams(inst.redis, follower.streams(), 1000, 1000)
                   for e in follower.take(got)]


def _check_entry(fields: dict[bytes, Any], want: bytes) -> str | None:
    """"" when ``fields`` is the awaited event, a problem when the wait is over
    without it, None to read on."""
    import orjson

    event = fields.get(b"n")
    if event == want:
        return ""
    if event == b"exception":
        ctx = orjson.loads(fields.get(b"c") or b"{}")
        if ctx.get("severity") == 0:
            return f"exception type={ctx.get('type')} before event {want.decode()}"
    if event in (b"clean", b"invalidate"):
        return f"the job ended before event {want.decode()}"
    return None
