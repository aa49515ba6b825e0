"""``fluxes job``: per-job commands (id, eventlog, wait-event...)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.cli import cmd_account, cmd_forecast, cmd_jobtools, cmd_kill, cmd_purge, cmd_submit
from fluxes.cli.display import event_line, fmt_id, human_event_lines, shown_id
from fluxes.cli.progress import Progress
from fluxes.cli.util import (
    UsageError,
    add_subcommands,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
)
from fluxes.formats import jobid
from fluxes.formats.fsd import parse_duration
from fluxes.store import jobfacts

if TYPE_CHECKING:
    from fluxes.cli.attach import Outcome
    from fluxes.store.eventstore import EventStore


def register(subparsers: Any) -> None:
    """Add the ``job`` command group."""
    parser = subparsers.add_parser(
        "job", **help_with_example("Per-job commands.", ["fluxes job id --to=f58 123456789",
                                                         "fluxes job eventlog ƒ2t6V2H"]),
    )
    sub = add_subcommands(parser, "job commands")

    idp = sub.add_parser(
        "id", **help_with_example(
            "Convert job ids between encodings, like 'flux job id'.\n"
            "Any encoding is accepted as input; with no ID, ids are read from\n"
            "stdin, one per line.",
            ["fluxes job id --to=f58 1234567890", "fluxes job id --to=dec ƒ2t6V2H",
             "fluxes jobs -o ids | fluxes job id --to=words"],
        ),
    )
    idp.add_argument("--to", choices=jobid.OUTPUT_FORMS, default="dec",
                     help="output encoding (default dec)")
    idp.add_argument("ids", nargs="*", metavar="ID", help="(default: read from stdin)")
    idp.set_defaults(func=_job_id)

    evp = sub.add_parser(
        "eventlog", **help_with_example(
            "Print a job's eventlog, like 'flux job eventlog'.",
            ["fluxes job eventlog ƒ2t6V2H", "fluxes job eventlog -H ƒ2t6V2H",
             "fluxes job eventlog --format=json ƒ2t6V2H  # RFC 18, one event per line"],
        ),
    )
    evp.add_argument("--format", choices=("text", "json"), default="text")
    evp.add_argument("-H", "--human", action="store_true",
                     help="human-readable times (date, then offsets)")
    evp.add_argument("id", type=job_id_arg, metavar="ID")
    evp.set_defaults(func=_eventlog)

    wep = sub.add_parser(
        "wait-event", **help_with_example(
            "Wait until EVENT appears in a job's eventlog, then print it.\n"
            "Blocks on the journal for its events (no polling). Exit 1 on timeout, and when the\n"
            "eventlog ends (the job is inactive) without the event.",
            ["fluxes job wait-event ƒ2t6V2H clean",
             "fluxes job wait-event -t 10s --match-context=type=cancel ƒ2t6V2H exception"],
        ),
    )
    wep.add_argument("-t", "--timeout", default=None, metavar="FSD",
                     help="give up after this long (default: wait forever)")
    wep.add_argument("-m", "--match-context", action="append", default=[], metavar="KEY=VAL",
                     help="only an event whose context has KEY equal to VAL (repeatable)")
    wep.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    wep.add_argument("--format", choices=("text", "json"), default="text")
    wep.add_argument("id", type=job_id_arg, metavar="ID")
    wep.add_argument("event", type=_event_name, metavar="EVENT")
    wep.set_defaults(func=_wait_event)
    cmd_submit.register_job(sub)
    cmd_kill.register(sub)
    cmd_jobtools.register(sub)
    cmd_purge.register(sub)

    ip = sub.add_parser("info", **help_with_example(
        "Print what is stored for a job: jobspec (as submitted, with its updates),\n"
        "jobspec_full (defaults applied), R, eventlog, or (no KEY) every field of the\n"
        "job record. jobspec, jobspec_full and R show their current value: the\n"
        "jobspec-update and resource-update events applied (--base: as stored).",
        ["fluxes job info ƒ2t6V2H R", "fluxes job info ƒ2t6V2H jobspec eventlog",
         "fluxes job info --base ƒ2t6V2H jobspec"]))
    ip.add_argument("-b", "--base", action="store_true",
                    help="jobspec and R as stored, without the updates of the eventlog")
    ip.add_argument("id", type=job_id_arg, metavar="ID")
    ip.add_argument("keys", nargs="*", metavar="KEY")
    ip.set_defaults(func=_info)

    wp = sub.add_parser("wait", **help_with_example(
        "Wait for jobs to finish; exit 0 if every one completed successfully, else 1\n"
        "(each failure is explained on stderr). --all waits for all your active jobs.",
        ["fluxes job wait ƒ2t6V2H", "fluxes job wait -t 10m ƒ2t6V2H ƒ2t6V2J",
         "fluxes job wait --all --progress", "fluxes job wait --all -v"]))
    wp.add_argument("-t", "--timeout", default=None, metavar="FSD",
                    help="give up (exit 1) after this long")
    wp.add_argument("-a", "--all", action="store_true",
                    help="every active job of yours (none: exit 0 at once)")
    wp.add_argument("-v", "--verbose", action="store_true",
                    help="also say when a job completed successfully")
    wp.add_argument("--progress", action="store_true",
                    help="a progress bar on a terminal, a line a second otherwise")
    wp.add_argument("ids", nargs="*", type=job_id_arg, metavar="ID")
    wp.set_defaults(func=_wait)

    ap = sub.add_parser("attach", **help_with_example(
        "Print a job's output as it runs, until it ends; exit with its exit code.",
        ["fluxes job attach ƒ2t6V2H", "fluxes job attach -l ƒ2t6V2H  # label lines by task"]))
    ap.add_argument("-l", "--label-io", action="store_true", help="prefix lines with task rank")
    ap.add_argument("id", type=job_id_arg, metavar="ID")
    ap.set_defaults(func=_attach)

    op = sub.add_parser("output", **help_with_example(
        "Print a job's output so far (stdout and stderr), without waiting.",
        ["fluxes job output ƒ2t6V2H", "fluxes job output -l ƒ2t6V2H"]))
    op.add_argument("-l", "--label-io", action="store_true", help="prefix lines with task rank")
    op.add_argument("id", type=job_id_arg, metavar="ID")
    op.set_defaults(func=_output)
    cmd_account.register_job_priority(sub)
    cmd_forecast.register_job_forecast(sub)


def _info(args: argparse.Namespace) -> int:
    """Print stored job data."""
    from fluxes.store.errors import NoPermissionError
    from fluxes.store.jobhash import JOBSPEC, JOBSPEC_FULL, JobHashes

    inst = instance(args)
    hashes = JobHashes(inst.redis, inst.keys)
    private = False
    try:
        found = hashes.get(args.id)
    except NoPermissionError:
        # another user's job: its jobspecs (blobs of the owner) are not for us
        found, private = hashes.public(args.id), True
    record = {} if found is None else found.text_fields()
    store = _store(args)
    if not record and not store.job_exists(args.id):
        die(f"job {shown_id(args.id)} not found")
    if found is not None and JOBSPEC_FULL in (args.keys or ()):
        # the jobspec the job runs with (stored apart only when defaults changed it)
        spec = found.effective_jobspec
        record[JOBSPEC_FULL] = spec.decode("utf-8", "replace") if spec else ""
    if not args.base and (not args.keys or {JOBSPEC, JOBSPEC_FULL, "R"} & set(args.keys)):
        try:
            _apply_updates(store, args.id, record)
        except NoPermissionError:
            pass  # an eventlog this user may not read: the values as stored
    if not args.keys:
        for key, value in sorted(record.items()):
            print(f"{key}: {value}")
        if private:
            print(f"fluxes: job {fmt_id(args.id)}: its jobspec is private (only its owner "
                  "and the instance owner can read it)", file=sys.stderr)
        return 0
    for key in args.keys:
        if private and key in (JOBSPEC, JOBSPEC_FULL):
            die(f"job {fmt_id(args.id)}: its {key} is private (only its owner and the "
                "instance owner can read it)")
        if key == "eventlog":
            for stamp, name, context in _revealed(store, args.id, store.eventlog(args.id)):
                print_json(_rfc18(stamp, name, context))
        elif key == JOBSPEC_FULL:
            print(record.get(JOBSPEC_FULL, ""))
        elif key in record:
            print(record[key])
        else:
            die(f"job {shown_id(args.id)} has no {key!r} (known: eventlog, "
                f"{', '.join(sorted(record))})")
    return 0


def _apply_updates(store: EventStore, jobid: int, record: dict[str, str]) -> None:
    """Replace the jobspecs and R of ``record`` by their current values: the contexts of
    the job's ``jobspec-update`` and ``resource-update`` events applied (RFC 21), as
    flux's ``flux job info`` shows them. A value that cannot be updated stays as
    stored, with a note on stderr."""
    from fluxes.domain.jm.update import current_jobspec, current_r
    from fluxes.store.jobhash import JOBSPEC, JOBSPEC_FULL

    specs: list[dict[str, Any]] = []
    rs: list[dict[str, Any]] = []
    for event in store.eventlog(jobid):
        if event.event_name == "jobspec-update":
            specs.append(event.context())
        elif event.event_name == "resource-update":
            rs.append(event.context())
    for key, updates, apply in ((JOBSPEC, specs, current_jobspec),
                                (JOBSPEC_FULL, specs, current_jobspec), ("R", rs, current_r)):
        text = record.get(key)
        if not updates or not text:
            continue
        try:
            value = orjson.loads(text)
            if not isinstance(value, dict):
                raise ValueError("not a JSON object")
            record[key] = orjson.dumps(apply(value, updates)).decode()
        except ValueError as exc:
            print(f"fluxes: job {fmt_id(jobid)}: {key} shown as stored: its updates do not "
                  f"apply ({str(exc).splitlines()[0] if str(exc) else exc!r})",
                  file=sys.stderr)


def _wait(args: argparse.Namespace) -> int:
    """Block until the jobs are inactive; report failures like flux job wait."""
    from fluxes.cli.attach import follow
    from fluxes.cli.waitjobs import active_jobs_of, wait_jobs

    timeout = parse_duration(args.timeout) if args.timeout else None
    if args.all and args.ids:
        raise UsageError("fluxes job wait: give job ids or --all, not both")
    if not args.all and not args.ids:
        raise UsageError("fluxes job wait: give job ids, or --all")
    inst = instance(args)
    cmd_jobtools.check_exist(inst, args.ids)
    if len(args.ids) == 1 and not args.progress:
        outcome = follow(inst, args.ids[0], output=False, timeout=timeout)
        message = outcome.message()
        if message:
            print(f"fluxes: {message}", file=sys.stderr)
            return 1
        if args.verbose:
            print(f"fluxes: job {fmt_id(args.ids[0])}: completed successfully", file=sys.stderr)
        return 0
    ids = list(dict.fromkeys(args.ids)) if args.ids else active_jobs_of(inst)
    bar = Progress("wait", len(ids), enabled=args.progress)
    failed = 0

    def report(outcome: Outcome) -> None:
        nonlocal failed
        message = outcome.message()
        if message:
            failed += 1
            bar.message(f"fluxes: {message}")
        elif args.verbose:
            bar.message(f"fluxes: job {fmt_id(outcome.job.id)}: completed successfully")

    try:
        wait_jobs(inst, ids, report, progress=bar.update, timeout=timeout)
    finally:
        bar.done()
    return 1 if failed else 0


def _attach(args: argparse.Namespace) -> int:
    """Stream output until the job ends; exit with its exit code."""
    from fluxes.cli.attach import follow_interruptible

    outcome = follow_interruptible(instance(args), args.id, label=args.label_io)
    message = outcome.message()
    if message:
        print(f"fluxes: {message}", file=sys.stderr)
    return outcome.exit_code


def _output(args: argparse.Namespace) -> int:
    """Print the output stored so far, and where output sent to files went."""
    from fluxes.cli.attach import print_output, print_redirections

    inst = instance(args)
    if not jobfacts.has_eventlog(inst.redis, inst.keys, args.id):
        die(f"job {shown_id(args.id)} not found")
    print_output(inst, args.id, label=args.label_io)
    sys.stdout.flush()
    print_redirections(inst, args.id)
    return 0


def _job_id(args: argparse.Namespace) -> int:
    """Print each id (from the arguments, else stdin) in the requested encoding.

    Stops at the first bad one.  F58 falls back to the ASCII ``f`` prefix when
    stdout cannot encode ``ƒ``, as flux does outside a UTF-8 locale.
    """
    form = args.to
    if form == "f58" and not _can_encode(sys.stdout, jobid.encode(0, "f58")):
        form = "f58plain"
    for text in args.ids if args.ids else _stdin_ids():
        print(jobid.encode(jobid.parse(text), form))
    return 0


def _can_encode(stream: Any, text: str) -> bool:
    """Whether ``stream`` can write ``text`` (a stream without an encoding is taken as able)."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return True
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _stdin_ids() -> Iterator[str]:
    """Ids from stdin, one per line; blank lines are skipped.

    The bytes are read as UTF-8 whatever the locale says: ids are ASCII
    except the ``ƒ`` prefix, which flux writes in UTF-8, so
    ``PYTHONIOENCODING=ascii`` must not make ``ƒ...`` ids unreadable.
    """
    binary = getattr(sys.stdin, "buffer", None)
    lines: Iterable[str] = (
        (raw.decode("utf-8", errors="replace") for raw in binary)
        if binary is not None else sys.stdin
    )
    for line in lines:
        text = line.strip()
        if text:
            yield text


