"""Plots of simulated runs (matplotlib, the optional ``plot`` extra: ``pip install fluxes[plot]``).

:func:`plot_runs` writes four PNG files for one run or several (``--compare``:
one line per run on each figure, one Gantt panel per run):

* ``utilization.png``: the share of cores in use over time, averaged per bin;
* ``queue.png``: jobs waiting (submitted, not started) over time, averaged per bin;
* ``wait_cdf.png``: the distribution of wait times (fraction of jobs that waited
  at most x);
* ``gantt.png``: which cores each job held during a time window, one colour per
  user.

Time is in hours from the first submission.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fluxes.sim.engine import Outcome

__all__ = ["BINS", "Frame", "binned", "frame_of", "plot_runs", "time_unit"]

#: Bins of the utilization and queue-length curves.
BINS: Final = 400
#: The longest default Gantt window (seconds from the first submission).
GANTT_WINDOW: Final = 86400.0


def time_unit(span: float) -> tuple[float, str]:
    """The unit an axis spanning ``span`` seconds counts in: (seconds per unit, its name)."""
    if span <= 600:
        return 1.0, "seconds"
    if span <= 3 * 3600:
        return 60.0, "minutes"
    if span <= 4 * 86400:
        return 3600.0, "hours"
    return 86400.0, "days"


@dataclass(frozen=True)
class Frame:
    """Where the plots of one simulation look: bins, time units and the Gantt window,
    all taken from the trace's own span, so that a 400 s trace is not drawn on a day."""

    span: float
    bins: int
    #: the curves' x axis: seconds per unit, and its name
    unit_s: float
    unit: str
    #: the Gantt chart's window (seconds from the first submission) and its unit
    gantt: tuple[float, float]
    gantt_unit_s: float
    gantt_unit: str

    @property
    def bin_label(self) -> str:
        """A bin's width in words (``1 s``, ``12 min``, ``2.5 h``)."""
        return duration_label(self.span / self.bins)


def frame_of(start: float, end: float, window: tuple[float, float] | None = None) -> Frame:
    """The frame of a trace from ``start`` (the first submission) to ``end`` (the last end).

    Bins are never narrower than a second (a 400 s trace has 400 of 1 s, a year
    :data:`BINS`); each axis counts seconds, minutes, hours or days by what it
    spans; the Gantt window is ``window`` or the trace's span, at most a day.
    """
    span = max(end - start, 1.0)
    gantt = window if window is not None else (0.0, min(GANTT_WINDOW, span))
    return Frame(span, max(1, min(BINS, int(span))), *time_unit(span),
                 gantt, *time_unit(gantt[1] - gantt[0]))


def binned(series: Sequence[tuple[float, int, int]], column: int, start: float, end: float,
           bins: int = BINS) -> tuple[list[float], list[float]]:
    """The time-weighted mean of one column of a step series per bin of ``[start, end)``:
    (bin centres, means). The series holds the value from each point to the next."""
    if end <= start or not series:
        return [], []
    width = (end - start) / bins
    sums = [0.0] * bins
    for i, point in enumerate(series):
        t0 = max(point[0], start)
        t1 = min(series[i + 1][0] if i + 1 < len(series) else end, end)
        if t1 <= t0:
            continue
        value = point[column]
        b = int((t0 - start) / width)
        while t0 < t1 and b < bins:
            edge = min(start + (b + 1) * width, t1)
            sums[b] += value * (edge - t0)
            t0 = edge
            b += 1
    centres = [start + (b + 0.5) * width for b in range(bins)]
    return centres, [s / width for s in sums]


