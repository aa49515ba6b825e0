"""The report's figures, against hand computation (and numpy's percentile)."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from fluxes.sim import metrics
from fluxes.sim.engine import JobRun, Outcome
from fluxes.sim.report import compare_text, duration, report_text
from fluxes.sim.workload import Machine, SimJob

ROOT = Path(__file__).resolve().parents[2]


def test_percentile_by_hand_and_like_numpy() -> None:
    assert metrics.percentile([10.0], 95) == 10.0
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert metrics.percentile([0.0, 10.0], 95) == 9.5
    numpy = pytest.importorskip("numpy")
    rng = random.Random(3)
    for n in (2, 3, 10, 101):
        values = sorted(rng.uniform(0, 1000) for _ in range(n))
        for p in (0, 5, 50, 95, 100):
            assert metrics.percentile(values, p) == pytest.approx(numpy.percentile(values, p))
    with pytest.raises(ValueError):
        metrics.percentile([], 50)


def test_bounded_slowdown() -> None:
    assert metrics.bounded_slowdown(60, 1) == pytest.approx(6.1)  # (60 + 1) / 10
    assert metrics.bounded_slowdown(0, 100) == 1.0
    assert metrics.bounded_slowdown(300, 100) == 4.0
    assert metrics.bounded_slowdown(0, 1) == 1.0  # never below 1


def _run(jobid: int, submit: float, start: float | None, end: float | None, ncores: int,
         user: str = "1", queue: str = "q") -> JobRun:
    job = SimJob(jobid, submit, ncores, 1000.0, 100.0, int(user), user, queue)
    run = JobRun(job, queue, 1000.0, start, end, None, ncores, "COMPLETED", end)
    return run


def test_summary_by_hand() -> None:
    # 4 cores; job 1: 2 cores 0-100 (wait 0); job 2: 4 cores 100-200 (wait 90);
    # job 3: 1 core 100-101 (wait 95, run 1 s); all in 200 s of makespan
    runs = [_run(1, 0, 0, 100, 2, "7", "a"), _run(2, 10, 100, 200, 4, "7", "b"),
            _run(3, 5, 100, 101, 1, "8", "a")]
    out = metrics.summarize(Outcome("easy", Machine.uniform(1, 4), runs))
    assert out["makespan"] == 200
    assert out["utilization"] == pytest.approx((200 + 400 + 1) / (4 * 200))
    assert out["wait"] == {"mean": pytest.approx(185 / 3), "median": 90, "max": 95,
                           "p95": pytest.approx(94.5)}
    # slowdowns: 1, (90 + 100) / 100, (95 + 1) / 10
    assert out["bounded_slowdown"] == {"tau": 10.0, "mean": pytest.approx((1 + 1.9 + 9.6) / 3)}
    assert out["queues"]["a"]["jobs"] == 2 and out["queues"]["b"]["wait"]["mean"] == 90
    assert out["users"]["7"]["core_hours"] == pytest.approx(600 / 3600)
    assert out["jobs"]["results"] == {"COMPLETED": 3}
    text = "\n".join(report_text(out, {"skipped": {"malformed line": 2}, "fixed": {}}))
    assert "makespan    3m20s (200 s)" in text and "2 skipped: 2 malformed line" in text
    assert "utilization 75.1%" in text
    both = "\n".join(compare_text([out, {**out, "label": "fcfs"}]))
    assert "easy" in both and "fcfs" in both and "mean bsld" in both


def test_a_job_that_never_ran_counts_as_a_job_not_a_wait() -> None:
    runs = [_run(1, 0, 0, 10, 1), _run(2, 0, None, None, 1)]
    out = metrics.summarize(Outcome("x", Machine.uniform(1, 1), runs))
    assert out["jobs"]["simulated"] == 2 and out["jobs"]["ran"] == 1
    assert out["wait"]["max"] == 0


def test_durations_read_well() -> None:
    assert [duration(s) for s in (0, 0.25, 45, 307, 10920, 187200)] == \
        ["0s", "0.25s", "45s", "5m07s", "3h02m", "2d04h"]


def test_the_simulator_imports_no_redis_and_no_store() -> None:
    """fluxes/sim is an entrypoint-level tool over the pure layers (docs/architecture.md)."""
    bad = []
    for path in sorted((ROOT / "fluxes" / "sim").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in ("redis", "hiredis", "workers") or name.startswith(
                        ("fluxes.store", "fluxes.proc", "fluxes.cli")):
                    bad.append(f"{path.name}: {name}")
    assert not bad
