"""The exec worker: starts and watches jobs' tasks on the execution ranks it serves.

One process serves one or several ranks.  Each loop iteration:

1. waits (``poll()``) for a new request, a task's exit, a timer or the next
   look at the output files, then reads start/kill requests from
   ``{ns}:exec:rank:<r>`` (group ``exec``; pending entries first after a
   restart) and fetches the job hashes new starts need;
2. handles them: simulated jobs (``attributes.system.exec.test.run_duration``)
   only get a timer; real jobs get one process per task on this rank;
3. fires due timers (simulated ends, SIGKILL escalation), reaps tasks and
   forwards their output, line by line, to ``{ns}:output:<owner>:<id>``;
4. writes everything in one MULTI: output lines, the jobs' records, the
   acknowledgements of the requests whose effect those records hold (and the
   dead letters of the requests refused), the registry heartbeat and the
   cumulative ``exec`` reports.

Any request whose handling raises (not only a malformed one) is dead-lettered
with its reason and acknowledged in that one write, and the loop goes on; a
start that fails so also fails its job, so the job manager never waits on it.
A worker running as root runs each job's tasks as the job's owner
(docs/security.md, "Jobs run as their users").

Why one module: it is the one loop that wires those parts together (the
start, kill and PMI paths, the job prolog/epilog hooks, ``fluxes exec``), each
a few lines calling its own module.  This module is only the loop: the rules
are pure modules of
:mod:`fluxes.domain.exec`, the start path is :mod:`workers.exec_start` (a base class),
processes and files are :mod:`fluxes.proc`'s
(``tasks``, ``exec_files``, ``adopt``), Redis is
:mod:`fluxes.store.exec_streams` (docs/exec.md, "Parts").
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from fluxes import messages as proto
from fluxes.config import DEFAULT_OUTPUT_LIMIT
from fluxes.domain.exec import timers as clock
from fluxes.domain.exec.intake import (
    Command,
    Entry,
    Intake,
    Kill,
    PmiWake,
    Request,
    Signal,
    Start,
)
from fluxes.domain.exec.jobs import (
    LOST_ERROR,
    ExecJob,
    Planner,
    StartFacts,
    TaskProc,
    job_owner,
    read_start,
)
from fluxes.domain.exec.jobsignal import JobSignals
from fluxes.domain.exec.layout import run_duration
from fluxes.domain.exec.outbox import EMPTY, FLUSH, FlushPolicy, Outbox
from fluxes.domain.exec.output import Budget
from fluxes.domain.exec.perilog import HOUSEKEEPING_REASON
from fluxes.domain.exec.table import JobTable
from fluxes.domain.exec.waits import UseReader, Waiting
from fluxes.formats.idset import IDSet
from fluxes.proc import hops, metrics
from fluxes.proc.adopt import Adopter
from fluxes.proc.child_identity import ChildIdentities
from fluxes.proc.exec_files import TaskFiles, close_streams, default_state_dir, forward_output
from fluxes.proc.perilog import HookRunner, PerilogFlow
from fluxes.proc.pmi_server import PmiServer
from fluxes.proc.remote_exec import REPLY_TTL_S, CommandRunner, reply_fields
from fluxes.proc.spawner_client import ENV_SPAWNER, SpawnerLink
from fluxes.proc.tasks import (
    Launcher,
    TaskWatcher,
    nap,
    raise_fd_limit,
    signal_tasks,
    tight_timers,
)
from fluxes.store.errors import StoreError
from fluxes.store.exec_streams import READ_COUNT, ExecStreams, entries
from fluxes.store.instance import Instance
from fluxes.store.jobhash import OWNER
from fluxes.store.keys import GROUP_EXEC
from fluxes.store.pmi_kvs import PmiKvs
from fluxes.store.resources import (
    published_summary,
    resource_events_since,
    send_resource_event,
)
from fluxes.store.security import strip_password
from workers.base import DEAD_LETTER_MAXLEN, not_the_input
from workers.exec_start import Starting

__all__ = ["LOST_ERROR", "ExecWorker", "Outbox", "default_state_dir", "main", "run_from_args"]

#: How often running tasks' output files are read (exits wake the loop at once).
POLL_MS = 25
#: Time spent handling requests per iteration before the rest of the loop runs.
STEP_BUDGET_S = 0.1
#: Registry heartbeat period; the job manager drains ranks silent for a few seconds.
REGISTRY_INTERVAL_S = 1.0
#: Default delay between the kill signal and SIGKILL.
KILL_GRACE_S = 5.0
#: A finished job's record is kept at least this long (duplicate starts are answered from it).
DONE_RETENTION_S = 30.0
PRUNE_INTERVAL_S = 2.0


class ExecWorker(Starting):
    """Runs the jobs sent to ``ranks``, keeping per-task files under ``state_dir``/rank<r>.

    ``kill_grace`` is the delay before SIGKILL follows a kill signal;
    ``hostnames`` (rank -> name) is what the registry shows (default: this
    machine's name); ``output_limit`` is the bytes of output forwarded per job
    on each rank (0 unlimited); both default to the instance configuration
    (``[exec] kill-timeout``, ``output-limit``);
    ``done_retention`` is how long a finished job's record is kept at least;
    ``poll_ms`` how often running tasks are checked.  A fast (tmpfs) state
    directory matters: every task creates and removes three small files.
    """

    kind = "exec"

    def __init__(self, instance: Instance, ranks: Iterable[int] | str,
                 state_dir: str | os.PathLike[str], *, kill_grace: float | None = None,
                 hostnames: Mapping[int, str] | None = None, name: str | None = None,
                 output_limit: int | None = None, done_retention: float = DONE_RETENTION_S,
                 poll_ms: int = POLL_MS) -> None:
        super().__init__(instance, name)
        self.ranks = sorted(IDSet(ranks)) if isinstance(ranks, str) else sorted(set(ranks))
        if not self.ranks:
            raise ValueError("exec worker: no ranks to serve")
        if kill_grace is not None and (kill_grace < 0 or not math.isfinite(kill_grace)):
            raise ValueError(f"kill grace must be a finite number >= 0, got {kill_grace}")
        self.state_dir = os.fspath(state_dir)
        self._given_grace = kill_grace
        self.kill_grace = KILL_GRACE_S if kill_grace is None else kill_grace
        self._given_limit = output_limit
        self.output_limit = DEFAULT_OUTPUT_LIMIT if output_limit is None else output_limit
        self.done_retention = done_retention
        self.poll_ms = poll_ms
        # Hostnames: given, else the instance's resource inventory (read at
        # setup) or a job's R nodelist, else this machine's name.
        self._given_hosts = dict(hostnames or {})
        machine = socket.gethostname()
        self.hostnames = {r: self._given_hosts.get(r, machine) for r in self.ranks}
        self.store = ExecStreams(self.redis, self.keys, self.ranks)
        self.store.dead_letter_maxlen = DEAD_LETTER_MAXLEN
        self.streams = self.store.streams
        # A root worker runs jobs as their owners, after checking who they are.
        self.euid = os.geteuid()
        self.registered: frozenset[int] = frozenset()
        self.instance_owner = self.euid
        # One rank: the waker's blocking read is the group read of that rank.
        self._consumer = f"rank{self.ranks[0]}" if len(self.ranks) == 1 else None
        # A stop request (signal handler or another thread) wakes the wait at once.
        self._stop_r, self._stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.files = TaskFiles(self.state_dir, self.ranks)
        # Process facts (our children, statuses reaped) outlive a reload of the state.
        self.watcher = TaskWatcher([self._stop_r])
        # the parent of the tasks run as the worker's user (docs/exec.md, "The spawner")
        self.watcher.spawner = SpawnerLink(self.files.rank_dirs[self.ranks[0]],
                                           os.environ.get(ENV_SPAWNER, "1") != "0")
        # PMI servers of the jobs' tasks: their sockets outlive a reload of the state
        self.pmi = PmiServer(PmiKvs(self.redis, self.keys), self.watcher.add,
                             self.watcher.remove)
        self._pmi_ready: list[int] = []
        # tasks may submit jobs to the instance, but never with the worker's password
        self.launcher = Launcher(strip_password(str(instance.uri)), self.files, self.watcher,
                                 self.keys.ns)
        self.adopter = Adopter(self.keys.ns, self.files, self.watcher)
        # the Redis identities of the child instances our jobs run (docs/nested.md)
        self.identities = ChildIdentities(self.redis, self.keys, instance.uri.redis_url,
                                          self.files)
        self.count_started = 0
        self.planner = Planner()  # the plans of recent starts (their R and layout)
        self.uses = UseReader()  # the cores and gpus recent starts hold (waiting starts)
        self.awaiting = {}  # starts whose spawn answer is to come (workers/exec_start.py)
        self.held_acks = []
        # [exec] prolog/epilog/housekeeping (docs/exec.md, "Prolog, epilog, housekeeping")
        self.perilog = PerilogFlow(HookRunner(self.state_dir, self.keys.ns, self.ranks,
                                              self._watch_hook),
                                   self._fail_after_prolog,
                                   self._drain, self._undrain, self._table_job, self._host,
                                   self._is_drained)
        self.waker = self.store.waker()
        self.table = JobTable(self.ranks)
        self._ready = False
        self.job_signals = JobSignals()  # --signal=SIG@TIME deliveries
        self.commands = CommandRunner(self.state_dir)  # fluxes exec
        self._reset()
        raise_fd_limit()
        tight_timers()

    def _reset(self) -> None:
        """Forget the in-memory job state (rebuilt by :meth:`setup`)."""
        for job in self.table.all():
            close_streams(job)
        self.waker.close()
        self.watcher.reset()
        self.waker = self.store.waker()
        self.watcher.add(self.waker.fileno())
        self.pmi.reregister()
        self.table = JobTable(self.ranks, metrics.EXEC_FINISHED.inc)
        self.intake = Intake(self.ranks)
        self.box = Outbox()
        self.flushing = FlushPolicy()
        self._next_output = 0.0
        self._next_registry = 0.0
        self._next_prune = time.monotonic() + PRUNE_INTERVAL_S

    # ------------------------------------------------------------ lifecycle

    def request_stop(self, signum: int = 0, frame: Any = None) -> None:
        """Ask the loop to stop after the current step (and wake it if it waits)."""
        super().request_stop(signum, frame)
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")

    def install_signals(self) -> None:
        """Stop on SIGTERM/SIGINT when running in the main thread (tests run it in another)."""
        if threading.current_thread() is threading.main_thread():
            super().install_signals()

    def status(self) -> dict[str, Any]:
        """Ranks served and jobs running, for ``fluxes status``."""
        return {"ranks": str(IDSet(self.ranks)), "running": len(self.table.live),
                "jobs_started": self.count_started, "waiting": len(self.table.cores)}

    def consumed(self) -> list[tuple[str, str]]:
        """The request streams of the served ranks, read through the ``exec`` group."""
        return [(stream, GROUP_EXEC) for stream in self.streams.values()]

    def setup(self) -> None:
        """Create the groups and rebuild the job table from the records and the state files."""
        setup_started = time.monotonic()
        if self.awaiting:  # a reload: what the spawner answered is known first
            self._complete_starts(wait=True)
        self.held_acks = []  # the entries come again (their effects were not written)
        self._ready = False
        self._reset()
        config = self.instance.config()
        self.instance_owner = self.instance.owner()[1]
        if self._given_grace is None:
            self.kill_grace = config.kill_timeout
        if self._given_limit is None:
            self.output_limit = config.output_limit
        self.perilog.config = config.perilog
        self.files.make_dirs()
        # before the records are restored: the spawner says which tasks still run
        self.watcher.connect_spawner()
        loaded = self.store.load()
        for rank, host in loaded.hosts.items():
            if rank not in self._given_hosts:
                self.hostnames[rank] = host
        table = self.table
        for rank, jobid in table.restore_all(self.box, loaded.records, time.time(),
                                             time.monotonic(), self.kill_grace,
                                             self.adopter.restore):
            self.log.error("unreadable exec record", extra={"job": jobid, "rank": rank})
        self._restore_owners()
        self.perilog.restore()
        for name in self.identities.setup(self.ranks, table.live):
            self.log.info("child identity swept", extra={"user": name})
        self.intake.last_ids.update(loaded.last_ids)
        for rank in self.ranks:
            self.files.sweep(rank, table.done_ids(rank))
        self._reap_strays()
        # starts written from now on carry facts as current as their hashes'
        self.intake.fresh_after_ms = self.store.now_ms()
        self._ready = True
        self.log.info("recovered", extra={
            "ranks": str(IDSet(self.ranks)), "jobs": sum(1 for _job in table.all()),
            "running": len(table.live), "recovery_s": round(time.monotonic() - setup_started, 3)})

    def teardown(self) -> None:
        """Close the output files; the tasks keep running for the next worker.

        Except when the whole instance is going away (``fluxes start`` ending
        or ``fluxes stop``: $FLUXES_EXEC_KILL_ON_STOP set, and this worker was
        asked to stop): then every task is killed, as flux does, rather than left
        orphaned. A loop that ended any other way (a bug; never Redis being
        unavailable, which the loop waits out) leaves the tasks to the next worker.
        """
        if self.awaiting:
            with contextlib.suppress(OSError):
                self._complete_starts(wait=True)
        if self.box:
            try:
                self._flush(self.box)  # what lingered (started reports, output lines)
            except StoreError:
                pass  # redelivered to the next worker, which adopts the jobs
        kill = self.stopping and bool(os.environ.get("FLUXES_EXEC_KILL_ON_STOP"))
        for job in self.table.all():
            if kill and job.kind == "run":
                signal_tasks(job.tasks, signal.SIGKILL)
            close_streams(job)
        self.pmi.close_all()
        self.waker.close()
        self.watcher.close()

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """One iteration: wait, read requests, act, watch tasks, write everything at once."""
        if not self._ready:
            self.setup()
        box, intake, table = self.box, self.intake, self.table
        self.files.forget_listings()
        self._wait(None if intake.backlog else clock.wait_ms(
            time.monotonic(), busy=intake.wants_read(), next_registry=self._next_registry,
            next_prune=self._next_prune, timers=table.timers,
            running=bool(table.live) or self.perilog.holding() or bool(self.commands.running),
            next_output=self._next_output, flush_after=self.flushing.after))
        if self.awaiting:
            self._complete_starts(wait=False)
        if self._pmi_ready or self.pmi.retry:
            # before the tasks are watched: a PMI failure is in the report of their end
            self._serve_pmi(box)
        if not intake.backlog and intake.wants_read():
            got = self.store.read(intake.pending)
            # A full read may have left more behind; otherwise only the waker's
            # signal (or a restart) says there is something new.
            intake.maybe_new = any(len(e) >= READ_COUNT for e in got.values())
            self._take(got)
        intake.handle(self._on_request, self._ack, STEP_BUDGET_S, time.monotonic, self._refuse)
        for job in table.fire(box, time.monotonic(), time.time()):
            signal_tasks(job.tasks, signal.SIGKILL)
        if self.job_signals:
            for rank, jobid, sig in self.job_signals.due(time.time()):
                signal_tasks(table.signal(rank, jobid), sig)
        self._watch(box)
        self._after_watch(box)
        now = time.monotonic()
        if now >= self._next_registry:
            self._next_registry = now + REGISTRY_INTERVAL_S
            box.registry.update(self.store.registry(self.hostnames, self.name, time.time(),
                                                    table.running()))
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_INTERVAL_S
            candidates = table.prune_candidates(time.time() - self.done_retention)
            if candidates:
                gone = self.store.gone([j.id for j in candidates])
                table.prune(box, candidates, gone, time.time())
                self.identities.jobs_over(j.id for j, over in zip(candidates, gone,
                                                                   strict=True) if over)
        decision = self.flushing.decide(box, now, self.stopping)
        if decision == FLUSH:
            self._flush(box)
        elif decision == EMPTY:
            self._finish_cleanup(box)

    def _after_watch(self, box: Outbox) -> None:
        """The hooks and commands that ended; the starts that jobs ending let start."""
        if self.perilog.holding():
            self._hooks_ended(box)
        if self.commands.running:
            self._commands_ended()
        if self.table.cores.freed:
            self._start_waiting()

    def _wait(self, timeout_ms: float | None) -> None:
        """Wait up to ``timeout_ms`` for a new request, a task's exit or nothing.

        The waker's blocking read is the "new request" signal (see
        :class:`~fluxes.store.exec_streams.Waker`); without a timeout (work
        waiting) the pidfds are only checked.
        """
        waker = self.waker
        if timeout_ms is not None:
            waker.arm({self.streams[r]: self.intake.last_ids[r] for r in self.ranks},
                      self._consumer)
            if timeout_ms < 1:
                # poll() counts whole milliseconds, rounding up: a simulated job
                # due in 0.3 ms would end up to a millisecond late (or, waiting 0,
                # the loop would spin until it is due). Sleep the fraction instead.
                nap(timeout_ms / 1000, waker.fileno())
                timeout_ms = 0
        ready = self.watcher.wait(int(timeout_ms or 0))
        self._pmi_ready = ready
        if waker.outstanding and waker.fileno() in ready:
            reply = waker.consume()
            if self._consumer is None:
                self.intake.maybe_new = bool(reply)
            elif reply:
                got = entries(reply)
                # a full read may have left more behind: read on at once
                self.intake.maybe_new = len(got) >= READ_COUNT
                self._take({self.ranks[0]: got})

    def _restore_owners(self) -> None:
        """Give restored real jobs recorded without their owner (by an older worker) the
        owner their output stream's key needs."""
        unknown = [job for job in self.table.live.values() if job.owner < 0]
        if not unknown:
            return
        owners = self.store.hashes.field([job.id for job in unknown], OWNER)
        for job, owner in zip(unknown, owners, strict=True):
            with contextlib.suppress(ValueError):
                job.owner = job_owner(job.id, owner)

    def _take(self, got: Mapping[int, list[Entry]]) -> None:
        """Queue the request entries read; park poison; fetch what new starts need."""
        new_starts, poison = self.intake.take(got, self.table.knows)
        for rank, msg_id, fields, error in poison:
            self.box.ack(rank, msg_id, [self.dead_letter_record(self.streams[rank], msg_id,
                                                                fields, error)])
        if not new_starts:
            return
        fetched = self.store.fetch(new_starts, self.intake.carried)
        if self.euid == 0:
            # Tasks may run as their owners: who submitted, who is registered. Not
            # needed for a root instance owner's own jobs, which run as the worker.
            check = [jobid for jobid, facts in fetched.items()
                     if facts.owner != b"0" or self.instance_owner != 0]
            if check:
                found = self.store.identities(check)
                self.registered, self.instance_owner = found.registered, found.instance_owner
                fetched.update({jobid: fetched[jobid]._replace(submitter=uid)
                                for jobid, uid in found.submitters.items()})
        self.intake.fetched.update(fetched)

    # ------------------------------------------------------------ requests

    def _refuse(self, rank: int, msg_id: bytes, request: Request, exc: Exception) -> Any:
        """The dead letter of a request whose handling raised (written with its entry's
        acknowledgement); errors of Redis itself propagate to the loop, which retries.

        A start that raised fails its job (unless it got as far as the job table), so
        that the job manager learns of it instead of waiting for the job forever.
        """
        if not_the_input(exc):
            raise exc
        reason = f"{type(exc).__name__}: {exc}"
        self.log.error("request refused", extra={"rank": rank, "request": repr(request),
                                                 "error": reason})
        if isinstance(request, Start) and not self.table.knows(rank, request.id):
            job = self.table.fail(self.box, ExecJob(request.id, rank, "run"), time.time(),
                                  f"exec: cannot start the job: {reason}")
            self.box.touch(self.table.add(job))
        return self.dead_letter_record(self.streams[rank], msg_id,
                                       proto.encode_entry([request]), reason)

    def _on_request(self, rank: int, request: Request, redelivered: bool) -> None:
        if self.awaiting:  # every request sees the jobs started before it in the table
            self._complete_starts(wait=True)
        box = self.box
        match request:
            case Kill(id=jobid, signal=sig):
                waited = self.table.cores.cancel(rank, jobid)
                if waited is not None:  # never starts: answered as a job never started here
                    self._left_queue(waited)
                self.perilog.on_kill(rank, jobid)
                signal_tasks(self.table.kill(box, rank, jobid, sig, time.time(),
                                             time.monotonic(), self.kill_grace), sig)
                return
            case Signal(id=jobid, signal=sig):
                signal_tasks(self.table.signal(rank, jobid), sig)
                return
            case Command():
                self._command(rank, request, redelivered)
                return
            case PmiWake(id=jobid, round=round_, error=error):
                self._pmi_failed(self.pmi.wake((rank, jobid), round_, error))
                return
            case Start(id=jobid):
                pass
        job = self.table.get(rank, jobid)
        if job is not None:
            box.report(job)  # a repeated start: say again where it stands
            return
        cores = self.table.cores
        if cores.waiting(rank, jobid):
            return  # a repeated start of one waiting: it starts once
        facts = self.intake.fetched.get(jobid)
        use = None if facts is None else self.uses.of(facts.R, rank)
        if use is not None and cores.busy(rank, jobid, use):
            # its cores are still another job's: it starts when they free (_start_waiting)
            cores.wait(Waiting(rank, jobid, use, facts, redelivered, request,
                               self.intake.entry_id))
            if self.intake.sent:  # the hand-off is over: the wait is not its latency
                hops.record(hops.JM_TO_EXEC, time.time() - self.intake.sent)
            return
        cores.hold(rank, jobid, use)
        self._begin(rank, jobid, facts, redelivered)

    def _begin(self, rank: int, jobid: int, facts: StartFacts | None,
               redelivered: bool) -> None:
        """Start the job (its prolog first, if one is configured)."""
        if self._prolog_first(rank, jobid, facts):
            return
        self._start_now(rank, jobid, facts, redelivered)

    def _start_waiting(self) -> None:
        """Start the waiting starts whose cores a job ending freed (in this iteration:
        their records go out in the write that reports the end)."""
        cores = self.table.cores
        self.intake.sent = 0.0  # their hand-off was measured when they were queued
        while cores.freed:
            for start in cores.ready():
                cores.hold(start.rank, start.jobid, start.use)
                try:
                    if self.awaiting:
                        self._complete_starts(wait=True)
                    self._begin(start.rank, start.jobid, start.facts, start.redelivered)
                except Exception as exc:  # as a request that raised: dead-lettered
                    self.box.dead_letters.append(self._refuse(start.rank, start.entry,
                                                              start.request, exc))
                self._left_queue(start)

    def _left_queue(self, start: Waiting) -> None:
        """``start`` no longer waits: its entry is acknowledged once none of its does."""
        dead = self.table.cores.entry_released(start)
        if dead is not None:
            self._ack(start.rank, start.entry, dead)

    def _prolog_first(self, rank: int, jobid: int, facts: StartFacts | None) -> bool:
        """True when the start waits for the job prolog (a real job, a prolog configured)."""
        if not self.perilog.config.prolog:
            return False
        spec = read_start(jobid, facts)
        if spec is None or facts is None or run_duration(spec) is not None:
            return False
        return self.perilog.on_start(self.box, rank, jobid, job_owner(jobid, facts.owner))

    def _fail_after_prolog(self, rank: int, jobid: int, error: str, status: int) -> None:
        """The prolog failed: the job fails here without running a task."""
        if self.table.knows(rank, jobid):
            return
        job = self.table.fail(self.box, ExecJob(jobid, rank, "run"), time.time(), error)
        job.prolog = status
        self.box.touch(self.table.add(job))

    def _drain(self, rank: int, reason: str) -> str:
        """Drain ``rank`` (a hook failed there, or housekeeping holds it), as ``fluxes
        resource drain`` does; the id of the resource event."""
        self.log.info("draining", extra={"rank": rank, "reason": reason})
        return send_resource_event(self.instance, "drain", str(rank), reason)

    def _undrain(self, rank: int, since: str) -> None:
        """Give back a rank housekeeping held, unless someone drained or undrained it
        after our drain ``since`` (theirs stands)."""
        for _id, fields in resource_events_since(self.redis, self.keys, since):
            try:
                event = proto.decode_resource_event(fields)
            except ValueError:
                continue
            if rank in IDSet(event.ranks):
                return
        send_resource_event(self.instance, "undrain", str(rank))

    def _is_drained(self, rank: int) -> bool:
        """Whether the scheduler's last summary says ``rank`` is drained (not by a
        housekeeping: that summary may predate the undrain of an earlier one)."""
        summary = published_summary(self.redis, self.keys) or {}
        try:
            drain = summary.get("drained", {}).get(str(rank))
            return bool(drain) and not str(drain.get("reason", "")).startswith(
                HOUSEKEEPING_REASON)
        except AttributeError:
            return False

    def _watch_hook(self, pid: int) -> None:
        """A hook's end wakes the loop at once (its pidfd; the key names no job)."""
        self.watcher.watch((-1, pid), TaskProc(-1, pid, False))

    def _table_job(self, rank: int, jobid: int) -> ExecJob | None:
        return self.table.get(rank, jobid)

    def _host(self, rank: int) -> str:
        return self.hostnames.get(rank, "")

    def _hooks_ended(self, box: Outbox) -> None:
        """Act on the prolog/epilog/housekeeping runs that ended."""
        for run, what in self.perilog.poll(box):
            self.log.info("hook ended", extra={"job": run.jobid, "rank": run.rank,
                                              "phase": run.phase, "result": what,
                                              "output": self.perilog.runner.log_tail(run)})

    def _command(self, rank: int, cmd: Command, redelivered: bool) -> None:
        """``fluxes exec``: run ``cmd`` as the instance owner (never twice)."""
        if redelivered:
            self._reply(cmd.token, reply_fields(rank, 1 << 8, b"", b"",
                                                "not run: the exec worker restarted"))
            return
        user = self.instance_owner if self.euid == 0 and self.instance_owner != 0 else None
        self.log.info("fluxes exec", extra={"rank": rank, "command": cmd.argv[:8]})
        run = self.commands.start(rank, cmd, user)
        if run.popen is not None:
            self._watch_hook(run.popen.pid)

    def _commands_ended(self) -> None:
        """Send the output and status of the ``fluxes exec`` commands that ended."""
        for run, status, out, err in self.commands.poll():
            self._reply(run.token, reply_fields(run.rank, status, out, err, run.error))

    def _reply(self, token: str, fields: dict[bytes, bytes]) -> None:
        self.store.answer_command(token, fields, REPLY_TTL_S)

    # ------------------------------------------------------------ tasks

    def _watch(self, box: Outbox) -> None:
        """Reap ended tasks, forward output, finish jobs whose tasks all ended."""
        live = self.table.live
        if not live:
            return
        budget = Budget()
        wall = time.time()
        now = time.monotonic()
        woken = self.watcher.woken
        if now >= self._next_output:
            # Every running job: new output, and tasks without a pidfd.
            self._next_output = now + self.poll_ms / 1000
            jobs = list(live.values())
        else:
            # Only the jobs a task exit woke us for (cheap with many jobs running).
            jobs = [live[k] for k in woken if k in live]
        woken.clear()
        for job in jobs:
            changed = self.adopter.look(job, box)
            changed |= forward_output(job, budget, self.output_limit, box)
            self.table.settle(box, job, changed, wall)

    def _flush(self, box: Outbox) -> None:
        """Write the iteration's effects (see :meth:`ExecStreams.flush`), then clean up."""
        self.flushing.flushed()
        if box:
            now = time.time()
            woke, self.watcher.exit_woke = self.watcher.exit_woke, 0.0
            for job in box.reports.values():
                if job.kind == "done" and job.deadline:  # a simulated job's end was due then
                    hops.record(hops.EXEC_END_TO_REPORT, now - job.deadline)
                elif job.kind == "done" and woke and job.tasks:  # a task exit woke the loop
                    hops.record(hops.EXEC_END_TO_REPORT, now - woke)
            self.store.flush(box)
            if box.dead_letters:
                self.count_dead_letters(len(box.dead_letters))
        self._finish_cleanup(box)

    def _finish_cleanup(self, box: Outbox) -> None:
        """After the write: remove the files of jobs whose end is recorded; new outbox."""
        for job in box.finished:
            self.pmi.close(job.key, killed=bool(job.kill_signal))
            self.identities.revoke(job)
            close_streams(job)
            for task in job.tasks:
                self.watcher.reaped.pop(task.pid, None)
            spawner = self.watcher.spawner
            for pid, path in self.files.remove(job):
                if spawner is not None:
                    spawner.forget(pid, path)
        self.box = Outbox()
        if box.finished:
            self.perilog.finished(self.box, box.finished)


def main(instance: Instance, ranks: Iterable[int] | str, state_dir: str | os.PathLike[str],
         *, kill_grace: float | None = None, hostnames: Mapping[int, str] | None = None,
         name: str | None = None) -> int:
    """Run an exec worker for ``ranks`` (e.g. ``[3]`` or ``"0-3"``) until SIGTERM."""
    return ExecWorker(instance, ranks, state_dir, kill_grace=kill_grace, hostnames=hostnames,
                      name=name).run()


def run_from_args(instance: Instance, args: Any) -> int:
    """Run from ``python -m workers exec`` arguments (``--ranks``, ``--state-dir``, ``--name``)."""
    ranks = getattr(args, "ranks", None) or "0"
    state_dir = getattr(args, "state_dir", None) or default_state_dir()
    return main(instance, ranks, state_dir, name=getattr(args, "name", None))
