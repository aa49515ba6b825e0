"""Prometheus metrics of the worker processes, and the small HTTP server that exposes them.

Every metric lives in prometheus-client's process-wide default registry, so a
worker only increments or observes; nothing is sent anywhere until something
scrapes ``/metrics`` on the port :func:`serve` opened (``python -m workers
KIND --metrics-port PORT``). Without a server the cost of a metric is the
increment itself, which is why the workers count per commit or per message
block, never per event.

Gauges that describe stored state (jobs by state, stream lag) are refreshed
by the worker's heartbeat, and only while a server runs: there is no point
paying a Redis round trip for numbers nobody reads.

This module holds no Redis code: the heartbeat reads Redis (stream lags come
parsed from :func:`fluxes.store.groups.stream_lags`) and hands the figures to
the helpers here (:func:`set_lags`, :func:`job_counts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

if TYPE_CHECKING:
    from fluxes.store.groups import GroupLag

# A ``_created`` series per counter and histogram doubles what is scraped for a
# start time that ``process_start_time_seconds`` already gives. (The library
# leaves this function unannotated, hence the cast.)
cast(Callable[[], None], disable_created_metrics)()

# ----------------------------------------------------------------------------- metrics

#: The states and results the job-list counters know, so a state that went
#: back to zero is reported as 0 rather than keeping its last value.
JOB_STATES = ("NEW", "DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP", "INACTIVE")
JOB_RESULTS = ("COMPLETED", "FAILED", "CANCELED", "TIMEOUT")

JOBS = Gauge("fluxes_jobs", "Jobs by state, from the job-list read model's counters "
             "(set by the job-list worker).", ["state"])
JOBS_BY_RESULT = Gauge("fluxes_job_results", "Inactive jobs by result, from the job-list "
                       "read model's counters (set by the job-list worker).", ["result"])
EVENTS_APPENDED = Counter("fluxes_events_appended", "Job events committed to eventlogs and "
                          "journals, by writer (job-manager, ingest).", ["writer"])
STREAM_LAG = Gauge("fluxes_stream_lag", "Entries a consumer group has not finished: pending "
                   "(delivered, not acknowledged) plus not yet delivered; NaN when Redis "
                   "cannot tell (entries deleted in between).", ["stream", "group"])
STREAM_PENDING = Gauge("fluxes_stream_pending", "Entries delivered to a consumer group and not "
                       "yet acknowledged.", ["stream", "group"])
ALLOC_LATENCY = Histogram(
    "fluxes_alloc_latency_seconds",
    "Scheduler: from an alloc request's arrival to the commit of its SUCCESS response "
    "(includes the time the job waited for resources).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
             30.0, 60.0, 300.0, 900.0, 3600.0, math.inf))
SCHED_PASS = Histogram(
    "fluxes_sched_pass_seconds", "Scheduler: time of one scheduling pass over the pending jobs.",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
             1.0, 2.5, 5.0, math.inf))
RECOVERY = Histogram(
    "fluxes_recovery_seconds",
    "Recoveries by worker: a job manager's restore on taking the lead (checkpoint + journal "
    "replay), a scheduler's from taking the lead to ready, a job list's load of a partition's "
    "active jobs on taking its lease; _count is the number of recoveries.",
    ["worker"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
             math.inf))
EXEC_STARTED = Counter("fluxes_exec_jobs_started", "Exec: job shares started on a served rank "
                       "(real or simulated).")
EXEC_FINISHED = Counter("fluxes_exec_jobs_finished", "Exec: job shares that ended on a served "
                        "rank (finished, killed, or failed to start).")
DEAD_LETTERS = Counter("fluxes_dead_letters", "Malformed messages a worker parked in the "
                       "dead-letter stream, by worker kind.", ["worker"])
LEADER = Gauge("fluxes_leader", "1 while this worker leads (job manager of its partition, "
               "scheduler, job list of at least one partition), 0 while it stands by.",
               ["worker"])

# Bound children for the hot paths: ``labels()`` is a dict lookup under a lock,
# an increment on a bound child is only the latter.
EVENTS_JOB_MANAGER = EVENTS_APPENDED.labels(writer="job-manager")
EVENTS_INGEST = EVENTS_APPENDED.labels(writer="ingest")

# ----------------------------------------------------------------------------- the server

_served_port: int | None = None
_server: WSGIServer | None = None


def check_port(port: int) -> int:
    """``port`` if it is a TCP port number or 0 (any free port); ValueError otherwise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"metrics port must be an integer from 0 to 65535, got {port!r}")
    return port


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Serve ``/metrics`` on ``addr``:``port`` from a daemon thread; return the bound port.

    Port 0 asks the system for any free port; the bound one is returned and
    remembered (:func:`served_port`) so the worker's heartbeat can publish it.
    One server per process: a second call replaces the first.
    """
    global _served_port, _server
    check_port(port)
    stop()
    server, _thread = start_http_server(port, addr=addr)
    _server = server
    _served_port = int(server.server_port)
    return _served_port


def served_port() -> int | None:
    """The port :func:`serve` bound in this process, None when no server runs."""
    return _served_port


def stop() -> None:
    """Close the server :func:`serve` started, if any (a worker's lives as long as it does)."""
    global _served_port, _server
    server, _server, _served_port = _server, None, None
    if server is not None:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------- pure helpers


def set_lags(lags: Iterable[GroupLag]) -> None:
    """Publish ``lags`` as the stream lag and pending gauges."""
    for item in lags:
        lag = item.lag
        STREAM_LAG.labels(stream=item.stream, group=item.group).set(
            math.nan if lag is None else lag)
        STREAM_PENDING.labels(stream=item.stream, group=item.group).set(item.pending)


def job_counts(counters: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Jobs by state and by result from the read model's counters (``state:RUN`` ...).

    Every known state and result is present, zero when the counters lack it.
    """
    states = {s: int(counters.get(f"state:{s}", 0)) for s in JOB_STATES}
    results = {r: int(counters.get(f"result:{r}", 0)) for r in JOB_RESULTS}
    return states, results


def set_job_counts(counters: Mapping[str, int]) -> None:
    """Publish the read model's counters as the jobs-by-state and by-result gauges."""
    states, results = job_counts(counters)
    for state, n in states.items():
        JOBS.labels(state=state).set(n)
    for result, n in results.items():
        JOBS_BY_RESULT.labels(result=result).set(n)


def heartbeat_age(record: Mapping[str, Any], now: float) -> float | None:
    """Seconds since a worker registry record's heartbeat (None if it has none)."""
    beat = record.get("heartbeat")
    if not isinstance(beat, int | float) or isinstance(beat, bool):
        return None
    return max(0.0, now - float(beat))

