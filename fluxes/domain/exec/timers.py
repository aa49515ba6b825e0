"""The exec worker's clock: simulated ends, kill escalation, and how long the loop may wait.

Pure (times are passed in):

* :class:`Timers` is the heap of what is due when (monotonic seconds): the
  end of a simulated job (:data:`SIM`), SIGKILL after a kill's grace period
  (:data:`ESCALATE`);
* :func:`request_kill`, :func:`escalate` and :func:`escalation_at` are the
  kill rules (docs/exec.md, "Kill"): the signal goes out at once, SIGKILL
  follows once, ``grace`` seconds after the *first* kill, unless the job is
  already escalated; a restarted worker keeps the original deadline;
* :func:`wait_ms` is how long the loop may sleep before something is due.
"""

from __future__ import annotations

import heapq

from fluxes.domain.exec.jobs import ExecJob

#: Timer kinds.
SIM = "sim"
ESCALATE = "escalate"

#: What a due timer asks for.
FINISH = "finish"  # a simulated job reached its end: status 0
SIGKILL = "sigkill"  # the grace is over: SIGKILL every task still running


class Timers:
    """Due times of simulated ends and kill escalations (monotonic clock)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, int, int]] = []
        self._seq = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, when: float, kind: str, job: ExecJob) -> None:
        """Have ``kind`` fire for ``job`` at ``when`` (ties fire in arming order)."""
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, kind, job.rank, job.id))

    def next_due(self) -> float | None:
        """When the earliest timer fires, None when none is armed."""
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[str, int, int]]:
        """Remove and return the timers due at ``now``: (kind, rank, job id), in order."""
        heap = self._heap
        out = []
        while heap and heap[0][0] <= now:
            _when, _seq, kind, rank, jobid = heapq.heappop(heap)
            out.append((kind, rank, jobid))
        return out


def action(kind: str, job: ExecJob) -> str | None:
    """What a due timer of ``kind`` does to ``job`` as it is now (None: nothing).

    A timer outlives changes of its job: a simulated job killed before its
    end, a job whose tasks all ended before the grace was over, a second
    escalation timer of a restored job: those fire into nothing.
    """
    if kind == SIM and job.kind == "sim":
        return FINISH
    if kind == ESCALATE and job.kind == "run" and not job.escalated:
        return SIGKILL
    return None


def request_kill(job: ExecJob, sig: int, now: float) -> bool:
    """Record a kill of a running job with ``sig`` at wall time ``now``.

    True when the SIGKILL escalation must be armed: on the first kill only
    (a later kill sends its signal but keeps the first deadline), and never
    for a job already escalated.
    """
    first = not job.kill_signal
    job.kill_signal = sig
    job.kill_time = now
    return first and not job.escalated


def escalate(job: ExecJob) -> bool:
    """The grace is over: True (and the job marked escalated) if SIGKILL must be sent."""
    if action(ESCALATE, job) is None:
        return False
    job.escalated = True
    return True


def escalation_at(job: ExecJob, grace: float, wall: float, mono: float) -> float | None:
    """When (monotonic) a restored job's pending escalation fires, None if there is none.

    The deadline is the recorded kill time plus the grace, so a worker that
    restarts does not give the tasks a new grace period; a deadline already
    passed fires at once.
    """
    if not job.kill_signal or job.escalated:
        return None
    return mono + (job.kill_time + grace - wall)


def sim_at(job: ExecJob, wall: float, mono: float) -> float:
    """When (monotonic) a restored simulated job ends: its recorded wall-clock deadline."""
    return mono + (job.deadline - wall)


def wait_ms(now: float, *, busy: bool, next_registry: float, next_prune: float,
            timers: Timers, running: bool, next_output: float,
            flush_after: float | None) -> float | None:
    """How long the loop may wait for news (ms, maybe fractional); None: not at all.

    ``busy`` means requests may be waiting (pending ones after a restart, or
    a full read that left more); ``running`` that tasks run whose output
    files must be read now and then (they do not announce new data).
    """
    if busy:
        return None
    ms = (min(next_registry, next_prune) - now) * 1000
    due = timers.next_due()
    if due is not None:
        ms = min(ms, (due - now) * 1000)
    if running:
        ms = min(ms, (next_output - now) * 1000)
    if flush_after is not None:
        ms = min(ms, (flush_after - now) * 1000)
    return max(ms, 0.0)
