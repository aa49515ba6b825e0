"""Tests for fluxes.domain.jm.depend: RFC 26 dependency parsing, rules and the DependencyIndex."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.jm.depend import (
    JOBID_SCHEMES,
    SCHEMES,
    Dependency,
    DependencyActions,
    DependencyIndex,
    TargetStatus,
    Verdict,
    check_dependency,
    evaluate,
    parse_dependency,
)
from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, apply
from fluxes.domain.job.states import JobResult, JobState
from fluxes.errors import PolicyError
from fluxes.formats import jobid

ID = 6787342413402046
F58 = jobid.encode(ID, "f58")

# -- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", JOBID_SCHEMES)
@pytest.mark.parametrize("form", ["dec", "hex", "dothex", "kvs", "f58", "f58plain", "words"])
def test_parse_jobid_schemes_any_encoding(scheme: str, form: str) -> None:
    text = jobid.encode(ID, form)
    dep = parse_dependency(f"{scheme}:{text}")
    assert dep == {"scheme": scheme, "value": text}  # kept as written, like flux
    assert check_dependency(dep).target == ID


def test_parse_keeps_query_keys() -> None:
    assert parse_dependency(f"afterany:{F58}?note=x&y=1") == {
        "scheme": "afterany", "value": F58, "note": "x", "y": "1"}


def test_parse_begin_time_absolute() -> None:
    assert parse_dependency("begin-time:1700000000.5") == {
        "scheme": "begin-time", "value": "1700000000.5"}
    assert parse_dependency("begin-time:0") == {"scheme": "begin-time", "value": "0"}


@pytest.mark.parametrize(
    ("offset", "now", "value"),
    [("+1h", 1000.0, "4600"), ("+1.5m", 0.25, "90.25"), ("+0", 5.0, "5"),
     ("+250ms", 10.0, "10.25"), ("+30", 1700000000.123456, "1700000030.123456")],
)
def test_parse_begin_time_relative(offset: str, now: float, value: str) -> None:
    assert parse_dependency(f"begin-time:{offset}", now=now) == {
        "scheme": "begin-time", "value": value}


def test_parse_begin_time_relative_defaults_to_the_clock() -> None:
    before = time.time()
    dep = parse_dependency("begin-time:+1h")
    assert before + 3600 <= float(dep["value"]) <= time.time() + 3600


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo:1", "unknown dependency scheme 'foo'"),
        ("string:foo?type=out&scope=user", "unknown dependency scheme 'string'"),
        ("afterok:xyz", "dependency: afterok: 'xyz' is not a valid jobid"),
        ("after:-1", "dependency: after: '-1' is not a valid jobid"),
        ("afterok", "expected scheme:value"),
        ("afterok:", "expected scheme:value"),
        (":123", "expected scheme:value"),
        ("afterok:1?x", "expected key=value"),
        ("begin-time:abc", "dependency: begin-time: invalid timestamp 'abc'"),
        ("begin-time:-5", "dependency: begin-time: invalid timestamp '-5'"),
        ("begin-time:inf", "invalid timestamp 'inf'"),
        ("begin-time:0x10", "invalid timestamp '0x10'"),
        ("begin-time: 5", "invalid timestamp ' 5'"),
        ("begin-time:1e999", "dependency: begin-time: timestamp '1e999' is too large"),
        ("begin-time:+1x", "dependency: begin-time: invalid duration '1x'"),
        ("begin-time:+-1h", "dependency: begin-time: duration '-1h' is negative"),
        ("begin-time:+inf", "dependency: begin-time: the offset must be finite"),
        ("begin-time:+", "dependency: begin-time: duration is empty"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_dependency(text, now=0.0)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_refuses_non_strings() -> None:
    with pytest.raises(PolicyError):
        parse_dependency(5)  # type: ignore[arg-type]


@given(st.text(max_size=30))
def test_parse_only_raises_policy_error(text: str) -> None:
    try:
        dep = parse_dependency(text, now=1.0)
    except PolicyError:
        return
    assert dep["scheme"] in SCHEMES


# -- checking -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "description"),
    [("after", f"after-start={F58}"), ("afterany", f"after-finish={F58}"),
     ("afterok", f"after-success={F58}"), ("afternotok", f"after-failure={F58}"),
     ("afterexcept", f"after-except={F58}")],
)
def test_descriptions_match_flux(scheme: str, description: str) -> None:
    dep = check_dependency({"scheme": scheme, "value": F58})
    assert dep == Dependency(scheme, F58, description, target=ID)


def test_begin_time_description() -> None:
    dep = check_dependency({"scheme": "begin-time", "value": "1700000000.5"})
    assert dep.description == "begin-time=1700000000.500"
    assert dep.begin_time == 1700000000.5
    assert dep.target is None


def test_extra_keys_are_ignored() -> None:
    assert check_dependency({"scheme": "afterok", "value": "5", "x": "y"}).description == \
        "after-success=5"


@pytest.mark.parametrize(
    ("dep", "message"),
    [
        ([], "dependency: expected a mapping, got list"),
        ({"value": "1"}, "dependency: scheme must be a non-empty string, got None"),
        ({"scheme": "", "value": "1"}, "scheme must be a non-empty string"),
        ({"scheme": "bogus", "value": "1"}, "unknown dependency scheme 'bogus'"),
        ({"scheme": "afterok"}, "dependency: afterok: value must be a non-empty string"),
        ({"scheme": "afterok", "value": 5}, "value must be a non-empty string, got 5"),
        ({"scheme": "afterok", "value": ""}, "value must be a non-empty string"),
        ({"scheme": "begin-time", "value": "+1h"}, "invalid timestamp '+1h'"),
    ],
)
def test_check_errors(dep: Any, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        check_dependency(dep)
    assert message in str(info.value)


# -- the rules ------------------------------------------------------------------------------

INACT, S, R, C = JobState.INACTIVE, JobState.SCHED, JobState.RUN, JobState.CLEANUP
OK, FAIL, CANCEL, TO = JobResult.COMPLETED, JobResult.FAILED, JobResult.CANCELED, JobResult.TIMEOUT

STATUS = {
    "pending": TargetStatus(S),
    "allocated": TargetStatus(R, allocated=True),
    "running": TargetStatus(R, allocated=True, started=True),
    "cleanup": TargetStatus(C, allocated=True, started=True),
    "completed": TargetStatus(INACT, OK, allocated=True, started=True),
    "failed": TargetStatus(INACT, FAIL, allocated=True, started=True),
    "failed-exception": TargetStatus(INACT, FAIL, allocated=True, started=True, exception=True),
    "canceled-running": TargetStatus(INACT, CANCEL, allocated=True, started=True, exception=True),
    "canceled-pending": TargetStatus(INACT, CANCEL, exception=True),
    "timeout": TargetStatus(INACT, TO, allocated=True, started=True, exception=True),
    "prolog-failed": TargetStatus(INACT, FAIL, allocated=True, exception=True),
    "missing": None,
}

SAT, PEND = "satisfied", "pending"
NEVER = "never started"
EXPECTED: dict[str, dict[str, str]] = {
    "after": {
        "pending": PEND, "allocated": PEND, "running": SAT, "cleanup": SAT, "completed": SAT,
        "failed": SAT, "failed-exception": SAT, "canceled-running": SAT,
        "canceled-pending": NEVER, "timeout": SAT, "prolog-failed": NEVER,
        "missing": "not found",
    },
    "afterany": {
        "pending": PEND, "allocated": PEND, "running": PEND, "cleanup": PEND,
        "completed": SAT, "failed": SAT, "failed-exception": SAT, "canceled-running": SAT,
        "canceled-pending": SAT, "timeout": SAT, "prolog-failed": SAT, "missing": "not found",
    },
    "afterok": {
        "pending": PEND, "allocated": PEND, "running": PEND, "cleanup": PEND,
        "completed": SAT, "failed": "failed", "failed-exception": "failed",
        "canceled-running": "was canceled", "canceled-pending": "was canceled",
        "timeout": "timed out", "prolog-failed": "failed", "missing": "not found",
    },
    "afternotok": {
        "pending": PEND, "allocated": PEND, "running": PEND, "cleanup": PEND,
        "completed": "succeeded", "failed": SAT, "failed-exception": SAT,
        "canceled-running": SAT, "canceled-pending": NEVER, "timeout": SAT,
        "prolog-failed": SAT, "missing": "not found",
    },
    "afterexcept": {
        "pending": PEND, "allocated": PEND, "running": PEND, "cleanup": PEND,
        "completed": "ended without an exception", "failed": "ended without an exception",
        "failed-exception": SAT, "canceled-running": SAT, "canceled-pending": NEVER,
        "timeout": SAT, "prolog-failed": SAT, "missing": "not found",
    },
}


@pytest.mark.parametrize("scheme", JOBID_SCHEMES)
@pytest.mark.parametrize("case", list(STATUS))
def test_rules(scheme: str, case: str) -> None:
    dep = check_dependency({"scheme": scheme, "value": "ƒABC"})
    verdict = evaluate(dep, STATUS[case])
    want = EXPECTED[scheme][case]
    if want == SAT:
        assert verdict == Verdict(satisfied=True)
    elif want == PEND:
        assert verdict.pending
    else:
        assert verdict.fail == f"dependency: {scheme}: job ƒABC {want}"
        assert not verdict.satisfied


def test_evaluate_refuses_begin_time() -> None:
    dep = check_dependency({"scheme": "begin-time", "value": "5"})
    with pytest.raises(PolicyError, match="names no job"):
        evaluate(dep, STATUS["running"])


def _job(*names: Any) -> Job:
    job = Job(7)
    for t, item in enumerate(names):
        name, ctx = item if isinstance(item, tuple) else (item, None)
        job = apply(ev.decode(name, float(t), ctx) if ctx else ev.decode(name, float(t)), job)
    return job


SUBMIT = ("submit", {"urgency": 16, "userid": 1000, "flags": 0, "version": 1})
QUEUED = [SUBMIT, "validate", "depend", ("priority", {"priority": 16})]


def test_target_status_from_job() -> None:
    done = _job(*QUEUED, "alloc", "start", ("finish", {"status": 0}),
                ("release", {"ranks": "all", "final": True}), "free", "clean")
    assert TargetStatus.from_job(done) == TargetStatus(INACT, OK, True, True, False, 1000)
    canceled = _job(*QUEUED, ("exception", {"type": "cancel", "severity": 0, "note": ""}),
                    "clean")
    assert TargetStatus.from_job(canceled) == TargetStatus(INACT, CANCEL, False, False, True, 1000)
    running = _job(*QUEUED, "alloc", "start")
    assert TargetStatus.from_job(running) == TargetStatus(R, None, True, True, False, 1000)


# -- the index ------------------------------------------------------------------------------

A, B, C_ID = 101, 102, 103  # targets
X, Y, Z = 201, 202, 203  # dependents


class World:
    """A tiny job table to look targets up in."""

    def __init__(self) -> None:
        self.jobs: dict[int, TargetStatus | None] = {}

    def __call__(self, job: int) -> TargetStatus | None:
        return self.jobs.get(job)


def dep(scheme: str, target: int | str) -> dict[str, str]:
    return {"scheme": scheme, "value": str(target)}


def test_no_dependencies_is_ready() -> None:
    index = DependencyIndex()
    assert index.add(X, [], World(), 0.0) == DependencyActions(X, [], [], None, True)
    assert len(index) == 0


def test_wait_then_satisfy() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    index = DependencyIndex()
    actions = index.add(X, [dep("afterok", A)], world, 0.0)
    assert actions == DependencyActions(X, [f"after-success={A}"], [], None, False)
    assert X in index and len(index) == 1
    assert index.is_target(A) and not index.is_target(X)
    assert index.dependents(A) == [X]
    assert index.outstanding(X) == [f"after-success={A}"]
    # Events that change nothing produce nothing.
    assert index.target_changed(A, STATUS["cleanup"]) == []
    assert index.target_changed(B, STATUS["completed"]) == []
    assert index.target_changed(A, STATUS["completed"]) == [
        DependencyActions(X, [], [f"after-success={A}"], None, True)]
    assert len(index) == 0 and not index.is_target(A)
    assert index.outstanding(X) == []


def test_after_is_satisfied_by_start() -> None:
    world = World()
    world.jobs[A] = STATUS["pending"]
    index = DependencyIndex()
    index.add(X, [dep("after", A)], world, 0.0)
    assert index.target_changed(A, STATUS["allocated"]) == []
    assert index.target_changed(A, STATUS["running"]) == [
        DependencyActions(X, [], [f"after-start={A}"], None, True)]


def test_after_fails_if_target_never_starts() -> None:
    world = World()
    world.jobs[A] = STATUS["pending"]
    index = DependencyIndex()
    index.add(X, [dep("after", A)], world, 0.0)
    assert index.target_changed(A, STATUS["canceled-pending"]) == [
        DependencyActions(X, [], [], f"dependency: after: job {A} never started")]
    assert X not in index and not index.is_target(A)


def test_already_satisfied_at_add() -> None:
    world = World()
    world.jobs[A] = STATUS["completed"]
    world.jobs[B] = STATUS["running"]
    index = DependencyIndex()
    actions = index.add(X, [dep("afterany", A), dep("after", B)], world, 0.0)
    assert actions == DependencyActions(
        X, [f"after-finish={A}", f"after-start={B}"], [f"after-finish={A}", f"after-start={B}"],
        None, True)
    assert len(index) == 0


def test_partly_satisfied_at_add() -> None:
    world = World()
    world.jobs[A] = STATUS["completed"]
    world.jobs[B] = STATUS["running"]
    index = DependencyIndex()
    actions = index.add(X, [dep("afterok", A), dep("afterok", B)], world, 0.0)
    assert actions == DependencyActions(
        X, [f"after-success={A}", f"after-success={B}"], [f"after-success={A}"])
    assert index.outstanding(X) == [f"after-success={B}"]
    assert not index.is_target(A)
    assert index.target_changed(B, STATUS["completed"])[0].ready


@pytest.mark.parametrize(
    ("status", "note"),
    [("failed", f"dependency: afterok: job {A} failed"),
     ("canceled-pending", f"dependency: afterok: job {A} was canceled"),
     ("timeout", f"dependency: afterok: job {A} timed out")],
)
def test_unsatisfiable_at_add(status: str, note: str) -> None:
    world = World()
    world.jobs[A] = STATUS[status]
    index = DependencyIndex()
    assert index.add(X, [dep("afterok", A)], world, 0.0) == DependencyActions(X, [], [], note)
    assert len(index) == 0 and not index.is_target(A)


def test_target_not_found() -> None:
    index = DependencyIndex()
    actions = index.add(X, [dep("afterok", F58)], World(), 0.0)
    assert actions.fail == f"dependency: afterok: job {F58} not found"


def test_target_vanishes() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    index = DependencyIndex()
    index.add(X, [dep("afterany", A)], world, 0.0)
    assert index.target_changed(A, None) == [
        DependencyActions(X, [], [], f"dependency: afterany: job {A} not found")]


def test_malformed_dependency_fails_the_job() -> None:
    index = DependencyIndex()
    actions = index.add(X, [dep("afterok", A), {"scheme": "foo", "value": "1"}], World(), 0.0)
    assert actions == DependencyActions(X, [], [], "unknown dependency scheme 'foo'")
    assert not index.is_target(A)


def test_self_dependency() -> None:
    world = World()
    world.jobs[X] = STATUS["pending"]
    actions = DependencyIndex().add(X, [dep("afterany", X)], world, 0.0)
    assert actions.fail == "dependency: afterany: a job cannot depend on itself"


def test_permission() -> None:
    world = World()
    world.jobs[A] = TargetStatus(R, userid=1001)
    index = DependencyIndex()
    actions = index.add(X, [dep("afterok", A)], world, 0.0, userid=1000)
    assert actions.fail == f"dependency: afterok: permission denied for job {A}"
    assert not index.add(X, [dep("afterok", A)], world, 0.0, userid=1001).fail
    assert not index.add(Y, [dep("afterok", A)], world, 0.0).fail  # userid unknown


def test_duplicate_descriptions_are_added_once() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    deps = [dep("afterok", A), {**dep("afterok", A), "note": "again"}]
    actions = DependencyIndex().add(X, deps, world, 0.0)
    assert actions.add == [f"after-success={A}"]


def test_same_target_two_schemes() -> None:
    world = World()
    world.jobs[A] = STATUS["pending"]
    index = DependencyIndex()
    index.add(X, [dep("after", A), dep("afterany", A)], world, 0.0)
    assert index.target_changed(A, STATUS["running"]) == [
        DependencyActions(X, [], [f"after-start={A}"], None, False)]
    assert index.is_target(A)
    assert index.target_changed(A, STATUS["failed"]) == [
        DependencyActions(X, [], [f"after-finish={A}"], None, True)]


def test_one_failure_fails_the_job_but_keeps_others() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    world.jobs[B] = STATUS["running"]
    index = DependencyIndex()
    index.add(X, [dep("afterok", A), dep("afterok", B)], world, 0.0)
    index.add(Y, [dep("afternotok", A)], world, 0.0)
    index.add(Z, [dep("afterok", B)], world, 0.0)
    assert index.dependents(A) == [X, Y]
    actions = index.target_changed(A, STATUS["failed"])
    assert actions == [
        DependencyActions(X, [], [], f"dependency: afterok: job {A} failed"),
        DependencyActions(Y, [], [f"after-failure={A}"], None, True),
    ]
    # X is gone from B's dependents too; Z still waits.
    assert index.dependents(B) == [Z]
    assert list(index.target_changed(B, STATUS["completed"])) == [
        DependencyActions(Z, [], [f"after-success={B}"], None, True)]
    assert len(index) == 0


def test_remove_and_readd() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    index = DependencyIndex()
    index.add(X, [dep("afterok", A), dep("begin-time", 50)], world, 0.0)
    assert index.next_due() == 50.0
    index.remove(X)
    index.remove(X)  # no-op
    assert len(index) == 0 and not index.is_target(A)
    assert index.next_due() is None
    assert index.target_changed(A, STATUS["completed"]) == []
    # Re-adding replaces the old entry.
    index.add(Y, [dep("afterok", A)], world, 0.0)
    index.add(Y, [dep("afterany", A)], world, 0.0)
    assert index.outstanding(Y) == [f"after-finish={A}"]


def test_begin_time() -> None:
    index = DependencyIndex()
    past = index.add(X, [dep("begin-time", "100")], World(), 100.0)
    assert past == DependencyActions(X, ["begin-time=100.000"], ["begin-time=100.000"],
                                     None, True)
    future = index.add(Y, [dep("begin-time", "200.25")], World(), 100.0)
    assert future == DependencyActions(Y, ["begin-time=200.250"], [])
    index.add(Z, [dep("begin-time", "150")], World(), 100.0)
    assert index.next_due() == 150.0
    assert index.due(149.9) == []
    assert index.due(160.0) == [DependencyActions(Z, [], ["begin-time=150.000"], None, True)]
    assert index.next_due() == 200.25
    assert index.due(1000.0) == [DependencyActions(Y, [], ["begin-time=200.250"], None, True)]
    assert index.next_due() is None and len(index) == 0


def test_begin_time_with_a_job_dependency() -> None:
    world = World()
    world.jobs[A] = STATUS["running"]
    index = DependencyIndex()
    index.add(X, [dep("begin-time", "10"), dep("afterany", A)], world, 0.0)
    assert index.due(10.0) == [DependencyActions(X, [], ["begin-time=10.000"], None, False)]
    assert index.target_changed(A, STATUS["completed"])[0].ready


def test_two_begin_times_same_job_are_grouped() -> None:
    index = DependencyIndex()
    index.add(X, [dep("begin-time", "10"), dep("begin-time", "20")], World(), 0.0)
    assert index.due(30.0) == [
        DependencyActions(X, [], ["begin-time=10.000", "begin-time=20.000"], None, True)]


def test_stale_timers_are_compacted() -> None:
    index = DependencyIndex()
    for job in range(200):
        index.add(job, [dep("begin-time", str(1000 + job))], World(), 0.0)
    for job in range(199):
        index.remove(job)
    assert len(index._heap) < 100
    assert index.next_due() == 1199.0
    assert index.due(2000.0) == [DependencyActions(199, [], ["begin-time=1199.000"], None, True)]


def test_resume_after_restart() -> None:
    world = World()
    world.jobs[A] = STATUS["completed"]
    world.jobs[B] = STATUS["running"]
    deps = [dep("afterok", A), dep("afterok", B), dep("begin-time", "5")]
    index = DependencyIndex()
    # The eventlog shows A's and B's dependencies added; the begin time was removed.
    actions = index.add(X, deps, world, 10.0,
                        outstanding={f"after-success={A}", f"after-success={B}"})
    assert actions == DependencyActions(X, [], [f"after-success={A}"])
    assert index.outstanding(X) == [f"after-success={B}"]
    assert index.next_due() is None
    # Nothing outstanding: ready at once, nothing to post.
    assert index.add(Y, deps, world, 10.0, outstanding=()) == \
        DependencyActions(Y, [], [], None, True)


def test_chain() -> None:
    """A <- B (afterok) <- C (afterany): each becomes ready in turn."""
    world = World()
    world.jobs[A] = STATUS["running"]
    world.jobs[B] = STATUS["pending"]
    index = DependencyIndex()
    assert not index.add(B, [dep("afterok", A)], world, 0.0).ready
    assert not index.add(C_ID, [dep("afterany", B)], world, 0.0).ready
    assert index.target_changed(A, STATUS["completed"]) == [
        DependencyActions(B, [], [f"after-success={A}"], None, True)]
    assert index.target_changed(B, STATUS["running"]) == []
    assert index.target_changed(B, STATUS["completed"]) == [
        DependencyActions(C_ID, [], [f"after-finish={B}"], None, True)]


def test_chain_failure_propagates_as_not_found_or_failed() -> None:
    """A fails: B (afterok) fails; C (afterok on B) then fails when B ends canceled."""
    world = World()
    world.jobs[A] = STATUS["running"]
    world.jobs[B] = STATUS["pending"]
    index = DependencyIndex()
    index.add(B, [dep("afterok", A)], world, 0.0)
    index.add(C_ID, [dep("afterok", B)], world, 0.0)
    assert index.target_changed(A, STATUS["failed"])[0].fail == \
        f"dependency: afterok: job {A} failed"
    # The job manager raises the exception on B, which ends canceled-like.
    assert index.target_changed(B, TargetStatus(INACT, FAIL, exception=True)) == [
        DependencyActions(C_ID, [], [], f"dependency: afterok: job {B} failed")]


# -- hypothesis: the index agrees with the rules ----------------------------------------------

PATHS = {
    "complete": ["pending", "allocated", "running", "cleanup", "completed"],
    "fail": ["pending", "running", "failed"],
    "cancel-pending": ["pending", "canceled-pending"],
    "cancel-running": ["pending", "allocated", "running", "canceled-running"],
    "prolog-fail": ["pending", "allocated", "prolog-failed"],
    "timeout": ["pending", "running", "timeout"],
}
TARGETS = [A, B, C_ID]


@settings(max_examples=200)
def _record(actions: DependencyActions, added: dict[int, set[str]],
            removed: dict[int, set[str]], outcome: dict[int, str]) -> None:
    """Check one job's actions against what it was told before, and note them."""
    job = actions.jobid
    assert job not in outcome, "a job resolved twice"
    have = added.setdefault(job, set())
    gone = removed.setdefault(job, set())
    for desc in actions.add:
        assert desc not in have
        have.add(desc)
    for desc in actions.remove:
        assert desc in have and desc not in gone
        gone.add(desc)
    if actions.fail:
        outcome[job] = "fail"
    elif actions.ready:
        assert gone == have
        outcome[job] = "ready"


