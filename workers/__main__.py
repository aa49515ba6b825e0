"""Run one worker process: ``python -m workers KIND --uri URI [options]``.

This is what ``fluxes start``, the systemd units and the Kubernetes
manifests run; ``fluxes worker KIND`` is the same thing through the CLI.

Whatever stops a worker is reported on one line of stderr, with a non-zero
exit status: plain text on a terminal, a JSON log record otherwise (see
:mod:`fluxes.proc.logs`), like every other line the worker logs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from fluxes.cli.worker_args import ENV_INSECURE, KINDS, build_parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the worker until it is told to stop."""
    return run_args(build_parser().parse_args(argv))


def refuse_open_redis(uri: str | None) -> None:
    """FluxesError when ``uri`` (or the environment's) is a Redis other machines reach
    with no password or ACL user, as ``fluxes start --redis`` refuses: anyone on the
    network could write to it and run jobs as the instance owner."""
    from fluxes.env import ENV_REDIS_URL, ENV_URI
    from fluxes.errors import FluxesError
    from fluxes.store.security import apply_credentials, shared_redis_problem

    text = uri or os.environ.get(ENV_URI) or os.environ.get(ENV_REDIS_URL)
    url = apply_credentials(text)[0]
    problem = shared_redis_problem(url) if url else None
    if problem:
        raise FluxesError(problem)


#: The niceness (added to the one inherited) of the workers that keep read models
#: (``fluxes jobs``' list, accounting): no job waits on them, so on a loaded host the
#: kernel gives a core to the job manager, scheduler and exec first, whose hand-offs
#: every job turnover waits on (docs/operations.md, "Priorities").
OFF_PATH_NICENESS = {"job-list": 10, "accounting": 10}


def run_args(args: argparse.Namespace) -> int:
    """Run the worker that the parsed arguments (:func:`build_parser`) describe."""
    if args.metrics_port is not None:
        # before connecting, so a port already taken fails at once
        from fluxes.proc import metrics
        from fluxes.proc.logs import setup_logging

        port = metrics.serve(args.metrics_port)
        setup_logging("fluxes.metrics").info("serving metrics", extra={"port": port})
    from fluxes.store.instance import Instance

    uri = getattr(args, "uri", None)
    if not (args.insecure or os.environ.get(ENV_INSECURE) == "1"):
        refuse_open_redis(uri)
    instance = Instance.connect(uri, client_name=f"fluxes-{args.kind}")
    if args.kind in OFF_PATH_NICENESS:
        os.nice(OFF_PATH_NICENESS[args.kind])
    if args.kind == "ingest":
        from workers.ingest import IngestWorker
        return IngestWorker(instance, args.name).run()
    if args.kind == "job-manager":
        from workers.jobmanager import JobManagerWorker
        return JobManagerWorker(instance, args.partition, args.name, pipelined=True).run()
    if args.kind == "job-list":
        from workers.joblist import JobListWorker
        return JobListWorker(instance, args.name).run()
    if args.kind == "scheduler":
        from workers.scheduler import SchedulerWorker
        return SchedulerWorker(instance, args.name, pipelined=True).run()
    if args.kind == "accounting":
        from workers.accounting import AccountingWorker
        return AccountingWorker(instance, args.name).run()
    from workers.exec import run_from_args
    return run_from_args(instance, args)


def guarded(func: Callable[[], int], kind: str | None) -> int:
    """Run ``func`` with the CLI's error wrapper (one line, no traceback, an exit code),
    the line going to :func:`fluxes.proc.logs.error_stream` of the worker's logger."""
    from fluxes.cli.util import run_cli
    from fluxes.proc.logs import error_stream

    stream = error_stream(f"fluxes.{kind or 'workers'}")
    try:
        return run_cli(func, stderr=stream)
    finally:
        stream.flush()


def main() -> None:
    """Console entry point: run the worker; report what stopped it on one line."""
    from fluxes.proc.gcpolicy import tune

    tune()
    argv = sys.argv[1:]
    kind = next((a for a in argv if a in KINDS), None)
    sys.exit(guarded(lambda: run(argv), kind))


if __name__ == "__main__":
    main()
