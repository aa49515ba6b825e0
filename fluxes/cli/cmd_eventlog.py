"""``fluxes eventlog``: the journal, time travel, consistency checks, dead letters."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.cli.display import context_text, fmt_id, parse_time, stream_id_for, table, username
from fluxes.cli.util import (
    PROG,
    add_subcommands,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
    whole_number,
)
from fluxes.store import jobfacts

if TYPE_CHECKING:
    from fluxes.domain.job.model import Job
    from fluxes.store.eventstore import Archive, EventStore, JournalEntry

#: Job eventlogs fetched per round trip by ``check``.
CHECK_BLOCK = 500


def register(subparsers: Any) -> None:
    """Add the ``eventlog`` command group."""
    parser = subparsers.add_parser(
        "eventlog", **help_with_example(
            "Inspect the journal of every job event.",
            ["fluxes eventlog journal --follow", "fluxes eventlog replay --until=-1h",
             "fluxes eventlog check"],
        ),
    )
    sub = add_subcommands(parser, "eventlog commands")

    jp = sub.add_parser("journal", **help_with_example(
        "Print journal entries (every event of every job), optionally filtered.",
        ["fluxes eventlog journal --job=ƒ2t6V2H",
         "fluxes eventlog journal --follow --name=exception",
         "fluxes eventlog journal --since=-10m --json"]))
    jp.add_argument("-f", "--follow", action="store_true", help="keep printing new entries")
    jp.add_argument("--since", metavar="ID|TIME",
                    help="start after a stream id, a UNIX/ISO time or -DURATION ago")
    jp.add_argument("--job", type=job_id_arg, metavar="ID", help="only this job")
    jp.add_argument("--name", metavar="EVENT", action="append",
                    help="only events with this name (repeatable)")
    jp.add_argument("--json", action="store_true", help="one JSON object per line")
    jp.set_defaults(func=_journal)

    rp = sub.add_parser("replay", **help_with_example(
        "Show every job's state as of a moment in the past, rebuilt from the journal.",
        ["fluxes eventlog replay --until=-1h",
         "fluxes eventlog replay --until=2026-11-22T10:00 --json"]))
    rp.add_argument("--until", metavar="TIME",
                    help="a UNIX/ISO time or -DURATION ago (default now)")
    rp.add_argument("--json", action="store_true", help="one JSON object per job")
    rp.add_argument("--file", metavar="FILE",
                    help="fold an export file (fluxes eventlog export, fluxes simulate "
                         "--journal-out) instead of the instance's journal")
    rp.set_defaults(func=_replay)

    xp = sub.add_parser("export", **help_with_example(
        "Write the journal, with what the retention archive holds, as one JSON line per\n"
        "entry (docs/simulate.md, \"The export format\"); each submit carries the job's\n"
        "summary and scheduler request. --since/--until select jobs by submit time and\n"
        "keep their whole history. FILE '-' is stdout.",
        ["fluxes eventlog export history.jsonl",
         "fluxes eventlog export --since=-30d --until=-1d month.jsonl"]))
    xp.add_argument("--since", metavar="TIME",
                    help="only jobs submitted from TIME (UNIX, ISO, -DURATION ago)")
    xp.add_argument("--until", metavar="TIME", help="only jobs submitted up to TIME")
    xp.add_argument("file", metavar="FILE")
    xp.set_defaults(func=_export)

    cp = sub.add_parser("check", **help_with_example(
        "Replay every eventlog and list jobs that do not replay cleanly (exit 1 if any).",
        ["fluxes eventlog check", "fluxes eventlog check --json"]))
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=_check)

    dp = sub.add_parser("dead-letters", **help_with_example(
        "Show malformed messages the workers parked, with the error.",
        ["fluxes eventlog dead-letters", "fluxes eventlog dead-letters --json -n 5"]))
    dp.add_argument("-n", "--count", type=whole_number(1), default=50, metavar="N",
                    help="newest N (default 50)")
    dp.add_argument("--json", action="store_true")
    dp.set_defaults(func=_dead_letters)



def _store(args: argparse.Namespace) -> EventStore:
    from fluxes.store.eventstore import EventStore

    inst = instance(args)
    return EventStore(inst.redis, inst.keys)


def _print_entry(entry: JournalEntry, as_json: bool) -> None:
    event = entry.event()
    if as_json:
        obj: dict[str, Any] = {"id": entry.jobid, **event.to_rfc18()}
        print_json(obj)
        return
    line = f"{fmt_id(entry.jobid)} {event.timestamp:.6f} {event.event_name}"
    ctx = event.context()
    print(f"{line} {context_text(ctx)}" if ctx else line)


def _journal(args: argparse.Namespace) -> int:
    """Print (and follow) the journal, filtered."""
    from fluxes.store.eventstore import journal_entry
    from fluxes.store.groups import read_streams

    store = _store(args)
    keys = store.keys
    names = {n.encode() for n in args.name} if args.name else None
    start = stream_id_for(args.since) if args.since else "0-0"
    if args.job is not None:
        partitions = [keys.partition_of(args.job)]
    else:
        partitions = list(range(keys.partitions))

    def wanted(entry: JournalEntry) -> bool:
        return ((args.job is None or entry.jobid == args.job)
                and (names is None or entry.name in names))

    last = dict.fromkeys(partitions, start)
    for p in partitions:
        blocks, gap = store.history(p, after=start, archive=_archive(args, store, p))
        if gap is not None:
            _say_purged("journal", p, gap)
        for block in blocks:
            for entry in block:
                last[p] = entry.id
                if wanted(entry):
                    _print_entry(entry, args.json)
    if not args.follow:
        return 0
    while True:
        # one read per hash slot (Redis Cluster), each waiting up to a second
        reply = read_streams(store.redis, {keys.journal(p): last[p] for p in partitions},
                             1000, 1000)
        for stream, entries in reply or []:
            p = next(q for q in partitions if keys.journal(q) == stream.decode())
            for sid, fields in entries:
                entry = journal_entry(sid, fields)
                last[p] = entry.id
                if wanted(entry):
                    _print_entry(entry, args.json)


def _archive(args: argparse.Namespace, store: EventStore, partition: int) -> Archive | None:
    """The partition's journal archive as configured (None: archiving is off)."""
    from fluxes.store.retention import archive_for

    return archive_for(store.redis, store.keys, instance(args).config().retention, partition)


