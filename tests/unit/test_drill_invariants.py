"""Each drill invariant, fed data that breaks it, reports the violation (and good data passes).

A regression of any check to "always OK" fails here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fluxes.domain.job import events as ev
from fluxes.domain.job.states import JobResult
from fluxes.domain.joblist.model import ReadModel
from fluxes.drill.invariants import (
    allocation_intervals,
    check_exclusive,
    check_jobs,
    check_no_double_allocation,
    check_pool,
    check_read_model,
    check_submissions,
    holding,
    pool_summary,
    summarize,
)
from fluxes.formats.rset import ResourceSet

SUBMIT = {"urgency": 16, "userid": 1000, "flags": 0, "version": 1}
LIFE: list[tuple[str, dict[str, Any]]]
LIFE = [("submit", SUBMIT), ("validate", {}), ("depend", {}), ("priority", {"priority": 16}),
        ("alloc", {}), ("start", {}), ("finish", {"status": 0}),
        ("release", {"ranks": "all", "final": True}), ("free", {}), ("clean", {})]


def life(t0: float = 100.0, upto: int = len(LIFE), status: int = 0) -> list[ev.Event]:
    """A job's events, one second apart, up to event number ``upto``."""
    out = []
    for i, (name, ctx) in enumerate(LIFE[:upto]):
        out.append(ev.decode(name, t0 + i, {"status": status} if name == "finish" else ctx))
    return out


def r(ranks: dict[int, str], gpus: dict[int, str] | None = None) -> ResourceSet:
    return ResourceSet.from_ranks({k: (v, (gpus or {}).get(k)) for k, v in ranks.items()})


# ----------------------------------------------------------------------------- submissions


def test_refused_submissions_are_violations_counted_by_reason() -> None:
    found = check_submissions(["queue closed", "queue closed", "too big"])
    assert sorted(v.detail for v in found) == ["1 refused: too big", "2 refused: queue closed"]
    assert check_submissions([]) == []


# ----------------------------------------------------------------------------- jobs


def test_complete_jobs_pass() -> None:
    jobs, report = check_jobs({1: life(), 2: life(200)}, {1: JobResult.COMPLETED})
    assert report.ok and set(jobs) == {1, 2}


def test_job_left_active_is_reported() -> None:
    _jobs, report = check_jobs({7: life(upto=6)})
    [v] = report.violations
    assert v.invariant == "inactive exactly once" and v.jobs == (7,) and "RUN" in v.detail


def test_wrong_result_is_reported() -> None:
    _jobs, report = check_jobs({3: life(status=256)}, {3: JobResult.COMPLETED})
    [v] = report.violations
    assert v.invariant == "right result" and "FAILED" in v.detail


def test_impossible_event_is_a_replay_violation_naming_the_event() -> None:
    log = life()
    log.insert(3, ev.decode("start", 103.5))  # start before alloc
    _jobs, report = check_jobs({5: log})
    [v] = report.violations
    assert v.invariant == "replays cleanly" and v.jobs == (5,) and "event 3 (start)" in v.detail


def test_undecodable_eventlog_is_a_replay_violation() -> None:
    _jobs, report = check_jobs({}, broken={9: "event 2 (stream id 1-2) does not decode: x"})
    [v] = report.violations
    assert v.invariant == "replays cleanly" and v.jobs == (9,) and "does not decode" in v.detail
    assert report.jobs == 1


# ----------------------------------------------------------------------------- allocation


def test_every_overlapping_pair_is_reported() -> None:
    # A holds core 0 over [0, 10); B [2, 3) and C [5, 6) both overlap A, not each other
    intervals = {1: (0.0, 10.0), 2: (2.0, 3.0), 3: (5.0, 6.0)}
    rsets = {j: r({0: "0"}) for j in intervals}
    found = check_no_double_allocation(intervals, rsets)
    assert sorted(v.jobs for v in found) == [(1, 2), (1, 3)]
    assert all(v.invariant == "no unit held twice" for v in found)


def test_overlap_on_several_units_is_one_violation_listing_them() -> None:
    found = check_no_double_allocation({1: (0.0, 5.0), 2: (1.0, 2.0)},
                                       {1: r({0: "0-3"}), 2: r({0: "2-3"})})
    [v] = found
    assert "core 2" in v.detail and "core 3" in v.detail


def test_gpus_count_too() -> None:
    found = check_no_double_allocation({1: (0.0, 5.0), 2: (1.0, 2.0)},
                                       {1: r({0: "0"}, {0: "0"}), 2: r({0: "1"}, {0: "0"})})
    [v] = found
    assert "gpu 0" in v.detail


def test_back_to_back_and_disjoint_allocations_pass() -> None:
    assert check_no_double_allocation({1: (0.0, 2.0), 2: (2.0, 4.0)},
                                      {1: r({0: "0"}), 2: r({0: "0"})}) == []
    assert check_no_double_allocation({1: (0.0, 5.0), 2: (1.0, 2.0)},
                                      {1: r({0: "0"}), 2: r({0: "1"})}) == []


