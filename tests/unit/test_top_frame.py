"""One screen of ``fluxes top`` (fluxes.cli.top.frame): resources, counts, jobs, selection."""

from __future__ import annotations

from fluxes.cli.display import fmt_id
from fluxes.cli.top import NORMAL, REVERSE, TopJob, frame

SUMMARY = {"free": {"nnodes": 3, "ncores": 8, "ngpus": 0, "nodelist": "node[1-3]"},
           "allocated": {"nnodes": 2, "ncores": 8, "ngpus": 0, "nodelist": "node[0-1]"},
           "down": {"nnodes": 0, "ncores": 0, "ngpus": 0, "nodelist": ""}}


def jobs(n: int) -> list[TopJob]:
    return [TopJob(1000 + i, "alice", "R", 2, 2, 3.0, f"job{i}", i == 0) for i in range(n)]


def test_resources_counts_and_marked_instance_jobs() -> None:
    lines = frame("fluxes top: fx", SUMMARY, {"state:RUN": 2, "state:SCHED": 1,
                                              "state:INACTIVE": 7}, jobs(2), selected=1)
    assert lines[0] == "fluxes top: fx"
    # node1 is partly allocated: counted once
    assert lines[1] == "nodes [" + "#" * 15 + "." * 15 + "] 2/4 used"
    assert lines[2].startswith("cores [") and lines[2].endswith("8/16 used")
    assert not any(line.startswith(" gpus") for line in lines)
    assert lines[3] == " jobs 2 running, 1 pending, 7 inactive"
    assert lines[6].startswith("+ ") and lines[6].endswith("job0")
    assert lines[7].startswith(REVERSE) and lines[7].endswith(NORMAL)
    assert "job1" in lines[7] and not lines[7][len(REVERSE):].startswith("+")


def test_the_screen_fits_and_follows_the_selection() -> None:
    lines = frame("t", SUMMARY, {}, jobs(50), selected=40, width=40, height=15)
    assert len(lines) <= 15
    assert all(len(line) <= 40 for line in lines if REVERSE not in line)
    assert any(REVERSE in line and fmt_id(1040) in line for line in lines)


def test_no_status_yet() -> None:
    lines = frame("t", None, {}, [], selected=0)
    assert lines[1] == "resources: no status yet (is the scheduler running?)"
