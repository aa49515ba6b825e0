"""Run one worker process: ``python -m workers KIND --uri URI [options]``.

This is what ``fluxes start``, the systemd units and the Kubernetes
manifests run; ``fluxes worker KIND`` is the same thing through the CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

KINDS = ("ingest", "job-manager", "scheduler", "job-list", "exec")


def build_parser() -> argparse.ArgumentParser:
    """Arguments shared by every worker kind."""
    parser = argparse.ArgumentParser(prog="python -m workers",
                                     description="Run one fluxes worker process.")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--uri", default=None, help="instance URI (default $FLUXES_URI)")
    parser.add_argument("--name", default=None, help="worker name (default KIND-HOST-PID)")
    parser.add_argument("--partition", type=int, default=0, help="job-manager partition")
    parser.add_argument("--ranks", default=None, help="exec: the ranks served (idset)")
    parser.add_argument("--state-dir", default=None, help="exec: where task files live")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the worker until it is told to stop."""
    args = build_parser().parse_args(argv)
    from fluxes.instance import Instance

    instance = Instance.connect(args.uri, client_name=f"fluxes-{args.kind}")
    if args.kind == "ingest":
        from workers.ingest import IngestWorker
        return IngestWorker(instance, args.name).run()
    if args.kind == "job-manager":
        from workers.jobmanager import JobManagerWorker
        return JobManagerWorker(instance, args.partition, args.name).run()
    if args.kind == "job-list":
        from workers.joblist import JobListWorker
        return JobListWorker(instance, args.name).run()
    if args.kind == "scheduler":
        from workers.scheduler import SchedulerWorker
        return SchedulerWorker(instance, args.name).run()
    from workers.exec import run_from_args
    return run_from_args(instance, args)


def main() -> None:
    """Console entry point with the CLI's error wrapper (one line, no traceback)."""
    from fluxes.cli.util import run_cli

    sys.exit(run_cli(lambda: run(sys.argv[1:])))


if __name__ == "__main__":
    main()
