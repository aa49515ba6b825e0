"""What every page of ``fluxes web`` shows, as JSON-ready data.

Each function here returns the document of one ``/api/...`` endpoint; the
page of the same name renders that same document (:mod:`fluxes.web.render`),
so scripts and browsers see the same data. Reads go through the session's own
connection (:attr:`View.inst`: the user's Redis identity, or the server's for
a guest), except the history of public streams, which the server's time index
(:mod:`fluxes.web.timeindex`) and its own connection read.

``View.at`` set: everything as it was at that moment (time travel).

Why one module: each function is the document of one endpoint, and they share the View,
the user and time-travel helpers and the reading of job records; a module per page would
scatter those shared helpers (the HTML is in render.py, the routes in app.py).
"""

from __future__ import annotations

import pwd
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.domain.job.states import JobResult, JobState, parse_states
from fluxes.errors import FluxesError
from fluxes.formats import jobid as jobids
from fluxes.store.errors import NoPermissionError

if TYPE_CHECKING:
    from fluxes.domain.jm.queues import QueueState
    from fluxes.domain.job.record import JobRecord
    from fluxes.store.instance import Instance
    from fluxes.web.auth import Session
    from fluxes.web.timeindex import Moment, TimeIndex

#: How long a live read waits for the job list to fold what the journal has.
CATCH_UP_S = 0.5
#: Jobs listed at most unless ``limit`` says otherwise, and the most it may say.
DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
#: Output entries shown at the end of a job page.
OUTPUT_TAIL = 200
#: Bars of the Gantt chart at most (the latest allocations win).
MAX_BARS = 3_000
#: The Gantt chart's default window: the hour before the moment looked at.
GANTT_WINDOW_S = 3600.0


class NotFound(FluxesError):
    """What a request names does not exist (HTTP 404)."""


@dataclass
class View:
    """Who looks at what, and when."""

    #: the session's connection: every read of the present goes through it
    inst: Instance
    #: the server's own connection (public history: resource events)
    server: Instance
    index: TimeIndex
    viewer: Session
    #: None: now; else a UNIX time to show everything as it was then
    at: float | None = None
    _moment: Moment | None = None

    @property
    def when(self) -> float:
        """The moment looked at (now when live)."""
        return self.at if self.at is not None else time.time()

    def moment(self) -> Moment:
        """Every job at :attr:`at` (folded once per request)."""
        if self._moment is None:
            self._moment = self.index.moment(self.when)
        return self._moment


# ---------------------------------------------------------------- small helpers


def parse_at(text: str | None) -> float | None:
    """``?at=``: a UNIX time, an ISO date and time, or -DURATION ago; None when absent."""
    from fluxes.cli.display import parse_time

    if text is None or not text.strip() or text.strip() == "now":
        return None
    return parse_time(text)


def parse_job(text: str) -> int:
    """A job id in any RFC 19 encoding; NotFound when it is none."""
    try:
        return jobids.parse(text)
    except ValueError:
        raise NotFound(f"no job {text[:40]!r}") from None


def user_name(uid: int) -> str:
    """The name of ``uid`` on this machine, else the number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError, ValueError):
        return str(uid)


def resolve_user(view: View, text: str) -> int:
    """A user given by name or uid: the instance's users, else this machine's."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    for inst in (view.inst, view.server):
        try:
            raw = inst.redis.hget(inst.keys.users, text)
        except NoPermissionError:
            continue
        if raw is not None:
            return int(raw)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise ValueError(f"unknown user {text!r}") from None


def wanted_states(text: str) -> tuple[JobState, JobResult]:
    """The states and results a ``fluxes jobs -f`` text names (ValueError if bad)."""
    parsed = parse_states(text)
    if isinstance(parsed, tuple):
        return parsed
    if isinstance(parsed, JobResult):
        return JobState(0), parsed
    return parsed, JobResult(0)


