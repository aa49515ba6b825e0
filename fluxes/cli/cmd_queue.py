"""``fluxes queue``: RFC 33 queue administration (event-sourced in the queue stream)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import add_subcommands, die, help_with_example, instance, print_json
from fluxes.formats.fsd import format_duration, parse_duration
from fluxes.service.queues import change_queue, queue_states

if TYPE_CHECKING:
    from fluxes.domain.jm.queues import QueueState


#: Pause between looks at the job list's position while it catches up with the journals.
CATCH_UP_PAUSE_S = 0.02


def register(subparsers: Any) -> None:
    """Add ``queue`` and its subcommands."""
    parser = subparsers.add_parser("queue", **help_with_example(
        "Show and administer queues (RFC 33).",
        ["fluxes queue list", "fluxes queue disable debug -m 'maintenance'",
         "fluxes queue stop --all", "fluxes queue drain batch --timeout=10m"]))
    sub = add_subcommands(parser, "queue commands")
    lp = sub.add_parser("list", **help_with_example(
        "List queues with their limits and state.",
        ["fluxes queue list", "fluxes queue list --json"]))
    lp.add_argument("--json", action="store_true")
    lp.set_defaults(func=_list)
    sp = sub.add_parser("status", **help_with_example(
        "Say whether each queue accepts and schedules jobs, and why not.",
        ["fluxes queue status", "fluxes queue status debug"]))
    sp.add_argument("queue", nargs="?", metavar="QUEUE")
    sp.set_defaults(func=_status)
    for kind, what in (("enable", "Accept submissions to QUEUE again."),
                       ("disable", "Refuse new submissions to QUEUE (jobs already there stay)."),
                       ("start", "Schedule QUEUE's jobs again."),
                       ("stop", "Stop scheduling QUEUE's jobs (pending alloc requests are "
                                "canceled; running jobs go on).")):
        p = sub.add_parser(kind, **help_with_example(
            what, [f"fluxes queue {kind} debug" + (" -m 'reason'" if kind in
                                                   ("disable", "stop") else ""),
                   f"fluxes queue {kind} --all"]))
        p.add_argument("queue", nargs="?", metavar="QUEUE")
        p.add_argument("-a", "--all", action="store_true", help="every queue")
        p.add_argument("-m", "--message", metavar="REASON", default=None)
        p.set_defaults(func=_admin, kind=kind)
    for kind, what in (("drain", "Wait until QUEUE (or every queue) has no active jobs."),
                       ("idle", "Wait until no job of QUEUE is running (RUN or CLEANUP).")):
        p = sub.add_parser(kind, **help_with_example(
            what, [f"fluxes queue {kind}", f"fluxes queue {kind} debug --timeout=5m"]))
        p.add_argument("queue", nargs="?", metavar="QUEUE")
        p.add_argument("--timeout", metavar="FSD", default=None)
        p.add_argument("--progress", action="store_true")
        p.set_defaults(func=_wait, kind=kind)


def _list(args: argparse.Namespace) -> int:
    inst = instance(args)
    config = inst.config().queues
    states = queue_states(inst)
    rows: list[dict[str, Any]] = []
    for name in config.queue_names:
        policy = config.effective_policy(name)
        state = states.get(name)
        limit = policy.max_duration
        rows.append({
            "queue": name or "(default)",
            # the anonymous queue is the one jobs go to: it is the default
            "default": name == config.default_queue,
            "enabled": bool(state.enabled) if state else True,
            "started": bool(state.started) if state else True,
            "time_limit": format_duration(limit) if limit else "inf",
            "max_nodes": policy.max_size.nnodes, "max_ncores": policy.max_size.ncores,
            "requires": list(config.requires(name)),
        })
    if args.json:
        print_json({"queues": rows})
        return 0
    print(f"{'QUEUE':<12} {'EN':>2} {'ST':>2} {'TLIMIT':>8} {'NNODES':>8} {'NCORES':>8} PROPERTIES")
    for row in rows:
        nodes = "inf" if row["max_nodes"] < 0 else str(row["max_nodes"])
        cores = "inf" if row["max_ncores"] < 0 else str(row["max_ncores"])
        # "(default)*" would say it twice
        star = "*" if row["default"] and config.queue_names != (None,) else ""
        print(f"{row['queue'] + star:<12} {'✔' if row['enabled'] else '✗':>2} "
              f"{'✔' if row['started'] else '✗':>2} {row['time_limit']:>8} {nodes:>8} "
              f"{cores:>8} {','.join(row['requires'])}")
    return 0


def known_queue(name: str | None, states: dict[str | None, QueueState]) -> None:
    """Stop with the one-line "unknown queue" error unless ``name`` is a configured queue."""
    if name not in states:
        die(f"unknown queue {name!r}")


def _status(args: argparse.Namespace) -> int:
    inst = instance(args)
    states = queue_states(inst)
    names = [args.queue] if args.queue else list(states)
    for name in names:
        known_queue(name, states)
        state = states[name]
        label = f"{name}: " if name else ""
        enabled = "enabled" if state.enabled else \
            f"disabled: {state.enable_reason}" if state.enable_reason else "disabled"
        started = "started" if state.started else \
            f"stopped: {state.stop_reason}" if state.stop_reason else "stopped"
        print(f"{label}Job submission is {enabled}")
        print(f"{label}Scheduling is {started}")
    return 0


def _admin(args: argparse.Namespace) -> int:
    """Append a queue event and tell every job manager to re-read queue states."""
    try:
        change_queue(instance(args), args.kind, args.queue, args.message, bool(args.all))
    except ValueError as exc:
        die(str(exc))
    return 0


def _wait(args: argparse.Namespace) -> int:
    """Block (on the journals) until the queue is empty or idle.

    Counters come from the job-list read model; "empty" counts only once the
    read model includes every journal entry written before the command
    started, so a job submitted just before is waited for.
    """
    from fluxes.store.groups import read_streams
    from fluxes.store.joblist import JobListStore

    inst = instance(args)
    if args.queue:
        # counters of a queue that does not exist stay at 0: without this
        # check a typo would "drain" at once and exit 0
        known_queue(args.queue, queue_states(inst))
    timeout = parse_duration(args.timeout) if args.timeout else None
    deadline = None if timeout is None else time.monotonic() + timeout
    store = JobListStore(inst.redis, inst.keys)
    states = ("RUN", "CLEANUP") if args.kind == "idle" else \
        ("DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP", "NEW")
    prefix = f"queue:{args.queue}:state:" if args.queue else "state:"
    journals = {inst.keys.journal(p): "$" for p in range(inst.keys.partitions)}
    # the journals' ends now: a job submitted just before this command is in
    # the counters only once the read model has folded that far
    marks = store.journal_marks()
    shown: int | None = None
    while True:
        if marks:
            # the position first: counters read after it include everything before it
            marks = store.behind(marks)
        counts = store.counters()
        left = sum(counts.get(prefix + s, 0) for s in states)
        if left == 0 and marks:
            if deadline is not None and time.monotonic() >= deadline:
                die(f"queue {args.kind}: timeout: the job list has not caught up "
                    f"with the journal")
            # the read model lags by milliseconds: a short pause, not a stream wait
            time.sleep(CATCH_UP_PAUSE_S)
            continue
        if args.progress and left != shown:  # a line per change, not per wake-up
            print(f"{args.kind}: {left} jobs left", file=sys.stderr)
            shown = left
        if left == 0:
            return 0
        block = 1000
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                die(f"queue {args.kind}: timeout with {left} jobs left")
            block = max(1, min(1000, int(remaining * 1000)))
        # any journal entry (or a second) means the counters may have moved
        reply = read_streams(inst.redis, journals, 1000, block)
        for stream, entries in reply or []:
            journals[stream.decode()] = entries[-1][0].decode()
