"""The exec worker: starts and watches jobs' tasks on the execution ranks it serves.

One process serves one or several ranks.  Each loop iteration:

1. reads start/kill requests from ``{ns}:exec:rank:<r>`` (consumer group
   ``exec``, consumer ``rank<r>``; pending entries first after a restart) and
   fetches the job hashes the new starts need in one pipelined round trip;
2. handles them: simulated jobs (``attributes.system.exec.test.run_duration``)
   only get a timer; real jobs get one process per task on this rank;
3. fires due timers (simulated ends, SIGKILL escalation), reaps tasks and
   forwards their output, line by line, to ``{ns}:output:<id>``;
4. writes everything in one MULTI: output lines, the jobs' records in
   ``{ns}:exec:jobs:<r>``, the acknowledgements of the requests whose effect
   those records hold, the registry heartbeat, and the cumulative ``exec``
   reports (one entry per partition stream; reports to a partition in another
   slot follow in a second pipeline).

Tasks must outlive the worker, so nothing of theirs depends on it: each task
runs under a small ``/bin/sh`` wrapper in its own session (process group)
that, when the task ends, creates an empty file whose name carries the exit
code (``<job>.<task>.st.<code>``: creating a name is atomic), and the task's
stdout/stderr go to files (``<job>.<task>.out``/``.err``) in the rank's state
directory, or to the user's output files.  The worker reads those files with
``pread`` at offsets it records together with the output it has written, so
a restarted worker resumes forwarding where the last one stopped, adopts the
still-running wrappers (recognised by the marker in their command line) and
reads the exit codes of those that ended meanwhile.  See ``docs/exec.md``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import heapq
import math
import os
import resource
import select
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from fluxes import messages as proto
from fluxes.config import DEFAULT_OUTPUT_LIMIT
from fluxes.domain.exec.layout import (
    JobLayout,
    OutputSpec,
    RankShare,
    base_environment,
    command_error,
    compute_layout,
    environment_overlay,
    expand_template,
    job_cwd,
    job_environment,
    job_name,
    output_spec,
    run_duration,
    shell_option,
    task_command,
    task_environment,
    wait_status,
)
from fluxes.domain.sched.inventory import Inventory, format_size
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet
from fluxes.proc import metrics
from fluxes.store.direct import Direct, execute_grouped, stream_entries
from fluxes.store.groups import ensure_group
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_EXEC
from workers.base import Worker

#: Requests read per rank and iteration (each entry may hold many messages).
READ_COUNT = 256
#: BLOCK of the outstanding "new request" read (re-armed when it times out).
WAKE_BLOCK_MS = 1000
#: How often running tasks' output files are read (exits wake the loop at once).
POLL_MS = 25
#: After a task exit wakes the loop, how long it waits for other exits to batch them.
EXIT_LINGER_MS = 2
#: How long a write holding nothing urgent (started reports, records, acks,
#: output lines) may wait for company: a short job's "started" and "finished"
#: then travel in one write, which the job manager handles in one step.
FLUSH_LINGER_S = 0.005
#: Time spent handling requests per iteration before the rest of the loop runs.
STEP_BUDGET_S = 0.1
#: Registry heartbeat period; the job manager drains ranks silent for a few seconds.
REGISTRY_INTERVAL_S = 1.0
#: Default delay between the kill signal and SIGKILL.
KILL_GRACE_S = 5.0
#: The line that replaces a job's output past the limit (``[exec] output-limit``).
TRUNCATED_PREFIX = b"fluxes: output limit"
TRUNCATED_NOTE = ("fluxes: output limit of {limit} reached on rank {rank}: "
                  "further output dropped (use --output/--error files for more)\n")
#: Longest line forwarded as one entry; longer lines are split.
MAX_LINE = 64 * 1024
#: Bytes read per output file and iteration.
READ_CHUNK = 256 * 1024
#: Output bytes and lines forwarded per iteration (keeps the loop short).
OUTPUT_BYTES_BUDGET = 4 * 1024 * 1024
OUTPUT_LINES_BUDGET = 20_000
#: A finished job's record is kept at least this long (duplicate starts are answered from it).
DONE_RETENTION_S = 30.0
PRUNE_INTERVAL_S = 2.0
PRUNE_BATCH = 5000
#: Messages per exec-event entry.
REPORT_CHUNK = 1000
#: How long a command lookup (PATH search) is trusted.
COMMAND_CACHE_S = 2.0

LOST_ERROR = "exec: lost the job's processes (exec worker restarted)"

SH = "/bin/sh"
#: The task wrapper: $1 cwd, $2 status file prefix, then the command.  Signals
#: the job may be killed with are caught (so the wrapper outlives the task and
#: records its status) and reset to default in the task; the subshell makes
#: even a shell builtin run as a separate process (dash execs the command in
#: it directly, so there is no extra fork).  ``true`` (not the special builtin
#: ``:``) creates the status file, so a failed redirection cannot end the shell.
WRAPPER = (
    "trap : HUP INT QUIT TERM USR1 USR2 ALRM\n"
    "d=$1 f=$2\n"
    "shift 2\n"
    'if cd -- "$d"; then ( "$@" ); s=$?; else s=126; fi\n'
    'true 2>/dev/null >"$f.$s"\n'
    'exit "$s"\n'
)
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
_O_OUT = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
_STREAMS = (("o", "stdout", "out", 1), ("e", "stderr", "err", 2))


# ----------------------------------------------------------------------------- state


class StartFailed(ValueError):
    """The job's command cannot be executed: the tasks end with exit ``code`` at once."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code



class Stream:
    """A task's forwarded output file: what was forwarded (``offset``) and the partial line."""

    __slots__ = ("buf", "done", "fd", "name", "offset", "path")

    def __init__(self, name: str, path: str, fd: int | None, offset: int = 0) -> None:
        self.name = name
        self.path = path
        self.fd = fd
        self.offset = offset
        self.buf = b""
        self.done = False

    def close(self) -> None:
        """Close the file (the forwarding position stays)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


class TaskProc:
    """One task's wrapper process on this rank."""

    __slots__ = ("code", "exited", "lost", "own", "pid", "pidfd", "rank", "status", "streams")

    def __init__(self, rank: int, pid: int, own: bool, status: int | None = None) -> None:
        self.rank = rank
        self.pid = pid
        self.own = own
        self.status = status
        self.pidfd: int | None = None  # readable once the process has exited
        self.exited = False  # its pidfd said so: look at it
        self.code: int | None = None  # the wrapper's exit code (names its status file)
        self.lost = False
        self.streams: list[Stream] = []

    @property
    def ended(self) -> bool:
        """The task's process is gone (status known, or lost)."""
        return self.status is not None or self.lost