def queue_states(view: View) -> dict[str | None, QueueState]:
    """Every queue's admin state at the moment looked at (the queue stream folded up to
    it)."""
    from fluxes import messages as proto
    from fluxes.domain.jm.queues import fold_queue_events

    inst = view.inst
    events = []
    for _sid, fields in inst.redis.xrange(inst.keys.queues):
        try:
            event = proto.load_queue_event(fields)
        except proto.MessageError:
            continue
        stamp = event.get("timestamp") if isinstance(event, dict) else None
        if view.at is not None and isinstance(stamp, int | float) and stamp > view.at:
            continue
        events.append(event)
    return fold_queue_events(inst.config().queues, events)


def _active_records(view: View) -> list[JobRecord]:
    """Every active job, newest first: the read model now, the time index in the past."""
    if view.at is not None:
        return view.moment().active()
    from fluxes.store.joblist import JobListStore

    store = JobListStore(view.inst.redis, view.inst.keys)
    store.catch_up(CATCH_UP_S)
    out = [r for p in range(view.inst.keys.partitions) for r in store.load_active(p).values()]
    out.sort(key=lambda r: (r.job.t_submit, r.id), reverse=True)
    return out


def job_row(record: JobRecord, now: float,
            queues: dict[str | None, QueueState] | None) -> dict[str, Any]:
    """A job as ``fluxes jobs --json`` prints it, plus its F58 id and times as text."""
    from fluxes.cli.cmd_jobs import Row

    row = Row(record, now, queues)
    out = row.as_dict()
    out["f58"] = jobids.encode(record.id, "f58")
    for name in ("t_priority", "t_sched"):
        value = getattr(record.job, name)
        if value is not None:
            out[name] = value
    out["contextual_time"] = row.contextual_time
    out["contextual_info"] = row.contextual_info
    out["runtime_text"] = row.runtime_text
    return out


# ---------------------------------------------------------------- jobs