def _say_purged(command: str, partition: int, before: float) -> None:
    """Tell the reader that the history it reads starts later than the instance."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before)) if before else "-"
    print(f"{PROG} eventlog {command}: partition {partition}: history before {when} was "
          "purged (trimmed from the journal and not in the archive here): jobs purged "
          "by then are not shown", file=sys.stderr)


def _job_row(job: Job) -> dict[str, Any]:
    result = job.result
    return {"id": job.id, "userid": job.userid, "state": job.state.name,
            "result": result.name if result is not None else None,
            "t_submit": job.t_submit, "t_run": job.t_run, "t_inactive": job.t_inactive,
            "priority": job.priority, "urgency": job.urgency}


def _replay(args: argparse.Namespace) -> int:
    """Fold the journal up to a time and print the jobs as they were."""
    jobs: dict[int, Job] = {}
    if args.file is not None:
        # a file is a finished history (a simulated one may lie in the future): all of it
        jobs = _replay_file(args.file, parse_time(args.until) if args.until else None)
    else:
        until = parse_time(args.until) if args.until else time.time()
        store = _store(args)
        for p in range(store.keys.partitions):
            replayed = store.replay(p, until_time=until, archive=_archive(args, store, p))
            if replayed.purged_before is not None:
                _say_purged("replay", p, replayed.purged_before)
            jobs.update(replayed.jobs)
    ordered = sorted(jobs.values(), key=lambda j: (j.t_submit, j.id))
    if args.json:
        for job in ordered:
            print_json(_job_row(job))
        return 0
    rows = []
    for job in ordered:
        result = job.result
        rows.append([fmt_id(job.id), username(job.userid) if job.userid >= 0 else "-",
                     job.state.short, result.short if result is not None else "",
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.t_submit))])
    for line in table(["JOBID", "USER", "ST", "RESULT", "SUBMITTED"], rows):
        print(line)
    return 0


def _replay_file(path: str, until: float | None) -> dict[int, Job]:
    """The jobs of an export file as of ``until`` (its broken jobs told on stderr)."""
    from fluxes.sim.journal import read_records, replay

    with open(path, "rb") as f:
        replayed = replay(read_records(f, name=path), until=until)
    for jobid, reason in sorted(replayed.broken.items()):
        print(f"{PROG} eventlog replay: {fmt_id(jobid)} does not replay: {reason}",
              file=sys.stderr)
    return {jobid: rec.job for jobid, rec in replayed.records.items()}


def instance_records(args: argparse.Namespace, since: float | None = None,
                     until: float | None = None) -> Iterator[dict[str, Any]]:
    """The instance's journal (the archive first, for what was trimmed) in the export
    format: every entry of each job submitted in ``[since, until]`` (all entries when
    neither is given), each submit with the job's stored scheduler request."""
    from fluxes.sim.journal import record_of_entry
    from fluxes.store import jobhash

    store = _store(args)
    hashes = jobhash.JobHashes(store.redis, store.keys)
    selecting = since is not None or until is not None
    lo = since if since is not None else float("-inf")
    hi = until if until is not None else float("inf")
    # entries are stamped about when Redis numbers them: begin a margin before --since
    start = "0-0" if since is None else f"{max(int((since - 60) * 1000), 0)}-0"
    for p in range(store.keys.partitions):
        chosen: set[int] = set()
        blocks, gap = store.history(p, after=start, archive=_archive(args, store, p))
        if gap is not None:
            _say_purged("export", p, gap)
        for block in blocks:
            records: list[dict[str, Any]] = []
            submits: list[int] = []
            for entry in block:
                if entry.name == b"submit" and (not selecting
                                                or lo <= float(entry.timestamp) <= hi):
                    chosen.add(entry.jobid)
                    submits.append(len(records))
                elif selecting and entry.jobid not in chosen:
                    continue
                records.append(record_of_entry(entry.id, entry.jobid, entry.seq, entry.name,
                                               entry.timestamp, entry.context, entry.extra))
            ids = [records[i]["j"] for i in submits]
            for i, raw in zip(submits, hashes.field(ids, jobhash.REQUEST) if ids else [],
                              strict=True):
                if raw:
                    records[i].setdefault("x", {})["request"] = raw.decode("utf-8", "replace")
            yield from records


