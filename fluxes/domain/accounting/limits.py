"""Limits per association and per bank: may this job be submitted, may it start now.

An association's limits cap what its own jobs hold; a bank's limits cap
everything charged to the bank and to the banks below it (Slurm's ``Grp*``
limits of an account). ``max_active_jobs`` (pending + running) is checked at
submission, where a job over it is refused (:func:`check_submit`);
``max_running_jobs``, ``max_nodes`` and ``max_cores`` when the scheduler
would start a job, which otherwise waits with the reason
:func:`start_refusal` gives (``max-running-jobs limit (4) reached for
alice/physics``), the way ``sched.reason_pending`` annotations read. A job
larger than a node or core limit on its own could never start, so it is
refused at submission too.

:class:`Holdings` is what the caller counts (the ingest its active jobs, the
scheduler its running ones), kept up to date with :meth:`Holdings.add` and
:meth:`Holdings.remove`, or built at once with :func:`holdings`. The ingest
builds only the active counts it needs (:class:`ActiveIndex`, from the
accounting fold's active jobs per association, :func:`active_holdings`) plus
the jobs it created that the fold does not show yet (:class:`SubmitLedger`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from fluxes.domain.accounting.banks import ANY_PROJECT, Accounts, Association, Limits
from fluxes.domain.accounting.queuelimits import running_refusal, submit_refusal
from fluxes.domain.accounting.usage import AssocKey
from fluxes.domain.sched.policy import PendingJob
from fluxes.errors import PolicyError
from fluxes.formats.rset import ResourceSet


class Held(NamedTuple):
    """What one association or bank holds: jobs running, jobs active, nodes, cores."""

    running: int = 0
    active: int = 0
    nodes: int = 0
    cores: int = 0

    def plus(self, other: Held, sign: int = 1) -> Held:
        """The sum (``sign`` -1: the difference)."""
        return Held(self.running + sign * other.running, self.active + sign * other.active,
                    self.nodes + sign * other.nodes, self.cores + sign * other.cores)


class HeldJob(NamedTuple):
    """A job as limits see it: who pays, whether it runs, its size."""

    userid: int
    bank: str | None
    running: bool
    nnodes: int = 0
    ncores: int = 0
    #: the time limit it asks for, seconds (0: none): a queue's max-time-per-job
    duration: float = 0.0

    @property
    def held(self) -> Held:
        """What it holds: running jobs hold nodes and cores, pending ones only count."""
        if self.running:
            return Held(1, 1, self.nnodes, self.ncores)
        return Held(0, 1, 0, 0)


@dataclass
class Holdings:
    """What every association (user, bank) and every bank (with its subtree) holds."""

    by_assoc: dict[tuple[str, str], Held] = field(default_factory=dict)
    by_bank: dict[str, Held] = field(default_factory=dict)

    def _apply(self, accounts: Accounts, job: HeldJob, sign: int) -> None:
        assoc = accounts.resolve(job.userid, job.bank)
        if assoc is None:
            return  # charged to no association: no limit applies
        key = (assoc.username, assoc.bank)
        held = job.held
        self.by_assoc[key] = self.by_assoc.get(key, Held()).plus(held, sign)
        for bank in accounts.path(assoc.bank):
            self.by_bank[bank] = self.by_bank.get(bank, Held()).plus(held, sign)

    def add(self, accounts: Accounts, job: HeldJob) -> None:
        """Count ``job`` (submitted, or started: remove it as pending first)."""
        self._apply(accounts, job, 1)

    def remove(self, accounts: Accounts, job: HeldJob) -> None:
        """Stop counting ``job`` (it ended, or it started and is added again as running)."""
        self._apply(accounts, job, -1)


def limits_active_jobs(accounts: Accounts) -> bool:
    """True when some active association or bank has a ``max-active-jobs`` limit: only then
    does :func:`check_submit` need to know what is active."""
    return any(a.active and a.limits.max_active_jobs is not None
               for a in accounts.associations.values()) or any(
        b.active and b.limits.max_active_jobs is not None for b in accounts.banks.values())


def holdings(accounts: Accounts, jobs: Iterable[HeldJob]) -> Holdings:
    """The holdings of ``jobs`` (every active job of the instance)."""
    out = Holdings()
    for job in jobs:
        out.add(accounts, job)
    return out


def _over(limits: Limits, held: Held, job: HeldJob, who: str) -> str | None:
    """The first running/node/core limit of ``limits`` that ``job`` starting would break."""
    if limits.max_running_jobs is not None and held.running + 1 > limits.max_running_jobs:
        return f"max-running-jobs limit ({limits.max_running_jobs}) reached for {who}"
    if limits.max_nodes is not None and held.nodes + job.nnodes > limits.max_nodes:
        return (f"max-nodes limit ({limits.max_nodes}) reached for {who} "
                f"({held.nodes} held, the job needs {job.nnodes})")
    if limits.max_cores is not None and held.cores + job.ncores > limits.max_cores:
        return (f"max-cores limit ({limits.max_cores}) reached for {who} "
                f"({held.cores} held, the job needs {job.ncores})")
    return None


def start_refusal(accounts: Accounts, held: Holdings, job: HeldJob) -> str | None:
    """Why ``job`` may not start now (None: it may). ``held`` counts the running jobs;
    the association's limits first, then each bank's from the job's bank up."""
    assoc = accounts.resolve(job.userid, job.bank)
    if assoc is None:
        return None
    reason = _over(assoc.limits, held.by_assoc.get((assoc.username, assoc.bank), Held()), job,
                   assoc.label)
    if reason is not None:
        return reason
    for name in reversed(accounts.path(assoc.bank)):
        reason = _over(accounts.banks[name].limits, held.by_bank.get(name, Held()), job,
                       f"bank {name}")
        if reason is not None:
            return reason
    return None


