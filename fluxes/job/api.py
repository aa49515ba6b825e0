"""The functions of ``fluxes.job`` (flux's ``flux.job`` names and meanings).

Submit, wait, result, event watches, cancel/kill/raise and the job list,
each over a :class:`~fluxes.job.handle.Flux` handle; ``*_async`` variants
return futures the handle's engine fulfils (see :mod:`fluxes.job.handle`).
"""

from __future__ import annotations

import collections
import errno
import os
import signal
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fluxes.job.future import EventLogEvent, Future, JobException, WatchFuture
from fluxes.job.jobid import JobID

if TYPE_CHECKING:
    from fluxes.job.handle import Flux, SubmitFuture

#: flux's submit flags (recorded with the job's ``submit`` event)
FLAG_DEBUG = 2
FLAG_WAITABLE = 4

#: flux's "any job" for ``wait``
JOBID_ANY = -1

JobWaitResult = collections.namedtuple("JobWaitResult", "jobid, success, errstr")


def _spec_item(jobspec: Any, urgency: int | None, flags: int) -> dict[str, Any]:
    """A submission item from a JobspecV1, a document or its JSON/YAML text."""
    from fluxes.job.jobspec import Jobspec

    if isinstance(jobspec, Jobspec):
        doc: Any
        doc, own = jobspec._submitted()
        if urgency is None:
            urgency = own  # what the ingest would take from the document's Jobspec
    elif isinstance(jobspec, str | bytes):
        from fluxes.formats.jobspec import Jobspec as Checked

        doc = Checked.from_yaml(jobspec)
    elif isinstance(jobspec, dict):
        doc = jobspec
    else:
        raise TypeError("jobspec must be a Jobspec, a dict or its JSON text")
    if urgency is not None and not (isinstance(urgency, int) and 0 <= urgency <= 31):
        raise ValueError(f"urgency must be 0-31, got {urgency!r}")
    return {"jobspec": doc, "urgency": urgency, "flags": flags}


def submit_async(flux_handle: Flux, jobspec: Any, urgency: int = 16, waitable: bool = False,
                 debug: bool = False, pre_signed: bool = False, novalidate: bool = False
                 ) -> SubmitFuture:
    """Submit a job; the future's ``get_id()`` is its JobID. ``ValueError`` for a bad
    jobspec (at once); the future raises ``OSError`` when the instance refuses it."""
    flags = (FLAG_WAITABLE if waitable else 0) | (FLAG_DEBUG if debug else 0)
    future = flux_handle.queue_submit(_spec_item(jobspec, urgency, flags))
    if waitable:
        _remember_waitable(flux_handle, future)
    return future


def _remember_waitable(flux_handle: Flux, future: SubmitFuture) -> None:
    original = future._fulfil

    def fulfil(value: Any = None, error: BaseException | None = None) -> None:
        if value is not None:
            flux_handle.waitable.append(int(value))
        original(value, error)

    future._fulfil = fulfil  # type: ignore[method-assign]


def submit_get_id(future: SubmitFuture) -> JobID:
    """The JobID of a ``submit_async`` future."""
    jobid: JobID = future.get_id()
    return jobid


def submit(flux_handle: Flux, jobspec: Any, urgency: int = 16, waitable: bool = False,
           debug: bool = False, pre_signed: bool = False, novalidate: bool = False) -> JobID:
    """Submit a job and return its JobID."""
    return submit_get_id(submit_async(flux_handle, jobspec, urgency, waitable, debug))


# -- event watches -----------------------------------------------------------

class _WatchSink:
    """Feeds a WatchFuture from the engine (the eventlog's entries, then its end)."""

    def __init__(self, future: WatchFuture) -> None:
        self.future = future

    def _event(self, event: EventLogEvent) -> None:
        self.future._push(event)

    def _end(self) -> None:
        self.future._push(None)


def event_watch_async(flux_handle: Flux, jobid: int, eventlog: str = "eventlog"
                      ) -> WatchFuture:
    """Watch a job's eventlog from its start: the future is ready once per event
    (``get_event()``), with None after the last. ``FileNotFoundError`` for an
    unknown job. Only the main ``eventlog`` exists here."""
    if eventlog != "eventlog":
        raise FileNotFoundError(errno.ENOENT, f"no eventlog {eventlog!r} (only 'eventlog')")
    future = WatchFuture(flux_handle, int(jobid))
    flux_handle.watch_log(int(jobid), _WatchSink(future))
    return future