@dataclass(eq=False)
class ExecJob:
    """What this worker knows of one job on one rank (mirrored in ``exec:jobs:<rank>``)."""

    id: int
    rank: int
    kind: str  # "sim" | "run" | "done"
    started: bool = False
    status: int | None = None
    released: bool = False
    error: str | None = None
    deadline: float = 0.0  # wall clock end of a simulated job
    tasks: list[TaskProc] = field(default_factory=list)
    forward: str = ""  # "o" and/or "e": streams forwarded to the output stream
    kill_signal: int = 0
    kill_time: float = 0.0
    escalated: bool = False
    done_time: float = 0.0
    forwarded: int = 0  # output bytes forwarded (the output limit counts them)
    truncated: bool = False  # the output limit was reached: the rest is dropped

    def record(self) -> bytes:
        """The JSON kept in ``exec:jobs:<rank>`` so a restarted worker can carry on."""
        if self.kind == "done":
            return orjson.dumps({"k": "done", "s": self.started, "st": self.status,
                                 "e": self.error, "dt": self.done_time})
        if self.kind == "sim":
            return orjson.dumps({"k": "sim", "d": self.deadline})
        tasks = []
        for t in self.tasks:
            offsets = {s.name: s.offset for s in t.streams}
            tasks.append([t.rank, t.pid, offsets.get("stdout", 0), offsets.get("stderr", 0),
                          t.status, t.lost, t.code])
        return orjson.dumps({"k": "run", "s": self.started, "t": tasks, "fw": self.forward,
                             "e": self.error, "ks": self.kill_signal, "kt": self.kill_time,
                             "x": self.escalated, "ob": self.forwarded, "tr": self.truncated})

    def report(self) -> dict[str, Any]:
        """The cumulative ``exec`` message for the job manager."""
        return {"t": "exec", "id": self.id, "rank": self.rank, "started": self.started,
                "status": self.status, "released": self.released, "error": self.error}


@dataclass
class Entry:
    """A request entry being handled (its messages may span iterations)."""

    rank: int
    msg_id: bytes
    msgs: list[dict[str, Any]]
    redelivered: bool
    index: int = 0


@dataclass
class Outbox:
    """Everything one iteration writes, in one round trip."""

    records: dict[tuple[int, int], ExecJob | None] = field(default_factory=dict)
    reports: dict[tuple[int, int], ExecJob] = field(default_factory=dict)
    acks: dict[int, list[bytes]] = field(default_factory=dict)
    output: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    registry: dict[str, bytes] = field(default_factory=dict)
    finished: list[ExecJob] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.records or self.reports or self.acks or self.output or self.registry)

    def urgent(self) -> bool:
        """True when the job manager waits on this write: a job finished, released or failed."""
        return bool(self.finished) or any(job.kind == "done" or job.error
                                          for job in self.reports.values())


# ----------------------------------------------------------------------------- the worker


