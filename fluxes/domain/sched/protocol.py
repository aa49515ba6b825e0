"""The pool interface the scheduler's policies and worker call, whatever the pool.

Two pools implement it: :class:`~fluxes.domain.sched.pool.ResourcePool`
(nodes, sockets, cores, gpus, memory) and
:class:`~fluxes.domain.graph.pool.GraphPool` (any containment graph). The
scheduler worker picks one when it starts leading (a graph when the
instance's resources come with one, :mod:`fluxes.domain.graph.table`);
:class:`~fluxes.domain.sched.policy.Scheduler` and
:class:`~fluxes.domain.sched.planner.PassPlanner` call only what is here.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.shapes import Shape
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

__all__ = ["SchedulerPool"]


class SchedulerPool(Protocol):
    """What the scheduler's policies and worker call on a pool; both pools have it.

    Exceptions are the same for both: ``InfeasibleRequest`` (never),
    ``InsufficientResources`` (not now), ValueError (bad arguments).
    """

    @property
    def inventory(self) -> Inventory:
        """The execution targets."""

    @property
    def down(self) -> IDSet:
        """The drained ranks."""

    def check(self, request: Request) -> None:
        """InfeasibleRequest if *request* could never run."""

    def alloc(self, request: Request, jobid: int, policy: str = "first-fit", *,
              start: float | None = None, duration: float | None = None,
              now: float | None = None) -> ResourceSet:
        """Allocate now, or reserve from *start*."""

    def reserve(self, request: Request, jobid: int, policy: str, start: float) -> None:
        """Reserve from *start*: ``alloc(..., start=start)`` for a caller that does not
        want the R (a pass's planner)."""

    def free(self, what: int | ResourceSet) -> None:
        """Release a job."""

    def adopt(self, jobid: int, R: ResourceSet | Mapping[str, Any] | str,  # noqa: N803
              *, memory: Mapping[int, int] | None = None, exclusive: bool = False,
              now: float | None = None) -> None:
        """Take back an allocation made earlier (R as stored)."""

    def set_expiration(self, jobid: int, expiration: float | None) -> bool:
        """Move the end of a held allocation (False: the job holds none)."""

    def earliest_start(self, request: Request, now: float | None = None,
                       duration: float | None = None, jobid: int | None = None
                       ) -> float | None:
        """When *request* could start (None: never; inf: not known)."""

    def clear_reservations(self) -> None:
        """Drop every reservation."""

    def has_free(self) -> bool:
        """Whether anything can start now."""

    def free_totals(self) -> tuple[int, int]:
        """Free cores and gpus of the up ranks now."""

    def mark_down(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Drain ranks."""

    def mark_up(self, ranks: IDSet | str | Iterable[int]) -> None:
        """Undrain ranks."""

    def allocated(self) -> ResourceSet:
        """What allocations hold."""

    def available(self, include_down: bool = False) -> ResourceSet:
        """What is free on up ranks."""

    def jobids(self) -> list[int]:
        """Jobs holding allocations."""

    def allocation_of(self, jobid: int) -> ResourceSet:
        """The R *jobid* holds (ValueError: none)."""

    def holders(self, R: ResourceSet) -> set[int]:  # noqa: N803
        """The jobs whose allocation holds any core or gpu of *R*."""

    def counts(self) -> dict[str, int]:
        """Totals for monitoring."""

    def shape_of(self, jobid: int) -> Shape | None:
        """The cached encodings of *jobid*'s allocation shape; None: encode its R itself."""
