"""What one loop iteration of the exec worker writes, and when it writes it.

The worker gathers its effects in an :class:`Outbox` and writes them in one
round trip (docs/exec.md, "Contract with the job manager"): output entries,
job records, acknowledgements of the requests whose effects those records
hold, the dead letters of the requests refused (acknowledged in the same
write), the registry heartbeat, and the reports.  Pure: the Redis side
(:mod:`fluxes.store.exec_streams`) turns an outbox into commands.

:class:`FlushPolicy` decides when: at once when the job manager waits on it
(a job finished, released or failed) or the worker stops; otherwise the
write lingers :data:`FLUSH_LINGER_S` for company, so a short job's
"started" and "finished" travel in one write and one job-manager step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fluxes.domain.exec.jobs import ExecJob

#: How long a write holding nothing urgent may wait for company.
FLUSH_LINGER_S = 0.005

#: FlushPolicy decisions.
EMPTY = "empty"  # nothing to write (the finished jobs' cleanup may still run)
FLUSH = "flush"  # write now
LINGER = "linger"  # wait a moment for more


@dataclass
class Outbox:
    """Everything one iteration writes, in one round trip.

    ``records`` maps (rank, job) to the job whose record to write, or None to
    delete it; ``reports`` to the job to report; ``output`` (owner uid, job)
    to the job's output entries (its stream's key carries the owner);
    ``dead_letters`` are the records of refused requests, whose entries are
    among ``acks``; ``finished`` are the jobs whose task files may go once the
    write is done.
    """

    records: dict[tuple[int, int], ExecJob | None] = field(default_factory=dict)
    reports: dict[tuple[int, int], ExecJob] = field(default_factory=dict)
    acks: dict[int, list[bytes]] = field(default_factory=dict)
    output: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)
    registry: dict[str, bytes] = field(default_factory=dict)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    finished: list[ExecJob] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.records or self.reports or self.acks or self.output or self.registry
                    or self.dead_letters)

    def urgent(self) -> bool:
        """True when the job manager waits on this write: a job finished, released or failed."""
        return bool(self.finished) or any(job.kind == "done" or job.error
                                          for job in self.reports.values())

    def touch(self, job: ExecJob, report: bool = True) -> None:
        """Write ``job``'s record, and report it unless ``report`` is False."""
        key = (job.rank, job.id)
        self.records[key] = job
        if report:
            self.reports[key] = job

    def report(self, job: ExecJob) -> None:
        """Report ``job`` as it stands (a repeated start, a restored record)."""
        self.reports[(job.rank, job.id)] = job

    def forget(self, job: ExecJob) -> None:
        """Delete ``job``'s record (the job manager is done with it)."""
        self.records[(job.rank, job.id)] = None

    def ack(self, rank: int, msg_id: bytes, dead: Iterable[dict[str, Any]] = ()) -> None:
        """Acknowledge request entry ``msg_id`` of ``rank`` with this write, and write the
        ``dead`` letters of its refused requests in the same one."""
        self.acks.setdefault(rank, []).append(msg_id)
        self.dead_letters.extend(dead)

    def lines(self, job: ExecJob) -> list[dict[str, Any]]:
        """The output entries of ``job`` in this write (appended to in place)."""
        key = (job.owner, job.id)
        entries = self.output.get(key)
        if entries is None:
            entries = self.output[key] = []
        return entries

    def record_changes(self) -> tuple[dict[int, dict[str, ExecJob]], dict[int, list[str]]]:
        """Records to set and to delete, per rank (field = job id in decimal)."""
        sets: dict[int, dict[str, ExecJob]] = {}
        dels: dict[int, list[str]] = {}
        for (rank, jobid), job in self.records.items():
            if job is None:
                dels.setdefault(rank, []).append(str(jobid))
            else:
                sets.setdefault(rank, {})[str(jobid)] = job
        return sets, dels

    def reports_by_partition(self, partition_of: Callable[[int], int]
                             ) -> dict[int, list[ExecJob]]:
        """The jobs to report, grouped by the partition stream each report goes to."""
        out: dict[int, list[ExecJob]] = {}
        for job in self.reports.values():
            out.setdefault(partition_of(job.id), []).append(job)
        return out


class FlushPolicy:
    """When the outbox is written: at once if urgent, else after a short linger."""

    __slots__ = ("after", "linger")

    def __init__(self, linger: float = FLUSH_LINGER_S) -> None:
        self.linger = linger
        self.after: float | None = None  # when a lingering write is due

    def decide(self, box: Outbox, now: float, stopping: bool) -> str:
        """:data:`EMPTY`, :data:`FLUSH` or :data:`LINGER` for ``box`` at ``now``."""
        if not box:
            self.after = None
            return EMPTY
        if box.urgent() or stopping:
            return FLUSH
        if self.after is None:
            self.after = now + self.linger
            return LINGER
        return FLUSH if now >= self.after else LINGER

    def flushed(self) -> None:
        """The outbox was written: no write is due any more."""
        self.after = None
