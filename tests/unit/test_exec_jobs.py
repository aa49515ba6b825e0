"""Exec job state and the checks before a start (pure)."""

from __future__ import annotations

import signal

import orjson
import pytest

from fluxes.domain.exec.jobs import (
    ExecJob,
    Planner,
    StartFacts,
    Stream,
    TaskProc,
    check_rank,
    final_status,
    finish,
    forward_flags,
    job_owner,
    plan_run,
    read_start,
    run_as,
    wait_result,
)
from fluxes.domain.exec.layout import OutputSpec
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet

SPEC = Jobspec.from_command(["true"], nnodes=2, ntasks=3).to_dict()
R = ResourceSet.from_ranks({3: ("0-1", None), 5: ("0-1", None)})


def test_finish_releases_once_and_keeps_the_first_error() -> None:
    job = ExecJob(1, 0, "run", started=True, error="first")
    assert finish(job, 5.0, status=9, error="second") is True
    assert (job.kind, job.status, job.released, job.error, job.done_time) == (
        "done", 9, True, "first", 5.0)
    assert finish(job, 6.0, status=0) is False and job.status == 9 and job.done_time == 5.0
    fresh = ExecJob(2, 0, "run")
    finish(fresh, 1.0, error="why")
    assert fresh.error == "why" and fresh.status is None


def test_the_rank_status_is_the_largest() -> None:
    tasks = [TaskProc(0, 1, True, 0), TaskProc(1, 2, True, 2 << 8), TaskProc(2, 3, True, 9)]
    assert final_status(tasks) == 2 << 8
    lost = TaskProc(3, 4, True)
    lost.lost = True
    assert final_status([lost]) is None and final_status([]) is None


def test_wait_result_of_an_exited_and_a_killed_wrapper() -> None:
    assert wait_result(3 << 8) == (3 << 8, 3)  # exited 3
    assert wait_result((128 + 15) << 8) == (15, 128 + 15)  # its task was killed by SIGTERM
    assert wait_result(signal.SIGKILL) == (signal.SIGKILL, None)  # the wrapper itself


def test_all_ended_waits_for_output() -> None:
    job = ExecJob(1, 0, "run", tasks=[TaskProc(0, 1, True, 0)])
    assert job.all_ended()
    job.tasks[0].streams.append(Stream("stdout", "/x", None))
    assert not job.all_ended()
    job.tasks[0].streams[0].done = True
    assert job.all_ended() and job.key == (0, 1)


@pytest.mark.parametrize(("outputs", "flags"), [
    (OutputSpec(None, None), "oe"), (OutputSpec("f", None), "e"),
    (OutputSpec(None, "f"), "o"), (OutputSpec("f", "f"), ""),
])
def test_forward_flags(outputs: OutputSpec, flags: str) -> None:
    assert forward_flags(outputs) == flags


def test_read_start() -> None:
    raw = orjson.dumps(SPEC)
    assert read_start(1, StartFacts(raw, b"R", b"1000")) == SPEC
    assert read_start(1, StartFacts(raw, b"R", b"1000", b"0")) is None  # inactive: never rerun
    assert read_start(1, StartFacts(None, None, None, b"0")) is None
    with pytest.raises(ValueError, match="has no jobspec"):
        read_start(1, None)
    with pytest.raises(ValueError, match="has no jobspec"):
        read_start(2, StartFacts(None, b"R"))
    with pytest.raises(ValueError, match="not JSON"):
        read_start(1, StartFacts(b"{"))
    with pytest.raises(ValueError, match="not a mapping"):
        read_start(1, StartFacts(b"[1]"))


def test_check_rank() -> None:
    assert check_rank(1, 3, R.dumps()).ranks == R.ranks
    with pytest.raises(ValueError, match="has no R"):
        check_rank(1, 3, None)
    with pytest.raises(ValueError, match="rank 4 is not in the job's R"):
        check_rank(1, 4, R.dumps())


def facts(owner: int | None, submitter: int | None = None) -> StartFacts:
    return StartFacts(b"{}", b"R", None if owner is None else str(owner).encode(), None,
                      submitter)


def test_a_worker_that_is_not_root_runs_every_job_as_itself() -> None:
    for owner in (0, 1000, 5001):
        assert run_as(1, facts(owner), 1000, frozenset(), 1000) is None


def test_a_root_worker_runs_registered_owners_jobs_as_them() -> None:
    registered = frozenset({5001, 5002})
    assert run_as(1, facts(5001, 5001), 0, registered, 4000) == 5001
    assert run_as(1, facts(4000, 4000), 0, registered, 4000) == 4000  # the instance owner
    with pytest.raises(ValueError, match="uid 5003 is not a registered user"):
        run_as(1, facts(5003, 5003), 0, registered, 4000)
    # the job hash's owner must be the submit event's userid
    with pytest.raises(ValueError, match="not the userid of its submit event"):
        run_as(1, facts(5001, 5002), 0, registered, 4000)
    with pytest.raises(ValueError, match="not the userid of its submit event"):
        run_as(1, facts(5001, None), 0, registered, 4000)
    with pytest.raises(ValueError, match="has no owner"):
        run_as(1, facts(None), 0, registered, 4000)


