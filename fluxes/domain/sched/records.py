"""The resource pool's record of one allocation or reservation, and its argument checks.

:class:`JobRecord` is what :class:`~fluxes.domain.sched.pool.ResourcePool` keeps per
job (now or planned): the parts it holds per rank, from when to when, with the
totals the planner sums. The checks are those of the pool's arguments and saved
records. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fluxes.domain.sched.placement import Part
from fluxes.formats.rset import ResourceSet

if TYPE_CHECKING:
    from fluxes.domain.sched.shapes import Shape

__all__ = ["JobRecord", "check_jobid", "check_text", "check_time"]


@dataclass(slots=True)
class JobRecord:
    """One allocation or reservation: what a job holds, from when to when."""

    jobid: int
    start: float
    end: float
    exclusive: bool
    parts: dict[int, Part]
    #: built when first asked for (``ResourcePool._rset_of``): a scheduler
    #: recovering thousands of allocations never needs most of them
    R: ResourceSet | None
    ncores: int = 0
    ngpus: int = 0
    #: the shape of :attr:`parts` as allocated (``ResourcePool.alloc``), so the session's
    #: look-up right after the allocation needs no second key; dropped when the parts
    #: change (a partial release)
    shape: Shape | None = None

    def __post_init__(self) -> None:
        """Count the cores and gpus held (the planner sums them per release)."""
        self.count()

    def count(self) -> None:
        """Recount :attr:`ncores` and :attr:`ngpus` after :attr:`parts` changed."""
        ncores = ngpus = 0
        for cores, gpus, _mem in self.parts.values():  # one walk: every allocation counts
            ncores += len(cores)
            ngpus += len(gpus)
        self.ncores, self.ngpus = ncores, ngpus


def check_jobid(jobid: object, where: str) -> int:
    """*jobid* if it is a non-negative int."""
    if isinstance(jobid, bool) or not isinstance(jobid, int) or jobid < 0:
        raise ValueError(f"{where}: job id must be a non-negative integer, got {jobid!r}")
    return jobid


def check_time(value: object, where: str) -> float:
    """*value* as a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        raise ValueError(f"{where}: expected a finite number of seconds, got {value!r}")
    return float(value)


def check_text(value: object, where: str) -> str:
    """*value* if it is a string."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string")
    return value
