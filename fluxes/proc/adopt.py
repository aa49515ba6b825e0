"""Finding a job's processes again after a restart: markers in /proc, status files.

A restarted exec worker rebuilds its jobs from their records; this module
gathers what the host says about each task (is the pid our child, does the
spawner run it with its marker, does a live wrapper carry the task's marker,
is a status file there)
and lets :mod:`fluxes.domain.exec.adoption` decide.  It also finds the
tasks of a start that was spawned but not recorded before a crash (a /proc
scan for the job's markers), so a redelivered start never runs a job twice,
and checks tasks that are not our children (no ``waitpid`` for those).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from fluxes.domain.exec.adoption import (
    WATCH,
    lost_error,
    marker,
    marker_task,
    settle_gone,
    settle_recorded,
    settle_unrecorded,
)
from fluxes.domain.exec.jobs import ExecJob, TaskProc
from fluxes.domain.exec.layout import RankShare
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.records import Offsets
from fluxes.proc.exec_files import TaskFiles
from fluxes.proc.spawner import shell_code
from fluxes.proc.tasks import TaskWatcher


def cmdline(pid: int) -> list[bytes]:
    """The arguments of process ``pid`` ([] when it is gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def runs_as(pid: int, uid: int | None) -> bool:
    """Whether process ``pid`` belongs to ``uid`` (None: anyone).  Anyone can put a
    marker on a command line: only a process of the job's user can be its task."""
    if uid is None:
        return True
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid
    except OSError:
        return False


def zombie_status(pid: int) -> int | None:
    """The wait status of ``pid`` if it is a zombie (exited, not yet reaped), else None.

    Called when a task's pidfd said it exited: its pid cannot be reused
    before its parent (the spawner) reaps it, and once reaped it is no zombie.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 50 or fields[0] != b"Z":
        return None
    return int(fields[49])  # field 52, exit_code (Linux >= 3.5)


def has_marker(pid: int, mark: str, uid: int | None = None) -> bool:
    """True if ``pid`` is alive and is the wrapper carrying ``mark`` (not a reused pid),
    run by ``uid`` when given."""
    argv = cmdline(pid)
    return len(argv) > 3 and argv[3] == mark.encode() and runs_as(pid, uid)


def live_markers(prefix: str, uid: int | None = None) -> list[tuple[int, str]]:
    """(pid, marker) of live wrappers whose marker starts with ``prefix`` (a /proc scan),
    run by ``uid`` when given."""
    found = []
    want = prefix.encode()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        argv = cmdline(pid)
        if len(argv) > 3 and argv[3].startswith(want) and runs_as(pid, uid):
            found.append((pid, argv[3].decode(errors="replace")))
    return found


class Adopter:
    """Re-attaches a worker to tasks it did not start, or started before a reload."""

    def __init__(self, ns: str, files: TaskFiles, watcher: TaskWatcher) -> None:
        self.ns = ns
        self.files = files
        self.watcher = watcher

    def restore(self, job: ExecJob, offsets: Offsets) -> None:
        """A recorded real job: reopen its output at the recorded offsets and
        settle each unfinished task (reaped, watched, ended or lost)."""
        files, watcher = self.files, self.watcher
        for task in job.tasks:
            out, err = offsets.get(task.rank, (0, 0))
            files.attach(job, task, {"stdout": out, "stderr": err})
        for task in job.tasks:
            if not task.ended and not job.as_user and self._spawner_knows(job, task):
                task.spawned, task.own = True, False
                watcher.watch(job.key, task)
            elif not task.ended and settle_recorded(
                    task, reaped=watcher.reaped, children=watcher.children,
                    alive=self._alive(job, task), status_code=self._code(job, task),
                    escalated=job.escalated) == WATCH:
                watcher.watch(job.key, task)
        lost_error(job)

    def unrecorded(self, rank: int, jobid: int, share: RankShare, forward: str,
                   owner: int = -1, user: int | None = None) -> ExecJob | None:
        """A redelivered start whose tasks may have been spawned before a crash: adopt them.

        ``owner`` is the job owner's uid, ``user`` the uid its tasks run as when
        not the worker's.  None when nothing of the job exists here (it was never
        spawned).
        """
        prefix = marker(self.ns, rank, jobid)
        live: dict[int, int] = {}
        found_by_spawner: set[int] = set()
        link = self.watcher.spawner
        if user is None and link is not None and link.up:
            for pid, found in link.running.items():
                task_rank = marker_task(prefix, found)
                if task_rank is not None:
                    live[task_rank] = pid
                    found_by_spawner.add(pid)
        for pid, found in live_markers(prefix, os.geteuid() if user is None else user):
            task_rank = marker_task(prefix, found)
            if task_rank is not None:
                live[task_rank] = pid
        listing = self.files.listing(rank, fresh=True, uid=user)
        codes = {task: code for (job, task), code in listing.items() if job == jobid}
        tasks = settle_unrecorded(share.task_ranks, live, codes,
                                  self.files.has_files(rank, jobid, user),
                                  self.watcher.children)
        if tasks is None:
            return None
        job = ExecJob(jobid, rank, "run", started=True, forward=forward, owner=owner,
                      as_user=user is not None)
        for task in tasks:
            self.files.attach(job, task, {})
            if task.pid in found_by_spawner:
                task.spawned, task.own = True, False
            if task.pid:
                self.watcher.watch(job.key, task)
            job.tasks.append(task)
        lost_error(job)
        self.watcher.woken.add(job.key)
        return job

    def look(self, job: ExecJob, box: Outbox) -> bool:
        """Look at ``job``'s tasks that may have ended (their pidfd said so, or they
        have none); True when one did.  A task found lost gives the job its error,
        reported at once."""
        changed = False
        for task in job.tasks:
            if not task.ended and (task.exited or (task.pidfd is None and not task.spawned)) \
                    and self.check(job, task):
                changed = True
                if lost_error(job):
                    box.report(job)
            if task.pidfd is not None and task.ended:
                self.watcher.unwatch(task)
        return changed

    def check(self, job: ExecJob, task: TaskProc) -> bool:
        """Whether ``task`` (not ended) ended; its status is then set.

        Our own children are reaped; another process's task ended when no
        live process carries its marker any more (a zombie nobody reaps has
        an empty command line, a reused pid another one); the spawner's task
        when the spawner said so.
        """
        if task.spawned:
            return self._check_spawned(job, task)
        if task.own:
            reaped = self.watcher.reap(task)
            if reaped is not None:
                return reaped
            # not ours after all (reaped elsewhere): its status file tells
        elif has_marker(task.pid, self._marker(job, task), self._uid(job)):
            task.exited = False
            return False
        settle_gone(task, self.files.status_code(job.rank, job.id, task.rank,
                                                 self.files.owner_of(job)), job.escalated)
        return True

    def _spawner_knows(self, job: ExecJob, task: TaskProc) -> bool:
        """Whether the spawner runs ``task`` (or reported its end): its pid with its marker."""
        link = self.watcher.spawner
        if link is None or not link.up:
            return False
        mark = self._marker(job, task)
        ended = link.ended.get(task.pid)
        return link.running.get(task.pid) == mark or (ended is not None and ended[0] == mark)

    def _check_spawned(self, job: ExecJob, task: TaskProc) -> bool:
        """:meth:`check` for a task of the spawner: its end as the spawner reported it,
        else its status file once the spawner no longer runs it.  A task whose
        spawner went away before it ended has nobody to record its end: it is
        killed (its process group) and, without a status file, lost."""
        link = self.watcher.spawner
        mark = self._marker(job, task)
        if link is not None:
            if self._spawner_ended(task, mark):
                return True
            if link.running.get(task.pid) == mark:
                if task.exited:
                    # its pidfd said it exited: its status is on the zombie until
                    # the spawner reaps it (then in the spawner's message)
                    ws = zombie_status(task.pid)
                    if ws is not None:
                        task.status, task.code = ws, shell_code(ws)
                        link.taken(task.pid)
                        self.watcher.unwatch(task)
                        return True
                    link.read()  # not drain(): the other ends read wake their jobs
                    if self._spawner_ended(task, mark):
                        return True
                task.exited = False
                return False
        self.watcher.unwatch(task)
        code = self.files.status_code(job.rank, job.id, task.rank, self.files.owner_of(job))
        if code is None and link is not None and task.pid in link.orphans:
            link.orphans.pop(task.pid, None)
            with contextlib.suppress(OSError):
                os.killpg(task.pid, signal.SIGKILL)
        settle_gone(task, code, job.escalated)
        return True

    def _spawner_ended(self, task: TaskProc, mark: str) -> bool:
        """Take ``task``'s end from the spawner's messages, if there."""
        link = self.watcher.spawner
        ended = link.ended.get(task.pid) if link is not None else None
        if link is None or ended is None or ended[0] != mark:
            return False
        del link.ended[task.pid]
        task.status, task.code = ended[1], shell_code(ended[1])
        self.watcher.unwatch(task)
        return True

    @staticmethod
    def _uid(job: ExecJob) -> int:
        """The uid the job's tasks run as."""
        return job.owner if job.as_user else os.geteuid()

    def _marker(self, job: ExecJob, task: TaskProc) -> str:
        return marker(self.ns, job.rank, job.id, task.rank)

    def _alive(self, job: ExecJob, task: TaskProc) -> Callable[[], bool]:
        return lambda: has_marker(task.pid, self._marker(job, task), self._uid(job))

    def _code(self, job: ExecJob, task: TaskProc) -> Callable[[], int | None]:
        return lambda: self.files.status_code(job.rank, job.id, task.rank,
                                              self.files.owner_of(job))

