"""Plots: the four PNG files, for one run and for a comparison; the binned curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxes.config import InstanceConfig
from fluxes.sim.plots import BINS, binned, duration_label, frame_of, plot_runs
from fluxes.sim.run import load_swf, simulate
from fluxes.sim.workload import Machine

pytest.importorskip("matplotlib")

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"
PNG = b"\x89PNG\r\n\x1a\n"


def test_binned_is_time_weighted() -> None:
    series = [(0.0, 4, 0), (5.0, 0, 2), (10.0, 2, 1)]
    xs, ys = binned(series, 1, 0.0, 20.0, bins=4)
    assert xs == [2.5, 7.5, 12.5, 17.5]
    assert ys == [4.0, 0.0, 2.0, 2.0]
    xs, ys = binned(series, 1, 0.0, 10.0, bins=1)
    assert ys == [2.0]  # 4 for half the bin, 0 for the other half
    assert binned([], 1, 0.0, 1.0) == ([], [])


@pytest.mark.parametrize("policies", [["easy"], ["fcfs", "easy", "conservative"]])
def test_plots_are_written(tmp_path: Path, policies: list[str]) -> None:
    with open(CASES / "tiny.swf", encoding="utf-8") as f:
        workload = load_swf(f)
    outcomes = [simulate(workload, Machine.uniform(2, 2), InstanceConfig(), {"policy": p},
                         label=p) for p in policies]
    paths = plot_runs(outcomes, tmp_path / "plots", window=(0.0, 300.0))
    assert sorted(p.name for p in paths) == ["gantt.png", "queue.png", "utilization.png",
                                             "wait_cdf.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 2000
    with pytest.raises(ValueError, match="window"):
        plot_runs(outcomes, tmp_path / "bad", window=(5.0, 1.0))


def test_a_short_trace_is_framed_by_its_own_span() -> None:
    # a 400 s trace: 1 s bins, axes in seconds, the Gantt over the 400 s (not a day)
    frame = frame_of(1000.0, 1400.0)
    assert (frame.bins, frame.bin_label, frame.unit, frame.gantt) == \
        (400, "1 s", "seconds", (0.0, 400.0))
    assert frame.gantt_unit == "seconds"
    # a week: BINS bins, days, the Gantt on the first day in hours
    week = frame_of(0.0, 7 * 86400.0)
    assert (week.bins, week.unit, week.gantt, week.gantt_unit) == \
        (BINS, "days", (0.0, 86400.0), "hours")
    assert week.bin_label == "25 min"
    # a window picked by hand is counted in its own unit
    assert frame_of(0.0, 7 * 86400.0, (0.0, 300.0)).gantt_unit == "seconds"
    assert frame_of(0.0, 0.0).bins == 1


def test_bin_labels_never_round_to_zero() -> None:
    assert duration_label(1.0) == "1 s"
    assert duration_label(0.25) == "0.25 s"
    assert duration_label(720.0) == "12 min"
    assert duration_label(9000.0) == "2.5 h"
