"""What one step of the job manager's core produced, and the small pieces its parts share.

:class:`Effects` is everything one processing step of
:class:`~fluxes.domain.jm.core.JobManagerCore` decided, which the worker commits in
one atomic step (``fluxes/store/jm_unit.py``); :class:`SchedSession` is the RFC 27
session with the current scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from fluxes import messages as proto
from fluxes.domain.job import events as ev
from fluxes.formats.jobid import MAX_ID as MAX_JOBID
from fluxes.formats.jobid import encode as encode_id
from fluxes.messages import ExecRequest, Reply, SchedRequest

#: Input reference: (stream key, message id), acknowledged when its effects are written.
Ack = tuple[str, bytes]

#: Signal sent to cancel or time out a running job (exec escalates to SIGKILL).
KILL_SIGNAL = 15
#: Wait status recorded for a rank whose tasks were lost: "killed by SIGKILL".
LOST_WAIT_STATUS = 9


class SavedProgress(TypedDict):
    """A running job's exec progress no event records yet, saved with a commit so that
    a restarted job manager does not lose which ranks already reported (as stored:
    JSON, rank keys as text)."""

    started: list[int]
    #: rank -> its wait status
    finished: dict[str, int]
    released: list[int]
    error: bool
    #: the prolog/epilog progress (``HookProgress.to_wire``)
    hooks: NotRequired[dict[str, Any]]


@dataclass
class Effects:
    """Everything one processing step produced, to be committed atomically."""

    #: per job, in order: ("E", event, extra) eventlog events, ("J", event) journal-only
    ops: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)
    #: eventlog length of each job before this step's first event
    base_seq: dict[int, int] = field(default_factory=dict)
    sched: list[SchedRequest] = field(default_factory=list)
    exec: dict[int, list[ExecRequest]] = field(default_factory=dict)
    replies: list[tuple[str, Reply]] = field(default_factory=list)
    #: jobs that became inactive: their result name ("" if none) and when
    retired: dict[int, tuple[str, float]] = field(default_factory=dict)
    #: exec progress per job not yet told by events (None: forget it), so a
    #: restarted job manager does not lose which ranks already reported
    progress: dict[int, SavedProgress | None] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    #: per job, the facts of its hash an update changed (``queue``, ``request``; None:
    #: no longer any), written with its ``jobspec-update`` event
    job_fields: dict[int, dict[str, str | None]] = field(default_factory=dict)
    #: records of inputs refused (the worker's dead letters), written with their acks
    dead_letters: list[dict[str, bytes | str]] = field(default_factory=list)
    sched_epoch: int = 0
    #: the owner of each job with events in ``ops``: their private text goes to the
    #: owner's private hash (fluxes.domain.job.privacy)
    owners: dict[int, int] = field(default_factory=dict)
    #: eventlog events in ``ops`` (the ``E`` ops), kept by :meth:`add_event`
    events: int = 0

    def add_event(self, jobid: int, event: ev.Event, extra: Mapping[str, Any] | None) -> None:
        """Add an eventlog event of job ``jobid`` (with its journal extras) to ``ops``."""
        self.ops.setdefault(jobid, []).append(("E", event, extra))
        self.events += 1

    def __bool__(self) -> bool:
        return bool(self.ops or self.sched or self.exec or self.replies or self.retired
                    or self.progress or self.acks or self.dead_letters)

    @property
    def nevents(self) -> int:
        """Number of eventlog events in this step (counted as they are added: the loop
        asks after every input whether the step must be cut)."""
        return self.events


@dataclass
class SchedSession:
    """The RFC 27 session with the current scheduler."""

    epoch: int | None = None
    ready: bool = False
    mode: str = "unlimited"
    limit: int = 0
    outstanding: int = 0
    #: why scheduling is suspended until the next hello (None: it is not)
    suspended: str | None = None
    #: when it was suspended (the core's clock)
    suspended_at: float = 0.0

    def may_send(self) -> bool:
        """True when another alloc request may go out under the ready mode."""
        if not self.ready:
            return False
        if self.mode == "single":
            return self.outstanding == 0
        if self.mode == "limited":
            return self.outstanding < max(self.limit, 1)
        return True


def check_jobid(jobid: int) -> int:
    """MessageError unless ``jobid`` is a 64-bit job id."""
    if not 0 <= jobid <= MAX_JOBID:
        raise proto.MessageError(f"job id {jobid} is out of range")
    return jobid


def show_id(jobid: int) -> str:
    """A job id for a reply: F58 when it is one, else as given (a forged request)."""
    return encode_id(jobid, "f58") if 0 <= jobid <= MAX_JOBID else str(jobid)
