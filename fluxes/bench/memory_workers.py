"""``fluxes bench memory --workers``: Redis and every worker's bytes per pending job.

The house issue's figure for a million pending jobs in 4 GiB: on a private
16 x 32 instance one simulated job holds every node (an hour long), then
``fluxes submit --cc=1-N true`` (the submitter's environment in every
jobspec; requests of 10,000) queues N jobs behind it, which the job manager *and* the scheduler
carry (each has sent or received its ``alloc`` request). Once the scheduler
reports them all pending and the read model has folded them, each figure is
its growth over the submission divided by N: Redis' ``used_memory``, and
the resident set (``VmRSS``) of every worker process, per kind (the 16 exec
workers summed). ``total`` is their sum: the bytes a pending job costs the
instance.

A process' resident set keeps what its allocator once took (CPython seldom
gives arenas back), unless the process gives it back: the ingest trims the C
heap after a burst (``fluxes.proc.gcpolicy.release_free_memory``), so its
figure is what it keeps per job, and ``worker_peak_rss_mb`` reports every
worker's high-water mark (``VmHWM``) over the run: what the host has to
provide during a burst, bounded by a block of requests, not by the backlog.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from fluxes.bench.common import private_instance
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.instance import Instance

from .memory import _cli, _wait_folded, _wait_trimmed, freed_by_kind

#: Jobs a submit request carries (``[ingest] max-jobs-per-request`` is 10,000 by default).
REQUEST_JOBS = 10_000
#: How long the bench waits for the housekeeping to trim the message streams.
TRIM_WAIT_S = 60.0


def run(jobs: int = 100_000, nodes: int = 16, cores_per_node: int = 32,
        timeout: float = 1800.0) -> dict[str, Any]:
    """Start an instance, queue ``jobs`` pending jobs behind one holding every node, and
    return the bytes per pending job of Redis and of each worker kind."""
    if jobs < 1:
        raise ValueError("--jobs must be >= 1")
    with private_instance(nodes, cores_per_node) as (launcher, uri):
        return _measure(launcher, Instance.connect(uri), uri, jobs, nodes, cores_per_node,
                        time.monotonic() + timeout)


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """The resident set of process ``pid`` (``VmHWM``: its peak; 0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def worker_rss(launcher: Launcher, field: str = "VmRSS") -> dict[str, int]:
    """Resident bytes per worker kind (``exec-3`` counts as ``exec``; ``VmHWM``: peaks)."""
    out: dict[str, int] = {}
    for spec in launcher.workers:
        if spec.proc is None:
            continue
        kind = "exec" if spec.name.startswith("exec-") else spec.name.removesuffix("-0")
        out[kind] = out.get(kind, 0) + rss_bytes(spec.proc.pid, field)
    return out


def _blocker(nodes: int) -> dict[str, Any]:
    """A simulated hour-long job holding every node (exclusively)."""
    return Jobspec.from_command(["true"], cwd="/tmp", nnodes=nodes, ntasks=nodes,
                                exclusive=True, attributes={
                                    "system": {"exec": {"test": {"run_duration": "1h"}}}
                                }).to_dict()


def _scheduler_pending(inst: Instance) -> int:
    """Pending jobs the leading scheduler reports (its published status)."""
    status = orjson.loads(inst.redis.get(inst.keys.sched_status) or b"{}")
    return int(status.get("pending") or 0)


def _wait_scheduler(inst: Instance, want: int, deadline: float) -> int:
    """Until the scheduler reports ``want`` pending jobs; the last count seen."""
    seen = 0
    while time.monotonic() < deadline:
        seen = _scheduler_pending(inst)
        if seen >= want:
            break
        time.sleep(0.5)
    return seen


def _measure(launcher: Launcher, inst: Instance, uri: str, jobs: int, nodes: int,
             cores: int, deadline: float) -> dict[str, Any]:
    client = inst.redis
    [blocker] = Client(inst).submit([{"jobspec": _blocker(nodes)}],
                                    timeout=deadline - time.monotonic())
    if not isinstance(blocker, int):
        raise RuntimeError(f"the job holding every node was refused: {blocker}")
    # warm up: one job queued behind it through every worker, so that streams, groups,
    # the read model and each worker's caches exist before the first measurement
    _cli(uri, "submit", "true", timeout=120)
    _wait_scheduler(inst, 1, deadline)
    _wait_folded(inst, deadline)
    time.sleep(2.5)  # a heartbeat and a housekeeping round of every worker
    redis_before = int(client.info("memory")["used_memory"])
    rss_before = worker_rss(launcher)
    started = time.monotonic()
    for first in range(0, jobs, REQUEST_JOBS):  # within the ingest's per-request limit
        count = min(REQUEST_JOBS, jobs - first)
        _cli(uri, "submit", f"--cc=1-{count}", "true", timeout=deadline - time.monotonic())
    submitted = time.monotonic() - started
    pending = _wait_scheduler(inst, jobs + 1, deadline) - 1
    _wait_folded(inst, deadline)
    _wait_trimmed(inst, min(deadline, time.monotonic() + TRIM_WAIT_S))
    time.sleep(2.5)
    redis_after = int(client.info("memory")["used_memory"])
    rss_after = worker_rss(launcher)
    per_job = {"redis": round((redis_after - redis_before) / jobs, 1)}
    for kind in sorted(rss_after):
        per_job[kind] = round((rss_after[kind] - rss_before.get(kind, 0)) / jobs, 1)
    per_job["total"] = round(sum(per_job.values()), 1)
    peak = worker_rss(launcher, "VmHWM")
    return {"jobs": jobs, "nodes": nodes, "cores_per_node": cores,
            "pending_in_scheduler": pending, "submit_s": round(submitted, 2),
            "bytes_per_pending_job": per_job,
            "worker_rss_after": rss_after, "used_memory_after": redis_after,
            "worker_peak_rss_mb": {kind: round(most / 1e6, 1) for kind, most
                                   in sorted(peak.items())},
            # Redis' share by key kind (the last step: it deletes them)
            "redis_bytes_per_job_freed_by_kind": freed_by_kind(client, jobs)}
