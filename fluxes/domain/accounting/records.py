"""``view-job-records``: which ended allocations pass a user's filters, pure
(flux-accounting's command; the records are :class:`~fluxes.domain.accounting.usage.JobCharge`
as the usage fold writes them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Final, NamedTuple

from fluxes.domain.accounting.usage import JobCharge

#: the comparisons a ``view-job-records`` duration filter may use
_COMPARE: Final[dict[str, Callable[[float, float], bool]]] = {
    "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
    ">": lambda a, b: a > b, "=": lambda a, b: a == b}


class DurationTest(NamedTuple):
    """One duration filter of ``view-job-records`` (``-d '< 60'``): operator, seconds."""

    op: str
    seconds: float

    @classmethod
    def parse(cls, text: str) -> DurationTest:
        """``OP SECONDS`` (``<``, ``<=``, ``=``, ``>=``, ``>``; spaces optional);
        ValueError saying why not."""
        body = text.strip()
        op = next((o for o in _COMPARE if body.startswith(o)), None)
        if op is None:
            raise ValueError(f"{text!r:.40}: start with one of <, <=, =, >=, > "
                             "(e.g. '< 60')")
        try:
            seconds = float(body[len(op):])
        except ValueError:
            raise ValueError(f"{text!r:.40}: expected a number of seconds after "
                             f"{op}") from None
        if not math.isfinite(seconds):
            raise ValueError(f"{text!r:.40}: expected a finite number of seconds")
        return cls(op, seconds)

    def holds(self, value: float) -> bool:
        """Whether ``value`` passes."""
        return _COMPARE[self.op](value, self.seconds)


def job_records(charges: Iterable[JobCharge], *, userid: int | None = None,
                bank: str | None = None, after_start: float | None = None,
                before_end: float | None = None, jobid: int | None = None,
                project: str | None = None,
                requested: Sequence[DurationTest] = (),
                actual: Sequence[DurationTest] = (),
                delta: Sequence[DurationTest] = ()) -> list[JobCharge]:
    """The ended allocations that pass every filter given (flux-accounting's
    ``view-job-records``): of ``userid``, charged to ``bank`` (a job submitted before any
    bank existed names none and charges none), of ``project``, started at or after
    ``after_start``, ended at or before ``before_end``, whose requested duration, actual
    duration and duration delta pass every test of ``requested``, ``actual`` and
    ``delta``; by end time, then id."""
    out = []
    for charge in charges:
        if not (all(t.holds(charge.duration) for t in requested)
                and all(t.holds(charge.actual_duration) for t in actual)
                and all(t.holds(charge.duration_delta) for t in delta)):
            continue
        if jobid is not None and charge.jobid != jobid:
            continue
        if userid is not None and charge.userid != userid:
            continue
        if bank is not None and charge.bank != bank:
            continue
        if project is not None and charge.project != project:
            continue
        if after_start is not None and charge.t_alloc < after_start:
            continue
        if before_end is not None and charge.t_free > before_end:
            continue
        out.append(charge)
    return sorted(out, key=lambda c: (c.t_free, c.jobid))