def _store(args: argparse.Namespace) -> EventStore:
    from fluxes.store.eventstore import EventStore

    inst = instance(args)
    return EventStore(inst.redis, inst.keys)


def _eventlog(args: argparse.Namespace) -> int:
    """Print the job's events."""
    store = _store(args)
    events = store.eventlog(args.id)
    if not events:
        die(f"job {shown_id(args.id)} not found")
    shown = _revealed(store, args.id, events)
    if args.format == "json":
        for stamp, name, context in shown:
            print_json(_rfc18(stamp, name, context))
    elif args.human:
        for line in human_event_lines(shown):
            print(line)
    else:
        for stamp, name, context in shown:
            print(event_line(stamp, name, context))
    return 0


def _revealed(store: EventStore, jobid: int, events: list[Any]
              ) -> list[tuple[float, str, dict[str, Any]]]:
    """The job's events with the text private to its owner put back when this user may
    read it (the owner, the instance owner); others see the public stand-ins
    (docs/security.md)."""
    from fluxes.store.private import revealed_events

    return revealed_events(store.redis, store.keys, jobid, events)


def _rfc18(stamp: float, name: str, context: dict[str, Any]) -> dict[str, Any]:
    """An RFC 18 object; ``context`` left out when empty, as flux does."""
    obj: dict[str, Any] = {"timestamp": stamp, "name": name}
    if context:
        obj["context"] = context
    return obj