def _never_fits(limits: Limits, job: HeldJob, who: str) -> str | None:
    if limits.max_nodes is not None and job.nnodes > limits.max_nodes:
        return (f"the job requests {job.nnodes} nodes, more than the max-nodes limit "
                f"({limits.max_nodes}) of {who}")
    if limits.max_cores is not None and job.ncores > limits.max_cores:
        return (f"the job requests {job.ncores} cores, more than the max-cores limit "
                f"({limits.max_cores}) of {who}")
    return None


def check_submit(accounts: Accounts, held: Holdings, username: str, job: HeldJob,
                 queue: str | None = None, project: str | None = None
                 ) -> Association | None:
    """The association a new job of ``username`` is charged to, or PolicyError saying why
    it may not be submitted. Before any bank exists every job may be (None).

    ``job.bank`` None asks for the user's default bank; ``held`` counts the active
    jobs (pending and running) before this one; ``queue`` is the job's queue, which
    must be one of the association's (``--queues``) when it names any; ``project``,
    when given, one of its projects (``--projects``, and ``*``).
    """
    if not accounts.enabled:
        return None
    mine = accounts.user_associations(username)
    if not mine or mine[0].userid != job.userid:
        raise PolicyError(f"user {username} belongs to no bank: the instance owner adds "
                          f"them with 'fluxes account add-user --username={username} "
                          "--bank=BANK'")
    if job.bank:
        assoc = accounts.associations.get((username, job.bank))
        if assoc is None or not assoc.active:
            known = ", ".join(a.bank for a in mine)
            # the name is the user's own input: shown quoted when odd or long
            name = job.bank if job.bank.isprintable() and len(job.bank) <= 40 \
                else repr(job.bank[:37]) + "..."
            raise PolicyError(f"user {username} is not in bank {name} (their banks: "
                              f"{known})")
    else:
        default = accounts.default_banks.get(username)
        assoc = accounts.associations.get((username, default)) if default else None
        if assoc is None:
            raise PolicyError(f"user {username} has no default bank: give one with -B")
    if queue is not None and assoc.queues and queue not in assoc.queues:
        raise PolicyError(f"{assoc.label} may not use queue {queue} (its queues: "
                          f"{', '.join(assoc.queues)})")
    if queue is not None and queue in accounts.queue_limits:
        reason = submit_refusal(queue, accounts.queue_limits[queue], job.nnodes, job.duration)
        if reason is not None:
            raise PolicyError(reason)
    if project is not None and project != ANY_PROJECT and project not in assoc.projects:
        raise PolicyError(f"{assoc.label} is not in project {project[:40]} (its projects: "
                          f"{', '.join((*assoc.projects, ANY_PROJECT))})")
    checks = [(assoc.limits, held.by_assoc.get((username, assoc.bank), Held()), assoc.label)]
    checks += [(accounts.banks[name].limits, held.by_bank.get(name, Held()), f"bank {name}")
               for name in reversed(accounts.path(assoc.bank))]
    for limits, now, who in checks:
        if limits.max_active_jobs is not None and now.active + 1 > limits.max_active_jobs:
            raise PolicyError(f"max-active-jobs limit ({limits.max_active_jobs}) reached "
                              f"for {who}")
        reason = _never_fits(limits, job, who)
        if reason is not None:
            raise PolicyError(reason)
    return assoc


