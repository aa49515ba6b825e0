"""What an exec worker knows of a job on one of its ranks, and how a start is planned.

Pure: the data the worker keeps per job and task, the transitions every part
shares (a job finishing, a task's wait status), and the checks a start goes
through before any process exists (:func:`read_start`, :func:`plan_run`).
File descriptors appear only as numbers the process side opened; nothing
here does I/O.  See ``docs/exec.md``.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Mapping
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
from fluxes.formats.rset import ResourceSet, decode_times
from fluxes.formats.rset_values import execution_of

#: The job's error when its processes vanished while no worker watched them.
LOST_ERROR = "exec: lost the job's processes (exec worker restarted)"

#: Output streams: (record flag, stream name, file suffix, task fd).
STREAMS = (("o", "stdout", "out", 1), ("e", "stderr", "err", 2))

#: Plans :class:`Planner` keeps (the oldest dropped beyond).
PLAN_CACHE_SIZE = 256
#: the largest jobspec and R (but its times) whose plan is kept, in bytes together:
#: the cache holds at most PLAN_CACHE_SIZE x this (16 MiB), whatever the jobs are
PLAN_KEY_MAX = 65536

#: The uid of the superuser: tasks never run as it for anyone but a root instance owner.
ROOT_UID = 0


class StartFacts(NamedTuple):
    """What a start needs of the job's stored facts (``ExecStreams.fetch``).

    ``jobspec`` is the one the job runs with (defaults applied), ``owner``
    the job hash's uid, ``result`` set once the job is inactive;
    ``submitter`` is the userid of the job's ``submit`` event, read only by a
    worker that may run tasks as other users (root), else None.
    """

    jobspec: bytes | None = None
    R: bytes | None = None
    owner: bytes | None = None
    result: bytes | None = None
    submitter: int | None = None


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
    """One task's process on this rank: the task itself (a child of the spawner,
    ``spawned``), or its wrapper."""

    __slots__ = ("code", "exited", "lost", "own", "pid", "pidfd", "rank", "spawned", "status",
                 "streams")

    def __init__(self, rank: int, pid: int, own: bool, status: int | None = None) -> None:
        self.rank = rank
        self.pid = pid
        self.own = own
        self.status = status
        self.pidfd: int | None = None  # readable once the process has exited
        self.exited = False  # its pidfd said so: look at it
        self.code: int | None = None  # the wrapper's exit code (names its status file)
        self.lost = False
        self.spawned = False  # the spawner's child: its end comes from the spawner
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
    owner: int = -1  # the job owner's uid (its output stream's key carries it); -1 unknown
    as_user: bool = False  # its tasks run as the owner, not as the worker (a root worker)
    # the job prolog/epilog on this rank (-1 running, then its wait status) and whether
    # its release waits for them (fluxes/proc/perilog.py)
    prolog: int | None = None
    epilog: int | None = None
    held: bool = False
    # the cores and gpus it holds on its rank (idsets; "" unknown), for a restarted
    # worker's waiting starts (fluxes/domain/exec/waits.py)
    cores: str = ""
    gpus: str = ""

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


def read_start(jobid: int, data: StartFacts | None) -> dict[str, Any] | None:
    """The jobspec of a start, from the job's facts the worker fetched.

    None when the job is already inactive (it has a ``result``): never run it
    again.  ValueError, the job's exec error, when the jobspec is missing (the
    job hash is gone, or a blob) or not a JSON mapping.
    """
    if data is not None and data.result is not None:
        return None
    if data is None or data.jobspec is None:
        raise ValueError(f"exec: job {jobid} has no jobspec")
    try:
        spec = orjson.loads(data.jobspec)
    except orjson.JSONDecodeError:
        raise ValueError("exec: the job's jobspec is not JSON") from None
    if not isinstance(spec, dict):
        raise ValueError("exec: the job's jobspec is not a mapping")
    return spec


def job_owner(jobid: int, owner: Any) -> int:
    """The job hash's ``owner`` as a uid; ValueError (the job's exec error) if unreadable."""
    try:
        uid = int(owner)
    except (TypeError, ValueError):
        raise ValueError(f"exec: job {jobid} has no owner") from None
    if uid < 0:
        raise ValueError(f"exec: job {jobid} has no owner")
    return uid


def run_as(jobid: int, data: StartFacts, euid: int, registered: Container[int],
           instance_owner: int) -> int | None:
    """The uid a job's tasks run as: None for the worker's own user, else the owner's.

    A worker that is not root runs every job as itself (it cannot do
    otherwise: docs/security.md says what that means).  A root worker runs
    each job as its owner, after checking that the owner the job hash names
    is the ``submit`` event's userid (``data.submitter``) and a registered
    user (``registered``: the uids of ``fluxes admin adduser``; the instance
    owner always is).  It never runs a job as root, except a job of a root
    instance owner, which is that owner's own.  ValueError is the job's exec
    error.
    """
    owner = job_owner(jobid, data.owner)
    if euid != ROOT_UID:
        return None
    if owner == ROOT_UID:
        if instance_owner == ROOT_UID:
            return None  # the root instance owner's own job runs as the worker (root)
        raise ValueError("exec: refusing to run a job of uid 0 (root): the instance owner "
                         "is not root")
    if data.submitter is None or data.submitter != owner:
        raise ValueError(f"exec: job {jobid}: its owner ({owner}) is not the userid of its "
                         "submit event")
    if owner != instance_owner and owner not in registered:
        raise ValueError(f"exec: uid {owner} is not a registered user of this instance "
                         "(fluxes admin adduser)")
    return owner


def check_rank(jobid: int, rank: int, r_raw: Any) -> ResourceSet:
    """The job's R, checked to hold ``rank``; ValueError is the job's exec error."""
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


class Planned(NamedTuple):
    """A start's R (without its times: see :class:`Planner`), its plan on the rank and
    its own expiration (None: none)."""

    R: ResourceSet
    plan: RunPlan
    expiration: float | None


class Planner:
    """:func:`check_rank` and :func:`plan_run` of starts, the last :data:`PLAN_CACHE_SIZE`
    remembered by the bytes they depend on.

    Jobs submitted alike share their jobspec, and the jobs run one after another on the
    same cores share their R but for its times: decoding that R and laying out the
    tasks again for each was most of what a start cost the worker.  The key is the
    jobspec's bytes, the rank and all of R but its times; the times, checked as the
    decode checks them, are each start's own.  What is kept is never changed by its
    users (the layout is frozen; nothing sets the R's times or ranks).
    """

    def __init__(self, size: int = PLAN_CACHE_SIZE) -> None:
        self.size = size
        self._plans: dict[tuple[bytes, bytes, int], tuple[ResourceSet, RunPlan]] = {}

    def __len__(self) -> int:
        return len(self._plans)

    def plan(self, jobid: int, rank: int, spec: Mapping[str, Any], spec_raw: bytes | None,
             r_raw: Any) -> Planned:
        """The start's :class:`Planned`; ValueError is the job's exec error (as
        :func:`check_rank` and :func:`plan_run` raise it)."""
        if r_raw is None:
            raise ValueError(f"exec: job {jobid} has no R")
        if not isinstance(spec_raw, bytes) or not isinstance(r_raw, (bytes, str)):
            R = check_rank(jobid, rank, r_raw)  # noqa: N806
            return Planned(R, plan_run(spec, R, rank), R.expiration)
        try:
            doc = orjson.loads(r_raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"R: invalid JSON: {exc}") from None
        execution = execution_of(doc)
        expiration = _times(execution)
        timeless = {**doc, "execution": {k: v for k, v in execution.items()
                                         if k not in ("starttime", "expiration")}}
        # every part of R but the times is in the key (its version, scheduling, ...):
        # an R that differs anywhere else is decoded and checked on its own
        key = (spec_raw, orjson.dumps(timeless), rank)
        hit = self._plans.get(key)
        if hit is None:
            R = check_rank(jobid, rank, timeless)  # noqa: N806
            hit = (R, plan_run(spec, R, rank))
            if len(spec_raw) + len(key[1]) > PLAN_KEY_MAX:
                return Planned(hit[0], hit[1], expiration)
            if len(self._plans) >= self.size:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = hit
        return Planned(hit[0], hit[1], expiration)


def _times(execution: Mapping[str, Any]) -> float | None:
    """An R's expiration, its start time and expiration checked as its decode checks them."""
    return decode_times(execution)[1]
