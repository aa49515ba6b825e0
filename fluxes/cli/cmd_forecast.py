"""``fluxes job forecast ID``: when a pending job is expected to start, where, and behind what."""

from __future__ import annotations

import argparse
import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli.display import shown_id
from fluxes.cli.util import die, help_with_example, instance, job_id_arg, print_json
from fluxes.formats.fsd import brief_duration

if TYPE_CHECKING:
    from fluxes.forecast.model import ForecastRun

__all__ = ["register_job_forecast"]

#: Jobs named in "waits behind" at most (the rest are counted).
SHOWN_BEHIND = 8


def register_job_forecast(sub: Any) -> None:
    """Add ``job forecast``."""
    fp = sub.add_parser("forecast", **help_with_example(
        "When a pending job is expected to start (the scheduler's own code run forward\n"
        "from the instance's state: docs/forecast.md), on which nodes, and what it\n"
        "waits behind: the jobs that end before it starts, the limit or reservation\n"
        "that holds it.",
        ["fluxes job forecast ƒ2t6V2H", "fluxes job forecast --runtime history ƒ2t6V2H",
         "fluxes job forecast --json ƒ2t6V2H"]))
    fp.add_argument("--runtime", choices=("limit", "history"), default=None,
                    help="how run times are predicted (default: [forecast] runtime, limit)")
    fp.add_argument("--json", action="store_true")
    fp.add_argument("id", type=job_id_arg, metavar="ID")
    fp.set_defaults(func=_forecast)


def _forecast(args: argparse.Namespace) -> int:
    from fluxes.service.forecasting import cached_forecast
    from fluxes.service.jobs import jobs_by_id

    inst = instance(args)
    records, missing = jobs_by_id(inst, [args.id])
    if missing or not records:
        die(f"job {shown_id(args.id)} not found")
    job = records[0].job
    if not job.state & job.state.PENDING:
        when = job.t_run
        since = f" since {_when(when)}" if when else ""
        die(f"job {shown_id(args.id)} is not pending ({job.state.name}{since})")
    run = cached_forecast(inst, args.runtime, wanted=[args.id])
    fc = run.jobs.get(args.id)
    if fc is None:
        die(f"job {shown_id(args.id)}: no forecast (it was not pending when the forecast "
            "was made: try again)")
    behind = run.behind(args.id)
    if args.json:
        print_json({**fc.to_dict(), "id": args.id, "behind": behind,
                    "behind_ends": [_end(run, j) for j in behind]})
        return 0
    for line in _lines(run, args.id, behind):
        print(line)
    return 0


def _end(run: ForecastRun, jobid: int) -> float | None:
    span = run.spans.get(jobid)
    return span[2] if span is not None else None


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def _lines(run: ForecastRun, jobid: int, behind: list[int]) -> list[str]:
    fc = run.jobs[jobid]
    name = shown_id(jobid)
    now = time.time()
    if fc.t_start is None:
        out = [f"job {name}: no expected start: it cannot start as the instance is now"]
        if fc.reason:
            out.append(f"held by:        {fc.reason}")
        return out
    where = fc.nodelist or f"ranks {fc.ranks}"
    if fc.nodelist and fc.ranks:
        where += f" (ranks {fc.ranks})"
    wait = brief_duration(fc.t_start - now, 0)
    out = [f"job {name}: expected start {_when(fc.t_start)} (in {wait})",
           f"on:             {where}"]
    if fc.t_end is not None:
        out.append(f"until about:    {_when(fc.t_end)} (run time from its {fc.runtime})")
    if behind:
        shown = ", ".join(f"{shown_id(j)} (ends {_when(e)})" if (e := _end(run, j)) else
                          shown_id(j) for j in behind[:SHOWN_BEHIND])
        more = len(behind) - SHOWN_BEHIND
        out.append(f"waits behind:   {shown}" + (f" and {more} more" if more > 0 else ""))
    elif fc.t_start <= run.now + 1:
        out.append("waits behind:   nothing (it should start at once)")
    if fc.reason:
        out.append(f"held by:        {fc.reason}")
    return out


#: ``fluxes jobs --forecast``'s format: the pending view with each job's expected start
FORECAST_FORMAT = ("{id.f58:>12} ?:{queue:<8.8} {username:<8.8} {name:<10.10} "
                   "{status_abbrev:>2.2} {ntasks:>6} {nnodes:>6} {t_forecast!D:>19} "
                   "{contextual_info}")


def forecast_view(args: Any) -> None:
    """``fluxes jobs --forecast``: the pending jobs (unless ``-f`` or ids are given) in the
    format with the START column (unless ``-o`` or ``--csv`` is given)."""
    if args.format == "default" and not args.csv:
        args.format = FORECAST_FORMAT
    if args.filter is None and not args.ids:
        args.filter = "pending"
