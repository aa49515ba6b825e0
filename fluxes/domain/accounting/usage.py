"""Usage per association, folded from the journal, with half-life decay.

A job is charged for the resources it holds from its ``alloc`` entry to its
``free`` entry (``clean`` closes a job still holding resources, which the job
manager never writes but a foreign journal might): core-seconds, gpu-seconds
and node-seconds, charged to the association (userid, bank) of the job. The
bank is the journal's submit extra ``bank`` (``""`` when the journal names
none: the user's default bank when usage is read); the counts come from the
alloc extras ``ncores``/``ngpus`` and the node count of its ``ranks`` when
present, else from the submit extras (what the jobspec asked for).

Decay (Slurm's ``PriorityDecayHalfLife``): usage ``t`` seconds old counts
``2**(-t/h)``. A job holding ``r`` cores from ``a`` to ``b`` has, at time
``T >= b``, the decayed usage ``r * h/ln2 * (2**(-(T-b)/h) - 2**(-(T-a)/h))``:
the exact integral of its decayed rate, so neither the fold's block size nor
how often anyone looks changes a figure. Each association keeps its raw totals
and its decayed totals as of the latest charge (``t_ref``); a reader decays
them to its own ``now`` and adds the jobs still running. ``h = 0`` turns
decay off (decayed = raw).

The fold (:meth:`UsageState.feed`) depends only on the entries and their
order, never on the wall clock or on where a block ends, so folding a journal
in blocks of any size, with the state stored and loaded between blocks, gives
exactly what one fold from scratch gives (a hypothesis test checks it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeVar

from fluxes.domain.sharing import SharedValues
from fluxes.formats.idset import IDSet

LN2: Final = math.log(2.0)
#: Largest count a journal extra may give (cores, gpus, nodes of one job).
MAX_RESOURCES: Final = 2**31 - 1

#: (userid, bank): the key usage is kept under ("" bank: the user's default).
AssocKey = tuple[int, str]
_K = TypeVar("_K")


class UsageError(ValueError):
    """A journal entry that cannot be folded into usage (a malformed extra or context)."""


class Figures(NamedTuple):
    """Core-, gpu- and node-seconds (raw or decayed)."""

    core_seconds: float = 0.0
    gpu_seconds: float = 0.0
    node_seconds: float = 0.0

    def plus(self, other: Figures) -> Figures:
        """The sum of both."""
        return Figures(self.core_seconds + other.core_seconds,
                       self.gpu_seconds + other.gpu_seconds,
                       self.node_seconds + other.node_seconds)

    def scaled(self, factor: float) -> Figures:
        """Every figure times ``factor``."""
        return Figures(self.core_seconds * factor, self.gpu_seconds * factor,
                       self.node_seconds * factor)

    def billing(self, weights: Billing) -> float:
        """One number (Slurm's TRES billing): the weighted sum of the figures."""
        return (weights.cores * self.core_seconds + weights.gpus * self.gpu_seconds
                + weights.nodes * self.node_seconds)


class Billing(NamedTuple):
    """Weights that turn figures into the one usage fair share compares."""

    cores: float = 1.0
    gpus: float = 0.0
    nodes: float = 0.0


NO_USAGE: Final = Figures()


def decay(seconds: float, half_life: float) -> float:
    """The weight of usage ``seconds`` old (1 with no decay, or for the future)."""
    if half_life <= 0 or seconds <= 0:
        return 1.0
    return math.exp2(-seconds / half_life)


def held(start: float, end: float, half_life: float) -> float:
    """Seconds held from ``start`` to ``end``, decayed as of ``end`` (raw with no decay)."""
    span = end - start
    if span <= 0:
        return 0.0
    if half_life <= 0:
        return span
    # 1 - 2**(-x) without the cancellation of a short span: -expm1(-x ln 2)
    return -half_life / LN2 * math.expm1(-span / half_life * LN2)


class Accum(NamedTuple):
    """What one association was charged in one partition: raw totals, decayed totals as
    of ``t_ref`` (the latest charge), and the number of jobs charged."""

    raw: Figures = NO_USAGE
    decayed: Figures = NO_USAGE
    t_ref: float = 0.0
    jobs: int = 0

    def charged(self, raw: Figures, decayed: Figures, when: float,
                half_life: float) -> Accum:
        """This with a job's ``raw`` figures and its ``decayed`` ones (as of ``when``)."""
        if when >= self.t_ref:
            old = self.decayed.scaled(decay(when - self.t_ref, half_life))
            return Accum(self.raw.plus(raw), old.plus(decayed), when, self.jobs + 1)
        # an entry stamped earlier than the last one (another host's clock)
        late = decayed.scaled(decay(self.t_ref - when, half_life))
        return Accum(self.raw.plus(raw), self.decayed.plus(late), self.t_ref, self.jobs + 1)

    def at(self, now: float, half_life: float) -> Figures:
        """The decayed figures as of ``now``."""
        return self.decayed.scaled(decay(now - self.t_ref, half_life))

    def to_obj(self) -> list[Any]:
        """Compact JSON-ready form."""
        return [*self.raw, *self.decayed, self.t_ref, self.jobs]

    @classmethod
    def from_obj(cls, obj: Any) -> Accum:
        """Decode :meth:`to_obj` output; ValueError when it is not one."""
        if not isinstance(obj, list) or len(obj) != 8:
            raise ValueError(f"bad usage record: {obj!r:.60}")
        return cls(Figures(*map(float, obj[0:3])), Figures(*map(float, obj[3:6])),
                   float(obj[6]), int(obj[7]))


class OpenJob(NamedTuple):
    """An active job as usage sees it: who pays, what it holds, since when."""

    userid: int
    bank: str
    queue: str
    ncores: int
    ngpus: int
    nnodes: int
    t_submit: float
    #: when it was allocated (None: pending, or freed already)
    t_alloc: float | None = None
    #: the accounting project the ingest recorded ("" before projects existed)
    project: str = ""
    #: the time limit it asked for, seconds (0: none; the submit extra ``duration``)
    duration: float = 0.0
    #: allocated staged behind jobs still running (the alloc extra ``staged``): charged
    #: from its ``start``, not its ``alloc`` (docs/accounting.md)
    staged: bool = False

    @property
    def key(self) -> AssocKey:
        """The association it is charged to."""
        return self.userid, self.bank

    @property
    def rates(self) -> Figures:
        """Cores, gpus and nodes held, as figures per second."""
        return Figures(float(self.ncores), float(self.ngpus), float(self.nnodes))

    def to_obj(self) -> list[Any]:
        """Compact JSON-ready form: the fields in order, those at their defaults left out
        at the end (~35 bytes for a pending job, where the object form took ~71: one
        per active job in Redis, fluxes bench memory)."""
        out: list[Any] = list(self)
        while len(out) > _OPEN_REQUIRED and out[-1] == _OPEN_DEFAULTS[len(out) - 1]:
            out.pop()
        return out

    @classmethod
    def from_obj(cls, obj: Any) -> OpenJob:
        """Decode :meth:`to_obj` output, or the object form stored before; ValueError when
        it is neither."""
        try:
            if isinstance(obj, list):
                if not _OPEN_REQUIRED <= len(obj) <= len(cls._fields):
                    raise ValueError("wrong length")
                u, b, q, c, g, n, s, *rest = obj
                alloc, project, duration, staged = [*rest, *_OPEN_DEFAULTS[len(obj):]]
            else:
                u, b, q, c, g, n, s = (obj[k] for k in "ubqcgns")
                alloc, project, duration = obj["a"], obj.get("p", ""), obj.get("d", 0.0)
                staged = False
            if not isinstance(staged, bool):
                raise ValueError(f"staged: expected a boolean, got {staged!r:.40}")
            return cls(int(u), str(b), str(q), int(c), int(g), int(n), float(s),
                       None if alloc is None else float(alloc), str(project),
                       float(duration), staged)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad open job record: {exc}") from None


#: The fields every stored open job has; the defaults of the others.
_OPEN_REQUIRED = 7
_OPEN_DEFAULTS: tuple[Any, ...] = (None,) * _OPEN_REQUIRED + (None, "", 0.0, False)


class JobCharge(NamedTuple):
    """One allocation that ended: what ``fluxes account usage`` sums over a period."""

    jobid: int
    userid: int
    bank: str
    queue: str
    t_alloc: float
    t_free: float
    ncores: int
    ngpus: int
    nnodes: int
    project: str = ""
    #: when it was submitted (0: a record from before it was kept)
    t_submit: float = 0.0
    #: the time limit it asked for, seconds (0: none, or a record from before it was kept)
    duration: float = 0.0

    @property
    def key(self) -> AssocKey:
        """The association it was charged to."""
        return self.userid, self.bank

    @property
    def actual_duration(self) -> float:
        """How long it held its resources, seconds."""
        return max(self.t_free - self.t_alloc, 0.0)

    @property
    def duration_delta(self) -> float:
        """The time limit it asked for less the time it ran (flux-accounting's
        ``duration_delta``: how much of its request it left unused)."""
        return self.duration - self.actual_duration

    def to_obj(self) -> list[Any]:
        """Compact JSON-ready form (the project, submit time and requested duration last,
        only when set: records from before them stay as they were)."""
        out: list[Any] = [self.userid, self.bank, self.queue, self.t_alloc, self.t_free,
                          self.ncores, self.ngpus, self.nnodes]
        if self.t_submit or self.duration:
            return [*out, self.project, self.t_submit, self.duration]
        return [*out, self.project] if self.project else out

    @classmethod
    def from_obj(cls, jobid: int, obj: Any) -> JobCharge:
        """Decode :meth:`to_obj` output; ValueError when it is not one."""
        try:
            u, b, q, a, f, c, g, n, *rest = obj
            if len(rest) not in (0, 1, 3):
                raise ValueError("too many values")
            later = (float(rest[1]), float(rest[2])) if len(rest) == 3 else (0.0, 0.0)
            return cls(jobid, int(u), str(b), str(q), float(a), float(f), int(c), int(g),
                       int(n), str(rest[0]) if rest else "", *later)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad job charge record: {exc}") from None


#: Distinct shared open jobs kept (a cache: clearing it only costs sharing).
SHARED_KEPT = 4096
_shared: SharedValues[OpenJob] = SharedValues(SHARED_KEPT)


def shared_open(job: OpenJob) -> OpenJob:
    """``job``, or an equal open job seen before: the pending jobs of one submission are
    equal (same user, bank, queue, counts and submit time), so the fold keeps one
    record for all of them instead of ~0.25 KB each (issue 26). Safe because an
    open job is immutable."""
    return _shared(job)


def _count(extra: Mapping[str, Any], key: str, default: int) -> int:
    value = extra.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RESOURCES:
        raise UsageError(f"extra {key}: expected an integer 0-{MAX_RESOURCES}, "
                         f"got {value!r:.40}")
    return value


def _seconds(value: Any) -> float:
    """A requested duration as the journal carries it (seconds; 0 or none: no limit).
    Anything else counts as no limit: it only filters ``view-job-records``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def _text(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(f"{key}: expected a string, got {value!r:.40}")
    return value


@dataclass
class Changes:
    """What a block of entries changed, for the store's one write per block."""

    accums: dict[AssocKey, Accum] = field(default_factory=dict)
    opened: dict[int, OpenJob] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)
    charges: list[JobCharge] = field(default_factory=list)
    #: associations whose count of active jobs changed, with the new count (0: none)
    active: dict[AssocKey, int] = field(default_factory=dict)


