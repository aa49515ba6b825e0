"""Running the job prolog, epilog and housekeeping on an exec rank (as the worker's user).

Each hook runs as ``/bin/sh -c HOOK_WRAPPER <marker> <status-prefix> CMD...``
in its own session, stdin ``/dev/null``, stdout and stderr appended to
``<state>/hooks/rank<r>/<job>.<phase>.log``; the wrapper creates
``<job>.<phase>.st.<code>`` when the command ends (the exit code is in the
name, as for tasks), and ``<job>.<phase>.json`` says what runs (pid, the
deadline, the job's owner, whether a start waits on it).  Those files, not
the worker's memory, are the truth: a restarted worker finds a hook ended
(its status file), still running (its pid, whose command line carries the
marker) or lost (neither), and carries on (docs/exec.md, "Prolog, epilog,
housekeeping").  The rules are :mod:`fluxes.domain.exec.perilog`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import orjson

from fluxes.domain.exec.jobs import ExecJob
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.perilog import (
    Hook,
    PerilogConfig,
    drain_reason,
    failure_text,
    hook_environment,
    housekeeping_reason,
)
from fluxes.domain.jm.perilog import RUNNING

SH = "/bin/sh"
#: Signals reset to their default action in a hook.
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
#: $0 the marker (for /proc scans), $1 the status file prefix, then the command.
HOOK_WRAPPER = 'f=$1\nshift\n"$@"\ns=$?\ntrue >"$f.$s"\nexit "$s"\n'


@dataclass(slots=True)
class HookRun:
    """One hook running (or ended) for a job on a rank."""

    phase: str
    rank: int
    jobid: int
    owner: int
    pid: int
    deadline: float  # wall clock; 0 for none
    waits_start: bool = False  # a prolog: the job's tasks start when it ends well
    canceled: bool = False  # the job was killed while it ran: its end is no failure
    timed_out: bool = False
    drain_id: str = ""  # housekeeping: the resource event that holds the rank
    ended: bool = False
    status: int | None = None  # wait status; None when lost
    own: bool = False  # our child (started by this worker): waited for with waitpid

    @property
    def failed(self) -> bool:
        """It ended badly (not when canceled by a kill of the job)."""
        return self.ended and not self.canceled and (self.timed_out or self.status != 0)


def hook_marker(ns: str, rank: int, jobid: int, phase: str) -> str:
    """The marker a hook's wrapper carries as its first argument."""
    return f"fluxes-hook:{ns}:{rank}:{jobid}:{phase}"