def jobs(view: View, all_jobs: bool = False, user: str | None = None,
         queue: str | None = None, states: str | None = None,
         limit: int = DEFAULT_LIMIT, forecast: bool = False) -> dict[str, Any]:
    """``/api/jobs``: jobs filtered like ``fluxes jobs -A`` (``all_jobs``: inactive ones
    too; ``user``, ``queue``, ``states`` as ``-u``, ``-q``, ``-f``), newest first;
    ``forecast``: each pending job's ``t_forecast`` (``fluxes jobs --forecast``; live
    only: a forecast is of the present)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be 1-{MAX_LIMIT}")
    want_states, want_results = wanted_states(
        states or ("active,inactive" if all_jobs else "active"))
    need_inactive = bool(want_results) or bool(want_states & JobState.INACTIVE)
    need_active = bool(want_states & JobState.ACTIVE)
    uid = resolve_user(view, user) if user else None
    queues = queue_states(view)
    if queue is not None and queue != "" and queue not in queues:
        raise ValueError(f"unknown queue {queue!r}")

    def keep(rec: JobRecord) -> bool:
        job = rec.job
        if uid is not None and job.userid != uid:
            return False
        if queue is not None and rec.queue != queue:
            return False
        result = job.result
        return bool(job.state & want_states or (result is not None and result & want_results))

    # without filters the first limit + 1 candidates are the answer: read no more ids
    unfiltered = uid is None and queue is None and states is None
    picked: list[JobRecord] = []
    for rec in _candidates(view, need_active, need_inactive,
                           limit + 1 if unfiltered else None):
        if keep(rec):
            picked.append(rec)
            if len(picked) > limit:
                break
    truncated = len(picked) > limit
    now = view.when
    rows = [job_row(rec, now, queues) for rec in picked[:limit]]
    if forecast and view.at is None:
        from fluxes.web.forecast import add_forecasts

        add_forecasts(view, rows)
    return {"at": view.at, "now": time.time(), "limit": limit, "truncated": truncated,
            "filters": {"all": all_jobs, "user": user, "queue": queue, "states": states},
            "jobs": rows,
            "purged_before": view.moment().purged_before if view.at is not None else None}


def _candidates(view: View, active: bool, inactive: bool,
                limit: int | None = None) -> Iterator[JobRecord]:
    if view.at is not None:
        moment = view.moment()
        if active:
            yield from moment.active()
        if inactive:
            yield from moment.ended()
        return
    from fluxes.store.joblist import JobListStore

    store = JobListStore(view.inst.redis, view.inst.keys)
    store.catch_up(CATCH_UP_S)
    ids = store.list_ids(active=active, inactive=inactive, limit=limit)
    for i in range(0, len(ids), 1000):
        for rec in store.get_many(ids[i:i + 1000]):
            if rec is not None:
                yield rec


# ---------------------------------------------------------------- one job


def job(view: View, jobid: int) -> dict[str, Any]:
    """``/api/jobs/ID``: the job's record, eventlog (as a timeline), R, pending reason and
    estimate, and, for its owner (and the instance owner), its jobspec and output tail."""
    from fluxes.store.eventstore import EventStore
    from fluxes.store.jobhash import JobHashes
    from fluxes.store.private import revealed_events

    inst = view.inst
    record = _record(view, jobid)
    entries = EventStore(inst.redis, inst.keys).eventlog_entries(jobid)
    if record is None and not entries:
        raise NotFound(f"no job {jobids.encode(jobid, 'f58')}")
    facts = JobHashes(inst.redis, inst.keys).public(jobid)
    # notes and dependencies are the owner's: put back where this user may read them
    shown = revealed_events(inst.redis, inst.keys, jobid, [e for _sid, e in entries])
    events = [{"timestamp": stamp, "name": name, "context": context or None,
               "future": view.at is not None and stamp > view.at}
              for stamp, name, context in shown]
    out: dict[str, Any] = {"id": jobid, "f58": jobids.encode(jobid, "f58"), "at": view.at,
                           "events": events, "exists": record is not None}
    if record is None:
        out["note"] = ("not submitted yet at that time" if view.at is not None
                       else "not in the job list (purged?)")
        return out
    queues = queue_states(view)
    out["job"] = job_row(record, view.when, queues)
    out["owner"] = record.job.userid
    out["owner_name"] = user_name(record.job.userid) if record.job.userid >= 0 else "-"
    sched = (record.job.annotations or {}).get("sched") or {}
    out["pending"] = None
    if record.job.state & JobState.PENDING:
        out["pending"] = {"reason": sched.get("reason_pending") if isinstance(sched, dict)
                          else None,
                          "t_estimate": sched.get("t_estimate") if isinstance(sched, dict)
                          else None,
                          "info": out["job"].get("contextual_info"),
                          "forecast": _job_forecast(view, jobid)}
    allocated = view.at is None or record.job.t_run is not None  # R came with the alloc
    out["R"] = _json_or_text(facts.R) if facts is not None and facts.R and allocated \
        else None
    out["jobspec"], out["output"] = _private_parts(view, jobid, facts.owner if facts else None)
    return out


def _job_forecast(view: View, jobid: int) -> dict[str, Any] | None:
    """A pending job's forecast for its page (live only: a forecast is of the present)."""
    if view.at is not None:
        return None
    from fluxes.web.forecast import job_forecast

    return job_forecast(view, jobid)


def _record(view: View, jobid: int) -> JobRecord | None:
    if view.at is not None:
        return view.moment().get(jobid, view.inst.keys.partitions)
    from fluxes.store.joblist import JobListStore

    store = JobListStore(view.inst.redis, view.inst.keys)
    store.catch_up(CATCH_UP_S)
    return store.get_many([jobid])[0]


