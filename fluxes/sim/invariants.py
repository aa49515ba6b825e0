"""Invariants every simulated run is checked against (issue 17, "Checks and speed").

:func:`check_schedule` reads the finished schedule (what the exec side ran,
on which cores, from when to when):

* no core is used by two jobs at once (one bit mask of busy cores per rank,
  swept in time order, releases before starts at equal times; a job whose
  start and end share a timestamp, as ``fluxes run true`` often does in a
  real history, holds its cores for no time: it is checked against the cores
  busy then, between the releases and the starts of that instant, and holds
  nothing after it);
* every allocated core exists, and the cores in use never exceed the machine;
* no job starts before it was submitted;
* every job ends: each accepted job became inactive, each started job
  released its cores, and neither core holds anything when the run is over.

:class:`ReservationCheck` watches the scheduling passes as they run. The
promise behind ``easy`` (the first blocked job's reservation) and
``conservative`` (every reservation) is that work started later never delays
a reservation (docs/scheduling-policies.md, "What the policies promise"). So
a reserved job must start no later than its reservation, and a reservation
never moves later from pass to pass; except where the policy lets
higher-priority work go first: a job ahead of it in the queue order arrived
or changed priority, or started, or got an earlier reservation than before
(the documented "early ends under conservative" limit, which also covers
several queues sharing nodes). Such moves are counted as *yielded*, the
others are violations. A reservation is compared with the job's previous one
even when quick passes in between did not look at it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from fluxes.sim.workload import Machine

__all__ = ["EPSILON", "Checked", "ReservationCheck", "check_schedule"]

#: Times closer than this are equal (float sums of seconds).
EPSILON: Final = 1e-6
#: Violations listed at most (the count is always exact).
MAX_LISTED: Final = 20

Key = tuple[int, float, int]


@dataclass(slots=True)
class Ran:
    """What the checks need of one job's run."""

    jobid: int
    submit: float
    start: float | None
    end: float | None
    masks: Mapping[int, int] | None
    ncores: int
    ended: bool