def active_holdings(accounts: Accounts, counts: Mapping[AssocKey, int]) -> Holdings:
    """The active jobs of ``counts`` (association as journaled -> active jobs), resolved
    to associations and banks exactly as :func:`holdings` resolves each job: the
    ``active`` figures equal those of :func:`holdings` over the same jobs (the other
    figures stay 0)."""
    out = Holdings()
    for (userid, bank), count in counts.items():
        assoc = accounts.resolve(userid, bank or None)
        if assoc is None or not count:
            continue
        held = Held(0, count)
        key = (assoc.username, assoc.bank)
        out.by_assoc[key] = out.by_assoc.get(key, Held()).plus(held)
        for name in accounts.path(assoc.bank):
            out.by_bank[name] = out.by_bank.get(name, Held()).plus(held)
    return out


class ActiveIndex:
    """Which associations (as journaled: uid and bank, ``""`` for the default bank) a
    submission's ``max-active-jobs`` checks count, per user: the user's own
    associations, and every association below a bank with such a limit above them.
    Built once per state of the banks; what lets the ingest read a few counts per
    block instead of every active job."""

    def __init__(self, accounts: Accounts) -> None:
        self.accounts = accounts
        #: association -> the journaled keys that resolve to it
        self._keys: dict[tuple[str, str], list[AssocKey]] = {}
        #: bank with a max-active-jobs limit -> the keys of every association below it
        self._below: dict[str, list[AssocKey]] = {}
        #: user name -> what :meth:`wanted` answered for the user alone
        self._per_user: dict[str, frozenset[AssocKey]] = {}
        #: journaled key -> the association it resolves to and the banks from the root
        self._charged: dict[AssocKey, tuple[tuple[str, str], tuple[str, ...]]] = {}
        limited = {name for name, b in accounts.banks.items()
                   if b.active and b.limits.max_active_jobs is not None}
        for assoc in accounts.associations.values():
            if not assoc.active:
                continue  # resolve() charges nothing to it
            keys = [(assoc.userid, assoc.bank)]
            if accounts.default_banks.get(assoc.username) == assoc.bank:
                keys.append((assoc.userid, ""))
            self._keys[(assoc.username, assoc.bank)] = keys
            path = tuple(accounts.path(assoc.bank))
            for key in keys:
                if (found := accounts.resolve(*key)) is not None:
                    self._charged[key] = ((found.username, found.bank),
                                          tuple(accounts.path(found.bank)))
            for name in path:
                if name in limited:
                    self._below.setdefault(name, []).extend(keys)

    def wanted(self, usernames: Iterable[str]) -> set[AssocKey]:
        """The keys whose counts :func:`check_submit` needs for jobs of ``usernames``, in
        any of their banks: exact for every association and bank it consults."""
        out: set[AssocKey] = set()
        for username in usernames:
            mine = self._per_user.get(username)
            if mine is None:
                mine = self._per_user[username] = frozenset(self._user_wants(username))
            out |= mine
        return out

    def holdings(self, counts: Mapping[AssocKey, int]) -> Holdings:
        """:func:`active_holdings` of ``counts``, with the resolutions made once."""
        by_assoc: dict[tuple[str, str], int] = {}
        by_bank: dict[str, int] = {}
        charged = self._charged
        for key, count in counts.items():
            found = charged.get(key)
            if found is None or not count:
                continue
            assoc, path = found
            by_assoc[assoc] = by_assoc.get(assoc, 0) + count
            for name in path:
                by_bank[name] = by_bank.get(name, 0) + count
        return Holdings({k: Held(0, n) for k, n in by_assoc.items()},
                        {k: Held(0, n) for k, n in by_bank.items()})

    def _user_wants(self, username: str) -> set[AssocKey]:
        out: set[AssocKey] = set()
        accounts = self.accounts
        for assoc in accounts.user_associations(username):
            if assoc.limits.max_active_jobs is not None:
                out.update(self._keys.get((username, assoc.bank), ()))
            for name in accounts.path(assoc.bank):
                out.update(self._below.get(name, ()))
        return out