def test_a_root_worker_never_runs_a_job_as_root_but_a_root_owners_own() -> None:
    with pytest.raises(ValueError, match="refusing to run a job of uid 0"):
        run_as(1, facts(0, 0), 0, frozenset({0}), 4000)
    assert run_as(1, facts(0, 0), 0, frozenset(), 0) is None  # root's own instance, own job


def test_job_owner() -> None:
    assert job_owner(1, b"5001") == 5001
    for bad in (None, b"x", b"-1", b""):
        with pytest.raises(ValueError, match="has no owner"):
            job_owner(1, bad)


def test_plan_run_lays_out_the_rank_share() -> None:
    first = plan_run(SPEC, R, 3)
    second = plan_run(SPEC, R, 5)
    assert first.first_rank and not second.first_rank
    assert (list(first.share.task_ranks), list(second.share.task_ranks)) == ([0, 1], [2])
    assert first.forward == "oe" and first.layout.size == 3


def timed(start: float | None, expiration: float | None, ranks: ResourceSet = R) -> bytes:
    out = ResourceSet(ranks.dumps())
    out.starttime, out.expiration = start, expiration
    return out.dumps().encode()


def test_the_planner_plans_as_check_rank_and_plan_run_do() -> None:
    planner = Planner()
    spec_raw = orjson.dumps(SPEC)
    for rank in (3, 5):
        got = planner.plan(1, rank, SPEC, spec_raw, timed(10.0, 70.0))
        assert got.plan == plan_run(SPEC, check_rank(1, rank, timed(10.0, 70.0)), rank)
        assert got.R.ranks == R.ranks and got.expiration == 70.0
    for bad, match in ((None, "has no R"), (b"{", "invalid JSON"), (b"{}", "version"),
                       (timed(None, None, ResourceSet.from_ranks({4: ("0", None)})),
                        "rank 3 is not in the job's R")):
        with pytest.raises(ValueError, match=match):
            planner.plan(1, 3, SPEC, spec_raw, bad)


def test_the_planner_reuses_a_plan_for_other_times_and_checks_each_starts_times() -> None:
    planner = Planner(size=2)
    spec_raw = orjson.dumps(SPEC)
    first = planner.plan(1, 3, SPEC, spec_raw, timed(10.0, 70.0))
    again = planner.plan(2, 3, SPEC, spec_raw, timed(20.0, None))
    # the same layout object: nothing was decoded or laid out again
    assert again.plan is first.plan and again.R is first.R and len(planner) == 1
    assert (first.expiration, again.expiration) == (70.0, None)
    with pytest.raises(ValueError, match=r"expiration 5\.0 is before starttime 20\.0"):
        planner.plan(3, 3, SPEC, spec_raw, timed(20.0, 5.0))
    # another jobspec, another R: other plans; the oldest goes beyond the size
    other = Jobspec.from_command(["true"], nnodes=2, ntasks=4).to_dict()
    assert planner.plan(4, 3, other, orjson.dumps(other), timed(1.0, 2.0)).plan.layout.size == 4
    one = ResourceSet.from_ranks({3: ("0-3", None)})
    assert planner.plan(5, 3, SPEC, spec_raw, timed(1.0, 2.0, one)).plan.layout.nnodes == 1
    assert len(planner) == 2
    assert planner.plan(6, 3, SPEC, spec_raw, timed(1.0, 2.0)).plan is not first.plan
    # a start without its raw jobspec is planned all the same, and not kept
    assert planner.plan(7, 5, SPEC, None, timed(1.0, 2.0)).plan.share.rank == 5


def test_the_planner_checks_an_r_that_differs_from_a_kept_one_but_in_its_times() -> None:
    planner = Planner()
    spec_raw = orjson.dumps(SPEC)
    good = orjson.loads(timed(10.0, 70.0))
    planner.plan(1, 3, SPEC, spec_raw, orjson.dumps(good))
    # the same R_lite under another version is decoded again, and refused
    with pytest.raises(ValueError, match="version"):
        planner.plan(2, 3, SPEC, spec_raw, orjson.dumps({**good, "version": 99}))


def test_the_planner_keeps_no_plan_of_a_large_r() -> None:
    planner = Planner()
    spec_raw = orjson.dumps(SPEC)
    big = {**orjson.loads(timed(10.0, 70.0)), "scheduling": {"graph": "x" * 70000}}
    got = planner.plan(1, 3, SPEC, spec_raw, orjson.dumps(big))
    assert got.plan.share.rank == 3 and len(planner) == 0