@dataclass
class Checked:
    """The verdict: violations by invariant (first few listed) and what was checked."""

    violations: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    #: reservations kept (the job started by it), yielded (moved later or passed because
    #: higher-priority work went first) and broken (the rest: violations)
    reservations: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing is violated."""
        return not self.violations

    def fail(self, invariant: str, example: str) -> None:
        """Record one violation."""
        self.violations[invariant] = self.violations.get(invariant, 0) + 1
        if len(self.examples) < MAX_LISTED:
            self.examples.append(f"{invariant}: {example}")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"ok": self.ok, "violations": dict(self.violations),
                "examples": list(self.examples), "reservations": dict(self.reservations)}


def check_schedule(runs: Iterable[Ran], machine: Machine, checked: Checked | None = None,
                   leftovers: Iterable[int] = ()) -> Checked:
    """Check a finished schedule (see the module docstring); ``leftovers`` are jobs the
    job manager or the scheduler still holds at the end."""
    out = checked if checked is not None else Checked()
    capacity = {t.rank: _mask(t.cores.ranges()) for t in machine.inventory}
    total = machine.cores
    # time, 0 end / 1 start and end at once / 2 start, jobid, index
    points: list[tuple[float, int, int, int]] = []
    runs = list(runs)
    for index, run in enumerate(runs):
        if not run.ended:
            out.fail("every job ends", f"job {run.jobid} never became inactive")
        if run.start is None:
            continue
        if run.start < run.submit - EPSILON:
            out.fail("no start before submit",
                     f"job {run.jobid} started at {run.start:.3f}, submitted {run.submit:.3f}")
        if run.end is None:
            out.fail("every job ends", f"job {run.jobid} started and never released its cores")
            continue
        if run.masks is None:
            out.fail("every job ends", f"job {run.jobid} ran without an allocation")
            continue
        for rank, mask in run.masks.items():
            have = capacity.get(rank)
            if have is None or mask & ~have:
                out.fail("capacity never exceeded",
                         f"job {run.jobid} holds cores rank {rank} does not have")
        if run.end <= run.start:
            points.append((run.start, _INSTANT, run.jobid, index))
        else:
            points.append((run.start, _START, run.jobid, index))
            points.append((run.end, _END, run.jobid, index))
    for jobid in leftovers:
        out.fail("every job ends", f"job {jobid} is still held when the run is over")
    points.sort()
    _sweep(points, runs, total, out)
    return out


def _sweep(points: list[tuple[float, int, int, int]], runs: list[Ran], total: int,
           out: Checked) -> None:
    """Replay the sorted starts and ends: no core held twice, never more cores than
    ``total``, every core free at the end."""
    busy: dict[int, int] = {}
    used = 0
    for when, kind, jobid, index in points:
        run = runs[index]
        masks = run.masks or {}
        if kind == _END:
            for rank, mask in masks.items():
                busy[rank] = busy.get(rank, 0) & ~mask
            used -= run.ncores
            continue
        for rank, mask in masks.items():
            held = busy.get(rank, 0)
            if held & mask:
                out.fail("no core used by two jobs at once",
                         f"job {jobid} starts at {when:.3f} on rank {rank} cores already busy")
            if kind == _START:
                busy[rank] = held | mask
        if used + run.ncores > total:
            out.fail("capacity never exceeded",
                     f"{used + run.ncores} cores in use at {when:.3f}, the machine has {total}")
        if kind == _START:
            used += run.ncores
    if any(busy.values()):
        out.fail("every job ends", "cores still busy when the run is over")


#: Sweep point kinds, in their order at one instant.
_END, _INSTANT, _START = 0, 1, 2


def _mask(ranges: Iterable[tuple[int, int]]) -> int:
    mask = 0
    for lo, hi in ranges:
        mask |= ((1 << (hi - lo + 1)) - 1) << lo
    return mask


class ReservationCheck:
    """Checks pass by pass that reservations are kept (see the module docstring).

    ``policy_of`` maps a job to its queue's policy name; only ``easy`` and
    ``conservative`` jobs are judged (``fcfs`` makes no reservation).
    """

    def __init__(self, checked: Checked) -> None:
        self.checked = checked
        self.keys: dict[int, Key] = {}
        self.policy: dict[int, str] = {}
        #: job -> (pass of its latest reservation, its start)
        self.last: dict[int, tuple[int, float]] = {}
        #: pass -> the smallest order key among the jobs that went first in it
        self.moved: dict[int, Key] = {}
        self._changed: Key | None = None
        self.passes = 0
        for name in ("kept", "yielded", "broken"):
            checked.reservations.setdefault(name, 0)

    def queued(self, jobid: int, key: Key, policy: str) -> None:
        """A job was queued or re-prioritized: it may go ahead of reserved jobs."""
        self.keys[jobid] = key
        self.policy[jobid] = policy
        if self._changed is None or key < self._changed:
            self._changed = key

    def observe(self, now: float, reserved: Mapping[int, float], started: Iterable[int]
                ) -> None:
        """One pass's reservations and starts."""
        self.passes += 1
        p = self.passes
        keys = self.keys
        first = self._changed
        self._changed = None
        started = list(started)
        for jobid in started:
            key = keys.get(jobid)
            if key is not None and (first is None or key < first):
                first = key
        last = self.last
        for jobid, when in reserved.items():
            prev = last.get(jobid)
            key = keys.get(jobid)
            if key is not None and (prev is None or when < prev[1] - EPSILON) \
                    and (first is None or key < first):
                first = key
        if first is not None:
            self.moved[p] = first
        for jobid, when in reserved.items():
            prev = last.get(jobid)
            if prev is not None and when > prev[1] + EPSILON:
                self._judge(jobid, prev, p, f"reservation moved from {prev[1]:.3f} "
                                            f"to {when:.3f}")
            last[jobid] = (p, when)
        for jobid in started:
            prev = last.get(jobid)
            if prev is not None and jobid in keys:
                if now > prev[1] + EPSILON:
                    self._judge(jobid, prev, p,
                                f"started at {now:.3f}, reserved from {prev[1]:.3f}")
                else:
                    self.checked.reservations["kept"] += 1
            self.forget(jobid)

    def forget(self, jobid: int) -> None:
        """The job left the queue without starting (canceled, denied)."""
        self.last.pop(jobid, None)
        self.keys.pop(jobid, None)
        self.policy.pop(jobid, None)

    def _judge(self, jobid: int, prev: tuple[int, float], p: int, what: str) -> None:
        key = self.keys.get(jobid)
        moved = self.moved
        if key is not None:
            for i in range(prev[0] + 1, p + 1):
                ahead = moved.get(i)
                if ahead is not None and ahead < key:
                    self.checked.reservations["yielded"] += 1
                    return
        policy = self.policy.get(jobid, "")
        self.checked.reservations["broken"] += 1
        name = ("easy: the first blocked job never starts later than its reservation"
                if policy == "easy" else "conservative: no reservation is delayed")
        self.checked.fail(name, f"job {jobid} ({policy}): {what}")
