"""``fluxes worker KIND``: run one worker process, exactly as ``python -m workers KIND``."""

from __future__ import annotations

import argparse
from typing import Any

from fluxes.cli.util import help_with_example


def register(subparsers: Any) -> None:
    """Add ``worker``, whose options are those of ``python -m workers``."""
    from workers.__main__ import build_parser

    parser = subparsers.add_parser("worker", parents=[build_parser(as_parent=True)],
                                   **help_with_example(
        "Run one worker process (what 'fluxes start', systemd units and Kubernetes\n"
        "manifests run) until SIGTERM or SIGINT.",
        ["fluxes --uri unix:///run/fluxes/redis.sock worker ingest",
         "fluxes worker job-manager --partition 1 --metrics-port 9102",
         "fluxes worker exec --ranks 0-3 --state-dir /var/lib/fluxes/exec --metrics-port 0"]))
    parser.set_defaults(func=_worker)


def _worker(args: argparse.Namespace) -> int:
    from workers.__main__ import guarded, run_args

    # reported here, not by the CLI's wrapper, so that off a terminal it is JSON
    return guarded(lambda: run_args(args), args.kind)
