"""``fluxes bench memory --cc N``: what one big request costs the ingest (issue 26).

One user's ``fluxes submit --cc=1-N --urgency=hold true`` (the submitter's whole
environment in every jobspec) on a private instance started for the run; once
every job is pending, the ingest's peak resident memory (``VmHWM`` of its
process, read from ``/proc``) against its peak before the submission, the
submitting command's own peak, and how many jobs were created. Before array
requests one ``--cc=1-200000`` grew the ingest to 4.1 GB; the bound is what
one block of at most ``BLOCK_JOBS`` jobs holds (docs/operations.md).
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

from fluxes.bench.common import private_instance
from fluxes.bench.memory import _cli, _wait_pending
from fluxes.store.instance import Instance


def peak_rss(pid: int) -> int:
    """The peak resident set of process ``pid`` in bytes (``VmHWM``; 0 when unknown)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run(jobs: int = 200_000, nodes: int = 16, cores_per_node: int = 32,
        timeout: float = 1800.0) -> dict[str, Any]:
    """Start an instance, submit ``--cc=1-jobs`` held jobs with the CLI, return the figures."""
    if jobs < 1:
        raise ValueError("--cc must be >= 1")
    with private_instance(nodes, cores_per_node) as (launcher, uri):
        proc = launcher.worker("ingest").proc
        assert proc is not None
        return _measure(Instance.connect(uri), uri, proc.pid, jobs, timeout)


def _measure(inst: Instance, uri: str, ingest_pid: int, jobs: int,
             timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    journals = {inst.keys.journal(p): "0-0" for p in range(inst.keys.partitions)}
    # warm up: one held job through every worker (the ingest's steady size)
    _cli(uri, "submit", "--urgency=hold", "true", timeout=120)
    _wait_pending(inst, journals, 1, deadline)
    before = peak_rss(ingest_pid)
    started = time.monotonic()
    out = _cli(uri, "submit", f"--cc=1-{jobs}", "--urgency=hold", "true", timeout=timeout)
    submitted = time.monotonic() - started
    ids = out.stdout.split()
    seen = _wait_pending(inst, journals, jobs, deadline)
    after = peak_rss(ingest_pid)
    env_bytes = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in os.environ.items())
    return {
        "jobs": jobs, "ids_printed": len(ids), "distinct_ids": len(set(ids)),
        "pending": seen, "environment_bytes": env_bytes,
        "submit_s": round(submitted, 2),
        "ingest_peak_rss_before_mb": round(before / 1e6, 1),
        "ingest_peak_rss_mb": round(after / 1e6, 1),
        # the submitting command's peak (the largest child this process waited for)
        "cli_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                                 / 1e3, 1),
    }