#: How long the ingest counts a job it created whose commit it did not see succeed
#: (the fold can never show it, or shows it soon).
RECENT_S = 10.0
#: How long at most the ingest counts a committed job the fold has not reached: the
#: accounting worker folds within a fraction of a second, and one that is down must
#: not make the ingest keep every job it creates.
UNFOLDED_S = 60.0


def journal_id(text: str) -> tuple[int, int]:
    """A stream id ``ms-seq`` as a pair that orders like the stream; ValueError if it
    is not one."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Recent(NamedTuple):
    """A job the ingest created: its partition, association as journaled, when, and the
    journal id its submit entry is at or before (None until its commit is seen)."""

    partition: int
    key: AssocKey
    t: float
    journal_id: tuple[int, int] | None = None


class SubmitLedger:
    """What the ingest counts against ``max-active-jobs``: the active jobs per association
    the accounting worker has folded (exact as of each partition's folded position)
    plus the jobs this ingest created that the fold has not reached yet, so that a
    burst of submissions cannot slip through the lag. A job is known to be folded once
    its partition's folded position reaches the journal id its commit returned.

    The jobs waiting for the fold are kept per partition in journal order with a
    running count per association, so a block costs what the fold reached since the
    last one, not what is still waiting (with the accounting worker down, up to
    UNFOLDED_S of submissions)."""

    def __init__(self) -> None:
        #: partition -> jobs created whose commit was not seen yet: (jobid, key, when)
        self._unplaced: dict[int, list[tuple[int, AssocKey, float]]] = {}
        #: partition -> committed jobs in journal order: (journal id, jobid, key, when)
        self._placed: dict[int, deque[tuple[tuple[int, int], int, AssocKey, float]]] = {}
        #: association -> jobs of both kinds
        self._count: dict[AssocKey, int] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def recent(self) -> dict[int, Recent]:
        """Every job it counts now, by id (for inspection)."""
        out = {jobid: Recent(p, key, t) for p, jobs in self._unplaced.items()
               for jobid, key, t in jobs}
        out.update({jobid: Recent(p, key, t, at) for p, jobs in self._placed.items()
                    for at, jobid, key, t in jobs})
        return out

    def clear(self) -> None:
        """Forget every job (nothing caps active jobs: nobody needs the count)."""
        self._unplaced.clear()
        self._placed.clear()
        self._count.clear()
        self._size = 0

    def _drop(self, key: AssocKey) -> None:
        self._size -= 1
        left = self._count[key] - 1
        if left:
            self._count[key] = left
        else:
            del self._count[key]

    def created(self, jobid: int, partition: int, key: AssocKey, now: float) -> None:
        """The ingest is about to commit ``jobid`` charged to ``key``."""
        self._unplaced.setdefault(partition, []).append((jobid, key, now))
        self._count[key] = self._count.get(key, 0) + 1
        self._size += 1

    def committed(self, partition: int, last_id: str) -> None:
        """A commit of the partition succeeded with ``last_id`` its last journal entry:
        every job created for the partition and not placed yet is at or before it."""
        at = journal_id(last_id)
        placed = self._placed.setdefault(partition, deque())
        for jobid, key, t in self._unplaced.pop(partition, []):
            placed.append((at, jobid, key, t))

    def counts(self, folded: Mapping[AssocKey, int], positions: list[str | None],
               now: float) -> dict[AssocKey, int]:
        """``folded`` (the fold's counts, exact at ``positions``, per partition; None: the
        partition was never folded) plus the recent jobs the fold has not reached; the
        ones it reached, and those too old to wait for, are forgotten."""
        for partition, placed in self._placed.items():
            raw = positions[partition] if partition < len(positions) else None
            reached = journal_id(raw) if raw is not None else None
            # in journal order: the ones the fold reached, or too old, come first
            while placed and ((reached is not None and placed[0][0] <= reached)
                              or now - placed[0][3] > UNFOLDED_S):
                self._drop(placed.popleft()[2])
        for partition, jobs in list(self._unplaced.items()):
            kept = [job for job in jobs if now - job[2] <= RECENT_S]
            for _jobid, key, t in jobs:
                if now - t > RECENT_S:
                    self._drop(key)
            if kept:
                self._unplaced[partition] = kept
            else:
                del self._unplaced[partition]
        out = dict(folded)
        for key, n in self._count.items():
            out[key] = out.get(key, 0) + n
        return out

    def holdings(self, accounts: Accounts, folded: Mapping[AssocKey, int],
                 positions: list[str | None], now: float,
                 index: ActiveIndex | None = None) -> Holdings:
        """:meth:`counts` as the holdings :func:`check_submit` takes (active jobs only);
        ``index`` (of ``accounts``) resolves them faster."""
        counts = self.counts(folded, positions, now)
        return index.holdings(counts) if index is not None \
            else active_holdings(accounts, counts)


class LimitGate:
    """The scheduler's start gate (:class:`fluxes.domain.sched.policy.StartGate`) for the
    running limits of associations and banks: it counts the jobs running on the
    scheduler's pool and holds back a job whose start would break a limit, with
    :func:`start_refusal`'s reason. Before any bank exists it holds back nothing."""

    def __init__(self, accounts: Accounts | None = None) -> None:
        self.accounts = accounts if accounts is not None else Accounts()
        #: jobid -> the running job as limits see it
        self.running: dict[int, HeldJob] = {}
        self.held = Holdings()
        #: jobid -> the queue of a running job that has one
        self.queue_of: dict[int, str] = {}
        #: (username, bank, queue) -> the association's jobs running in the queue
        self.in_queue: dict[tuple[str, str, str], int] = {}

    def set_accounts(self, accounts: Accounts) -> None:
        """New banks and associations: count the running jobs again under them."""
        if accounts == self.accounts:
            return
        self.accounts = accounts
        self.held = holdings(accounts, self.running.values())
        self.in_queue = {}
        for jobid, queue in self.queue_of.items():
            self._count_in_queue(self.running[jobid], queue, 1)

    def _queue_key(self, job: HeldJob, queue: str) -> tuple[str, str, str] | None:
        assoc = self.accounts.resolve(job.userid, job.bank)
        return None if assoc is None else (assoc.username, assoc.bank, queue)

    def _count_in_queue(self, job: HeldJob, queue: str, delta: int) -> None:
        key = self._queue_key(job, queue)
        if key is not None:
            count = self.in_queue.get(key, 0) + delta
            if count > 0:
                self.in_queue[key] = count
            else:
                self.in_queue.pop(key, None)

    def refusal(self, job: PendingJob) -> str | None:
        """Why the pending ``job`` may not start now; None: it may."""
        if not self.accounts.enabled:
            return None
        request = job.request
        held = HeldJob(job.userid, job.bank, True, request.min_nodes, request.min_cores)
        limits = self.accounts.queue_limits.get(job.queue) if job.queue else None
        if limits is not None and job.queue:
            key = self._queue_key(held, job.queue)
            if key is not None:
                reason = running_refusal(job.queue, limits, self.in_queue.get(key, 0),
                                         f"{key[0]}/{key[1]}")
                if reason is not None:
                    return reason
        return start_refusal(self.accounts, self.held, held)

    def started(self, job: PendingJob, rset: ResourceSet) -> None:
        """``job`` was allocated ``rset``: it holds its nodes and cores."""
        self.adopt(job.id, job.userid, job.bank, rset.nnodes, rset.ncores, job.queue)

    def adopt(self, jobid: int, userid: int, bank: str | None, nnodes: int,
              ncores: int, queue: str | None = None) -> None:
        """Count a running job (an allocation made now, or recovered after a restart;
        ``queue``, when known, for the per-queue running limits)."""
        self.end(jobid)
        running = HeldJob(userid, bank, True, nnodes, ncores)
        self.running[jobid] = running
        self.held.add(self.accounts, running)
        if queue:
            self.queue_of[jobid] = queue
            self._count_in_queue(running, queue, 1)

    def end(self, jobid: int) -> None:
        """The job's resources were freed (unknown jobs are ignored)."""
        running = self.running.pop(jobid, None)
        if running is not None:
            self.held.remove(self.accounts, running)
            queue = self.queue_of.pop(jobid, None)
            if queue is not None:
                self._count_in_queue(running, queue, -1)
