"""One definition per message type, per stream (docs/protocol.md describes the wire format).

Every message is a frozen :class:`msgspec.Struct` whose JSON object carries
its type in ``t`` (a tagged union per stream), so decoding and validating
are one step: a value of the wrong type fails at its first byte, before
anything walks it. Keys a reader does not know are skipped (extensions);
fields equal to their default are left out when encoding.

Free-form parts (annotations, a new job's ``info``, submitted jobspecs) are
``dict[str, Any]``: their size and depth are bounded by the entry's bounds
(:mod:`fluxes.messages.bounds`), checked before parsing.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

#: A user id as events record it (replay refuses a negative one).
UserId = Annotated[int, msgspec.Meta(ge=0)]

ALLOC_SUCCESS: Final = 0
ALLOC_ANNOTATE: Final = 1
ALLOC_DENY: Final = 2
ALLOC_CANCEL: Final = 3
#: RFC 27 ready modes: one outstanding alloc request, any number, or ``limit``.
Mode = Literal["single", "unlimited", "limited"]
MODES: tuple[Mode, ...] = ("single", "unlimited", "limited")


class Message(msgspec.Struct, tag_field="t", frozen=True, kw_only=True, omit_defaults=True):
    """Base of every message: its type is the ``t`` key of its JSON object."""


# -- scheduler -> job manager ({p}:sched:resp) ------------------------------------------


class Hello(Message, tag="hello", frozen=True):
    """A scheduler starts the session of epoch ``e`` (RFC 27 ``sched-hello``)."""


class Ready(Message, tag="ready", frozen=True):
    """The scheduler has recovered the held allocations (RFC 27 ``sched-ready``)."""

    mode: Mode
    limit: int = 0


class AllocResponse(Message, tag="alloc-response", frozen=True):
    """Answer to an alloc request: SUCCESS (0, with ``ranks``), ANNOTATE, DENY or CANCEL."""

    id: int
    type: Literal[0, 1, 2, 3]
    annotations: dict[str, Any] | None = None
    note: str | None = None
    ranks: str | None = None
    nodelist: str | None = None
    #: the allocation's cores and gpus (SUCCESS), the alloc entry's extras for accounting
    ncores: int | None = None
    ngpus: int | None = None


class FreeResponse(Message, tag="free-response", frozen=True):
    """The scheduler took a job's resources back."""

    id: int


class SchedError(Message, tag="error", frozen=True):
    """The scheduler cannot go on (RFC 27 error response or disconnect)."""

    note: str | None = None
    id: int | None = None


SchedResponse = Hello | Ready | AllocResponse | FreeResponse | SchedError


# -- job manager -> scheduler ({p}:sched:req) -------------------------------------------


