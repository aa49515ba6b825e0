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

import gc

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