class HookRunner:
    """Starts hooks, notices their end (or timeout), and finds them again after a restart."""

    def __init__(self, state_dir: str, ns: str, ranks: list[int],
                 watch: Callable[[int], None] | None = None) -> None:
        # ``watch(pid)`` makes the hook's end wake the worker's loop (a pidfd)
        self.watch = watch
        self.ns = ns
        self.dirs = {r: os.path.join(state_dir, "hooks", f"rank{r}") for r in ranks}
        self.runs: dict[tuple[int, int], HookRun] = {}
        self.base_env = {k: v for k, v in os.environ.items()
                         if k in ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR")}

    def _path(self, run: HookRun, suffix: str) -> str:
        return os.path.join(self.dirs[run.rank], f"{run.jobid}.{run.phase}.{suffix}")

    def get(self, rank: int, jobid: int) -> HookRun | None:
        """The hook running (or ended, not yet taken) for the job on ``rank``."""
        return self.runs.get((rank, jobid))

    def start(self, phase: str, hook: Hook, rank: int, jobid: int, owner: int,
              waits_start: bool = False) -> HookRun:
        """Run ``hook`` for the job; a spawn failure is a run ended with status 127 << 8."""
        os.makedirs(self.dirs[rank], mode=0o700, exist_ok=True)
        deadline = time.time() + hook.timeout if hook.timeout > 0 else 0.0
        run = HookRun(phase, rank, jobid, owner, 0, deadline, waits_start)
        prefix = self._path(run, "st")
        for stale in self._status_files(run):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        env = hook_environment(self.base_env, jobid, owner, rank, phase)
        log = self._path(run, "log")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        try:
            # posix_spawn, as for tasks: a fork of the worker costs milliseconds more
            run.pid = os.posix_spawn(SH, [
                "sh", "-c", HOOK_WRAPPER, hook_marker(self.ns, rank, jobid, phase), prefix,
                *hook.argv], env, file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, log, flags, 0o600),
                    (os.POSIX_SPAWN_DUP2, 1, 2)], setsid=True, setsigdef=_SIGDEF,
                setsigmask=())
            run.own = True
            if self.watch is not None:
                self.watch(run.pid)
        except OSError:
            run.ended, run.status = True, 127 << 8
        self.runs[(rank, jobid)] = run
        self._save(run)
        return run

    def _save(self, run: HookRun) -> None:
        path = self._path(run, "json")
        with open(path + ".tmp", "wb") as out:
            out.write(orjson.dumps({"phase": run.phase, "pid": run.pid, "deadline": run.deadline,
                                    "owner": run.owner, "waits_start": run.waits_start,
                                    "canceled": run.canceled, "drain_id": run.drain_id}))
        os.replace(path + ".tmp", path)

    def _status_files(self, run: HookRun) -> Iterator[str]:
        prefix = f"{run.jobid}.{run.phase}.st."
        with contextlib.suppress(OSError):
            for name in os.listdir(self.dirs[run.rank]):
                if name.startswith(prefix):
                    yield os.path.join(self.dirs[run.rank], name)

    def _status(self, run: HookRun) -> int | None:
        """The wait status its status file says, None while there is none."""
        for path in self._status_files(run):
            code = path.rsplit(".", 1)[1]
            if code.isdigit():
                return int(code) << 8 if int(code) <= 128 else int(code) - 128
        return None

    def _ok_path(self, rank: int, jobid: int) -> str:
        return os.path.join(self.dirs[rank], f"{jobid}.prolog.ok")

    def mark_ok(self, rank: int, jobid: int) -> None:
        """The job's prolog ended well here: its tasks start on the next start request."""
        with open(self._ok_path(rank, jobid), "wb"):
            pass

    def take_ok(self, rank: int, jobid: int) -> bool:
        """True (once) when the job's prolog ended well here."""
        try:
            os.unlink(self._ok_path(rank, jobid))
        except OSError:
            return False
        return True

    def hold(self, run: HookRun, drain_id: str) -> None:
        """Remember the drain that holds the rank while ``run`` (housekeeping) runs."""
        run.drain_id = drain_id
        self._save(run)

    def cancel(self, run: HookRun) -> None:
        """The job was killed: end its hook (a prolog; an epilog runs to its end)."""
        run.canceled = True
        self._save(run)
        self._kill(run)

    @staticmethod
    def _kill(run: HookRun) -> None:
        if run.pid > 0 and not run.ended:
            with contextlib.suppress(OSError):
                os.killpg(run.pid, signal.SIGKILL)

    def poll(self) -> list[HookRun]:
        """The runs that ended since the last call (status or timeout set)."""
        done = []
        now = time.time()
        for run in list(self.runs.values()):
            if run.ended:
                done.append(run)
                continue
            if run.own:
                try:
                    pid, ws = os.waitpid(run.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: its status file says
                    run.own = False
                    continue
                if pid == 0:
                    if run.deadline and now >= run.deadline:
                        run.timed_out = True
                        self._kill(run)
                    continue
                run.status = ws
            else:
                status = self._status(run)
                if status is None and _alive(run.pid, hook_marker(self.ns, run.rank, run.jobid,
                                                                    run.phase)):
                    if run.deadline and now >= run.deadline:
                        run.timed_out = True
                        self._kill(run)
                    continue
                if status is None:
                    # it may have written its status and exited between the two looks:
                    # only a hook gone without a status file was lost
                    status = self._status(run)
                run.status = status
            run.ended = True
            done.append(run)
        return done

    def forget(self, run: HookRun) -> None:
        """Remove an ended run and its files (its log stays until the next run of it)."""
        self.runs.pop((run.rank, run.jobid), None)
        for path in [self._path(run, "json"), *self._status_files(run)]:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def log_tail(self, run: HookRun, limit: int = 200) -> str:
        """The last line the hook wrote (for the worker's log), at most ``limit`` chars."""
        try:
            with open(self._path(run, "log"), "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - 4096))
                lines = log.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:limit] if lines else ""

    def restore(self) -> list[HookRun]:
        """The runs a previous worker left (running ones are watched by :meth:`poll`)."""
        found = []
        for rank, directory in self.dirs.items():
            with contextlib.suppress(OSError):
                for name in os.listdir(directory):
                    if not name.endswith(".json"):
                        continue
                    run = _load(os.path.join(directory, name), rank)
                    if run is not None and (rank, run.jobid) not in self.runs:
                        self.runs[(rank, run.jobid)] = run
                        found.append(run)
                        if self.watch is not None and run.pid > 0:
                            self.watch(run.pid)
        return found


def _load(path: str, rank: int) -> HookRun | None:
    try:
        with open(path, "rb") as src:
            rec = orjson.loads(src.read())
        jobid = int(os.path.basename(path).split(".", 1)[0])
        return HookRun(str(rec["phase"]), rank, jobid, int(rec["owner"]), int(rec["pid"]),
                       float(rec["deadline"]), bool(rec.get("waits_start")),
                       bool(rec.get("canceled")), drain_id=str(rec.get("drain_id") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None


def _alive(pid: int, marker: str) -> bool:
    """True when ``pid`` runs and is the hook's wrapper (its command line has the marker)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as src:
            return marker.encode() in src.read().split(b"\0")
    except OSError:
        return False


#: Called when a prolog failed or was lost: (rank, job id, error, prolog status).
FailStart = Callable[[int, int, str, int], None]
#: Drains a rank with a reason; the id of the resource event written.
Drain = Callable[[int, str], str]
#: Undrains a rank unless a resource event about it came after the given one.
Undrain = Callable[[int, str], None]


class PerilogFlow:
    """Where the hooks sit in a job's life on a rank (the exec worker's small hooks call it).

    A job's start waits for the prolog of every rank: a rank whose prolog ended
    well reports it and waits; the job manager posts ``prolog-finish`` once all
    did and sends the start again, which starts the tasks (so no task runs
    anywhere when a prolog fails).  ``fail_start`` fails a start whose prolog
    failed;
    ``drain(rank, reason)`` drains a rank, ``undrain(rank, since)`` gives a rank
    held for housekeeping back, ``is_drained(rank)`` says whether it is already;
    ``get_job(rank, jobid)`` is the job table's; ``host(rank)`` names the rank in
    messages.

    Housekeeping runs once the job is released: as flux's, the job ends (it
    becomes inactive) while its node stays out of the scheduler's reach, held
    by a drain whose reason starts with :data:`HOUSEKEEPING_REASON` until the
    command ends; each rank is given back on its own (a partial release).
    """

    def __init__(self, runner: HookRunner, fail_start: FailStart,
                 drain: Drain, undrain: Undrain,
                 get_job: Callable[[int, int], ExecJob | None],
                 host: Callable[[int], str],
                 is_drained: Callable[[int], bool] = lambda _rank: False) -> None:
        self.runner = runner
        self.config = PerilogConfig()
        self._fail_start, self._drain = fail_start, drain
        self._undrain, self._is_drained = undrain, is_drained
        self._get_job, self._host = get_job, host
        self.waiting: dict[tuple[int, int], ExecJob] = {}  # the reports of held starts

    def holding(self) -> bool:
        """True while a hook runs (the loop must look again soon)."""
        return bool(self.runner.runs)

    def on_start(self, box: Outbox, rank: int, jobid: int, owner: int) -> bool:
        """A new start: run the prolog first (True: the start waits on it)."""
        hook = self.config.prolog
        if hook is None:
            return False
        if self.runner.take_ok(rank, jobid):
            return False  # every rank's prolog ended well: the tasks start now
        if self.runner.get(rank, jobid) is not None or (rank, jobid) in self.waiting:
            return True  # a repeated start while its prolog runs (or ran)
        run = self.runner.start("prolog", hook, rank, jobid, owner, waits_start=True)
        job = ExecJob(jobid, rank, "run", owner=owner)
        job.prolog = RUNNING
        self.waiting[(rank, jobid)] = job
        box.report(job)
        del run
        return True

    def prolog_status(self, rank: int, jobid: int) -> int | None:
        """The status of the prolog a start waited on (None: none ran)."""
        job = self.waiting.get((rank, jobid))
        return None if job is None else job.prolog

    def on_kill(self, rank: int, jobid: int) -> None:
        """The job is killed: a prolog of it stops (its tasks never start)."""
        run = self.runner.get(rank, jobid)
        if run is not None and run.phase == "prolog":
            self.runner.cancel(run)
        elif self.runner.take_ok(rank, jobid):
            self.waiting.pop((rank, jobid), None)

    def started(self, job: ExecJob) -> None:
        """A real job's tasks run (or its start failed after its prolog ran): its release
        waits for the epilog/housekeeping."""
        job.held = self.config.after_job
        waited = self.waiting.pop(job.key, None)
        if waited is not None:
            job.prolog = waited.prolog

    def finished(self, box: Outbox, jobs: list[ExecJob]) -> None:
        """Jobs whose tasks all ended: run their epilog (or housekeeping)."""
        for job in jobs:
            if job.held and self.runner.get(job.rank, job.id) is None:
                if self.config.epilog is not None:
                    self.runner.start("epilog", self.config.epilog, job.rank, job.id, job.owner)
                    job.epilog = RUNNING
                    box.report(job)
                else:
                    self._release(box, job)

    def _release(self, box: Outbox, job: ExecJob, drained: bool = False) -> None:
        """Report the job released here, its housekeeping (if any) holding the rank.

        A rank drained already (``drained``: its epilog failed; or by anyone, as the
        scheduler last said) stays so: housekeeping then neither drains nor undrains it.
        """
        hook = self.config.housekeeping
        if hook is not None and self.runner.get(job.rank, job.id) is None:
            drain_id = ""
            if not drained and not self._is_drained(job.rank):
                # drained before the release is reported: the scheduler reads the drain
                # before the job's free (workers/scheduler.py): the rank is never offered
                drain_id = self._drain(job.rank, housekeeping_reason(job.id))
            run = self.runner.start("housekeeping", hook, job.rank, job.id, job.owner)
            self.runner.hold(run, drain_id)
        job.held = False
        box.touch(job)

    def poll(self, box: Outbox) -> list[tuple[HookRun, str]]:
        """Act on the hooks that ended; (run, what happened) for the worker's log."""
        said = []
        for run in self.runner.poll():
            self.runner.forget(run)
            text = ""
            if run.phase == "housekeeping" and not run.failed and run.drain_id:
                self._undrain(run.rank, run.drain_id)
            if run.failed:
                timed_out = run.timed_out
                text = failure_text(run.phase, run.status, timed_out, self._host(run.rank),
                                    run.rank)
                self._drain(run.rank, drain_reason(run.phase, timed_out, run.jobid))
            said.append((run, text or f"{run.phase} ended"))
            self._after(box, run, text)
        return said

    def _after(self, box: Outbox, run: HookRun, failure: str) -> None:
        status = run.status if run.status is not None else (9 if run.timed_out else 1 << 8)
        if run.timed_out and run.status is not None and run.status == 0:
            status = 9
        if run.phase == "housekeeping":
            return  # the job was released when it began
        if run.phase == "prolog":
            waited = self.waiting.get((run.rank, run.jobid))
            if waited is not None:
                waited.prolog = status if not run.canceled else 0
            if run.canceled:
                self.waiting.pop((run.rank, run.jobid), None)
            elif failure:
                self.waiting.pop((run.rank, run.jobid), None)
                self._fail_start(run.rank, run.jobid, failure, status)
            else:
                # wait for the job manager's next start (every rank's prolog ended well)
                self.runner.mark_ok(run.rank, run.jobid)
                if waited is None:  # started before a restart of this worker
                    waited = self.waiting[(run.rank, run.jobid)] = ExecJob(
                        run.jobid, run.rank, "run", owner=run.owner)
                waited.prolog = 0
                box.report(waited)
            return
        job = self._get_job(run.rank, run.jobid)
        if job is None:
            return
        if run.phase == "epilog":
            job.epilog = status if not run.canceled else 0
            self._release(box, job, drained=bool(failure))

    def restore(self) -> None:
        """After a restart: hold the restored jobs whose epilog still runs (housekeeping
        holds its rank by its drain, which outlives the worker)."""
        for run in self.runner.restore():
            job = self._get_job(run.rank, run.jobid)
            if run.phase == "prolog" and not run.canceled:
                waited = self.waiting[(run.rank, run.jobid)] = ExecJob(
                    run.jobid, run.rank, "run", owner=run.owner)
                waited.prolog = RUNNING
            if run.phase == "epilog" and job is not None:
                job.held = True
                job.epilog = RUNNING
