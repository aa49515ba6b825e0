"""``fluxes bench``: benchmarks that print figures (``--json``: one object), never assert."""

from __future__ import annotations

import argparse
from typing import Any

from fluxes.cli.util import add_subcommands, help_with_example


def register(subparsers: Any) -> None:
    """Add ``bench`` and its benchmarks."""
    parser = subparsers.add_parser("bench", **help_with_example(
        "Measure fluxes on this machine (each benchmark starts its own redis-server).",
        ["fluxes bench eventlog", "fluxes bench eventlog --jobs 1000000 --json"]))
    sub = add_subcommands(parser, "benchmarks")
    ep = sub.add_parser("eventlog", **help_with_example(
        "Event store: append (single, batched), full replay, checkpoint restore,\n"
        "read-model fold speed and memory per job.",
        ["fluxes bench eventlog", "fluxes bench eventlog --jobs 1000000 --json"]))
    ep.add_argument("--jobs", type=int, default=100_000,
                    help="jobs in the history, 10 events each (default 100000)")
    ep.add_argument("--single", type=int, default=10_000,
                    help="events appended one per round trip (default 10000)")
    ep.add_argument("--json", action="store_true")
    ep.set_defaults(func=_eventlog)


def _eventlog(args: argparse.Namespace) -> int:
    from fluxes.bench import eventlog
    from fluxes.bench.common import report

    report(eventlog.run(jobs=args.jobs, single=args.single), args.json)
    return 0