@dataclass
class UsageState:
    """One partition's usage: per-association totals and the jobs still active."""

    half_life: float
    accums: dict[AssocKey, Accum] = field(default_factory=dict)
    open: dict[int, OpenJob] = field(default_factory=dict)
    changes: Changes = field(default_factory=Changes)
    #: active jobs (pending and running) per association as journaled: what the ingest
    #: reads instead of every open job to check ``max-active-jobs``; never a zero entry
    active: dict[AssocKey, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        open_jobs = self.open
        for jobid, job in open_jobs.items():
            self.active[job.key] = self.active.get(job.key, 0) + 1
            open_jobs[jobid] = shared_open(job)  # same keys: the dict is not resized

    def take_changes(self) -> Changes:
        """What changed since the last call (and start afresh)."""
        out, self.changes = self.changes, Changes()
        return out

    def feed(self, jobid: int, name: str, timestamp: float, context: Mapping[str, Any],
             extra: Mapping[str, Any]) -> None:
        """Fold one journal entry. Raises UsageError (changing nothing) when an entry this
        fold reads is malformed; entries it does not read are passed over."""
        if name == "submit":
            self._submit(jobid, timestamp, context, extra)
            return
        job = self.open.get(jobid)
        if job is None:
            return  # never submitted here (or done): nothing to charge
        if name == "alloc":
            if job.t_alloc is None:
                self._set(jobid, self._allocated(job, timestamp, extra))
        elif name == "start":
            if job.staged and job.t_alloc is not None:
                # its cores were its predecessor's until now (docs/accounting.md)
                self._set(jobid, job._replace(t_alloc=max(timestamp, job.t_alloc),
                                              staged=False))
        elif name == "free":
            if job.t_alloc is not None:
                self._charge(jobid, job, timestamp)
                self._set(jobid, job._replace(t_alloc=None))
        elif name in ("clean", "invalidate"):
            if job.t_alloc is not None:
                self._charge(jobid, job, timestamp)
            del self.open[jobid]
            self._count(job.key, -1)
            self.changes.opened.pop(jobid, None)
            self.changes.closed.add(jobid)
        elif name == "jobspec-update" and job.t_alloc is None:
            bank = context.get("attributes.system.bank")
            queue = context.get("attributes.system.queue")
            duration = context.get("attributes.system.duration")
            if bank is not None or queue is not None or duration is not None:
                self._set(jobid, job._replace(
                    bank=_text(context, "attributes.system.bank") if bank is not None
                    else job.bank,
                    queue=_text(context, "attributes.system.queue") if queue is not None
                    else job.queue,
                    duration=job.duration if duration is None else _seconds(duration)))

    def feed_all(self, entries: Iterable[tuple[int, str, float, Mapping[str, Any],
                                               Mapping[str, Any]]]) -> None:
        """Fold entries (jobid, name, timestamp, context, extras) in order."""
        for entry in entries:
            self.feed(*entry)

    # ------------------------------------------------------------ transitions

    def _count(self, key: AssocKey, delta: int) -> None:
        count = self.active.get(key, 0) + delta
        if count:
            self.active[key] = count
        else:
            del self.active[key]
        self.changes.active[key] = count

    def _set(self, jobid: int, job: OpenJob) -> None:
        before = self.open.get(jobid)
        if before is None or before.key != job.key:
            # a new job, or a pending one moved to another bank (jobspec-update)
            if before is not None:
                self._count(before.key, -1)
            self._count(job.key, 1)
        job = shared_open(job)
        self.open[jobid] = job
        self.changes.opened[jobid] = job
        self.changes.closed.discard(jobid)

    def _submit(self, jobid: int, timestamp: float, context: Mapping[str, Any],
                extra: Mapping[str, Any]) -> None:
        userid = context.get("userid")
        if isinstance(userid, bool) or not isinstance(userid, int) or userid < 0:
            raise UsageError(f"submit: context.userid: expected an integer >= 0, "
                             f"got {userid!r:.40}")
        if jobid in self.open:
            return  # a second submit of an active job: the job manager refuses it too
        project = extra.get("project")
        job = OpenJob(userid, _text(extra, "bank"), _text(extra, "queue"),
                      _count(extra, "ncores", 1), _count(extra, "ngpus", 0),
                      _count(extra, "nnodes", 0), timestamp,
                      project=project if isinstance(project, str) else "",
                      duration=_seconds(extra.get("duration")))
        self._set(jobid, job)

    def _allocated(self, job: OpenJob, timestamp: float, extra: Mapping[str, Any]) -> OpenJob:
        nnodes = job.nnodes
        ranks = extra.get("ranks")
        if ranks is not None:
            if not isinstance(ranks, str):
                raise UsageError(f"alloc: extra ranks: expected an idset, got {ranks!r:.40}")
            try:
                nnodes = _rank_count(ranks)
            except ValueError as exc:
                raise UsageError(f"alloc: extra ranks: {exc}") from None
        # R's own counts when the alloc entry carries them, else what was asked for
        staged = extra.get("staged", False)
        if not isinstance(staged, bool):
            raise UsageError(f"alloc: extra staged: expected a boolean, got {staged!r:.40}")
        return job._replace(t_alloc=timestamp, ncores=_count(extra, "ncores", job.ncores),
                            ngpus=_count(extra, "ngpus", job.ngpus), nnodes=max(nnodes, 1),
                            staged=staged)

    def _charge(self, jobid: int, job: OpenJob, end: float) -> None:
        assert job.t_alloc is not None
        start = job.t_alloc
        rates = job.rates
        raw = rates.scaled(max(end - start, 0.0))
        decayed = rates.scaled(held(start, end, self.half_life))
        key = job.key
        accum = self.accums.get(key, Accum()).charged(raw, decayed, end, self.half_life)
        self.accums[key] = accum
        self.changes.accums[key] = accum
        self.changes.charges.append(JobCharge(jobid, job.userid, job.bank, job.queue, start,
                                              end, job.ncores, job.ngpus, job.nnodes,
                                              job.project, job.t_submit, job.duration))


def _rank_count(ranks: str) -> int:
    """How many ranks the idset ``ranks`` names (ValueError when it is not one): a few
    distinct short sets, parsed once each (every alloc entry the fold reads carries
    one; a long one is not kept)."""
    return _short_rank_count(ranks) if len(ranks) <= 64 else len(IDSet(ranks))


@functools.lru_cache(maxsize=1024)
def _short_rank_count(ranks: str) -> int:
    return len(IDSet(ranks))


# ---------------------------------------------------------------- reading usage


def running_usage(job: OpenJob, now: float, half_life: float) -> Figures:
    """What a job still holding resources has used by ``now``, decayed as of ``now``."""
    if job.t_alloc is None:
        return NO_USAGE
    return job.rates.scaled(held(job.t_alloc, now, half_life))


def decayed_usage(accums: Mapping[AssocKey, Accum], open_jobs: Iterable[OpenJob],
                  half_life: float, now: float) -> dict[AssocKey, Figures]:
    """Every association's decayed usage as of ``now``: its charges plus its running jobs
    (one partition; sum the partitions' results for the instance)."""
    out = {key: accum.at(now, half_life) for key, accum in accums.items()}
    for job in open_jobs:
        if job.t_alloc is not None:
            out[job.key] = out.get(job.key, NO_USAGE).plus(running_usage(job, now, half_life))
    return out


def add_usage(into: dict[AssocKey, Figures], more: Mapping[AssocKey, Figures]) -> None:
    """Add ``more`` (another partition's usage) into ``into``."""
    for key, figures in more.items():
        into[key] = into.get(key, NO_USAGE).plus(figures)


class WindowUsage(NamedTuple):
    """Raw (undecayed) usage of one association over a period, and the jobs it counts."""

    figures: Figures = NO_USAGE
    jobs: int = 0


def _spans(charges: Iterable[JobCharge], open_jobs: Iterable[OpenJob], now: float
           ) -> Iterator[tuple[AssocKey, Figures, float, float]]:
    """(association, rates, start, end) of every allocation: the ended ones as charged,
    the running ones up to ``now``."""
    for charge in charges:
        yield (charge.key, Figures(float(charge.ncores), float(charge.ngpus),
                                   float(charge.nnodes)), charge.t_alloc, charge.t_free)
    for job in open_jobs:
        if job.t_alloc is not None:
            yield job.key, job.rates, job.t_alloc, max(now, job.t_alloc)


def window_usage(charges: Iterable[JobCharge], open_jobs: Iterable[OpenJob], since: float,
                 until: float, now: float) -> dict[AssocKey, WindowUsage]:
    """Raw usage from ``since`` to ``until`` per association: each allocation's part of the
    period (jobs still running count up to ``now``); ``jobs`` counts the allocations
    that overlap the period."""
    return _window(_spans(charges, open_jobs, now), since, until)


def project_usage(charges: Iterable[JobCharge], open_jobs: Iterable[OpenJob], since: float,
                  until: float, now: float) -> dict[str, WindowUsage]:
    """:func:`window_usage` per project (``""``: jobs from before projects were
    recorded)."""
    charges, open_jobs = list(charges), list(open_jobs)
    projects = [c.project for c in charges] + [j.project for j in open_jobs
                                               if j.t_alloc is not None]
    spans = ((project, *span[1:]) for project, span in
             zip(projects, _spans(charges, open_jobs, now), strict=True))
    return _window(spans, since, until)


def _window(spans: Iterable[tuple[_K, Figures, float, float]], since: float,
            until: float) -> dict[_K, WindowUsage]:
    """Each key's raw usage from ``since`` to ``until`` over ``spans`` (key, rates, start,
    end)."""
    out: dict[_K, WindowUsage] = {}
    for key, rates, start, end in spans:
        # the period is [since, until): adjacent periods never count a job twice
        overlaps = start < until and end > since if end > start else since <= start < until
        if not overlaps:
            continue
        lo, hi = max(start, since), min(end, until)
        old = out.get(key, WindowUsage())
        out[key] = WindowUsage(old.figures.plus(rates.scaled(max(hi - lo, 0.0))),
                               old.jobs + 1)
    return out


def minus_cleared(usage: Mapping[AssocKey, Figures],
                  cleared: Mapping[AssocKey, tuple[float, float, tuple[float, float, float]]],
                  now: float, half_life: float) -> dict[AssocKey, Figures]:
    """Decayed usage as of ``now`` less what ``clear-usage`` found (``cleared``: key ->
    (time, half-life, figures then)), decayed on to ``now``: decayed usage is a sum over
    time, so what is left is exactly the usage since the clear. A clear made under
    another half-life is passed over (its figures no longer compare)."""
    out = dict(usage)
    for key, (at, cleared_half_life, figures) in cleared.items():
        if key not in out or cleared_half_life != half_life:
            continue
        weight = decay(now - at, half_life)
        have = out[key]
        out[key] = Figures(max(have.core_seconds - figures[0] * weight, 0.0),
                           max(have.gpu_seconds - figures[1] * weight, 0.0),
                           max(have.node_seconds - figures[2] * weight, 0.0))
    return out


def decayed_since(charges: Iterable[JobCharge], open_jobs: Iterable[OpenJob], since: float,
                  now: float, half_life: float) -> dict[AssocKey, Figures]:
    """Each association's decayed usage as of ``now`` of what was held from ``since`` on
    (an allocation across ``since`` counts for its later part; running jobs up to
    ``now``): what ``clear-usage --ignore-older-than`` keeps."""
    out: dict[AssocKey, Figures] = {}

    def add(key: AssocKey, rates: Figures, start: float, end: float) -> None:
        start = max(start, since)
        if end <= start:
            return
        amount = rates.scaled(held(start, end, half_life) * decay(now - end, half_life))
        out[key] = out.get(key, NO_USAGE).plus(amount)

    for span in _spans(charges, open_jobs, now):
        add(*span)
    return out