def _export(args: argparse.Namespace) -> int:
    """Write the journal (and archive) in the export format."""
    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    out = sys.stdout.buffer if args.file == "-" else open(args.file, "wb")  # noqa: SIM115
    count = 0
    try:
        for record in instance_records(args, since, until):
            out.write(orjson.dumps(record))
            out.write(b"\n")
            count += 1
    finally:
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
    if args.file != "-":
        print(f"{count} journal entries written to {args.file}", file=sys.stderr)
    return 0


def _check(args: argparse.Namespace) -> int:
    """Replay the journal and every job's own eventlog; report disagreements."""
    store = _store(args)
    problems: dict[int, str] = {}
    total = 0
    for p in range(store.keys.partitions):
        result = store.replay(p)
        problems.update(result.broken)
        ids = sorted(result.jobs)
        total += len(ids) + len(result.broken)
        for i in range(0, len(ids), CHECK_BLOCK):
            chunk = ids[i:i + CHECK_BLOCK]
            logs = jobfacts.eventlogs(store.redis, store.keys, chunk)
            for jobid, entries in zip(chunk, logs, strict=True):
                reason = _check_one(jobid, entries, result.jobs[jobid])
                if reason:
                    problems[jobid] = reason
    if args.json:
        print_json({"jobs": total, "problems": [{"id": j, "reason": r}
                                                for j, r in sorted(problems.items())]})
    else:
        for jobid, reason in sorted(problems.items()):
            print(f"{fmt_id(jobid)}: {reason}")
        print(f"{total} jobs checked, {len(problems)} with problems")
    return 1 if problems else 0


def _check_one(jobid: int, entries: list[Any], from_journal: Job) -> str | None:
    """Why the job's own eventlog disagrees with the journal, or None."""
    from fluxes.domain.job.events import EventError
    from fluxes.domain.job.model import Job, TransitionError, apply
    from fluxes.store.eventstore import decode_entry

    job = Job(jobid)
    try:
        for _sid, fields in entries:
            job = apply(decode_entry(fields[b"n"], fields[b"t"], fields.get(b"c")), job)
    except (EventError, TransitionError, KeyError) as exc:
        return f"eventlog does not replay: {exc}"
    if job.seq != from_journal.seq or job.state != from_journal.state:
        return (f"eventlog ({job.seq} events, {job.state.name}) differs from the journal "
                f"({from_journal.seq} events, {from_journal.state.name})")
    return None


def _dead_letters(args: argparse.Namespace) -> int:
    """Print the newest dead letters."""
    inst = instance(args)
    from fluxes.store.status import newest_dead_letters

    entries = newest_dead_letters(inst.redis, inst.keys, args.count)
    for sid, fields in reversed(entries):
        rec = {k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}
        if args.json:
            rec["fields"] = orjson.loads(rec.get("fields", "{}"))
            print_json({"dead_letter_id": sid.decode(), **rec})
        else:
            print(f"{sid.decode()} {rec.get('stream', '?')} {rec.get('id', '?')} "
                  f"{rec.get('worker', '?')}: {rec.get('error', '')}")
    if not entries and not args.json:
        print("no dead letters")
    return 0