class ExecWorker(Worker):
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
        self.rank_dirs = {r: os.path.join(self.state_dir, f"rank{r}") for r in self.ranks}
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
        self.uri = str(instance.uri)
        self.base_env = base_environment(os.environ)
        home = os.path.expanduser("~")
        self.default_cwd = home if os.path.isdir(home) else "/tmp"
        self.cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else frozenset()
        self.streams = {r: self.keys.exec_rank(r) for r in self.ranks}
        # One rank: the waker's blocking read is the group read of that rank.
        self._consumer = f"rank{self.ranks[0]}" if len(self.ranks) == 1 else None
        self.direct = Direct(self.redis, self.keys.exec_registry)  # its own: the global slot
        # Process facts outlive a reload of the state (after a Redis outage):
        # which wrappers are our own children, and the statuses already reaped.
        self.children: set[int] = set()
        self.reaped: dict[int, tuple[int, int | None]] = {}
        self._commands: dict[tuple[str, str | None, str], tuple[float, str | None]] = {}
        self.count_started = 0
        # A stop request (signal handler or another thread) wakes the wait at once.
        self._stop_r, self._stop_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._ready = False
        self._reset()
        self._raise_fd_limit()

    def _reset(self) -> None:
        """Forget the in-memory job state (rebuilt by :meth:`setup`)."""
        for jobs in getattr(self, "jobs", {}).values():
            for job in jobs.values():
                _close_streams(job)
        waker = getattr(self, "waker", None)
        if waker is not None:
            waker.close()
        for fd in getattr(self, "pidfds", {}):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.waker = _Waker(self.redis)
        # One poll set for the whole life of the state: the waker's socket and
        # a pidfd per running task (fd -> the job's key and the task).
        self.poller = select.poll()
        self.poller.register(self._stop_r, select.POLLIN)
        self.pidfds: dict[int, tuple[tuple[int, int], TaskProc]] = {}
        self._waker_fd: int | None = None
        self._woken: set[tuple[int, int]] = set()
        self._next_output = 0.0
        self._maybe_new = True
        self.jobs: dict[int, dict[int, ExecJob]] = {r: {} for r in self.ranks}
        self.live: dict[tuple[int, int], ExecJob] = {}
        self.timers: list[tuple[float, int, str, int, int]] = []
        self._seq = 0
        self.done_queue: deque[tuple[float, int, int]] = deque()
        self.backlog: deque[Entry] = deque()
        self.fetched: dict[int, tuple[Any, ...]] = {}
        self.pending = dict.fromkeys(self.ranks, True)
        self.last_ids: dict[int, bytes | str] = dict.fromkeys(self.ranks, "$")
        self.box = Outbox()
        self._flush_after: float | None = None  # when a lingering write is due
        self._listings: dict[int, dict[tuple[int, int], int]] = {}
        self._next_registry = 0.0
        self._next_prune = time.monotonic() + PRUNE_INTERVAL_S

    @staticmethod
    def _raise_fd_limit() -> None:
        """Every running task holds up to two open files in the worker: allow many."""
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if hard == resource.RLIM_INFINITY or hard > soft:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass

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
        return {"ranks": str(IDSet(self.ranks)), "running": len(self.live),
                "jobs_started": self.count_started}

    def consumed(self) -> list[tuple[str, str]]:
        """The request streams of the served ranks, read through the ``exec`` group."""
        return [(stream, GROUP_EXEC) for stream in self.streams.values()]

    def setup(self) -> None:
        """Create the groups and rebuild the job table from the records and the state files."""
        setup_started = time.monotonic()
        self._ready = False
        self._reset()
        config = self.instance.config()
        if self._given_grace is None:
            self.kill_grace = config.kill_timeout
        if self._given_limit is None:
            self.output_limit = config.output_limit
        for rank in self.ranks:
            os.makedirs(self.rank_dirs[rank], mode=0o700, exist_ok=True)
            ensure_group(self.redis, self.streams[rank], GROUP_EXEC)
        pipe = self.redis.pipeline(transaction=False)
        for rank in self.ranks:
            pipe.hgetall(self.keys.exec_jobs(rank))
        for rank in self.ranks:
            pipe.xinfo_groups(self.streams[rank])
        pipe.hget(self.keys.instance, "resources")
        replies = pipe.execute()
        self._inventory_hosts(replies.pop())
        now = time.time()
        for rank, records in zip(self.ranks, replies, strict=False):
            for raw_id, raw in records.items():
                jobid = int(raw_id)
                job = self._restore(rank, jobid, raw, now)
                self.jobs[rank][jobid] = job
                self.box.reports[(rank, jobid)] = job  # the last report may have been lost
        for rank, groups in zip(self.ranks, replies[len(self.ranks):], strict=True):
            for group in groups:
                if _text(group.get("name")) == GROUP_EXEC:
                    self.last_ids[rank] = group.get("last-delivered-id") or "0-0"
        for rank in self.ranks:
            self._sweep_files(rank)
        self._reap_strays()
        self._ready = True
        self.log.info("recovered", extra={
            "ranks": str(IDSet(self.ranks)), "jobs": sum(len(j) for j in self.jobs.values()),
            "running": len(self.live), "recovery_s": round(time.monotonic() - setup_started, 3)})

    def _reap_strays(self) -> None:
        """Reap our children that no restored job claims (their status files stay)."""
        claimed = {t.pid for job in self.live.values() for t in job.tasks}
        for pid in list(self.children - claimed):
            try:
                done, _ws = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)

    def _inventory_hosts(self, raw: Any) -> None:
        """Take the served ranks' hostnames from the instance's resource inventory."""
        if not raw:
            return
        try:
            inventory = Inventory.from_table(orjson.loads(raw))
        except ValueError:
            return  # a bad inventory is the scheduler's problem; keep what we have
        for rank in self.ranks:
            if rank in inventory and rank not in self._given_hosts:
                host = inventory[rank].hostname
                if host:
                    self.hostnames[rank] = host

    def teardown(self) -> None:
        """Close the output files; the tasks keep running for the next worker.

        Except when the whole instance is going away (``fluxes start`` ending
        or ``fluxes stop``: $FLUXES_EXEC_KILL_ON_STOP set): then every task is
        killed, as flux does, rather than left orphaned.
        """
        if self.box:
            try:
                self._flush(self.box)  # what lingered (started reports, output lines)
            except redis.RedisError:
                pass  # redelivered to the next worker, which adopts the jobs
        if os.environ.get("FLUXES_EXEC_KILL_ON_STOP"):
            for jobs in self.jobs.values():
                for job in jobs.values():
                    if job.kind == "run":
                        self._signal(job, signal.SIGKILL)
        self.waker.close()
        for jobs in self.jobs.values():
            for job in jobs.values():
                _close_streams(job)

    # ------------------------------------------------------------ files and markers

    def _file(self, rank: int, jobid: int, task: int, suffix: str) -> str:
        return os.path.join(self.rank_dirs[rank], f"{jobid}.{task}.{suffix}")

    def _marker(self, rank: int, jobid: int, task: int | None = None) -> str:
        base = f"fluxes-task:{self.keys.ns}:{rank}:{jobid}:"
        return base if task is None else f"{base}{task}"

    def _listing(self, rank: int, fresh: bool = False) -> dict[tuple[int, int], int]:
        """(job, task) -> exit code of every status file of ``rank`` (cached per iteration)."""
        listing = None if fresh else self._listings.get(rank)
        if listing is None:
            listing = {}
            try:
                names = os.listdir(self.rank_dirs[rank])
            except OSError:
                names = []
            for name in names:
                parts = name.split(".")
                if len(parts) == 4 and parts[2] == "st" and parts[0].isdigit() and \
                        parts[1].isdigit() and parts[3].isdigit():
                    listing[(int(parts[0]), int(parts[1]))] = int(parts[3])
            self._listings[rank] = listing
        return listing

    def _status_code(self, rank: int, jobid: int, task: int) -> int | None:
        """The exit code a wrapper recorded, if its file exists (re-listed on a miss)."""
        code = self._listing(rank).get((jobid, task))
        if code is None:
            code = self._listing(rank, fresh=True).get((jobid, task))
        return code

    def _sweep_files(self, rank: int) -> None:
        """Remove the files of finished jobs; keep those a pending start may adopt."""
        try:
            names = os.listdir(self.rank_dirs[rank])
        except OSError:
            return
        for name in names:
            head = name.split(".", 1)[0]
            if not head.isdigit():
                continue
            job = self.jobs[rank].get(int(head))
            # Unknown jobs' files belong to a start whose effect was never
            # recorded; that start is still pending and will adopt them.
            if job is not None and job.kind == "done":
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.rank_dirs[rank], name))

    # ------------------------------------------------------------ restart

    def _restore(self, rank: int, jobid: int, raw: bytes, now: float) -> ExecJob:
        """Rebuild a job from its record, adopting the processes that still run."""
        try:
            rec = orjson.loads(raw)
            kind = rec["k"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.log.error("unreadable exec record", extra={"job": jobid, "rank": rank})
            return self._done(ExecJob(jobid, rank, "run"), now, error=LOST_ERROR)
        try:
            return self._restore_record(rank, jobid, rec, kind, now)
        except (KeyError, TypeError, ValueError):
            self.log.error("unreadable exec record", extra={"job": jobid, "rank": rank})
            return self._done(ExecJob(jobid, rank, "run"), now, error=LOST_ERROR)

    def _restore_record(self, rank: int, jobid: int, rec: Mapping[str, Any], kind: str,
                        now: float) -> ExecJob:
        if kind == "done":
            job = ExecJob(jobid, rank, "done", started=bool(rec.get("s")), status=rec.get("st"),
                          released=True, error=rec.get("e"), done_time=float(rec.get("dt", now)))
            self.done_queue.append((job.done_time, rank, jobid))
            return job
        if kind == "sim":
            job = ExecJob(jobid, rank, "sim", started=True, deadline=float(rec["d"]))
            self._arm(time.monotonic() + (job.deadline - now), "sim", job)
            return job
        job = ExecJob(jobid, rank, "run", started=bool(rec.get("s")), error=rec.get("e"),
                      forward=str(rec.get("fw", "")), kill_signal=int(rec.get("ks", 0)),
                      kill_time=float(rec.get("kt", 0.0)), escalated=bool(rec.get("x")),
                      forwarded=int(rec.get("ob", 0)), truncated=bool(rec.get("tr")))
        for task_rank, pid, out_off, err_off, status, lost, code in rec.get("t", []):
            task = TaskProc(int(task_rank), int(pid), False, status)
            task.lost = bool(lost)
            task.code = code
            self._attach_streams(job, task, {"stdout": out_off or 0, "stderr": err_off or 0})
            job.tasks.append(task)
        self._adopt(job)
        if job.kill_signal and not job.escalated:
            remaining = job.kill_time + self.kill_grace - now
            self._arm(time.monotonic() + remaining, "escalate", job)
        self.live[(rank, jobid)] = job
        return job

    def _attach_streams(self, job: ExecJob, task: TaskProc, offsets: Mapping[str, int]) -> None:
        """Reopen a task's forwarded output files at the recorded offsets."""
        for flag, name, suffix, _fd in _STREAMS:
            if flag not in job.forward:
                continue
            path = self._file(job.rank, job.id, task.rank, suffix)
            try:
                fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = None
            stream = Stream(name, path, fd, int(offsets.get(name, 0)))
            stream.done = fd is None  # nothing to forward if the file is gone
            task.streams.append(stream)

    def _adopt(self, job: ExecJob) -> None:
        """Classify each unfinished task: our child, a live adopted wrapper, ended, or lost."""
        for task in job.tasks:
            if task.ended:
                continue
            if task.pid in self.reaped:
                task.status, task.code = self.reaped[task.pid]
            elif task.pid in self.children:
                task.own = True
                self._watch_pid(job, task)
            elif _has_marker(task.pid, self._marker(job.rank, job.id, task.rank)):
                task.own = False
                self._watch_pid(job, task)
            else:
                self._ended_elsewhere(job, task)
        if any(t.lost for t in job.tasks) and job.error is None:
            job.error = LOST_ERROR

    def _ended_elsewhere(self, job: ExecJob, task: TaskProc) -> None:
        """A wrapper that is gone without us reaping it: read its status file."""
        code = self._status_code(job.rank, job.id, task.rank)
        if code is not None:
            task.code = code
            task.status = wait_status(code)
        elif job.escalated:
            task.status = signal.SIGKILL  # killed with its wrapper: no file
        else:
            task.lost = True

    def _adopt_unrecorded(self, rank: int, jobid: int, share: RankShare, forward: str,
                          now: float) -> ExecJob | None:
        """A redelivered start whose tasks may have been spawned before a crash: adopt them.

        None when nothing of the job exists here (it was never spawned).
        """
        live = {}
        prefix = self._marker(rank, jobid)
        for pid, marker in _live_markers(prefix):
            suffix = marker[len(prefix):]
            if suffix.isdigit():
                live[int(suffix)] = pid
        listing = self._listing(rank, fresh=True)
        prefix_file = f"{jobid}."
        try:
            files = any(n.startswith(prefix_file) for n in os.listdir(self.rank_dirs[rank]))
        except OSError:
            files = False
        if not live and not files:
            return None
        job = ExecJob(jobid, rank, "run", started=True, forward=forward)
        for task_rank in share.task_ranks:
            pid = live.get(task_rank, 0)
            task = TaskProc(task_rank, pid, pid in self.children)
            self._attach_streams(job, task, {})
            if pid:
                self._watch_pid(job, task)
            else:
                code = listing.get((jobid, task_rank))
                if code is None:
                    task.lost = True  # never spawned, or gone without a trace
                else:
                    task.code = code
                    task.status = wait_status(code)
            job.tasks.append(task)
        if any(t.lost for t in job.tasks):
            job.error = LOST_ERROR
        self.live[(rank, jobid)] = job
        self._woken.add((rank, jobid))
        self._reap_strays()  # our own wrappers that ended before this adoption
        return job

    # ------------------------------------------------------------ the loop

    def step(self) -> None:
        """One iteration: wait, read requests, act, watch tasks, write everything at once."""
        if not self._ready:
            self.setup()
        box = self.box
        self._listings.clear()
        self._wait(None if self.backlog else self._wait_ms())
        if not self.backlog and (self._maybe_new or any(self.pending.values())):
            self._read()
        self._handle_backlog(box)
        self._fire_timers(box)
        self._watch(box)
        now = time.monotonic()
        if now >= self._next_registry:
            self._next_registry = now + REGISTRY_INTERVAL_S
            self._registry(box)
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_INTERVAL_S
            self._prune(box)
        if not box:
            self._flush_after = None
            self._finish_cleanup(box)
        elif box.urgent() or self.stopping:
            self._flush(box)
        elif self._flush_after is None:
            self._flush_after = now + FLUSH_LINGER_S
        elif now >= self._flush_after:
            self._flush(box)

    def _wait_ms(self) -> float | None:
        """How long to wait for something to happen (ms, maybe fractional); None: not at all."""
        if any(self.pending.values()) or self._maybe_new:
            return None
        now = time.monotonic()
        ms = (min(self._next_registry, self._next_prune) - now) * 1000
        if self.timers:
            ms = min(ms, (self.timers[0][0] - now) * 1000)
        if self.live:  # output files do not announce new data: read them now and then
            ms = min(ms, (self._next_output - now) * 1000)
        if self._flush_after is not None:
            ms = min(ms, (self._flush_after - now) * 1000)
        return max(ms, 0.0)

    def _wait(self, timeout_ms: float | None) -> None:
        """Wait up to ``timeout_ms`` for a new request, a task's exit or nothing.

        Redis answers a blocking read's *timeout* only at its cron rate (every
        100 ms by default), so short waits must not rely on it: a blocking
        XREAD stays outstanding on a connection of its own as the "new
        request" signal, and the wait itself is a poll() on that connection,
        the tasks' pidfds and the timeout.  Without a timeout (work waiting)
        the pidfds are only checked.
        """
        waker = self.waker
        if timeout_ms is not None:
            waker.arm({self.streams[r]: self.last_ids[r] for r in self.ranks},
                      self._consumer)
            if self._waker_fd is None:
                self._waker_fd = waker.fileno()
                self.poller.register(self._waker_fd, select.POLLIN)
        if timeout_ms is not None and timeout_ms < 1:
            # poll() counts whole milliseconds, rounding up: a simulated job
            # due in 0.3 ms would end up to a millisecond late (or, waiting 0,
            # the loop would spin until it is due). Sleep the fraction instead.
            time.sleep(timeout_ms / 1000)
            timeout_ms = 0
        events = self.poller.poll(int(timeout_ms or 0))
        if events and self.pidfds and all(fd in self.pidfds for fd, _e in events):
            # Tasks of a job tend to end together: a moment's wait lets one
            # iteration (one write, one report entry) take them all.
            events += self.poller.poll(EXIT_LINGER_MS)
        for fd, _event in events:
            watched = self.pidfds.get(fd)
            if watched is not None:
                key, task = watched
                task.exited = True
                self._woken.add(key)
                self._unwatch_pid(task)  # it stays readable: stop polling it
            elif fd == self._waker_fd and self._waker_fd is not None:
                self.poller.unregister(fd)
                self._waker_fd = None
                reply = waker.consume()
                if self._consumer is None:
                    self._maybe_new = bool(reply)
                elif reply:
                    entries = _entries(stream_entries(reply))
                    # a full read may have left more behind: read on at once
                    self._maybe_new = len(entries) >= READ_COUNT
                    self._take({self.ranks[0]: entries})

    def _read(self) -> None:
        """Read new (or, after a restart, pending) requests and fetch what their starts need."""
        # every rank's request stream is in the global slot: one round trip
        commands = [("XREADGROUP", "GROUP", GROUP_EXEC, f"rank{rank}", "COUNT", READ_COUNT,
                     "STREAMS", self.streams[rank], "0" if self.pending[rank] else ">")
                    for rank in self.ranks]
        replies = self.direct.execute(commands)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        got = {rank: _entries(stream_entries(reply))
               for rank, reply in zip(self.ranks, replies, strict=True)}
        # A full read may have left more behind; otherwise only the waker's
        # signal (or a restart) says there is something new.
        self._maybe_new = any(len(entries) >= READ_COUNT for entries in got.values())
        self._take(got)

    def _take(self, got: Mapping[int, list[tuple[bytes, Any]]]) -> None:
        """Queue the request entries read per rank; fetch what their starts need."""
        new_starts: list[int] = []
        for rank, entries in got.items():
            redelivered = self.pending[rank]
            if redelivered and not entries:
                self.pending[rank] = False
            for msg_id, fields in entries:
                if not redelivered:
                    self.last_ids[rank] = msg_id
                self._accept(rank, msg_id, fields, redelivered, new_starts)
        if new_starts:
            self._fetch(new_starts)

    def _accept(self, rank: int, msg_id: bytes, fields: Any, redelivered: bool,
                new_starts: list[int]) -> None:
        """Decode one request entry; poison goes to the dead letters (and is acknowledged)."""
        stream = self.streams[rank]
        try:
            if not fields:
                raise proto.MessageError("entry has no fields (deleted?)")
            _epoch, msgs = proto.decode(fields)
            for msg in msgs:
                kind = msg["t"]
                if kind == "kill":
                    if not 0 < msg["signal"] < signal.NSIG:
                        raise proto.MessageError(f"kill: bad signal {msg['signal']}")
                elif kind != "start":
                    raise proto.MessageError(f"exec workers take start and kill, not {kind!r}")
        except proto.MessageError as exc:
            self.dead_letter(stream, msg_id, fields or {}, f"MessageError: {exc}")
            self.box.acks.setdefault(rank, []).append(msg_id)
            return
        for msg in msgs:
            if msg["t"] == "start" and msg["id"] not in self.fetched \
                    and msg["id"] not in self.jobs[rank]:
                new_starts.append(msg["id"])
        self.backlog.append(Entry(rank, msg_id, msgs, redelivered))

    def _fetch(self, jobids: Sequence[int]) -> None:
        """Job hash fields of every new start, in one round trip."""
        unique = list(dict.fromkeys(jobids))
        keys = [self.keys.job(jobid) for jobid in unique]
        replies = execute_grouped(self.redis, [
            (key, ("HMGET", key, "jobspec_full", "jobspec", "R", "owner", "result"))
            for key in keys])
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        for jobid, (full, submitted, r_raw, owner, result) in zip(unique, replies,
                                                                  strict=True):
            # The ingest stores jobspec_full only when defaults changed the jobspec.
            self.fetched[jobid] = (full if full is not None else submitted, r_raw, owner,
                                   result)

    def _handle_backlog(self, box: Outbox) -> None:
        """Handle request messages in order until the iteration's time budget is spent."""
        deadline = time.monotonic() + STEP_BUDGET_S
        backlog = self.backlog
        while backlog:
            entry = backlog[0]
            msgs = entry.msgs
            while entry.index < len(msgs):
                msg = msgs[entry.index]
                entry.index += 1
                if msg["t"] == "start":
                    self._on_start(box, entry.rank, msg, entry.redelivered)
                else:
                    self._on_kill(box, entry.rank, msg)
                if time.monotonic() > deadline:
                    break
            if entry.index < len(msgs):
                return  # the rest of this entry waits for the next iteration
            backlog.popleft()
            box.acks.setdefault(entry.rank, []).append(entry.msg_id)
            if not backlog:
                self.fetched.clear()
            if time.monotonic() > deadline:
                return

    # ------------------------------------------------------------ requests

    def _touch(self, box: Outbox, job: ExecJob, report: bool = True) -> None:
        key = (job.rank, job.id)
        box.records[key] = job
        if report:
            box.reports[key] = job

    def _on_start(self, box: Outbox, rank: int, msg: Mapping[str, Any],
                  redelivered: bool) -> None:
        jobid = msg["id"]
        job = self.jobs[rank].get(jobid)
        if job is not None:
            box.reports[(rank, jobid)] = job  # a repeated start: say again where it stands
            return
        data = self.fetched.get(jobid)  # shared by the job's ranks on this worker
        now = time.time()
        try:
            job = self._start(box, rank, jobid, data, now, redelivered)
        except StartFailed as exc:
            # the job started and its tasks could not: it fails with their exit code
            job = self._done(ExecJob(jobid, rank, "run", started=True), now,
                             status=wait_status(exc.code), error=str(exc))
            self._eof(box, job)
        except ValueError as exc:
            job = self._done(ExecJob(jobid, rank, "run"), now, error=str(exc))
            self._eof(box, job)
        except OSError as exc:
            # The state directory or the like: this job cannot run here.
            job = self._done(ExecJob(jobid, rank, "run"), now,
                             error=f"exec: {exc.strerror or exc}: {exc.filename or ''}")
            self._eof(box, job)
        self.jobs[rank][jobid] = job
        self._touch(box, job)

    def _start(self, box: Outbox, rank: int, jobid: int, data: Any, now: float,
               redelivered: bool) -> ExecJob:
        """Start the job's share on ``rank`` (or its simulation); ValueError is its exec error."""
        if data is None or data[0] is None:
            if data is not None and data[3] is not None:
                return self._done(ExecJob(jobid, rank, "run"), now)
            raise ValueError(f"exec: job {jobid} has no jobspec")
        spec_raw, r_raw, owner, result = data
        if result is not None:
            # The job is already inactive (a stale request): never run it again.
            return self._done(ExecJob(jobid, rank, "run"), now)
        try:
            spec = orjson.loads(spec_raw)
        except orjson.JSONDecodeError:
            raise ValueError("exec: the job's jobspec is not JSON") from None
        if not isinstance(spec, dict):
            raise ValueError("exec: the job's jobspec is not a mapping")
        duration = run_duration(spec)
        self.count_started += 1
        metrics.EXEC_STARTED.inc()
        if duration is not None:
            job = ExecJob(jobid, rank, "sim", started=True, deadline=now + duration)
            if duration < math.inf:
                self._arm(time.monotonic() + duration, "sim", job)
            return job
        if os.geteuid() == 0 and owner is not None and int(owner) != 0:
            raise ValueError("exec: this exec worker runs as root and will not run "
                             "another user's job")
        if r_raw is None:
            raise ValueError(f"exec: job {jobid} has no R")
        R = ResourceSet(r_raw)  # noqa: N806
        if rank not in R.ranks:
            raise ValueError(f"exec: rank {rank} is not in the job's R")
        host = R.hostname(rank)
        if host and rank not in self._given_hosts:
            self.hostnames[rank] = host
        layout = compute_layout(spec, R)
        share = layout.share(rank)
        outputs = output_spec(spec)
        forward = ("o" if outputs.stdout is None else "") + \
            ("e" if outputs.stderr is None else "")
        if redelivered:
            # This start was delivered before: a crash may have come between
            # spawning the tasks and recording them.  Never spawn twice.
            adopted = self._adopt_unrecorded(rank, jobid, share, forward, now)
            if adopted is not None:
                return adopted
        return self._launch(box, rank, jobid, spec, R, layout, share, outputs, forward, now)

    def _on_kill(self, box: Outbox, rank: int, msg: Mapping[str, Any]) -> None:
        jobid = msg["id"]
        sig = msg["signal"]
        job = self.jobs[rank].get(jobid)
        now = time.time()
        if job is None:
            # Never started here: nothing to kill, the resources are free.
            job = self._done(ExecJob(jobid, rank, "run"), now)
            self.jobs[rank][jobid] = job
            self._touch(box, job)
            return
        if job.kind == "done":
            box.reports[(rank, jobid)] = job
            return
        if job.kind == "sim":
            self._done(job, now, status=sig)  # "killed by signal N" has wait status N
            self._touch(box, job)
            return
        first = not job.kill_signal
        job.kill_signal = sig
        job.kill_time = now
        self._signal(job, sig)
        if first and not job.escalated:
            self._arm(time.monotonic() + self.kill_grace, "escalate", job)
        self._touch(box, job, report=False)

    def _signal(self, job: ExecJob, sig: int) -> None:
        """Send ``sig`` to the process group of every task still running."""
        for task in job.tasks:
            if not task.ended and task.pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(task.pid, sig)

    def _done(self, job: ExecJob, now: float, status: int | None = None,
              error: str | None = None) -> ExecJob:
        """Mark ``job`` finished and released on its rank."""
        if job.kind == "done":
            return job
        job.kind = "done"
        metrics.EXEC_FINISHED.inc()
        if status is not None:
            job.status = status
        if error is not None and job.error is None:
            job.error = error
        job.released = True
        job.done_time = now
        self.live.pop((job.rank, job.id), None)
        self.done_queue.append((now, job.rank, job.id))
        return job

    def _eof(self, box: Outbox, job: ExecJob) -> None:
        """The final output entry of this rank, so readers know it is done."""
        tasks = str(IDSet(t.rank for t in job.tasks))
        box.output.setdefault(job.id, []).append(
            {"eof": "1", "rank": str(job.rank), "tasks": tasks})

    # ------------------------------------------------------------ launching

    def _command_error(self, argv0: str, path: str | None, cwd: str) -> str | None:
        """:func:`command_error`, remembered for a moment (a PATH search costs ~10 stats)."""
        key = (argv0, path, cwd)
        now = time.monotonic()
        hit = self._commands.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._commands) > 1024:
            self._commands.clear()
        problem = command_error(argv0, path, cwd)
        self._commands[key] = (now + COMMAND_CACHE_S, problem)
        return problem

    def _launch(self, box: Outbox, rank: int, jobid: int, spec: Mapping[str, Any],
                R: ResourceSet, layout: JobLayout, share: RankShare,  # noqa: N803
                outputs: OutputSpec, forward: str, now: float) -> ExecJob:
        """Spawn this rank's tasks, each under the wrapper in its own session."""
        argv = task_command(spec)
        cwd = job_cwd(spec) or self.default_cwd
        if not os.path.isdir(cwd):
            raise ValueError(f"cannot change directory to {cwd!r}: "
                             f"{os.strerror(errno.ENOENT)}")
        env = job_environment(self.base_env, environment_overlay(spec))
        problem = self._command_error(argv[0], env.get("PATH"), cwd)
        if problem:
            # as a shell (and flux's job shell) would: 127 not found, 126 not executable
            raise StartFailed(problem, 127 if problem.endswith(os.strerror(errno.ENOENT))
                              else 126)
        job = ExecJob(jobid, rank, "run", started=True, forward=forward)
        if share.ntasks == 0:
            self._done(job, now, status=0)
            self._eof(box, job)
            return job
        name = job_name(spec)
        files = _OutputFiles(first_rank=rank == R.ranks.first())
        paths: dict[tuple[int, int], str] = {}
        try:
            for task in share.tasks():
                for (_flag, _name, _suffix, fd_no), template in zip(
                        _STREAMS, (outputs.stdout, outputs.stderr), strict=True):
                    if template is not None:
                        path = os.path.join(cwd, expand_template(
                            template, jobid=jobid, name=name, taskid=task.rank, rank=rank))
                        paths[(task.rank, fd_no)] = path
                        files.open(path)
        except OSError as exc:
            files.close()
            raise ValueError(f"cannot open output file {exc.filename!r}: "
                             f"{exc.strerror}") from None
        try:
            self._spawn_all(job, spec, layout, share, argv, cwd, env, files, paths)
        finally:
            files.close()
        self.live[(rank, jobid)] = job
        return job

    def _spawn_all(self, job: ExecJob, spec: Mapping[str, Any], layout: JobLayout,
                   share: RankShare, argv: list[str], cwd: str, env: Mapping[str, str],
                   files: _OutputFiles, paths: Mapping[tuple[int, int], str]) -> None:
        """Spawn every task; on failure kill what was started and record the error."""
        gpu_affinity = shell_option(spec, "gpu-affinity")
        cpu_affinity = shell_option(spec, "cpu-affinity")
        saved = self.cpus if cpu_affinity in ("on", "per-task") and self.cpus else None
        try:
            for task in share.tasks():
                actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull,
                                                   os.O_RDONLY, 0)]
                proc = TaskProc(task.rank, 0, True)
                for flag, sname, suffix, fd_no in _STREAMS:
                    user_path = paths.get((task.rank, fd_no))
                    if user_path is not None:
                        actions.append((os.POSIX_SPAWN_DUP2, files.fds[user_path], fd_no))
                    elif flag in job.forward:
                        spath = self._file(job.rank, job.id, task.rank, suffix)
                        fd = _high_fd(os.open(spath, _O_OUT, 0o600))
                        # The task writes through its copy; we read with pread at
                        # our own offset, so the shared file position does not matter.
                        proc.streams.append(Stream(sname, spath, fd))
                        actions.append((os.POSIX_SPAWN_DUP2, fd, fd_no))
                task_env = task_environment(env, jobid=job.id, layout=layout, share=share,
                                            task=task, cwd=cwd, uri=self.uri,
                                            gpu_affinity=gpu_affinity)
                status_prefix = self._file(job.rank, job.id, task.rank, "st")
                wrapper_argv = ["sh", "-c", WRAPPER, self._marker(job.rank, job.id, task.rank),
                                cwd, status_prefix, *argv]
                if saved is not None:
                    cores = self.cpus & set(task.cores if cpu_affinity == "per-task"
                                            else share.cores)
                    if cores:
                        os.sched_setaffinity(0, cores)
                try:
                    proc.pid = os.posix_spawn(SH, wrapper_argv, task_env, file_actions=actions,
                                              setsid=True, setsigdef=_SIGDEF, setsigmask=())
                except OSError:
                    for stream in proc.streams:
                        stream.close()
                    raise
                self.children.add(proc.pid)
                self._watch_pid(job, proc)
                job.tasks.append(proc)
        except OSError as exc:
            job.error = f"exec: cannot start task: {exc.strerror or exc}"
            job.started = False
            self._signal(job, signal.SIGKILL)
            job.escalated = True
        finally:
            if saved is not None:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, saved)

    # ------------------------------------------------------------ timers and tasks

    def _watch_pid(self, job: ExecJob, task: TaskProc) -> None:
        """Get a pidfd for ``task`` so its exit wakes the loop (Linux >= 5.3)."""
        key = (job.rank, job.id)
        try:
            fd = os.pidfd_open(task.pid)
        except ProcessLookupError:
            task.exited = True  # already gone: look at once
            self._woken.add(key)
            return
        except (OSError, AttributeError):
            return  # no pidfds here: the task is polled with the output files
        task.pidfd = fd
        self.pidfds[fd] = (key, task)
        self.poller.register(fd, select.POLLIN)

    def _unwatch_pid(self, task: TaskProc) -> None:
        if task.pidfd is not None:
            self.pidfds.pop(task.pidfd, None)
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(task.pidfd)
            with contextlib.suppress(OSError):
                os.close(task.pidfd)
            task.pidfd = None

    def _arm(self, when: float, kind: str, job: ExecJob) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (when, self._seq, kind, job.rank, job.id))

    def _fire_timers(self, box: Outbox) -> None:
        now = time.monotonic()
        wall = time.time()
        timers = self.timers
        while timers and timers[0][0] <= now:
            _when, _seq, kind, rank, jobid = heapq.heappop(timers)
            job = self.jobs[rank].get(jobid)
            if job is None:
                continue
            if kind == "sim" and job.kind == "sim":
                self._done(job, wall, status=0)
                self._touch(box, job)
            elif kind == "escalate" and job.kind == "run" and not job.escalated:
                job.escalated = True
                self._signal(job, signal.SIGKILL)
                self._touch(box, job, report=False)

    def _watch(self, box: Outbox) -> None:
        """Reap ended tasks, forward output, finish jobs whose tasks all ended."""
        if not self.live:
            return
        budget = _Budget(OUTPUT_BYTES_BUDGET, OUTPUT_LINES_BUDGET)
        wall = time.time()
        now = time.monotonic()
        if now >= self._next_output:
            # Every running job: new output, and tasks without a pidfd.
            self._next_output = now + self.poll_ms / 1000
            jobs = list(self.live.values())
        else:
            # Only the jobs a task exit woke us for (cheap with many jobs running).
            jobs = [self.live[k] for k in self._woken if k in self.live]
        self._woken.clear()
        for job in jobs:
            changed = False
            for task in job.tasks:
                if not task.ended and (task.exited or task.pidfd is None):
                    changed |= self._poll(box, job, task)
                if task.pidfd is not None and (task.status is not None or task.lost):
                    self._unwatch_pid(task)
            lines = box.output.get(job.id)
            for task in job.tasks:
                for stream in task.streams:
                    if not stream.done and budget.left():
                        got = _pump(stream, task.ended, budget)
                        if got and self.output_limit:
                            got = self._within_limit(job, task, got)
                        if got:
                            if lines is None:
                                lines = box.output.setdefault(job.id, [])
                            label = str(task.rank)
                            lines.extend({"rank": label, "stream": stream.name, "data": data}
                                         for data in got)
                            if job.truncated and got[-1].startswith(TRUNCATED_PREFIX):
                                lines[-1]["stream"] = "stderr"
                            changed = True
            if all(t.ended for t in job.tasks) and \
                    all(s.done for t in job.tasks for s in t.streams):
                statuses = [t.status for t in job.tasks if t.status is not None]
                self._done(job, wall, status=max(statuses) if statuses else None)
                self._eof(box, job)
                box.finished.append(job)
                self._touch(box, job)
            elif changed:
                self._touch(box, job, report=False)

    def _within_limit(self, job: ExecJob, task: TaskProc, got: list[bytes]) -> list[bytes]:
        """The lines of ``got`` that fit the job's output limit on this rank.

        The first line past the limit is replaced by one stderr line saying
        so (as flux's shell does), and everything after is read and dropped,
        so a job cannot fill Redis with output; complete output of any size
        goes to files (``--output``/``--error``).
        """
        if job.truncated:
            return []
        kept: list[bytes] = []
        for data in got:
            if job.forwarded + len(data) > self.output_limit:
                job.truncated = True
                kept.append(TRUNCATED_NOTE.format(
                    limit=format_size(self.output_limit), rank=job.rank).encode())
                break
            job.forwarded += len(data)
            kept.append(data)
        return kept

    def _poll(self, box: Outbox, job: ExecJob, task: TaskProc) -> bool:
        """Check whether ``task`` ended; True when something changed."""
        if task.own:
            try:
                pid, ws = os.waitpid(task.pid, os.WNOHANG)
            except ChildProcessError:
                task.own = False  # not ours after all (reaped elsewhere): use its file
                self.children.discard(task.pid)
                self._ended_elsewhere(job, task)
                return True
            if pid == 0:
                task.exited = False
                return False
            self.children.discard(task.pid)
            if os.WIFEXITED(ws):
                task.code = os.WEXITSTATUS(ws)
                task.status = wait_status(task.code)
            else:
                task.status = ws  # the wrapper itself was killed (SIGKILL escalation)
            self.reaped[task.pid] = (task.status, task.code)
            return True
        # Not our child: alive while its command line still carries the marker
        # (a zombie nobody reaps has an empty one, a reused pid another).
        if _has_marker(task.pid, self._marker(job.rank, job.id, task.rank)):
            task.exited = False
            return False
        self._ended_elsewhere(job, task)
        if task.lost and job.error is None:
            job.error = LOST_ERROR
            box.reports[(job.rank, job.id)] = job
        return True

    # ------------------------------------------------------------ housekeeping

    def _registry(self, box: Outbox) -> None:
        now = time.time()
        pid = os.getpid()
        running: dict[int, int] = {}
        for rank, _jobid in self.live:
            running[rank] = running.get(rank, 0) + 1
        for rank in self.ranks:
            box.registry[str(rank)] = orjson.dumps({
                "hostname": self.hostnames[rank], "pid": pid, "worker": self.name,
                "heartbeat": now, "running": running.get(rank, 0)})

    def _prune(self, box: Outbox) -> None:
        """Forget finished jobs the job manager is done with (their hash says inactive)."""
        horizon = time.time() - self.done_retention
        queue = self.done_queue
        candidates: list[ExecJob] = []
        while queue and queue[0][0] <= horizon and len(candidates) < PRUNE_BATCH:
            _t, rank, jobid = queue.popleft()
            job = self.jobs[rank].get(jobid)
            if job is not None and job.kind == "done":
                candidates.append(job)
        if not candidates:
            return
        pipe = self.redis.pipeline(transaction=False)
        for job in candidates:
            key = self.keys.job(job.id)
            pipe.hexists(key, "result")
            pipe.exists(key)
        replies = pipe.execute()
        now = time.time()
        for i, job in enumerate(candidates):
            inactive, exists = replies[2 * i], replies[2 * i + 1]
            if inactive or not exists:
                del self.jobs[job.rank][job.id]
                box.records[(job.rank, job.id)] = None
            else:
                queue.append((now, job.rank, job.id))  # still active: look again later

    def _flush(self, box: Outbox) -> None:
        """Write the iteration's effects: one MULTI for the global slot, then other slots."""
        self._flush_after = None
        if not box:
            self._finish_cleanup(box)
            return
        keys = self.keys
        tx: list[tuple[Any, ...]] = []
        later: list[tuple[str, tuple[Any, ...]]] = []
        for jobid, entries in box.output.items():
            key = keys.output(jobid)
            for fields in entries:
                tx.append(_xadd(key, fields))
        sets: dict[int, dict[str, bytes]] = {}
        dels: dict[int, list[str]] = {}
        for (rank, jobid), job in box.records.items():
            if job is None:
                dels.setdefault(rank, []).append(str(jobid))
            else:
                sets.setdefault(rank, {})[str(jobid)] = job.record()
        for rank, mapping in sets.items():
            tx.append(("HSET", keys.exec_jobs(rank), *_flat(mapping)))
        for rank, names in dels.items():
            tx.append(("HDEL", keys.exec_jobs(rank), *names))
        for rank, ids in box.acks.items():
            tx.append(("XACK", self.streams[rank], GROUP_EXEC, *ids))
        if box.registry:
            tx.append(("HSET", keys.exec_registry, *_flat(box.registry)))
        by_partition: dict[int, list[dict[str, Any]]] = {}
        for job in box.reports.values():
            by_partition.setdefault(keys.partition_of(job.id), []).append(job.report())
        anchor = keys.exec_registry
        for partition, msgs in by_partition.items():
            stream = keys.exec_events(partition)
            for i in range(0, len(msgs), REPORT_CHUNK):
                command = _xadd(stream, proto.encode(msgs[i:i + REPORT_CHUNK]))
                if keys.same_slot(stream, anchor):
                    tx.append(command)
                else:
                    later.append((stream, command))
        if tx:
            self.direct.transaction(tx)
        if later:
            for reply in execute_grouped(self.redis, later):
                if isinstance(reply, redis.ResponseError):
                    raise reply
        self._finish_cleanup(box)

    def _finish_cleanup(self, box: Outbox) -> None:
        """After the write: remove the files of jobs whose end is recorded; new outbox."""
        for job in box.finished:
            _close_streams(job)
            for task in job.tasks:
                self.reaped.pop(task.pid, None)
                for stream in task.streams:
                    _unlink(stream.path)
                if task.code is not None:
                    _unlink(self._file(job.rank, job.id, task.rank, f"st.{task.code}"))
        self.box = Outbox()


