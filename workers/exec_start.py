"""The exec worker's start path: a job's share of tasks started on a rank (or its
simulation, or its failure), with its PMI server, and a redelivered start adopting
the tasks a crash left unrecorded instead of spawning them twice.

:class:`Starting` is a base class of :class:`workers.exec.ExecWorker`, which sets
the attributes declared below (docs/exec.md, "Parts").
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fluxes.domain.exec.intake import Intake
from fluxes.domain.exec.jobs import (
    ExecJob,
    Planner,
    RunPlan,
    StartFacts,
    job_owner,
    read_start,
    run_as,
)
from fluxes.domain.exec.jobsignal import JobSignals, signal_at
from fluxes.domain.exec.layout import RankShare, run_duration, shell_option, wait_status
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.output import pids_entry
from fluxes.domain.exec.pmi import pmi_mode
from fluxes.domain.exec.table import JobTable
from fluxes.domain.nested import runs_child_instance
from fluxes.proc import hops, metrics
from fluxes.proc.adopt import Adopter
from fluxes.proc.child_identity import ChildIdentities
from fluxes.proc.perilog import PerilogFlow
from fluxes.proc.pmi_server import PmiServer, Served
from fluxes.proc.spawner_client import ANSWER_TIMEOUT_S
from fluxes.proc.tasks import Launcher, StartFailed, TaskWatcher, signal_tasks
from fluxes.store.security import ENV_CREDENTIALS
from workers.base import Worker


class Starting(Worker):
    """Starts (see the module's docstring)."""

    if TYPE_CHECKING:
        box: Outbox
        table: JobTable
        intake: Intake
        perilog: PerilogFlow
        pmi: PmiServer
        launcher: Launcher
        adopter: Adopter
        watcher: TaskWatcher
        identities: ChildIdentities
        job_signals: JobSignals
        hostnames: dict[int, str]
        _given_hosts: dict[int, str]
        _pmi_ready: list[int]
        euid: int
        registered: frozenset[int]
        instance_owner: int
        kill_grace: float
        count_started: int
        planner: Planner
        #: starts whose spawn answer is awaited (Launcher.deferred), by (rank, job id):
        #: their ``--signal`` arming, the hop's send time and when they were sent (monotonic)
        awaiting: dict[tuple[int, int], tuple[tuple[float, int] | None, float, float]]
        #: acknowledgements held while a start they hold is awaited
        held_acks: list[tuple[int, bytes, list[Any]]]

    def _start_now(self, rank: int, jobid: int, facts: StartFacts | None,
                   redelivered: bool) -> None:
        """Start the job on ``rank`` (or fail it) and record it in the table and the box."""
        box = self.box
        now = time.time()
        try:
            job = self._start(box, rank, jobid, facts, now, redelivered)
        except StartFailed as exc:
            # the job started and its tasks could not: it fails with their exit code
            job = self.table.fail(box, ExecJob(jobid, rank, "run", started=True), now,
                                  str(exc), wait_status(exc.code))
        except ValueError as exc:
            job = self.table.fail(box, ExecJob(jobid, rank, "run"), now, str(exc))
        except OSError as exc:
            # The state directory or the like: this job cannot run here.
            job = self.table.fail(box, ExecJob(jobid, rank, "run"), now,
                                  f"exec: {exc.strerror or exc}: {exc.filename or ''}")
        if job.key not in self.awaiting:
            self._record_start(job, self.intake.sent)

    def _record_start(self, job: ExecJob, sent: float) -> None:
        """The start's job (running, done or failed) in the table and the outbox."""
        box = self.box
        if (job.kind == "run" and job.started) or \
                self.perilog.prolog_status(job.rank, job.id) is not None:
            self.perilog.started(job)
            if job.kind == "done":  # failed after its prolog ran: the epilog runs still
                self.perilog.finished(box, [job])
        box.touch(self.table.add(job))
        if sent and job.started:
            hops.record(hops.JM_TO_EXEC, time.time() - sent)

    def _complete_starts(self, wait: bool) -> None:
        """Finish the starts whose spawn answers came, oldest first (every one, waiting
        for their answers, if ``wait``); then the acknowledgements held for them go."""
        link = self.watcher.spawner
        while self.awaiting:
            key = next(iter(self.launcher.deferred))  # requests are answered in order
            if not wait and link is not None and link.up and not link.answers and \
                    time.monotonic() - self.awaiting[key][2] < ANSWER_TIMEOUT_S:
                return  # (a spawner silent that long is given up: answer() times out)
            when, sent, _since = self.awaiting.pop(key)
            try:
                job = self._launched(self.launcher.complete(key), when)
            except StartFailed as exc:
                self.pmi.close(key, leave=False)
                job = self.table.fail(self.box, ExecJob(key[1], key[0], "run", started=True),
                                      time.time(), str(exc), wait_status(exc.code))
            self._record_start(job, sent)
        for rank, msg_id, dead in self.held_acks:
            self.box.ack(rank, msg_id, dead)
        self.held_acks = []

    def _ack(self, rank: int, msg_id: bytes, dead: list[Any]) -> None:
        """Acknowledge a request entry handled, unless a start of its awaits its spawn
        answer, or waits for its cores (:mod:`fluxes.domain.exec.waits`): its
        acknowledgement is then written with that start's record."""
        if self.table.cores.entry_handled(rank, msg_id, dead):
            return
        if self.awaiting:
            self.held_acks.append((rank, msg_id, dead))
        else:
            self.box.ack(rank, msg_id, dead)

    def _start(self, box: Outbox, rank: int, jobid: int, data: StartFacts | None,
               now: float, redelivered: bool) -> ExecJob:
        """Start the job's share on ``rank`` (or its simulation); ValueError is its exec error."""
        table = self.table
        spec = read_start(jobid, data)
        if spec is None or data is None:  # already inactive (a stale request): never rerun
            return table.done(ExecJob(jobid, rank, "run"), now)
        duration = run_duration(spec)
        self.count_started += 1
        metrics.EXEC_STARTED.inc()
        if duration is not None:
            return table.simulate(rank, jobid, now, time.monotonic(), duration)
        user = run_as(jobid, data, self.euid, self.registered, self.instance_owner)
        owner = job_owner(jobid, data.owner)
        planned = self.planner.plan(jobid, rank, spec, data.jobspec, data.R)
        host = planned.R.hostname(rank)
        if host and rank not in self._given_hosts:
            self.hostnames[rank] = host
        plan = planned.plan
        if redelivered:
            # This start was delivered before: a crash may have come between
            # spawning the tasks and recording them.  Never spawn twice.
            adopted = self._adopt_unrecorded(rank, jobid, plan.share, plan.forward, owner,
                                             user)
            if adopted is not None:
                return adopted
        prepared = self.launcher.prepare(spec, user)
        if self.identities.enabled and runs_child_instance(spec):
            path = self.identities.create(rank, jobid, owner, user is not None,
                                          plan.first_rank)
            prepared = prepared._replace(env={**prepared.env, ENV_CREDENTIALS: path})
        job = ExecJob(jobid, rank, "run", started=True, forward=plan.forward, owner=owner,
                      as_user=user is not None)
        if plan.share.ntasks == 0:
            self.perilog.started(job)
            table.done(job, now, status=0)
            box.lines(job).append(pids_entry(rank, self.hostnames.get(rank, ""), []))
            table.eof(box, job)
            return job
        served = self._open_pmi(job, plan, spec)
        when = signal_at(spec, planned.expiration)
        if self.awaiting:  # one request at a time is answered out of line
            self._complete_starts(wait=True)
        try:
            self.launcher.launch(job, plan, prepared, served)
        except BaseException:
            self.pmi.close(job.key, leave=False)
            raise
        if job.key in self.launcher.deferred:
            # the spawner's answer (the task's pid) is taken later: _complete_starts
            self.awaiting[job.key] = (when, self.intake.sent, time.monotonic())
            return job
        return self._launched(job, when)

    def _launched(self, job: ExecJob, when: tuple[float, int] | None) -> ExecJob:
        """A job whose tasks were spawned (or could not be): watched, its pids entry out."""
        if not job.started:  # no task could be spawned
            self.pmi.close(job.key, leave=False)
        if when is not None:
            self.job_signals.arm(when[0], when[1], job.rank, job.id)
        self.table.watch(job)
        self.box.lines(job).append(pids_entry(job.rank, self.hostnames.get(job.rank, ""),
                                              job.tasks))
        return job

    def _open_pmi(self, job: ExecJob, plan: RunPlan, spec: Mapping[str, Any]) -> Served | None:
        """The job's PMI server on this rank (shell option ``pmi``, ``simple`` by
        default), None for ``pmi=off`` and for a job that runs a child instance
        (its tasks are the child's workers, not an MPI program)."""
        if pmi_mode(shell_option(spec, "pmi")) == "off" or runs_child_instance(spec):
            return None
        return self.pmi.open(job.key, job.owner, plan.layout, plan.share)

    def _serve_pmi(self, box: Outbox) -> None:
        """Read the PMI sockets that woke the loop and act on what the tasks asked."""
        ready, self._pmi_ready = self._pmi_ready, []
        touched = self.pmi.handle(ready)
        if touched or self.pmi.retry:
            self._pmi_failed(self.pmi.service(touched))

    def _pmi_failed(self, failed: Mapping[tuple[int, int], str]) -> None:
        """Jobs whose PMI failed (MPI_Abort, a task gone before finalizing): the error
        is reported at once (the job manager raises the exception and kills every
        rank) and the tasks here are killed."""
        for (rank, jobid), reason in failed.items():
            job = self.table.get(rank, jobid)
            if job is None or job.kind != "run" or job.error is not None or job.kill_signal:
                # a job being killed (canceled, out of time, failed elsewhere): its
                # tasks leaving PMI unfinished is the kill's doing, not an error
                continue
            job.error = reason
            self.log.info("PMI failure", extra={"job": jobid, "rank": rank, "error": reason})
            signal_tasks(self.table.kill(self.box, rank, jobid, signal.SIGKILL, time.time(),
                                         time.monotonic(), self.kill_grace), signal.SIGKILL)
            self.box.touch(job)

    def _adopt_unrecorded(self, rank: int, jobid: int, share: RankShare, forward: str,
                          owner: int, user: int | None) -> ExecJob | None:
        """The tasks of a redelivered start found running or ended here; None if none."""
        job = self.adopter.unrecorded(rank, jobid, share, forward, owner, user)
        if job is not None:
            self.table.watch(job)
            self._reap_strays()  # our own wrappers that ended before this adoption
        return job

    def _reap_strays(self) -> None:
        self.watcher.reap_strays(t.pid for job in self.table.live.values() for t in job.tasks)