def event_watch(flux_handle: Flux, jobid: int, eventlog: str = "eventlog"
                ) -> Iterator[EventLogEvent]:
    """The job's events as they happen, until its eventlog ends."""
    future = event_watch_async(flux_handle, jobid, eventlog)
    while True:
        event = future.get_event()
        if event is None:
            return
        yield event


def event_wait(flux_handle: Flux, jobid: int, name: str, eventlog: str = "eventlog",
               raiseJobException: bool = True) -> EventLogEvent:  # noqa: N803 -- flux's name
    """Wait for the event ``name``; ``JobException`` when a fatal exception comes
    first (if ``raiseJobException``), ``OSError`` ENODATA when the log ends first."""
    for event in event_watch(flux_handle, jobid, eventlog):
        if event.name == name:
            return event
        if raiseJobException and event.name == "exception" \
                and event.context.get("severity") == 0:
            raise JobException(event)
    raise OSError(errno.ENODATA, f"eventlog ended before event='{name}'")


# -- results -----------------------------------------------------------------

class JobInfo:
    """A job's facts (flux's ``JobInfo``): ``id``, ``result``, ``returncode``,
    ``waitstatus``, ``t_submit``, ``t_run``, ``t_cleanup``, ``t_inactive``, ``runtime``,
    ``exception`` and, from the job list, ``name``, ``queue``, ``ntasks``, ... ."""

    def __init__(self, facts: dict[str, Any]) -> None:
        """From a dict of facts (``id`` required)."""
        self._facts = facts
        self.id = JobID(facts["id"])

    def __getattr__(self, name: str) -> Any:
        try:
            return self._facts[name]
        except KeyError:
            if name == "username" and "userid" in self._facts:
                return _username(self._facts["userid"])
            raise AttributeError(name) from None

    def to_dict(self, filtered: bool = True) -> dict[str, Any]:
        """The facts as a dict."""
        return dict(self._facts)

    def __repr__(self) -> str:
        return f"JobInfo({self._facts!r})"


def _username(uid: int) -> str:
    """The login name of ``uid`` (its number when the host has no such user, as flux)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError, TypeError):
        return str(uid)


ExceptionInfo = collections.namedtuple("ExceptionInfo", "occurred, severity, type, note")


def job_facts(job: Any) -> dict[str, Any]:
    """The JobInfo facts of a folded :class:`fluxes.domain.job.model.Job`."""
    status = job.wait_status
    returncode = job.exit_code
    if returncode is None and job.fatal is not None:
        returncode = 1  # ended by an exception before its tasks ran
    fatal = job.fatal
    result = job.result
    t_run = job.t_run or 0.0
    end = job.t_cleanup or job.t_inactive or 0.0
    return {
        "id": job.id, "userid": job.userid, "urgency": job.urgency, "priority": job.priority,
        "state": job.state.name, "result": result.name if result is not None else "",
        "success": result is not None and result.name == "COMPLETED",
        "returncode": returncode, "waitstatus": status, "t_submit": job.t_submit,
        "t_run": t_run, "t_cleanup": job.t_cleanup or 0.0, "t_inactive": job.t_inactive or 0.0,
        "runtime": max(0.0, end - t_run) if t_run else 0.0,
        "exception": ExceptionInfo(fatal is not None, 0 if fatal else None,
                                   fatal.type if fatal else None,
                                   fatal.note if fatal else None),
    }


class _EndSink:
    """Fulfils a future with ``finish(job)`` once the job's eventlog ends, the job
    folded from its eventlog then (one read)."""

    def __init__(self, future: Future, jobid: int, finish: Any) -> None:
        self.future, self.jobid, self.finish = future, jobid, finish

    def _event(self, event: EventLogEvent) -> None:
        pass  # the eventlog is read whole at its end

    def _end(self) -> None:
        self.future._fulfil(self.finish(self.final()))

    def final(self) -> Any:
        """The job as its complete eventlog says."""
        from fluxes.store.eventstore import EventStore
        from fluxes.store.private import revealed_job

        handle = self.future.flux_handle
        job = EventStore(handle.redis, handle.keys).replay_job(self.jobid)
        # the fatal exception's note is private to the owner (docs/security.md)
        return revealed_job(handle.redis, handle.keys, job)


def result_async(flux_handle: Flux, jobid: int, flags: int = 0) -> Future:
    """A future of the job's :class:`JobInfo` once it is inactive (``get_info()``)."""
    future = _InfoFuture(flux_handle)
    flux_handle.watch_log(int(jobid), _EndSink(future, int(jobid),
                                               lambda job: JobInfo(job_facts(job))))
    return future