def _parse_matches(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            die(f"--match-context: expected KEY=VAL, got {pair!r}")
        try:
            out[key] = orjson.loads(value)
        except orjson.JSONDecodeError:
            out[key] = value  # a bare word compares as a string
    return out


def _event_name(text: str) -> str:
    """argparse type of EVENT: a non-empty event name."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an event name cannot be empty")
    return text


#: Events after which nothing more is appended to a job's eventlog.
_LAST_EVENTS = frozenset({"clean", "invalidate"})


def _wait_event(args: argparse.Namespace) -> int:
    """Block on the job's eventlog until the event (with matching context) appears.

    Once the eventlog has ended (``clean``, ``invalidate``) without it, the
    event can never come: that is an error, as in flux, not a wait forever.
    """
    from fluxes.store.eventstore import decode_entry

    timeout = parse_duration(args.timeout) if args.timeout is not None else None
    matches = _parse_matches(args.match_context)
    store = _store(args)
    follower = jobfacts.EventlogFollower(store.redis, store.keys, args.id)
    if not follower.exists:
        die(f"job {shown_id(args.id)} not found")
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: list[Any] = []  # the eventlog so far: private text is keyed by position
    pending = follower.history
    while True:
        if not pending:
            if deadline is None:
                block = 0  # XREAD BLOCK 0 waits forever
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    die(f"wait-event timeout on event '{args.event}'")
                block = max(1, int(remaining * 1000))
            reply = jobfacts.read_new(store.redis, follower.streams(), block=block)
            pending = [e for _stream, entries in reply or [] for e in follower.take(entries)]
        entries, pending = pending, []
        for _sid, fields in entries:
            event = decode_entry(fields[b"n"], fields[b"t"], fields.get(b"c"))
            seen.append(event)
            if event.event_name == args.event:
                # the owner waits on (and sees) the note as written, not its stand-in
                stamp, name, context = _revealed(store, args.id, seen)[-1]
                if _context_matches(context, matches):
                    if not args.quiet:
                        if args.format == "json":
                            print_json(_rfc18(stamp, name, context))
                        else:
                            print(event_line(stamp, name, context))
                    return 0
            if event.event_name in _LAST_EVENTS:
                die(f"event '{args.event}' never received")


def _context_matches(ctx: dict[str, Any], matches: dict[str, Any]) -> bool:
    return all(ctx.get(k) == v for k, v in matches.items())
