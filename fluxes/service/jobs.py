"""Choosing jobs: the job list read your writes, filtered as ``fluxes jobs`` filters
(states, user, queue, time window), or by id (the CLI's listing commands, ``fluxes
top``, the Python API)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fluxes.domain.job.states import JobResult, JobState, parse_states
from fluxes.errors import FluxesError
from fluxes.store import jobfacts

if TYPE_CHECKING:
    from fluxes.domain.job.record import JobRecord
    from fluxes.store.instance import Instance
    from fluxes.store.joblist_read import JobListReader

#: Pause between looks at the job list while it folds a job just submitted.
CATCH_UP_PAUSE_S = 0.02
#: How long ``fluxes jobs ID`` waits for the job list to fold a job whose eventlog exists.
CATCH_UP_S = 5.0

def wanted_states(states: str) -> tuple[JobState, JobResult]:
    """The states and results a ``-f`` text names."""
    parsed = parse_states(states)
    if isinstance(parsed, tuple):
        return parsed
    if isinstance(parsed, JobResult):
        return JobState(0), parsed
    return parsed, JobResult(0)


def caught_up(inst: Instance, timeout: float = CATCH_UP_S) -> JobListReader:
    """The job list, once it includes every journal entry written before this call.

    Read-your-writes: once ``job wait`` or ``wait-event ... clean`` has returned,
    the job's final record is listed. The job list folds within milliseconds;
    if it has not caught up within ``timeout`` (its worker is down), say so on
    stderr and read it as it is.
    """
    from fluxes.store.joblist_read import JobListReader

    store = JobListReader(inst.redis, inst.keys)
    behind = store.catch_up(timeout, CATCH_UP_PAUSE_S)
    if behind:
        print(f"fluxes: warning: the job list has not folded the newest journal entries "
              f"of partition(s) {', '.join(map(str, sorted(behind)))} (is a job-list "
              "worker running?); showing it as it is", file=sys.stderr)
    return store


def select_jobs(inst: Instance, states: str = "active", user: str | None = None,
                queue: str | None = None, everyone: bool = False,
                limit: int | None = None, window: Window | None = None) -> list[JobRecord]:
    """Job records matching the filters, newest first (active jobs before inactive)."""
    want_states, want_results = wanted_states(states)
    need_inactive = bool(want_results) or bool(want_states & JobState.INACTIVE)
    need_active = bool(want_states & JobState.ACTIVE)
    store = caught_up(inst)
    ids = store.list_ids(active=need_active, inactive=need_inactive)
    uid = None if everyone else user_id(inst, user)
    out: list[JobRecord] = []
    chunk = 2000
    for i in range(0, len(ids), chunk):
        for rec in store.get_many(ids[i:i + chunk]):
            if rec is None:
                continue
            job = rec.job
            if uid is not None and job.userid != uid:
                continue
            if queue is not None and rec.queue != queue:
                continue
            if window is not None and not window.holds(rec):
                continue
            result = job.result
            if not (job.state & want_states or (result is not None and result & want_results)):
                continue
            out.append(rec)
            if limit and len(out) >= limit:
                return out
    return out


class Window:
    """The history filters ``sacct`` users reach for: jobs active at some time in
    [since, until) (submitted before ``until``, not inactive before ``since``) and
    charged to ``bank``."""

    def __init__(self, since: float | None = None, until: float | None = None,
                 bank: str | None = None) -> None:
        self.since = since
        self.until = until
        self.bank = bank

    def holds(self, rec: JobRecord) -> bool:
        """True when the job passes every filter given."""
        job = rec.job
        if self.until is not None and job.t_submit >= self.until:
            return False
        if self.since is not None and job.t_inactive is not None \
                and job.t_inactive < self.since:
            return False
        return self.bank is None or rec.info.get("bank") == self.bank


def user_id(inst: Instance, user: str | None = None) -> int:
    """The uid of ``user`` (a name or uid; default: you, as the instance knows you)."""
    from fluxes.service.users import current_user, local_uid
    from fluxes.store.users import UserTable

    who = user or inst.user or current_user()
    # a user without access to the users table is looked up locally
    known = UserTable(inst.redis, inst.keys).uid(who)
    if known is None:
        known = local_uid(who)
    if known is None:
        raise FluxesError(f"unknown user {who!r}")
    return known


def jobs_by_id(inst: Instance, ids: Iterable[int]) -> tuple[list[JobRecord], list[int]]:
    """The records of ``ids`` in the order given (repeats dropped), and the ids of no job.

    A job whose eventlog exists but which the job list has not folded yet (it
    lags by milliseconds) is waited for, up to :data:`CATCH_UP_S`, and so is
    the newest record of one it has (read-your-writes, :func:`caught_up`).
    """
    store = caught_up(inst)
    wanted = list(dict.fromkeys(ids))
    found: dict[int, JobRecord] = {}
    deadline = time.monotonic() + CATCH_UP_S
    todo = [int(j) for j in wanted]
    while True:
        for jobid, rec in zip(todo, store.get_many(todo), strict=True):
            if rec is not None:
                found[jobid] = rec
        todo = [j for j in todo if j not in found]
        if todo:
            exist = jobfacts.which_exist(inst.redis, inst.keys, todo)
            todo = [j for j, exists in zip(todo, exist, strict=True) if exists]
        if not todo or time.monotonic() >= deadline:
            break
        time.sleep(CATCH_UP_PAUSE_S)
    return [found[j] for j in wanted if j in found], [j for j in wanted if j not in found]