class _InfoFuture(Future):
    def get_info(self) -> JobInfo:
        """The JobInfo."""
        info: JobInfo = self.get()
        return info

    def get_dict(self) -> dict[str, Any]:
        """The JobInfo as a dict."""
        return self.get_info().to_dict()


def result(flux_handle: Flux, jobid: int, flags: int = 0) -> JobInfo:
    """The job's :class:`JobInfo` once it is inactive (blocking)."""
    info: JobInfo = result_async(flux_handle, jobid, flags).get_info()  # type: ignore[attr-defined]
    return info


def _wait_result(job: Any) -> JobWaitResult:
    """flux's wait status: (jobid, success, errstr as bytes)."""
    from fluxes.job.jobid import JobID

    if job.fatal is not None:
        note = f" {job.fatal.note}" if job.fatal.note else ""
        return JobWaitResult(JobID(job.id), False,
                             f"Fatal exception type={job.fatal.type}{note}".encode())
    status = job.wait_status or 0
    if status & 0x7F:
        return JobWaitResult(JobID(job.id), False,
                             f"task(s) {signal.Signals(status & 0x7F).name}".encode())
    code = job.exit_code or 0
    if code:
        return JobWaitResult(JobID(job.id), False,
                             f"task(s) exited with exit code {code}".encode())
    return JobWaitResult(JobID(job.id), True, b"")


class _WaitFuture(Future):
    def get_status(self) -> JobWaitResult:
        """The wait result."""
        status: JobWaitResult = self.get()
        return status


class _AnySink(_EndSink):
    """One of the waitable jobs a wait-for-any watches: the first to end wins."""

    def __init__(self, future: Future, jobid: int, group: list[_AnySink],
                 handle: Flux) -> None:
        super().__init__(future, jobid, _wait_result)
        self.group, self.handle = group, handle

    def _end(self) -> None:
        if self.future.is_ready():
            return
        for other in self.group:
            if other is not self:
                self.handle.unwatch_log(other.jobid, other)
        if self.jobid in self.handle.waitable:
            self.handle.waitable.remove(self.jobid)
        self.future._fulfil(_wait_result(self.final()))


def wait_async(flux_handle: Flux, jobid: int = JOBID_ANY) -> _WaitFuture:
    """Wait for a job to end (any waitable job of this handle when none is named);
    ``get_status()`` is ``(jobid, success, errstr)``. ``OSError`` ECHILD when there
    is no waitable job to wait for, ENOENT for an unknown job."""
    future = _WaitFuture(flux_handle)
    if jobid is not None and int(jobid) != JOBID_ANY:
        jobid = int(jobid)
        if jobid in flux_handle.waitable:
            flux_handle.waitable.remove(jobid)
        flux_handle.watch_log(jobid, _EndSink(future, jobid, _wait_result))
        return future
    if not flux_handle.waitable:
        raise ChildProcessError(errno.ECHILD, "there are no waitable jobs")
    group: list[_AnySink] = []
    for one in list(flux_handle.waitable):
        sink = _AnySink(future, one, group, flux_handle)
        group.append(sink)
        flux_handle.watch_log(one, sink)
    return future


def wait(flux_handle: Flux, jobid: int = JOBID_ANY) -> JobWaitResult:
    """Block until a job ends: ``(jobid, success, errstr)``."""
    return wait_async(flux_handle, jobid).get_status()


# -- control -----------------------------------------------------------------

def _check(answer: dict[str, Any], jobid: int) -> None:
    """flux's errors for a control request's refusal."""
    if not answer["errors"]:
        return
    line = str(answer["errors"][0])
    low = line.lower()
    if "unknown" in low or "not found" in low:
        raise FileNotFoundError(errno.ENOENT, line)
    if "permission" in low:
        raise PermissionError(errno.EPERM, line)
    raise OSError(errno.EINVAL, line)


class _DoneFuture(Future):
    def __init__(self, handle: Flux, value: Any = None, error: BaseException | None = None
                 ) -> None:
        super().__init__(handle)
        self._fulfil(value, error)


def _done(flux_handle: Flux, call: Any) -> Future:
    try:
        return _DoneFuture(flux_handle, call())
    except OSError as exc:
        return _DoneFuture(flux_handle, None, exc)


def cancel(flux_handle: Flux, jobid: int, reason: str | None = None) -> None:
    """Cancel a job (a ``cancel`` exception); ``OSError`` when refused."""
    _check(flux_handle.client.cancel([int(jobid)], note=reason or ""), int(jobid))


