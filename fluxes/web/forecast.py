"""Forecasts on the web (docs/forecast.md): ``t_forecast`` on the
jobs listed, a pending job's expected start on its page, and the Gantt chart's forecast
future. Live only (a forecast is of the present); the documents are :mod:`fluxes.web.data`'s.
"""

from __future__ import annotations

import time
from typing import Any

from fluxes.cli.forecasting import cached_forecast
from fluxes.formats import jobid as jobids
from fluxes.web.data import MAX_BARS, View, gantt, user_name

__all__ = ["FORECAST_HORIZON_S", "add_forecasts", "forecast_gantt", "job_forecast"]


def add_forecasts(view: View, rows: list[dict[str, Any]]) -> None:
    """``t_forecast`` on each pending row: its expected start (``-``: never)."""
    if not any(row.get("state") in _PENDING_NAMES for row in rows):
        return
    run = cached_forecast(view.inst, wanted=[int(row["id"]) for row in rows
                                             if row.get("state") in _PENDING_NAMES])
    for row in rows:
        if row.get("state") in _PENDING_NAMES:
            found = run.jobs.get(int(row["id"]))
            row["t_forecast"] = "-" if found is None or found.t_start is None \
                else found.t_start


_PENDING_NAMES = frozenset(("DEPEND", "PRIORITY", "SCHED"))


def job_forecast(view: View, jobid: int) -> dict[str, Any] | None:
    """A pending job's forecast for its page: when, where, behind which jobs."""
    run = cached_forecast(view.inst, wanted=[jobid])
    found = run.jobs.get(jobid)
    if found is None:
        return None
    behind = run.behind(jobid)
    return {**found.to_dict(), "behind": [jobids.encode(j, "f58") for j in behind[:8]],
            "behind_more": max(len(behind) - 8, 0)}


#: How far the Gantt chart's forecast reaches at most (seconds).
FORECAST_HORIZON_S = 86400.0


def forecast_gantt(view: View, start: float | None, end: float | None) -> dict[str, Any]:
    """The Gantt of the past up to now, then the forecast future (lighter bars)."""
    now = time.time()
    past = gantt(view, start, now)
    start = float(past["start"])
    run = cached_forecast(view.inst)
    if end is None or end <= now:
        # as far into the future as the window reaches into the past, or up to the last
        # forecast end (a young instance's past is short), a day at most
        last = max((e for _r, _s, e in run.spans.values() if e is not None), default=now)
        end = now + min(max(now - start, last - now), FORECAST_HORIZON_S)
    bars = past["bars"]
    known = {b["id"]: b for b in bars}
    for jobid, (ranks, t_from, t_to) in run.spans.items():
        begin = max(t_from, now)
        until = end if t_to is None else min(t_to, end)
        if until <= begin or begin >= end:
            continue
        seen = known.get(jobid)
        fc = run.jobs.get(jobid)
        if seen is None and fc is None:
            continue  # running, but not in the window's past (purged, hidden)
        bars.append({"id": jobid, "f58": jobids.encode(jobid, "f58"),
                     "user": seen["user"] if seen else "",
                     "name": seen["name"] if seen else "", "ranks": list(ranks),
                     "start": begin, "end": until, "t_run": t_from, "t_end": t_to,
                     "state": "forecast", "forecast": True})
        if len(bars) >= MAX_BARS:
            break
    _name_bars(view, [b for b in bars if b.get("forecast") and not b["user"]])
    return {**past, "end": end, "now": now, "bars": bars,
            "truncated": past["truncated"] or len(bars) >= MAX_BARS}


def _name_bars(view: View, bars: list[dict[str, Any]]) -> None:
    """Users and names of the pending jobs the forecast drew."""
    if not bars:
        return
    from fluxes.store.joblist import JobListStore

    store = JobListStore(view.inst.redis, view.inst.keys)
    for bar, rec in zip(bars, store.get_many([b["id"] for b in bars]), strict=True):
        if rec is not None:
            bar["user"] = user_name(rec.job.userid) if rec.job.userid >= 0 else "-"
            bar["name"] = str(rec.info.get("name") or "")
