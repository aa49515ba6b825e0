"""Forecasts: when each pending job is expected to start (issue 28).

The live state (:class:`~fluxes.forecast.model.Snapshot`: running jobs and
their ends, pending jobs and their priorities, queues, running limits,
drained ranks) is run forward on a virtual clock through the simulator's
driver (:mod:`fluxes.sim.drive`, the scheduler's and job manager's own
cores) until every pending job has started; each job's start is its
forecast. :func:`~fluxes.forecast.engine.forecast` is the one entry point:
a snapshot in, per-job forecasts out, pure (no I/O: the store's
:mod:`fluxes.store.forecast` reads the snapshot, read-only). See
docs/forecast.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxes.forecast.model import (
    Forecast,
    ForecastRun,
    Running,
    RuntimeSource,
    Snapshot,
    Waiting,
)

__all__ = ["Forecast", "ForecastRun", "Running", "Snapshot", "Waiting", "forecast"]


def forecast(snapshot: Snapshot, runtime: RuntimeSource = "limit",
             wanted: Iterable[int] | None = None) -> ForecastRun:
    """:func:`fluxes.forecast.engine.forecast` (imported on first use: the store reads
    snapshots through :mod:`fluxes.forecast.model` without loading the simulator)."""
    from fluxes.forecast.engine import forecast as run

    return run(snapshot, runtime, wanted)