def cancel_async(flux_handle: Flux, jobid: int, reason: str | None = None) -> Future:
    """:func:`cancel`, as a future (the request is answered before it returns)."""
    return _done(flux_handle, lambda: cancel(flux_handle, jobid, reason))


def kill(flux_handle: Flux, jobid: int, signum: int | None = None) -> None:
    """Send ``signum`` (SIGTERM) to a running job's tasks."""
    sig = signal.SIGTERM if signum is None else signum
    _check(flux_handle.client.signal([int(jobid)], int(sig)), int(jobid))


def kill_async(flux_handle: Flux, jobid: int, signum: int | None = None) -> Future:
    """:func:`kill`, as a future."""
    return _done(flux_handle, lambda: kill(flux_handle, jobid, signum))


def job_raise(flux_handle: Flux, jobid: int, type: str = "cancel",
              severity: int = 0, note: str = "") -> None:
    """Raise an exception on a job (severity 0 ends it)."""
    _check(flux_handle.client.raise_exception([int(jobid)], type, severity, note), int(jobid))


def job_raise_async(flux_handle: Flux, jobid: int, type: str = "cancel",
                    severity: int = 0, note: str = "") -> Future:
    """:func:`job_raise`, as a future."""
    return _done(flux_handle, lambda: job_raise(flux_handle, jobid, type, severity, note))


raise_job = job_raise


# -- the job list ------------------------------------------------------------

def _record_facts(rec: Any) -> dict[str, Any]:
    facts = job_facts(rec.job)
    facts.update({k: v for k, v in rec.info.items() if k not in facts})
    facts["queue"] = rec.queue
    return facts


class _ListFuture(Future):
    def get_jobs(self) -> list[dict[str, Any]]:
        """The jobs as dicts."""
        jobs: list[dict[str, Any]] = self.get()
        return jobs

    def get_jobinfos(self) -> list[JobInfo]:
        """The jobs as JobInfo."""
        return [JobInfo(d) for d in self.get_jobs()]


def job_list(flux_handle: Flux, max_entries: int = 1000, attrs: Sequence[str] = ("all",),
             userid: int | None = None, states: int = 0, results: int = 0,
             since: float = 0.0, name: str | None = None, queue: str | None = None
             ) -> _ListFuture:
    """Your jobs (``userid`` -1: everyone's), newest first, as ``fluxes jobs -a`` lists
    them; the future's ``get_jobs()`` gives dicts."""
    from fluxes.service.jobs import select_jobs

    uid = os.getuid() if userid is None else int(userid)
    records = select_jobs(flux_handle.instance, states="active,inactive",
                          user=None if uid == -1 else str(uid), everyone=uid == -1,
                          queue=queue, limit=None)
    out = []
    for rec in records:
        facts = _record_facts(rec)
        if name is not None and facts.get("name") != name:
            continue
        if since and (facts.get("t_inactive") or since) < since:
            continue
        out.append(facts)
        if max_entries and len(out) >= max_entries:
            break
    future = _ListFuture(flux_handle)
    future._fulfil(out)
    return future


def get_job(flux_handle: Flux, jobid: int) -> dict[str, Any] | None:
    """One job's list entry as a dict, None when there is no such job."""
    from fluxes.store.joblist import JobListStore

    [rec] = JobListStore(flux_handle.redis, flux_handle.keys).get_many([int(jobid)])
    return None if rec is None else _record_facts(rec)


class JobList:
    """A job-list query (flux's ``JobList``): ``jobs()`` returns JobInfo objects."""

    def __init__(self, flux_handle: Flux, ids: Sequence[int] = (),
                 attrs: Sequence[str] = ("all",), filters: Sequence[str] = (),
                 user: int | str | None = None, max_entries: int = 1000,
                 since: float = 0.0, name: str | None = None, queue: str | None = None
                 ) -> None:
        """The query; nothing is read before :meth:`jobs`."""
        self.handle, self.ids, self.max_entries = flux_handle, list(ids), max_entries
        self.user, self.since, self.name, self.queue = user, since, name, queue

    def jobs(self) -> list[JobInfo]:
        """The matching jobs."""
        if self.ids:
            found = [get_job(self.handle, i) for i in self.ids]
            return [JobInfo(d) for d in found if d is not None]
        uid: int | None
        if self.user in ("all", -1):
            uid = -1
        elif isinstance(self.user, str):
            import pwd

            uid = pwd.getpwnam(self.user).pw_uid
        else:
            uid = self.user
        return job_list(self.handle, self.max_entries, userid=uid, since=self.since,
                        name=self.name, queue=self.queue).get_jobinfos()
