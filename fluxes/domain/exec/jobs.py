"""What an exec worker knows of a job on one of its ranks, and how a start is planned.

Pure: the data the worker keeps per job and task, the transitions every part
shares (a job finishing, a task's wait status), and the checks a start goes
through before any process exists (:func:`read_start`, :func:`plan_run`).
File descriptors appear only as numbers the process side opened; nothing
here does I/O.  See ``docs/exec.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from fluxes.domain.exec.layout import (
    JobLayout,
    OutputSpec,
    RankShare,
    compute_layout,
    output_spec,
    wait_status,
)
from fluxes.formats.rset import ResourceSet

#: The job's error when its processes vanished while no worker watched them.
LOST_ERROR = "exec: lost the job's processes (exec worker restarted)"

#: Output streams: (record flag, stream name, file suffix, task fd).
STREAMS = (("o", "stdout", "out", 1), ("e", "stderr", "err", 2))

#: The job hash fields a start needs, in the order :func:`read_start` takes them.
START_FIELDS = ("jobspec_full", "jobspec", "R", "owner", "result")


class Stream:
    """A task's forwarded output file: what was forwarded (``offset``) and the partial line.

    ``fd`` is the open file (None once closed or when the file is gone); the
    process side opens, reads and closes it.
    """

    __slots__ = ("buf", "done", "fd", "name", "offset", "path")

    def __init__(self, name: str, path: str, fd: int | None, offset: int = 0) -> None:
        self.name = name
        self.path = path
        self.fd = fd
        self.offset = offset
        self.buf = b""
        self.done = False


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

    @property
    def key(self) -> tuple[int, int]:
        """(rank, job id): how the worker's tables name this job."""
        return (self.rank, self.id)

    def all_ended(self) -> bool:
        """Every task has ended and all of its output is forwarded."""
        return all(t.ended for t in self.tasks) and \
            all(s.done for t in self.tasks for s in t.streams)


def finish(job: ExecJob, now: float, status: int | None = None,
           error: str | None = None) -> bool:
    """Mark ``job`` finished and released on its rank; False if it already was.

    A first error sticks (a later one does not replace it); ``now`` is the
    wall clock time the record keeps (finished records are pruned after it).
    """
    if job.kind == "done":
        return False
    job.kind = "done"
    if status is not None:
        job.status = status
    if error is not None and job.error is None:
        job.error = error
    job.released = True
    job.done_time = now
    return True


def final_status(tasks: Iterable[TaskProc]) -> int | None:
    """The rank's wait status: the largest over its tasks (None when none is known)."""
    statuses = [t.status for t in tasks if t.status is not None]
    return max(statuses) if statuses else None


def wait_result(ws: int) -> tuple[int, int | None]:
    """(wait status, wrapper exit code) of a reaped wrapper from ``waitpid``'s status.

    The wrapper exits with its task's shell code; a wrapper that did not exit
    (killed with its task by the SIGKILL escalation) reports its own status.
    """
    if os.WIFEXITED(ws):
        code = os.WEXITSTATUS(ws)
        return wait_status(code), code
    return ws, None


def forward_flags(outputs: OutputSpec) -> str:
    """The streams that go to the output stream ("o", "e") rather than to files."""
    return ("o" if outputs.stdout is None else "") + ("e" if outputs.stderr is None else "")


# ----------------------------------------------------------------------------- starting


class RunPlan(NamedTuple):
    """A real job's share on one rank, checked and ready to spawn."""

    spec: Mapping[str, Any]
    layout: JobLayout
    share: RankShare
    outputs: OutputSpec
    forward: str
    first_rank: bool  # the job's first rank truncates shared output files


def read_start(jobid: int, data: tuple[Any, ...] | None) -> dict[str, Any] | None:
    """The jobspec of a start, from the job hash fields the worker fetched.

    ``data`` is (jobspec, R, owner, result), the jobspec being the full one
    when the ingest stored one.  None when the job is already inactive (it
    has a ``result``): never run it again.  ValueError, the job's exec error,
    when the jobspec is missing or not a JSON mapping.
    """
    if data is None or data[0] is None:
        if data is not None and data[3] is not None:
            return None
        raise ValueError(f"exec: job {jobid} has no jobspec")
    if data[3] is not None:
        return None
    try:
        spec = orjson.loads(data[0])
    except orjson.JSONDecodeError:
        raise ValueError("exec: the job's jobspec is not JSON") from None
    if not isinstance(spec, dict):
        raise ValueError("exec: the job's jobspec is not a mapping")
    return spec


def check_rank(jobid: int, rank: int, r_raw: Any, owner: Any, euid: int) -> ResourceSet:
    """The job's R, checked to hold ``rank``; ValueError is the job's exec error.

    ``euid`` is the worker's user: a worker running as root refuses other
    owners' jobs rather than run them as root.
    """
    if euid == 0 and owner is not None and int(owner) != 0:
        raise ValueError("exec: this exec worker runs as root and will not run "
                         "another user's job")
    if r_raw is None:
        raise ValueError(f"exec: job {jobid} has no R")
    R = ResourceSet(r_raw)  # noqa: N806
    if rank not in R.ranks:
        raise ValueError(f"exec: rank {rank} is not in the job's R")
    return R


def plan_run(spec: Mapping[str, Any], R: ResourceSet, rank: int) -> RunPlan:  # noqa: N803
    """Lay out the job's tasks and read its output options; ValueError is its exec error."""
    layout = compute_layout(spec, R)
    share = layout.share(rank)
    outputs = output_spec(spec)
    return RunPlan(spec, layout, share, outputs, forward_flags(outputs),
                   rank == R.ranks.first())