def require_matplotlib() -> Any:
    """matplotlib's pyplot on the Agg backend; ValueError naming the extra when missing."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'fluxes[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(outcomes: Sequence[Outcome], directory: str | Path,
              window: tuple[float, float] | None = None) -> list[Path]:
    """Write the four plots of ``outcomes`` into ``directory`` (created); their paths.

    ``window`` is the Gantt chart's time window in seconds from the first
    submission (default: the trace's span, at most its first day).
    """
    if not outcomes:
        raise ValueError("nothing to plot")
    if window is not None and window[1] <= window[0]:
        raise ValueError("gantt window: its end must come after its start")
    plt = require_matplotlib()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    start = min((r.job.submit for o in outcomes for r in o.runs), default=0.0)
    end = max((r.end for o in outcomes for r in o.runs if r.end is not None), default=start)
    if end <= start:
        end = start + 1.0
    frame = frame_of(start, end, window)
    paths = [_curve(plt, outcomes, out / "utilization.png", 1, start, end, frame,
                    "cores in use (%)", "Utilization"),
             _curve(plt, outcomes, out / "queue.png", 2, start, end, frame,
                    "jobs waiting", "Queue length"),
             _cdf(plt, outcomes, out / "wait_cdf.png"),
             _gantt(plt, outcomes, out / "gantt.png", start, frame)]
    return paths


def _curve(plt: Any, outcomes: Sequence[Outcome], path: Path, column: int, start: float,
           end: float, frame: Frame, ylabel: str, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(10, 4))
    for o in outcomes:
        xs, ys = binned(o.series, column, start, end, frame.bins)
        if column == 1:
            ys = [100.0 * y / o.machine.cores for y in ys]
        ax.plot([(x - start) / frame.unit_s for x in xs], ys, label=o.label, linewidth=1.2)
    ax.set_xlabel(f"{frame.unit} from the first submission")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title} (mean per {frame.bin_label})")
    if column == 1:
        ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def duration_label(seconds: float) -> str:
    """``2 s``, ``12 min`` or ``2.5 h``: a bin's width in words."""
    if seconds < 90:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _cdf(plt: Any, outcomes: Sequence[Outcome], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for o in outcomes:
        waits = sorted(r.start - r.job.submit for r in o.runs if r.start is not None)
        if not waits:
            continue
        n = len(waits)
        ax.step([w / 60.0 for w in waits], [(i + 1) / n for i in range(n)], where="post",
                label=o.label)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("wait (minutes)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.set_title("Wait time, cumulative distribution")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _gantt(plt: Any, outcomes: Sequence[Outcome], path: Path, start: float,
           frame: Frame) -> Path:
    from matplotlib.collections import PolyCollection

    lo, hi = frame.gantt
    t0, t1 = start + lo, start + hi
    scale = frame.gantt_unit_s
    fig, axes = plt.subplots(len(outcomes), 1, figsize=(11, 3.2 * len(outcomes) + 0.8),
                             squeeze=False, sharex=True)
    cmap = plt.get_cmap("tab20")
    for ax, o in zip([a[0] for a in axes], outcomes, strict=True):
        offsets: dict[int, int] = {}
        row = 0
        for target in o.machine.inventory:
            offsets[target.rank] = row
            row += max(len(target.cores), 1)
        verts: list[list[tuple[float, float]]] = []
        colours: list[Any] = []
        for run in o.runs:
            if run.start is None or run.end is None or not run.masks:
                continue
            if run.end <= t0 or run.start >= t1:
                continue
            x0 = (max(run.start, t0) - start) / scale
            x1 = (min(run.end, t1) - start) / scale
            colour = cmap(zlib.crc32(run.job.user.encode()) % 20)
            for rank, mask in run.masks.items():
                base = offsets.get(rank, 0)
                for a, b in _runs_of(mask):
                    y0, y1 = base + a, base + b + 1
                    verts.append([(x0, y0), (x1, y0), (x1, y1), (x0, y1)])
                    colours.append(colour)
        ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="black",
                                         linewidths=0.1))
        ax.set_xlim((t0 - start) / scale, (t1 - start) / scale)
        ax.set_ylim(0, row)
        ax.set_ylabel("core")
        ax.set_title(f"{o.label}: jobs by core (colour: user)")
    axes[-1][0].set_xlabel(f"{frame.gantt_unit} from the first submission")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _runs_of(mask: int) -> list[tuple[int, int]]:
    """The runs of set bits of ``mask``: [(first, last)]."""
    out = []
    bit = 0
    while mask:
        if mask & 1:
            length = (~mask & (mask + 1)).bit_length() - 1
            out.append((bit, bit + length - 1))
            mask >>= length
            bit += length
        else:
            skip = (mask & -mask).bit_length() - 1
            mask >>= skip
            bit += skip
    return out

