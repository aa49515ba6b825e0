"""How fluxes processes run Python's cycle collector.

A worker holds a large, long-lived state (the job manager's active jobs,
the scheduler's pending queue, the job list's cache: with a deep backlog,
a hundred thousand objects each), and with Python's default thresholds
(700, 10, 10) the collector walks that state again and again while jobs
come and go: CPU per job grew with the backlog (``fluxes bench throughput
--nodes 16 --cores-per-node 32``: 1,733 jobs/s at 10,000 jobs but 1,075 at
100,000; the same with collection disabled: 1,512). Almost all of fluxes'
garbage is acyclic and freed at once by reference counting, so collections
are made rare, and what a worker loaded at start-up is frozen out of the
collector's sight (:func:`freeze`). With both, 100,000 jobs ran at 1,727
jobs/s.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

#: Allocations before a young collection, and collections between older ones.
THRESHOLDS = (50_000, 50, 1000)


def tune() -> None:
    """Make cycle collections rare (call once, early in a process)."""
    gc.set_threshold(*THRESHOLDS)


def freeze() -> None:
    """Move every object that exists now out of the collector's sight (state loaded at
    start-up, which lives as long as the process); they are still freed when dropped."""
    gc.collect()
    gc.freeze()


@functools.cache
def _libc() -> Any:
    """glibc, or None elsewhere (musl, macOS: no ``malloc_trim``)."""
    import ctypes  # here: every fluxes command calls tune(), few trim (start-up time)

    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def release_free_memory() -> bool:
    """Give the C heap's free pages back to the OS (glibc ``malloc_trim``); True if done.

    CPython returns freed memory to the C heap, which keeps it: after a burst
    (the ingest's block of 10,000 jobs, ~8 KB each) the process would keep its
    high-water mark for good, ~5 KB per job ever submitted in the bench of issue
    26. A trim costs a walk of the free lists (milliseconds for a few hundred
    MB), so callers do it after a burst, not on every step.
    """
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
