"""``fluxes worker KIND``: run one worker process, exactly as ``python -m workers KIND``.

The command replaces itself with ``python -m workers`` (same process id, so a
supervisor's signals reach the worker): the CLI never imports a worker.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fluxes.cli.util import help_with_example
from fluxes.cli.worker_args import build_parser


def register(subparsers: Any) -> None:
    """Add ``worker``, whose options are those of ``python -m workers``."""
    parser = subparsers.add_parser("worker", parents=[build_parser(as_parent=True)],
                                   **help_with_example(
        "Run one worker process (what 'fluxes start', systemd units and Kubernetes\n"
        "manifests run) until SIGTERM or SIGINT.",
        ["fluxes --uri unix:///run/fluxes/redis.sock worker ingest",
         "fluxes worker job-manager --partition 1 --metrics-port 9102",
         "fluxes worker exec --ranks 0-3 --state-dir /var/lib/fluxes/exec --metrics-port 0"]))
    parser.set_defaults(func=_worker)


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The ``python -m workers`` command line that runs what ``args`` describe."""
    argv = [sys.executable, "-m", "workers", args.kind]
    uri = getattr(args, "uri", None)
    if uri:
        argv += ["--uri", uri]
    for option, value in (("--name", args.name), ("--ranks", args.ranks),
                          ("--state-dir", args.state_dir)):
        if value is not None:
            argv += [option, str(value)]
    if args.partition:
        argv += ["--partition", str(args.partition)]
    if args.insecure:
        argv.append("--insecure")
    if args.metrics_port is not None:
        argv += ["--metrics-port", str(args.metrics_port)]
    return argv


def _worker(args: argparse.Namespace) -> int:
    argv = worker_argv(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