def _json_or_text(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _private_parts(view: View, jobid: int, owner: int | None
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The jobspec and the output tail, as the session's identity may read them."""
    from fluxes.store.jobhash import JobHashes

    why = "only its owner and the instance owner can read it"
    if view.viewer.guest:
        private = {"private": True, "why": f"log in: {why}"}
        return private, dict(private)
    inst = view.inst
    try:
        [spec] = JobHashes(inst.redis, inst.keys).effective_jobspecs([jobid])
        jobspec: dict[str, Any] = {"private": False,
                                   "jobspec": _json_or_text(spec) if spec else None}
    except NoPermissionError:
        jobspec = {"private": True, "why": why}
    if owner is None:
        return jobspec, {"private": False, "lines": [], "truncated": False}
    try:
        entries = inst.redis.xrevrange(inst.keys.output(owner, jobid), count=OUTPUT_TAIL)
    except NoPermissionError:
        return jobspec, {"private": True, "why": why}
    lines = []
    for _sid, fields in reversed(entries):
        data = fields.get(b"data")
        if data is None:
            continue
        lines.append({"stream": (fields.get(b"stream") or b"stdout").decode(),
                      "rank": (fields.get(b"rank") or b"?").decode(),
                      "data": data.decode("utf-8", "replace")})
    return jobspec, {"private": False, "lines": lines, "truncated": len(entries) >= OUTPUT_TAIL}


# ---------------------------------------------------------------- the machine


def resources(view: View) -> dict[str, Any]:
    """``/api/resources``: every node with its cores, what is allocated on it (by which
    jobs), its state (free, partly allocated, allocated, drained, offline) and load."""
    from fluxes.formats.idset import IDSet
    from fluxes.formats.rset import ResourceSet
    from fluxes.store.jobhash import JobHashes
    from fluxes.store.resources import load_inventory

    inst = view.inst
    inventory = load_inventory(inst)
    running = [r for r in _active_records(view)
               if r.job.state & JobState.RUNNING and r.job.has_resources]
    cores_used: dict[int, int] = {}
    gpus_used: dict[int, int] = {}
    on_rank: dict[int, list[int]] = {}
    rs = JobHashes(inst.redis, inst.keys).field([r.id for r in running], "R") if running else []
    for rec, raw in zip(running, rs, strict=True):
        per_rank: dict[int, tuple[int, int]] = {}
        try:
            if raw:
                rset = ResourceSet(raw)
                per_rank = {rank: (len(rset.cores(rank)), len(rset.gpus(rank)))
                            for rank in rset.ranks}
        except ValueError:
            per_rank = {}
        if not per_rank:
            try:
                ranks = IDSet(str(rec.info.get("ranks") or ""))
            except ValueError:
                ranks = IDSet()
            ncores = int(rec.info.get("ncores") or 0)
            per_rank = {rank: (ncores // max(len(ranks), 1), 0) for rank in ranks}
        for rank, (ncores, ngpus) in per_rank.items():
            cores_used[rank] = cores_used.get(rank, 0) + ncores
            gpus_used[rank] = gpus_used.get(rank, 0) + ngpus
            on_rank.setdefault(rank, []).append(rec.id)
    drained, drain_note = _drained(view)
    online = _online(view)
    nodes = []
    counts: dict[str, int] = {}
    for target in inventory:
        rank = target.rank
        ncores, ngpus = len(target.cores), len(target.gpus)
        used = min(cores_used.get(rank, 0), ncores)
        if rank in drained:
            state = "drained"
        elif online is not None and rank not in online:
            state = "offline"
        elif used >= ncores and ncores:
            state = "allocated"
        elif used or gpus_used.get(rank):
            state = "partly"
        else:
            state = "free"
        counts[state] = counts.get(state, 0) + 1
        nodes.append({"rank": rank, "host": target.hostname or f"rank{rank}",
                      "cores": ncores, "gpus": ngpus, "cores_used": used,
                      "gpus_used": min(gpus_used.get(rank, 0), ngpus),
                      "load": used / ncores if ncores else 0.0, "state": state,
                      "reason": drained.get(rank), "jobs": [jobids.encode(j, "f58")
                                                          for j in on_rank.get(rank, [])]})
    return {"at": view.at, "nodes": nodes, "counts": counts,
            "ncores": sum(n["cores"] for n in nodes),
            "ncores_used": sum(n["cores_used"] for n in nodes),
            "running_jobs": len(running), "online_known": online is not None,
            "drain_note": drain_note}


def _drained(view: View) -> tuple[dict[int, str], str | None]:
    """rank -> drain reason at the moment looked at, and a note when it is uncertain."""
    inst = view.inst
    if view.at is None:
        raw = inst.redis.get(inst.keys.sched_status)
        if not raw:
            return {}, "no resource status yet (is the scheduler running?)"
        summary = orjson.loads(raw)
        return {int(r): str(d.get("reason") or "") for r, d in
                (summary.get("drained") or {}).items()}, None
    from fluxes import messages as proto
    from fluxes.formats.idset import IDSet

    server = view.server
    try:
        entries = server.redis.xrange(server.keys.resource_events)
    except NoPermissionError:
        return {}, "drains in the past are not readable with this server's credentials"
    drained: dict[int, str] = {}
    for _sid, fields in entries:
        try:
            event = proto.decode_resource_event(fields)
            ranks = IDSet(event.ranks)
        except ValueError:
            continue
        if event.timestamp > view.at:
            break
        for rank in ranks:
            if isinstance(event, proto.Drain):
                drained[rank] = event.reason
            else:
                drained.pop(rank, None)
    return drained, None


def _online(view: View) -> set[int] | None:
    """Ranks whose exec worker beats (now only); None when unknown: the past, a user who
    may not read the exec registry, or a guest (who gets what any user may read)."""
    if view.at is not None or view.viewer.guest:
        return None
    from fluxes.store.resources import LOST_AFTER_S

    inst = view.inst
    try:
        beats = inst.redis.hgetall(inst.keys.exec_registry)
    except NoPermissionError:
        return None
    now = time.time()
    out = set()
    for rank, raw in beats.items():
        try:
            if now - float(orjson.loads(raw)["heartbeat"]) <= LOST_AFTER_S:
                out.add(int(rank))
        except (ValueError, KeyError, TypeError):
            continue
    return out


# ---------------------------------------------------------------- queues


def queues(view: View) -> dict[str, Any]:
    """``/api/queues``: every queue's RFC 33 state (enabled, started, with reasons), its
    pending, held and running jobs, and why its jobs wait."""
    from fluxes.formats.fsd import format_duration

    config = view.inst.config().queues
    states = queue_states(view)
    tally: dict[str, dict[str, Any]] = {}
    for rec in _active_records(view):
        row = tally.setdefault(rec.queue, {"pending": 0, "running": 0, "held": 0,
                                           "reasons": {}})
        job = rec.job
        if job.state & JobState.RUNNING:
            row["running"] += 1
        elif job.state & JobState.PENDING:
            row["pending"] += 1
            if job.priority == 0:
                row["held"] += 1
            sched = (job.annotations or {}).get("sched") or {}
            reason = sched.get("reason_pending") if isinstance(sched, dict) else None
            if reason:
                row["reasons"][str(reason)] = row["reasons"].get(str(reason), 0) + 1
    rows = []
    for name in config.queue_names:
        state = states.get(name)
        policy = config.effective_policy(name)
        found = tally.get(name or "", {"pending": 0, "running": 0, "held": 0, "reasons": {}})
        rows.append({
            "queue": name, "label": name or "(default)",
            "default": name == config.default_queue,
            "enabled": state.enabled if state else True,
            "disable_reason": state.enable_reason if state else None,
            "started": state.started if state else True,
            "stop_reason": state.stop_reason if state else None,
            "time_limit": format_duration(policy.max_duration) if policy.max_duration
            else "inf",
            **found})
    return {"at": view.at, "queues": rows}


# ---------------------------------------------------------------- the Gantt chart


def gantt(view: View, start: float | None = None, end: float | None = None,
          forecast: bool = False) -> dict[str, Any]:
    """``/api/gantt``: the allocations (job, ranks, from, to) that overlap the window
    ``[start, end]`` (default: the hour up to the moment looked at). ``forecast`` (live
    only): the window goes on into the future as far as it reaches into the past, and
    the forecast's allocations there are bars with ``"forecast": true``."""
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory

    if forecast and view.at is None:
        from fluxes.web.forecast import forecast_gantt

        return forecast_gantt(view, start, end)
    end = end if end is not None else view.when
    if start is None:
        # a young instance's hour is mostly empty: start where its history does
        first, _last = view.index.span()
        start = end - GANTT_WINDOW_S
        if first is not None and start < first < end:
            start = first - 0.02 * (end - first)
    if not start < end:
        raise ValueError("the window's start must come before its end")
    sub = View(view.inst, view.server, view.index, view.viewer, end)
    moment = sub.moment()
    bars = []

    def add(records: Iterable[JobRecord], stop_before: float | None) -> None:
        for rec in records:
            job = rec.job
            if stop_before is not None and (job.t_inactive or 0.0) < stop_before:
                return
            if job.t_run is None or job.t_run >= end:
                continue
            until = job.t_cleanup or job.t_inactive or end
            if until <= start:
                continue
            try:
                ranks = list(IDSet(str(rec.info.get("ranks") or "")))
            except ValueError:
                ranks = []
            bars.append({"id": rec.id, "f58": jobids.encode(rec.id, "f58"),
                         "user": user_name(job.userid) if job.userid >= 0 else "-",
                         "name": str(rec.info.get("name") or ""),
                         "ranks": ranks, "start": max(job.t_run, start),
                         "end": min(until, end), "t_run": job.t_run,
                         "t_end": job.t_cleanup or job.t_inactive,
                         "state": (job.result.name if job.result is not None
                                   else job.state.name or "")})
            if len(bars) >= MAX_BARS:
                return

    add(moment.active(), None)
    # ended jobs come last-ended first: past the window's start (with the clock
    # margin), none can overlap it any more
    add(moment.ended(), start - view.index.margin_s)
    inventory = load_inventory(view.inst)
    return {"at": view.at, "start": start, "end": end, "truncated": len(bars) >= MAX_BARS,
            "ranks": [{"rank": t.rank, "host": t.hostname or f"rank{t.rank}"}
                      for t in inventory], "bars": bars}


# ---------------------------------------------------------------- usage


def usage(view: View, since: float | None = None, until: float | None = None
          ) -> dict[str, Any]:
    """``/api/usage``: raw usage per user and bank over ``[since, until)`` (default: all
    time up to the moment looked at), as ``fluxes account usage --json``."""
    from fluxes.cli.cmd_account import usage_report

    until = until if until is not None else view.when
    since = since if since is not None else 0.0
    if until < since:
        raise ValueError("until is before since")
    report = usage_report(view.inst, since, until, time.time())
    report["at"] = view.at
    return report


# ---------------------------------------------------------------- time


def timeline(view: View) -> dict[str, Any]:
    """``/api/timeline``: the span of history time travel can show."""
    first, last = view.index.span()
    return {"first": first, "last": last, "now": time.time(),
            "purged_before": view.index.purged_before}


def steps(view: View, count: int = 1, backwards: bool = False) -> dict[str, Any]:
    """``/api/steps``: the next events after the moment looked at (before it,
    ``backwards``), for the play mode."""
    if not 1 <= count <= 1000:
        raise ValueError("n must be 1-1000")
    found = view.index.steps(view.when, count, backwards)
    return {"at": view.at, "steps": [{"t": t, "id": j, "f58": jobids.encode(j, "f58"),
                                      "name": name} for t, j, name in found]}
