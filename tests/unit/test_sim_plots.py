"""Plots: the four PNG files, for one run and for a comparison; the binned curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxes.config import InstanceConfig
from fluxes.sim.plots import binned, plot_runs
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
