"""``fluxes top``: the live terminal view of an instance, as ``flux top``.

:func:`frame` (pure) lays out one screen from what was read: a title, the
resources with a utilization bar, the job counts and the active jobs,
running first, batch and alloc jobs marked ``+``, one of them selected.
:func:`run` reads the instance, draws frames in place (ANSI: home and
clear) every ``interval`` seconds and answers keys: ``j``/``k`` or the
arrows move the selection, Enter descends into a selected batch or alloc
job's child instance, ``h`` (or Left) goes back up, ``q`` goes back up or,
at the top, quits.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fluxes.cli.display import fmt_id, username
from fluxes.domain.job.states import JobState

#: Escape sequences: cursor home, clear to the end of the line and of the screen (a
#: frame overwrites the last one in place, without a blank screen in between), reverse
#: video on and off.
HOME, CLEAR_LINE, CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"
REVERSE, NORMAL = "\x1b[7m", "\x1b[0m"


@dataclass(frozen=True)
class TopJob:
    """One active job as the view shows it."""

    id: int
    user: str
    state: str
    ntasks: int
    nnodes: int
    runtime: float
    name: str
    instance: bool


def _bar(used: int, total: int, width: int) -> str:
    """``[####......]`` with ``used`` of ``total`` filled."""
    filled = 0 if total <= 0 else round(width * used / total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _count_nodes(summary: Mapping[str, Any]) -> int:
    """Distinct nodes named by the summary's node lists (0 when it names none)."""
    from fluxes.formats.hostlist import Hostlist

    hosts: set[str] = set()
    for state in ("free", "allocated", "down"):
        text = summary.get(state, {}).get("nodelist") or ""
        try:
            hosts.update(Hostlist(text))
        except ValueError:
            return 0
    return len(hosts)


def frame(title: str, summary: Mapping[str, Any] | None, counts: Mapping[str, int],
          jobs: Sequence[TopJob], selected: int, width: int = 80,
          height: int = 24) -> list[str]:
    """The lines of one screen (at most ``height``, each at most ``width`` wide)."""
    lines = [title]
    if summary is None:
        lines.append("resources: no status yet (is the scheduler running?)")
    else:
        total = {k: sum(int(summary.get(s, {}).get(k, 0)) for s in ("free", "allocated", "down"))
                 for k in ("nnodes", "ncores", "ngpus")}
        # a node partly allocated is both free and allocated: count each node once
        total["nnodes"] = _count_nodes(summary) or total["nnodes"]
        used = {k: int(summary.get("allocated", {}).get(k, 0)) for k in total}
        for kind, label in (("nnodes", "nodes"), ("ncores", "cores"), ("ngpus", "gpus")):
            if total[kind] or kind != "ngpus":
                lines.append(f"{label:>5} {_bar(used[kind], total[kind], 30)} "
                             f"{used[kind]}/{total[kind]} used")
    running = counts.get("state:RUN", 0) + counts.get("state:CLEANUP", 0)
    pending = sum(counts.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))
    lines.append(f" jobs {running} running, {pending} pending, "
                 f"{counts.get('state:INACTIVE', 0)} inactive")
    lines.append("")
    lines.append(f"  {'JOBID':>13} {'USER':<8} {'ST':>2} {'NTASKS':>6} {'NNODES':>6} "
                 f"{'RUNTIME':>8} NAME")
    room = max(0, height - len(lines) - 1)
    first = max(0, selected - room + 1) if selected >= room else 0
    for index, job in enumerate(jobs[first:first + room], first):
        mark = "+" if job.instance else " "
        runtime = f"{job.runtime:.1f}s" if job.runtime else ""
        text = (f"{mark} {fmt_id(job.id):>13} {job.user:<8.8} {job.state:>2} {job.ntasks:>6} "
                f"{job.nnodes:>6} {runtime:>8} {job.name}")[:width]
        lines.append(f"{REVERSE}{text}{NORMAL}" if index == selected else text)
    lines.append("q quit/up  j/k move  Enter: into a + job  h up"[:width])
    return [line[:width] if REVERSE not in line else line for line in lines][:height]


def read_view(inst: Any) -> tuple[dict[str, Any] | None, dict[str, int], list[TopJob]]:
    """What a frame shows, read from ``inst`` (an Instance)."""
    from fluxes.service.jobs import select_jobs
    from fluxes.store.joblist import JobListStore
    from fluxes.store.nesting import ChildTable
    from fluxes.store.resources import published_summary

    summary = published_summary(inst.redis, inst.keys)
    counts = dict(JobListStore(inst.redis, inst.keys).counters())
    records = select_jobs(inst, states="active", everyone=True)
    children = ChildTable(inst.redis, inst.keys).all()
    now = time.time()
    jobs = []
    for rec in records:
        job = rec.job
        runtime = now - job.t_run if job.t_run is not None else 0.0
        jobs.append(TopJob(rec.id, username(job.userid) if job.userid >= 0 else "-",
                           job.state.short, int(rec.info.get("ntasks") or 0),
                           _nnodes(rec.info), runtime,
                           str(rec.info.get("name") or ""), rec.id in children))
    # running jobs first, as flux top
    jobs.sort(key=lambda j: (j.state != JobState.RUN.short, -j.runtime))
    return summary, counts, jobs


def _nnodes(info: Mapping[str, Any]) -> int:
    """A job's node count: its node list once allocated, else what it asked for."""
    from fluxes.formats.hostlist import Hostlist

    if info.get("nodelist"):
        with contextlib.suppress(ValueError):
            return len(Hostlist(str(info["nodelist"])))
    return int(info.get("nnodes") or 0)


@contextlib.contextmanager
def _cbreak(fd: int | None) -> Iterator[None]:
    """Keys without Enter and without echo, while the view runs (a terminal only)."""
    if fd is None:
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _keys(fd: int | None, timeout: float) -> list[str]:
    """Keys pressed within ``timeout`` (arrows as ``up``, ``down``, ``left``)."""
    if fd is None:
        time.sleep(timeout)
        return []
    ready, _w, _x = select.select([fd], [], [], timeout)
    if not ready:
        return []
    data = os.read(fd, 64).decode(errors="replace")
    data = data.replace("\x1b[A", "k").replace("\x1b[B", "j").replace("\x1b[D", "h")
    return list(data)


def run(inst: Any, interval: float = 2.0, iterations: int | None = None) -> int:
    """Draw the view of ``inst`` until ``q`` at the top (or ``iterations`` frames)."""
    from fluxes.store.nesting import ChildTable, instance_of

    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    stack = [inst]
    selected = 0
    drawn = 0
    with _cbreak(fd):
        while iterations is None or drawn < iterations:
            here = stack[-1]
            summary, counts, jobs = read_view(here)
            selected = min(selected, max(0, len(jobs) - 1))
            size = os.get_terminal_size() if sys.stdout.isatty() else os.terminal_size((80, 24))
            title = f"fluxes top: {here.keys.ns}" + ("" if len(stack) == 1 else
                                                      f" (depth {len(stack) - 1}, h: up)")
            lines = frame(title, summary, counts, jobs, selected, size.columns, size.lines)
            sys.stdout.write(HOME + "".join(line + CLEAR_LINE + "\r\n" for line in lines)
                             + CLEAR_BELOW)
            sys.stdout.flush()
            drawn += 1
            deadline = time.monotonic() + interval
            while time.monotonic() < deadline:
                keys = _keys(fd, max(0.0, deadline - time.monotonic()))
                redraw = False
                for key in keys:
                    if key in ("q", "h"):
                        if len(stack) == 1:
                            if key == "q":
                                sys.stdout.write("\r\n")
                                return 0
                        else:
                            stack.pop()
                            selected = 0
                    elif key == "j":
                        selected = min(selected + 1, max(0, len(jobs) - 1))
                    elif key == "k":
                        selected = max(0, selected - 1)
                    elif key in ("\n", "\r") and jobs and jobs[selected].instance:
                        ns = ChildTable(here.redis, here.keys).namespace_of(
                            jobs[selected].id)
                        if ns is not None:
                            stack.append(instance_of(here, ns))
                            selected = 0
                    redraw = True
                if redraw:
                    break
    sys.stdout.write("\r\n")
    return 0