# ----------------------------------------------------------------------------- helpers


def _pool_for(client: Any, key: str) -> Any:
    """The connection pool serving ``key``: the client's own, or (Redis Cluster) the
    pool of the node that holds the key's slot."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    return client.get_node_from_key(key).redis_connection.connection_pool


class _Waker:
    """A blocking read kept outstanding on a connection of its own (see :meth:`arm`)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pool: Any = None
        self.conn: Any = None
        self.outstanding = False

    def arm(self, streams: Mapping[str, bytes | str], consumer: str | None = None) -> None:
        """Send the blocking read unless one is already out.

        With ``consumer`` (a worker serving one rank) it is the consumer
        group read itself, so its answer carries the new entries and saves a
        round trip per wake-up; otherwise an XREAD from the last delivered ids
        only signals that the per-rank group reads have something to take.
        """
        if self.outstanding:
            return
        if self.conn is None:
            self.pool = _pool_for(self.client, next(iter(streams)))
            self.conn = self.pool.get_connection()
        if consumer is not None:
            self.conn.send_command("XREADGROUP", "GROUP", GROUP_EXEC, consumer, "COUNT",
                                   READ_COUNT, "BLOCK", WAKE_BLOCK_MS, "STREAMS",
                                   *streams.keys(), *(">" for _ in streams))
        else:
            self.conn.send_command("XREAD", "COUNT", 1, "BLOCK", WAKE_BLOCK_MS, "STREAMS",
                                   *streams.keys(), *streams.values())
        self.outstanding = True

    def fileno(self) -> int:
        """The connection's socket, to poll() on."""
        return int(self.conn._sock.fileno())  # redis-py keeps no public accessor

    def consume(self) -> Any:
        """Read the answer: the raw stream reply (None when the read timed out)."""
        reply = self.conn.read_response()
        self.outstanding = False
        return reply

    def close(self) -> None:
        """Drop the connection (an answer still out would confuse its next user)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.disconnect()
                self.pool.release(self.conn)
            self.conn = None
        self.outstanding = False


class _OutputFiles:
    """User output files of one job on this rank, each opened once.

    Tasks append (so tasks sharing a file do not overwrite each other); the
    job's first rank truncates when it opens the file.
    """

    def __init__(self, first_rank: bool) -> None:
        self.first_rank = first_rank
        self.fds: dict[str, int] = {}

    def open(self, path: str) -> None:
        if path in self.fds:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if self.first_rank:
            flags |= os.O_TRUNC
        self.fds[path] = _high_fd(os.open(path, flags, 0o666))

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


class _Budget:
    """Output bytes and lines still allowed in this iteration."""

    __slots__ = ("bytes", "lines")

    def __init__(self, nbytes: int, lines: int) -> None:
        self.bytes = nbytes
        self.lines = lines

    def left(self) -> bool:
        return self.bytes > 0 and self.lines > 0


def _pump(stream: Stream, final: bool, budget: _Budget) -> list[bytes]:
    """Whole lines newly written to ``stream``; once the task ended, everything to the end.

    A live task's file gets one read per iteration (fairness between tasks);
    an ended task's file is read to its end, budget permitting, and its last
    partial line is forwarded as it is.
    """
    out: list[bytes] = []
    while budget.left():
        want = min(READ_CHUNK, budget.bytes)
        data = b""
        if stream.fd is not None:
            try:
                data = os.pread(stream.fd, want, stream.offset + len(stream.buf))
            except OSError:
                data = b""
        if not data:
            if final:
                if stream.buf:
                    out.append(stream.buf)
                    stream.offset += len(stream.buf)
                    stream.buf = b""
                stream.done = True
                stream.close()
            break
        budget.bytes -= len(data)
        buf = stream.buf + data
        cut = buf.rfind(b"\n") + 1
        if cut:
            for line in buf[:cut].splitlines(keepends=True):
                out.extend(_split_long(line))
            stream.offset += cut
            buf = buf[cut:]
        while len(buf) >= MAX_LINE:
            out.append(buf[:MAX_LINE])
            stream.offset += MAX_LINE
            buf = buf[MAX_LINE:]
        stream.buf = buf
        if not final:
            break
    budget.lines -= len(out)
    return out


def _split_long(line: bytes) -> list[bytes]:
    if len(line) <= MAX_LINE:
        return [line]
    return [line[i:i + MAX_LINE] for i in range(0, len(line), MAX_LINE)]


def _xadd(key: str, fields: Mapping[Any, Any], maxlen: int | None = None) -> tuple[Any, ...]:
    """An XADD command (trimmed approximately to ``maxlen`` entries when given)."""
    trim = ("MAXLEN", "~", maxlen) if maxlen is not None else ()
    return ("XADD", key, *trim, "*", *_flat(fields))


def _flat(mapping: Mapping[Any, Any]) -> list[Any]:
    """A mapping as the field/value list of HSET or XADD."""
    out: list[Any] = []
    for field_, value in mapping.items():
        out += (field_, value)
    return out


def _entries(reply: Any) -> list[tuple[bytes, Any]]:
    """The entries of an XREADGROUP reply (``[[stream, [(id, fields)...]]...]``)."""
    out: list[tuple[bytes, Any]] = []
    for _stream, entries in reply or []:
        out.extend(entries)
    return out


def _high_fd(fd: int) -> int:
    """``fd`` moved above the standard descriptors (a worker started with them closed
    would otherwise hand a task fd 1 as "its stdout file" and dup2 would be a no-op)."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _close_streams(job: ExecJob) -> None:
    for task in job.tasks:
        for stream in task.streams:
            stream.close()


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def _has_marker(pid: int, marker: str) -> bool:
    """True if ``pid`` is alive and is the wrapper carrying ``marker`` (not a reused pid)."""
    argv = _cmdline(pid)
    return len(argv) > 3 and argv[3] == marker.encode()


def _live_markers(prefix: str) -> list[tuple[int, str]]:
    """(pid, marker) of live wrappers whose marker starts with ``prefix`` (a /proc scan)."""
    found = []
    want = prefix.encode()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        argv = _cmdline(pid)
        if len(argv) > 3 and argv[3].startswith(want):
            found.append((pid, argv[3].decode(errors="replace")))
    return found


def default_state_dir() -> str:
    """Where task files live when none is given: per user, on tmpfs when there is one."""
    for base in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if base and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return os.path.join(base, f"fluxes-exec-{os.getuid()}")
    return os.path.join("/tmp", f"fluxes-exec-{os.getuid()}")


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