def test_still_held_is_open_ended() -> None:
    logs = {1: life(), 2: life(upto=7)}
    intervals = allocation_intervals(logs)
    assert intervals[2][1] == float("inf")
    assert holding(logs) == [2]
    found = check_no_double_allocation({1: (500.0, 501.0), **{2: intervals[2]}},
                                       {1: r({0: "0"}), 2: r({0: "0"})})
    assert [v.jobs for v in found] == [(2, 1)]


def timed(times: dict[str, float], staged: bool = False) -> list[ev.Event]:
    """A job's events at the given times (``alloc`` annotated staged when ``staged``)."""
    ann = {"annotations": {"sched": {"staged": {"after": [1]}}}} if staged else {}
    return [ev.decode(name, t, ann if name == "alloc" else ctx)
            for name, ctx in LIFE if (t := times.get(name)) is not None]


def test_a_staged_job_may_be_allocated_early_but_never_run_early() -> None:
    """Staged behind job 1 (docs/scheduling-policies.md): its allocation overlaps 1's on
    purpose; its run must begin once 1's has ended."""
    first = timed({"submit": 0, "alloc": 1, "start": 1, "finish": 5, "free": 6, "clean": 6})
    rsets = {1: r({0: "0"}), 2: r({0: "0"})}
    after = timed({"submit": 0, "alloc": 2, "start": 5, "finish": 9, "free": 10}, staged=True)
    assert check_exclusive({1: first, 2: after}, rsets) == []
    early = timed({"submit": 0, "alloc": 2, "start": 4, "finish": 9, "free": 10}, staged=True)
    assert [v.jobs for v in check_exclusive({1: first, 2: early}, rsets)] == [(1, 2)]
    # never started (canceled while it waited): it held nothing
    never = timed({"submit": 0, "alloc": 2, "free": 3}, staged=True)
    assert check_exclusive({1: first, 2: never}, rsets) == []
    # the same overlap without the staged mark is a double allocation
    plain = timed({"submit": 0, "alloc": 2, "start": 5, "finish": 9, "free": 10})
    assert [v.jobs for v in check_exclusive({1: first, 2: plain}, rsets)] == [(1, 2)]


# ----------------------------------------------------------------------------- pool


def test_pool_equal_to_stored_r_passes() -> None:
    rsets = {1: r({0: "0-1"}), 2: r({1: "3"}, {1: "0"})}
    published = {"ncores": 3, "ngpus": 1, "nnodes": 2, "ranks": "0-1", "nodelist": "x"}
    assert check_pool(published, rsets) == []
    assert pool_summary(rsets.values()) == {"ncores": 3, "ngpus": 1, "nnodes": 2,
                                            "ranks": "0-1"}


@pytest.mark.parametrize("published", [
    {"ncores": 0, "ngpus": 0, "nnodes": 0, "ranks": ""},  # recovered nothing
    {"ncores": 4, "ngpus": 1, "nnodes": 2, "ranks": "0-1"},  # one core too many
    {"ncores": 3, "ngpus": 1, "nnodes": 2, "ranks": "0,2"},  # wrong rank
    {"ncores": 3, "ngpus": 0, "nnodes": 2, "ranks": "0-1"},  # lost the GPU
])
def test_pool_differing_from_stored_r_is_reported(published: dict[str, object]) -> None:
    rsets = {1: r({0: "0-1"}), 2: r({1: "3"}, {1: "0"})}
    [v] = check_pool(published, rsets)
    assert v.invariant == "pool equals stored R" and v.jobs == (1, 2)


def test_malformed_published_pool_is_reported_not_raised() -> None:
    [v] = check_pool({"ncores": "many"}, {1: r({0: "0"})})
    assert "malformed" in v.detail


# ----------------------------------------------------------------------------- read model


def _model(*logs: tuple[int, list[ev.Event]]) -> ReadModel:
    model = ReadModel()
    for jobid, events in logs:
        model.feed((jobid, e, {}) for e in events)
    return model


def test_equal_read_models_pass() -> None:
    assert check_read_model(_model((1, life())), _model((1, life()))) == []


def test_read_model_behind_the_journal_is_reported() -> None:
    fresh = _model((1, life()), (2, life(200)))
    stored = _model((1, life()), (2, life(200, upto=5)))
    found = check_read_model(fresh, stored)
    assert [v.jobs for v in found] == [(2,), ()]  # the summary, and the counters
    assert "SCHED" in found[0].detail or "differs" in found[0].detail
    assert "counters differ" in found[1].detail


def test_job_missing_from_the_read_model_is_reported() -> None:
    found = check_read_model(_model((1, life()), (2, life())), _model((1, life())))
    assert found[0].jobs == (2,) and "missing" in found[0].detail


def test_counters_alone_differing_are_reported() -> None:
    fresh = _model((1, life()))
    stored = _model((1, life()))
    stored.counters = stored.counters + Counter({"state:RUN": 1})
    [v] = check_read_model(fresh, stored)
    assert "state:RUN 1 vs 0" in v.detail


def test_summarize_caps_the_lines() -> None:
    found = check_no_double_allocation({j: (0.0, 1.0) for j in range(5)},
                                       {j: r({0: "0"}) for j in range(5)})
    assert len(found) == 10
    lines = summarize(found, limit=3)
    assert len(lines) == 4 and lines[-1] == "... and 7 more"

