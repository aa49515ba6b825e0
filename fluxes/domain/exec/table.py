"""The exec worker's job table: every job of the served ranks, and the rules that move it.

Pure bookkeeping (times are passed in; processes are the caller's): which
jobs each rank knows, which run (their tasks watched), which finished (kept
until the job manager is done with them), the timers, and what a simulated
start, a kill, a due timer, a restored record or tasks ending change, written
to the iteration's :class:`~fluxes.domain.exec.outbox.Outbox`.  Where
processes must be signalled, the methods return the tasks or jobs and the
worker signals them.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from fluxes.domain.exec import records
from fluxes.domain.exec.jobs import LOST_ERROR, ExecJob, TaskProc, final_status, finish
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.output import eof_entry
from fluxes.domain.exec.timers import (
    ESCALATE,
    FINISH,
    SIGKILL,
    SIM,
    Timers,
    action,
    escalate,
    escalation_at,
    request_kill,
    sim_at,
)
from fluxes.domain.exec.waits import Cores, use_of_texts

#: Most finished jobs looked up per prune.
PRUNE_BATCH = 5000


def _nothing() -> None:
    pass


class JobTable:
    """The jobs of the served ``ranks``; ``on_finish`` is called for each job that ends."""

    def __init__(self, ranks: Iterable[int], on_finish: Callable[[], None] = _nothing) -> None:
        self.jobs: dict[int, dict[int, ExecJob]] = {r: {} for r in ranks}
        self.live: dict[tuple[int, int], ExecJob] = {}  # real jobs whose tasks are watched
        self.done_queue: deque[tuple[float, int, int]] = deque()  # (done time, rank, job)
        self.timers = Timers()
        self.on_finish = on_finish
        #: what the started jobs hold per rank, and the starts waiting for it
        self.cores = Cores()

    def get(self, rank: int, jobid: int) -> ExecJob | None:
        """The job ``jobid`` on ``rank``, if known."""
        return self.jobs[rank].get(jobid)

    def knows(self, rank: int, jobid: int) -> bool:
        """Whether ``rank`` has (or had, recently) job ``jobid``."""
        return jobid in self.jobs[rank]

    def add(self, job: ExecJob) -> ExecJob:
        """Know ``job`` on its rank (a running one's record names what it holds)."""
        self.jobs[job.rank][job.id] = job
        if job.kind != "done":
            use = self.cores.use(job.rank, job.id)
            if use is not None:
                job.cores, job.gpus = use.core_text, use.gpu_text
        return job

    def watch(self, job: ExecJob) -> None:
        """``job``'s tasks run: look at them (until it is done)."""
        self.live[job.key] = job

    def all(self) -> Iterator[ExecJob]:
        """Every known job."""
        for jobs in self.jobs.values():
            yield from jobs.values()

    def done(self, job: ExecJob, now: float, status: int | None = None,
             error: str | None = None) -> ExecJob:
        """Mark ``job`` finished and released (:func:`~fluxes.domain.exec.jobs.finish`)."""
        if finish(job, now, status, error):
            self.on_finish()
            self.cores.release(job.rank, job.id)
            self.live.pop(job.key, None)
            self.done_queue.append((now, job.rank, job.id))
        return job

    @staticmethod
    def eof(box: Outbox, job: ExecJob) -> None:
        """Add the end marker of ``job``'s output on its rank to ``box``."""
        box.lines(job).append(eof_entry(job.rank, (t.rank for t in job.tasks)))

    def fail(self, box: Outbox, job: ExecJob, now: float, error: str,
             status: int | None = None) -> ExecJob:
        """A start that could not run: done at once with ``error``, and its end marker."""
        self.done(job, now, status=status, error=error)
        self.eof(box, job)
        return job

    def simulate(self, rank: int, jobid: int, now: float, mono: float,
                 duration: float) -> ExecJob:
        """A simulated job: started now, its end a timer (none when it runs forever)."""
        job = ExecJob(jobid, rank, "sim", started=True, deadline=now + duration)
        if duration < math.inf:
            self.timers.arm(mono + duration, SIM, job)
        return job

    def restore(self, rank: int, jobid: int, raw: bytes, now: float, mono: float,
                grace: float, adopt: Callable[[ExecJob, records.Offsets], None]) -> ExecJob:
        """Rebuild a job from its record; ``adopt`` finds a real job's processes again.

        Timers carry on from the recorded wall-clock times.  ValueError for an
        unreadable record.
        """
        job, offsets = records.decode(rank, jobid, raw, now)
        if job.kind != "done":  # starts wait behind it again
            self.cores.hold(rank, jobid, use_of_texts(job.cores, job.gpus))
        if job.kind == "done":
            self.done_queue.append((job.done_time, rank, jobid))
        elif job.kind == "sim":
            self.timers.arm(sim_at(job, now, mono), SIM, job)
        else:
            adopt(job, offsets)
            when = escalation_at(job, grace, now, mono)
            if when is not None:
                self.timers.arm(when, ESCALATE, job)
            self.watch(job)
        return self.add(job)

    def restore_all(self, box: Outbox, recs: Mapping[int, Mapping[Any, Any]], now: float,
                    mono: float, grace: float,
                    adopt: Callable[[ExecJob, records.Offsets], None]) -> list[tuple[int, int]]:
        """Rebuild every job from its record (rank -> {job id: record}) and report it
        again (the last report may have been lost).

        An unreadable record makes its job done with the lost-processes error
        (released, never left hanging); their (rank, job) pairs are returned.
        """
        unreadable = []
        for rank, by_id in recs.items():
            for raw_id, raw in by_id.items():
                jobid = int(raw_id)
                try:
                    job = self.restore(rank, jobid, raw, now, mono, grace, adopt)
                except ValueError:
                    unreadable.append((rank, jobid))
                    job = self.add(self.done(ExecJob(jobid, rank, "run"), now,
                                             error=LOST_ERROR))
                box.report(job)
        return unreadable

    def kill(self, box: Outbox, rank: int, jobid: int, sig: int, now: float, mono: float,
             grace: float) -> list[TaskProc]:
        """A kill request: the tasks to send ``sig`` to (docs/exec.md, "Kill").

        A job never started here is answered released (and remembered, so a
        late start does not run it); a finished one is reported again; a
        simulated one ends with status ``sig``; a real one gets the signal,
        and on the first kill SIGKILL is armed ``grace`` seconds later.
        """
        job = self.get(rank, jobid)
        if job is None:
            box.touch(self.add(self.done(ExecJob(jobid, rank, "run"), now)))
            return []
        if job.kind == "done":
            box.report(job)
            return []
        if job.kind == "sim":
            self.done(job, now, status=sig)  # "killed by signal N" has wait status N
            box.touch(job)
            return []
        if request_kill(job, sig, now):
            self.timers.arm(mono + grace, ESCALATE, job)
        box.touch(job, report=False)
        return job.tasks

    def signal(self, rank: int, jobid: int) -> list[TaskProc]:
        """A signal request (``fluxes job kill``): the tasks to send it to.

        Only a real job running here has any; nothing is recorded, so the job
        runs on (or ends) as its tasks decide, and a job not (or no longer)
        running here is left alone.
        """
        job = self.get(rank, jobid)
        if job is None or job.kind != "run":
            return []
        return [task for task in job.tasks if not task.ended]

    def fire(self, box: Outbox, mono: float, wall: float) -> list[ExecJob]:
        """Handle the timers due at ``mono``; the jobs whose tasks must get SIGKILL."""
        kill = []
        for kind, rank, jobid in self.timers.due(mono):
            job = self.get(rank, jobid)
            if job is None:
                continue
            act = action(kind, job)
            if act == FINISH:
                self.done(job, wall, status=0)
                box.touch(job)
            elif act == SIGKILL and escalate(job):
                kill.append(job)
                box.touch(job, report=False)
        return kill

    def settle(self, box: Outbox, job: ExecJob, changed: bool, now: float) -> None:
        """After looking at ``job``'s tasks: finish it when all ended and all output
        is forwarded (one write with its end marker), else record what changed."""
        if job.all_ended():
            self.done(job, now, status=final_status(job.tasks))
            self.eof(box, job)
            box.finished.append(job)
            box.touch(job)
        elif changed:
            box.touch(job, report=False)

    def running(self) -> Counter[int]:
        """Running real jobs per rank."""
        return Counter(rank for rank, _jobid in self.live)

    def done_ids(self, rank: int) -> set[int]:
        """The finished jobs of ``rank``."""
        return {jobid for jobid, job in self.jobs[rank].items() if job.kind == "done"}

    def prune_candidates(self, horizon: float) -> list[ExecJob]:
        """Finished jobs done before ``horizon``, whose records may go (at most a batch)."""
        queue = self.done_queue
        out: list[ExecJob] = []
        while queue and queue[0][0] <= horizon and len(out) < PRUNE_BATCH:
            _t, rank, jobid = queue.popleft()
            job = self.get(rank, jobid)
            if job is not None and job.kind == "done":
                out.append(job)
        return out

    def prune(self, box: Outbox, candidates: Iterable[ExecJob], gone: Iterable[bool],
              now: float) -> None:
        """Forget the candidates the job manager is done with (``gone``); look at the
        others again later."""
        for job, done_with in zip(candidates, gone, strict=True):
            if done_with:
                del self.jobs[job.rank][job.id]
                box.forget(job)
            else:
                self.done_queue.append((now, job.rank, job.id))