class HeldJob(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A job holding resources, as the hello reply lists it."""

    id: int
    priority: int = 0
    userid: int = 0
    #: its ranks, so the scheduler can keep them out of use if its R is unreadable
    ranks: str | None = None
    #: the bank it is charged to (docs/accounting.md), for the scheduler's running limits
    bank: str | None = None
    #: its end when a ``resource-update`` moved it (``fluxes update`` of a running job):
    #: it replaces the stored R's expiration, which is the scheduler's and never rewritten
    expiration: Annotated[float, msgspec.Meta(gt=0)] | None = None


class HelloReply(Message, tag="hello-reply", frozen=True):
    """Every job holding resources (the answer to ``hello``)."""

    alloc: list[HeldJob]


class Alloc(Message, tag="alloc", frozen=True):
    """Request resources for a job (RFC 27 ``sched.alloc``)."""

    id: int
    priority: int
    userid: int
    t_submit: float = 0.0
    queue: str | None = None
    #: what the job asks for, normalized by the ingest (``Request.to_wire``; flux's
    #: alloc carries the jobspec); absent for older jobs: the scheduler reads the jobspec
    request: str | None = None
    #: the bank it is charged to (docs/accounting.md), for the scheduler's running limits
    bank: str | None = None


class Cancel(Message, tag="cancel", frozen=True):
    """Withdraw a job's outstanding alloc request."""

    id: int


class Prioritize(Message, tag="prioritize", frozen=True):
    """New priorities of jobs whose alloc requests are outstanding: [[id, priority]]."""

    jobs: list[tuple[int, int]]


class Free(Message, tag="free", frozen=True):
    """Give a job's resources back."""

    id: int


class Reset(Message, tag="reset", frozen=True):
    """The job manager restarted: start a new epoch with a hello (ours, not RFC 27)."""


class Expiration(Message, tag="expiration", frozen=True):
    """A running job's new end (RFC 27 ``sched.expiration``; one-way here: the scheduler
    moves the end of the job's allocation in its plan and answers nothing)."""

    id: int
    expiration: Annotated[float, msgspec.Meta(gt=0)]


SchedRequest = HelloReply | Alloc | Cancel | Prioritize | Free | Reset | Expiration


# -- job manager -> exec ({ns}:exec:rank:<r>) and back ({p}:exec:events) -----------------


class Start(Message, tag="start", frozen=True):
    """Start a job's tasks on this rank (``ranks`` are all of the job's ranks)."""

    id: int
    ranks: str


class Kill(Message, tag="kill", frozen=True):
    """Signal a job's tasks on this rank."""

    id: int
    signal: int


class Signal(Message, tag="signal", frozen=True):
    """Deliver ``signal`` to a job's running tasks on this rank, and nothing more
    (``fluxes job kill``): no escalation, no release, nothing remembered; a job the
    rank does not run (yet, or any more) is left alone."""

    id: int
    signal: Annotated[int, msgspec.Meta(ge=1, le=64)]


class PmiWake(Message, tag="pmi", frozen=True):
    """A job's PMI barrier ``round`` completed on every rank (``error``: it never will,
    the job is broken), written by the rank whose step ended it (``fluxes/store/lua/pmi.lua``)."""

    id: int
    round: Annotated[int, msgspec.Meta(ge=1)]
    error: Annotated[str, msgspec.Meta(max_length=4096)] | None = None


class Command(Message, tag="command", frozen=True):
    """Run ``argv`` on this rank as the instance owner (``fluxes exec``), its output and
    wait status written to the reply stream of ``token`` (fluxes/proc/remote_exec.py)."""

    token: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    argv: Annotated[list[Annotated[str, msgspec.Meta(max_length=65536)]],
                    msgspec.Meta(min_length=1, max_length=4096)]
    cwd: Annotated[str, msgspec.Meta(max_length=4096)] = "/"
    env: dict[str, str] | None = None


ExecRequest = Start | Kill | Signal | PmiWake | Command


class ExecReport(Message, tag="exec", frozen=True):
    """Cumulative progress of one job on one rank."""

    id: int
    rank: int
    started: bool = False
    status: int | None = None
    released: bool = False
    error: str | None = None
    #: the rank's job prolog/epilog: -1 while it runs, then its wait status
    #: (fluxes/domain/jm/perilog.py); absent when none is configured
    prolog: int | None = None
    epilog: int | None = None


# -- ingest -> job manager ({p}:jm:new) ------------------------------------------------


class New(Message, tag="new", frozen=True):
    """A job the ingest stored (its submit and validate events are in the journal)."""

    id: int
    userid: int
    urgency: int
    flags: int
    t_submit: float
    #: the journal extras of its submit event (name, counts, queue, dependencies...)
    info: dict[str, Any] = msgspec.field(default_factory=dict)
    #: the scheduler's request (``Request.to_wire``), for the job's alloc messages
    request: str | None = None


# -- ingest, scheduler, CLI -> job manager ({p}:jm:ctl) ----------------------------------


class CancelRequest(Message, tag="cancel-request", frozen=True):
    """A user's cancel, forwarded with the authenticated userid."""

    ids: list[int]
    userid: UserId
    note: str = ""
    reply: str | None = None


class RaiseRequest(Message, tag="raise", frozen=True):
    """An exception raised on jobs by a user, or by the scheduler as the owner."""

    ids: list[int]
    userid: UserId
    type: str
    severity: int
    note: str = ""
    reply: str | None = None


class UrgencyRequest(Message, tag="urgency-request", frozen=True):
    """A user's urgency change, forwarded with the authenticated userid."""

    id: int
    urgency: int
    userid: UserId
    reply: str | None = None


class SignalRequest(Message, tag="signal-request", frozen=True):
    """A user's ``job kill``, forwarded with the authenticated userid: the running
    jobs' tasks get ``signal`` (through their ranks' exec workers)."""

    ids: list[int]
    userid: UserId
    signal: Annotated[int, msgspec.Meta(ge=1, le=64)] = 15
    reply: str | None = None


class KillAllRequest(Message, tag="killall-request", frozen=True):
    """A user's ``job killall``: signal every running job of ``target`` (a uid, -1
    every user's), or with ``dry_run`` only count them."""

    userid: UserId
    target: Annotated[int, msgspec.Meta(ge=-1)]
    signal: Annotated[int, msgspec.Meta(ge=1, le=64)] = 15
    dry_run: bool = False
    reply: str | None = None


class UpdateRequest(Message, tag="update-request", frozen=True):
    """A user's ``fluxes update``, checked by the ingest as at submission and
    forwarded with the authenticated userid.

    ``updates`` is the ``jobspec-update`` context (``attributes.*`` keys, relative
    durations resolved); ``base`` the job's earlier updates and ``base_expiration``
    its expiration the ingest judged against (the job manager refuses the update
    when either changed since); ``request`` the scheduler's new request
    (``Request.to_wire``) for a pending job; ``immutable`` marks an instance
    owner's update of another user's job that passed no limits.
    """

    id: int
    userid: UserId
    updates: dict[str, Any]
    base: dict[str, Any] = msgspec.field(default_factory=dict)
    base_expiration: float | None = None
    request: str | None = None
    immutable: bool = False
    reply: str | None = None


class QueuesChanged(Message, tag="queues", frozen=True):
    """Queue admin states changed: re-read them (``stopped`` is filled in by the reader)."""

    stopped: list[str] | None = None
    reply: str | None = None


class LostRanks(Message, tag="lost-ranks", frozen=True):
    """Exec workers of ``ranks`` stopped heart-beating: their jobs fail."""

    ranks: str
    reply: str | None = None


Control = (CancelRequest | RaiseRequest | UrgencyRequest | QueuesChanged | LostRanks
           | SignalRequest | KillAllRequest | UpdateRequest)


# -- users -> ingest ({ns}:submit:<user>), one request per entry ---------------------------


class SubmitItem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One job of a submit request: a jobspec object, or its YAML (or JSON) text."""

    jobspec: dict[str, Any] | None = None
    yaml: str | None = None
    urgency: int | None = None
    flags: int = 0


class UserRequest(Message, frozen=True):
    """Base of user requests: ``req`` names the reply list ``{ns}:reply:<user>:<req>``."""

    req: str


class SubmitJobs(UserRequest, tag="submit", frozen=True):
    """Submit jobs; with ``cc`` (an id set), ``jobs`` holds one job and the request one
    copy of it per id (fluxes/domain/jm/arrays.py)."""

    jobs: list[SubmitItem] = msgspec.field(default_factory=list)
    cc: str | None = None
    #: with ``cc``: each copy's environment gets FLUXES_JOB_CC=<id> (``--cc``, not ``--bcc``)
    cc_var: bool = False


class CancelJobs(UserRequest, tag="cancel", frozen=True):
    """Cancel jobs."""

    ids: list[int]
    note: str = ""


class SetUrgency(UserRequest, tag="urgency", frozen=True):
    """Change a job's urgency."""

    id: int
    urgency: int


class RaiseOnJobs(UserRequest, tag="raise", frozen=True):
    """Raise an exception on jobs (``flux job raise``)."""

    ids: list[int]
    type: str = "exception"
    severity: int = 0
    note: str = ""


class SignalJobs(UserRequest, tag="kill", frozen=True):
    """Send a signal to running jobs' tasks (``flux job kill``)."""

    ids: list[int]
    signal: Annotated[int, msgspec.Meta(ge=1, le=64)] = 15


class KillAll(UserRequest, tag="killall", frozen=True):
    """Signal all running jobs of a user (``flux job killall``): ``user`` a uid (None:
    the requester), ``all_users`` everyone's (instance owner only); ``dry_run`` only
    counts them."""

    signal: Annotated[int, msgspec.Meta(ge=1, le=64)] = 15
    user: Annotated[int, msgspec.Meta(ge=0)] | None = None
    all_users: bool = False
    dry_run: bool = False


class UpdateJob(UserRequest, tag="update", frozen=True):
    """Update an active job's jobspec attributes (``flux update``): ``updates`` maps
    keys (``duration``, ``queue``, ``name`` or ``attributes.system.*`` paths) to
    values; a duration may be ``+FSD``/``-FSD``. ``dry_run`` checks it and answers
    with the resolved updates without applying them."""

    id: int
    updates: dict[str, Any]
    dry_run: bool = False


Request = SubmitJobs | CancelJobs | SetUrgency | RaiseOnJobs | SignalJobs | KillAll | UpdateJob


class JobResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The fate of one submitted job: its id, or the one-line reason it was refused."""

    id: int | None = None
    error: str | None = None


class Reply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The answer a client BLPOPs from ``{ns}:reply:<user>:<req>``.

    A submit is answered with ``jobs`` (one result per job, in order) or a
    request-wide ``errors``; control requests with the ``ok`` ids, ``errors``
    lines, and (urgency) the ``old`` urgency; an update with the ``updates`` it
    applied (or, dry run, would apply).
    """

    jobs: list[JobResult] | None = None
    ok: list[int] | None = None
    errors: list[str] | None = None
    old: int | None = None
    updates: dict[str, Any] | None = None


class SubmitReqId(msgspec.Struct):
    """Only the ``req`` of a request: enough to answer one that failed to decode."""

    req: str


# -- resource events ({ns}:resource:events), one per entry -------------------------------


class ResourceEvent(msgspec.Struct, tag_field="t", frozen=True, kw_only=True,
                    omit_defaults=True):
    """Base of drain/undrain events of execution targets."""

    ranks: str
    reason: str = ""
    auto: bool = False
    timestamp: float = 0.0


class Drain(ResourceEvent, tag="drain", frozen=True):
    """Give the ranks no new work."""


class Undrain(ResourceEvent, tag="undrain", frozen=True):
    """Return the ranks to service."""


class Reload(ResourceEvent, tag="reload", frozen=True):
    """The recorded resources were replaced (``fluxes resource reload``): the scheduler
    reads them again (``ranks`` is empty: the record says what they are)."""


ResourceChange = Drain | Undrain | Reload
