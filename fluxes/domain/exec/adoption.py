"""After a restart: which tasks still run, which ended, which are lost (the decisions).

A restarted exec worker finds its jobs' tasks from three facts (docs/exec.md,
"Robustness"), which :mod:`fluxes.proc.adopt` gathers from the host and
passes in here:

* whether the task's pid is one of the worker's own children (or was
  already reaped by it, with its status);
* whether a process with that pid still carries the task's *marker*
  (``fluxes-task:<ns>:<rank>:<job>:<task>`` in its wrapper's command line,
  which rules out reused pids and unreaped zombies; a task of the spawner:
  the spawner lists it with its marker, checked in :mod:`fluxes.proc.adopt`);
* whether the task's wrapper left its status file ``<job>.<task>.st.<code>``.

A task with neither a process nor a status file is lost, and the job's
error says so (:data:`~fluxes.domain.exec.jobs.LOST_ERROR`): it is released,
never left hanging.  The checks that read ``/proc`` or list a directory are
passed as functions, called only when the cheaper facts did not decide.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Container, Iterable, Mapping

from fluxes.domain.exec.jobs import LOST_ERROR, ExecJob, TaskProc
from fluxes.domain.exec.layout import wait_status

#: What became of a task that had not ended when last seen.
REAPED = "reaped"  # the worker reaped it itself (before a reload of its state)
WATCH = "watch"  # still running: watch it (our child, or a live adopted wrapper)
EXITED = "exited"  # its status file gives the exit status
KILLED = "killed"  # gone without a file after the SIGKILL escalation: killed with its wrapper
LOST = "lost"  # gone without a trace


def marker(ns: str, rank: int, jobid: int, task: int | None = None) -> str:
    """The marker a task's wrapper carries as its first argument (prefix when ``task`` is None)."""
    base = f"fluxes-task:{ns}:{rank}:{jobid}:"
    return base if task is None else f"{base}{task}"


def marker_task(prefix: str, found: str) -> int | None:
    """The task rank of marker ``found`` of a job whose marker prefix is ``prefix``."""
    if not found.startswith(prefix):
        return None
    suffix = found[len(prefix):]
    return int(suffix) if suffix.isdigit() else None


def parse_status_name(name: str) -> tuple[int, int, int] | None:
    """(job, task, exit code) of a status file name ``<job>.<task>.st.<code>``, else None."""
    parts = name.split(".")
    if len(parts) == 4 and parts[2] == "st" and parts[0].isdigit() and \
            parts[1].isdigit() and parts[3].isdigit():
        return int(parts[0]), int(parts[1]), int(parts[3])
    return None


def settle_gone(task: TaskProc, code: int | None, escalated: bool) -> str:
    """A wrapper that is gone without us reaping it: its status file decides.

    Without a file, a job whose kill escalated had its wrappers killed with
    their tasks (status SIGKILL); otherwise the task is lost.
    """
    if code is not None:
        task.code = code
        task.status = wait_status(code)
        return EXITED
    if escalated:
        task.status = signal.SIGKILL
        return KILLED
    task.lost = True
    return LOST


def settle_recorded(task: TaskProc, *, reaped: Mapping[int, tuple[int, int | None]],
                    children: Container[int], alive: Callable[[], bool],
                    status_code: Callable[[], int | None], escalated: bool) -> str:
    """Decide what became of a recorded, unfinished task; the decision is returned.

    In order: already reaped by this process (its status), our own child
    (watch it), a live process carrying its marker (adopt and watch it),
    else gone (:func:`settle_gone` with ``status_code()``).  ``alive()`` is
    asked only for tasks that are not our children.
    """
    got = reaped.get(task.pid)
    if got is not None:
        task.status, task.code = got
        return REAPED
    if task.pid in children:
        task.own = True
        return WATCH
    if alive():
        task.own = False
        return WATCH
    return settle_gone(task, status_code(), escalated)


def settle_unrecorded(task_ranks: Iterable[int], live: Mapping[int, int],
                      codes: Mapping[int, int], has_files: bool,
                      children: Container[int]) -> list[TaskProc] | None:
    """The tasks of a start that may have been spawned before a crash, before it was recorded.

    ``live`` maps task rank -> pid of the wrappers found running with the
    job's markers, ``codes`` task rank -> exit code of the status files
    found, ``has_files`` says whether any file of the job exists.  None when
    nothing of the job exists (it was never spawned: start it).  Otherwise
    every task of the share: running ones have their pid (watch them), the
    others their file's status or, without one, are lost.
    """
    if not live and not has_files:
        return None
    tasks = []
    for task_rank in task_ranks:
        pid = live.get(task_rank, 0)
        task = TaskProc(task_rank, pid, pid in children)
        if not pid:
            code = codes.get(task_rank)
            if code is None:
                task.lost = True  # never spawned, or gone without a trace
            else:
                task.code = code
                task.status = wait_status(code)
        tasks.append(task)
    return tasks


def lost_error(job: ExecJob) -> bool:
    """Give ``job`` the lost-processes error if a task is lost; True if it is new."""
    if job.error is None and any(t.lost for t in job.tasks):
        job.error = LOST_ERROR
        return True
    return False