@given(
    paths=st.lists(st.sampled_from(sorted(PATHS)), min_size=3, max_size=3),
    dependents=st.lists(
        st.lists(st.tuples(st.sampled_from(JOBID_SCHEMES), st.sampled_from(TARGETS)),
                 min_size=1, max_size=3),
        min_size=1, max_size=5),
    steps=st.lists(st.one_of(st.tuples(st.just("advance"), st.sampled_from(TARGETS)),
                             st.tuples(st.just("add"), st.integers(0, 4))), max_size=30),
)
def test_index_agrees_with_rules(paths: list[str], dependents: list[list[tuple[str, int]]],
                                 steps: list[tuple[str, int]]) -> None:
    path_of = dict(zip(TARGETS, (PATHS[p] for p in paths), strict=True))
    position = dict.fromkeys(TARGETS, 0)
    world = World()
    for target in TARGETS:
        world.jobs[target] = STATUS[path_of[target][0]]
    index = DependencyIndex()
    added: dict[int, set[str]] = {}
    removed: dict[int, set[str]] = {}
    outcome: dict[int, str] = {}

    def record(actions: DependencyActions) -> None:
        _record(actions, added, removed, outcome)

    def add(i: int) -> None:
        job = 1000 + i
        if i < len(dependents) and job not in added:
            deps = [dep(scheme, target) for scheme, target in dependents[i]]
            record(index.add(job, deps, world, 0.0))

    def advance(target: int) -> None:
        if position[target] + 1 < len(path_of[target]):
            position[target] += 1
            world.jobs[target] = STATUS[path_of[target][position[target]]]
            for actions in index.target_changed(target, world.jobs[target]):
                record(actions)

    for kind, arg in steps:
        if kind == "add":
            add(arg)
        else:
            advance(arg)
    for i in range(len(dependents)):
        add(i)
    for target in TARGETS:
        while position[target] + 1 < len(path_of[target]):
            advance(target)

    assert len(index) == 0
    for i, deps in enumerate(dependents):
        # Verdicts never flip (a started job stays started), so the final
        # statuses decide: the job failed iff some dependency's verdict fails.
        final = [evaluate(check_dependency(dep(s, t)), world.jobs[t]) for s, t in deps]
        assert all(not v.pending for v in final)
        expected = "fail" if any(v.fail for v in final) else "ready"
        assert outcome[1000 + i] == expected
