"""RFC 21 transitions as a table: every event, in every state, accepted or refused.

The table comes from the text of RFC 21 (the state descriptions and the state
diagram), not from ``fluxes.domain.job.model``:

- NEW: ``submit`` comes first; ``validate`` -> DEPEND; ``invalidate`` removes
  the job (-> INACTIVE).
- DEPEND: ``dependency-add``/``-remove`` hold it; ``depend`` -> PRIORITY.
- PRIORITY: ``priority`` -> SCHED (and a new priority while in SCHED).
- SCHED: ``alloc`` -> RUN; ``urgency``, ``flux-restart`` and
  ``jobspec-update`` go back to PRIORITY.
- RUN: prologs hold ``start``; ``start``; ``finish`` -> CLEANUP.
- CLEANUP: ``release``, epilogs hold ``free``; ``free``; ``clean`` -> INACTIVE.
  "Under exceptional termination, one or more steps may be unnecessary":
  after a fatal exception an ``alloc`` already in flight, ``start`` and
  ``finish`` of shells already launched still land in CLEANUP.
- A severity-0 ``exception`` moves DEPEND, PRIORITY, SCHED and RUN to CLEANUP
  (the red edges); other severities change no state.
- INACTIVE is captive: no event is accepted.
- ``set-flags``, ``memo``, ``debug.*`` and unknown events change no state.

Where RFC 21 says nothing (states of ``jobspec-update``, ``urgency`` in NEW,
``resource-update``), the rows follow docs/eventlog.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import FatalException, Job, TransitionError, apply
from fluxes.domain.job.states import STATES, JobResult, JobState

T = 1000.0  # the fixtures' events
TE = 2000.0  # the event under test: fields it sets carry this time


def at(t: float, name: str, **ctx: Any) -> ev.Event:
    return ev.decode(name, t, ctx)


def f(name: str, **ctx: Any) -> ev.Event:
    return at(T, name, **ctx)


SUBMIT = f("submit", urgency=16, userid=1000, flags=0, version=1)
QUEUED = [SUBMIT, f("validate"), f("depend"), f("priority", priority=5)]
RUNNING = [*QUEUED, f("alloc"), f("start")]
FINISHED = [*RUNNING, f("finish", status=0), f("release", ranks="all", final=True)]

#: Jobs in every state, some states in several situations. The name up to the
#: first "-" is the state.
FIXTURES: dict[str, list[ev.Event]] = {
    "NEW": [SUBMIT],
    "NEW-dependency": [SUBMIT, f("dependency-add", description="d")],
    "DEPEND": QUEUED[:2],
    "DEPEND-dependency": [*QUEUED[:2], f("dependency-add", description="d")],
    "PRIORITY": QUEUED[:3],
    "SCHED": QUEUED,
    "SCHED-annotated": [*QUEUED, f("annotations", annotations={"sched": {"t_estimate": 9.0}})],
    "RUN": [*QUEUED, f("alloc")],
    "RUN-prolog": [*QUEUED, f("alloc"), f("prolog-start", description="p")],
    "RUN-started": RUNNING,
    "CLEANUP-unallocated": [*QUEUED, f("exception", type="cancel", severity=0, note="")],
    "CLEANUP-allocated": [*QUEUED, f("alloc"),
                          f("exception", type="cancel", severity=0, note="")],
    "CLEANUP-prolog": [*QUEUED, f("alloc"), f("prolog-start", description="p"),
                       f("exception", type="cancel", severity=0, note="")],
    "CLEANUP-running": [*RUNNING, f("exception", type="timelimit", severity=0, note="")],
    "CLEANUP-finished": [*RUNNING, f("finish", status=0)],
    "CLEANUP-released": FINISHED,
    "CLEANUP-epilog": [*FINISHED, f("epilog-start", description="e")],
    "CLEANUP-freed": [*FINISHED, f("free")],
    "CLEANUP-failed": [*RUNNING, f("finish", status=3 << 8),
                       f("release", ranks="all", final=True), f("free")],
    "CLEANUP-timeout": [*RUNNING, f("exception", type="timelimit", severity=0, note=""),
                        f("finish", status=15), f("release", ranks="all", final=True),
                        f("free")],
    "INACTIVE": [*FINISHED, f("free"), f("clean")],
}


def state_of(fixture: str) -> JobState:
    return JobState[fixture.split("-", maxsplit=1)[0]]


def job_of(fixture: str) -> Job:
    job = Job(42)
    for event in FIXTURES[fixture]:
        job = apply(event, job)
    return job


#: Derived facts (properties) a row may check besides the record's fields.
DERIVED = frozenset({"result", "exit_code", "free_owed", "can_free", "can_clean",
                     "can_start", "finished"})
#: Field or derived name -> its value after the event, or a function of the job before.
Changes = Mapping[str, Any]
ANY_ACTIVE = frozenset(STATES) - {JobState.NEW, JobState.INACTIVE}
NOT_INACTIVE = frozenset(STATES) - {JobState.INACTIVE}


def states(*members: JobState) -> frozenset[JobState]:
    return frozenset(members)


def everywhere(changes: Changes, states: frozenset[JobState] = NOT_INACTIVE
               ) -> dict[str, Changes]:
    """The same changes in every fixture of ``states``."""
    return {name: changes for name in FIXTURES if state_of(name) in states}


class Row(NamedTuple):
    """One event: where it is accepted (and what it changes), where it is refused."""

    event: ev.Event
    accepted: dict[str, Changes]
    refused_in: frozenset[JobState]
    #: fixtures of accepting states where the event is still refused, with the reason
    refused_otherwise: Mapping[str, str] = MappingProxyType({})


def more_exceptions(job: Job) -> int:
    return job.exceptions + 1


def one_more_restart(job: Job) -> int:
    return job.restarts + 1


def fatal_cancel(job: Job) -> FatalException:
    # the first severity-0 exception stays the root cause
    return job.fatal or FatalException("cancel", "", TE)


_S = JobState
ROWS: dict[str, Row] = {
    "validate": Row(
        at(TE, "validate"),
        {"NEW": {"state": _S.DEPEND, "t_depend": TE}},
        states(_S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "invalidate": Row(
        at(TE, "invalidate"),
        {"NEW": {"state": _S.INACTIVE, "t_inactive": TE, "result": JobResult.FAILED}},
        states(_S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "jobspec-update": Row(
        at(TE, "jobspec-update", **{"attributes.system.duration": 60}),
        {**everywhere({"jobspec_updates": {"attributes.system.duration": 60}},
                      states(_S.NEW, _S.DEPEND, _S.PRIORITY)),
         "SCHED": {"jobspec_updates": {"attributes.system.duration": 60},
                   "state": _S.PRIORITY, "t_priority": TE}},
        states(_S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "resource-update": Row(
        at(TE, "resource-update", expiration=5000.0),
        {name: {"expiration": 5000.0} for name in
         ("RUN", "RUN-prolog", "RUN-started", "CLEANUP-allocated", "CLEANUP-prolog",
          "CLEANUP-running", "CLEANUP-finished", "CLEANUP-released", "CLEANUP-epilog")},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE),
        {"CLEANUP-unallocated": "holds no resources", "CLEANUP-freed": "holds no resources",
         "CLEANUP-failed": "holds no resources", "CLEANUP-timeout": "holds no resources"}),
    "set-flags": Row(
        at(TE, "set-flags", flags=["debug"]),
        everywhere({"set_flags": frozenset({"debug"})}),
        states(_S.INACTIVE)),
    "dependency-add": Row(
        at(TE, "dependency-add", description="x"),
        {"NEW": {"dependencies": frozenset({"x"})},
         "DEPEND": {"dependencies": frozenset({"x"})},
         "NEW-dependency": {"dependencies": frozenset({"d", "x"})},
         "DEPEND-dependency": {"dependencies": frozenset({"d", "x"})}},
        states(_S.PRIORITY, _S.SCHED, _S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "dependency-remove": Row(
        at(TE, "dependency-remove", description="d"),
        {"NEW-dependency": {"dependencies": frozenset()},
         "DEPEND-dependency": {"dependencies": frozenset()}},
        states(_S.PRIORITY, _S.SCHED, _S.RUN, _S.CLEANUP, _S.INACTIVE),
        {"NEW": "no outstanding dependency", "DEPEND": "no outstanding dependency"}),
    "depend": Row(
        at(TE, "depend"),
        {"DEPEND": {"state": _S.PRIORITY, "t_priority": TE}},
        states(_S.NEW, _S.PRIORITY, _S.SCHED, _S.RUN, _S.CLEANUP, _S.INACTIVE),
        {"DEPEND-dependency": "outstanding"}),
    "priority": Row(
        at(TE, "priority", priority=7),
        {"PRIORITY": {"state": _S.SCHED, "priority": 7, "t_sched": TE},
         "SCHED": {"priority": 7}, "SCHED-annotated": {"priority": 7}},
        states(_S.NEW, _S.DEPEND, _S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "flux-restart": Row(
        at(TE, "flux-restart"),
        {**everywhere({"restarts": one_more_restart}),
         "SCHED": {"state": _S.PRIORITY, "t_priority": TE, "restarts": one_more_restart},
         # annotations are volatile until alloc (RFC 27): a new request starts afresh
         "SCHED-annotated": {"state": _S.PRIORITY, "t_priority": TE,
                             "restarts": one_more_restart, "annotations": None}},
        states(_S.INACTIVE)),
    "urgency": Row(
        at(TE, "urgency", urgency=3, userid=1),
        {**everywhere({"urgency": 3}, states(_S.NEW, _S.DEPEND, _S.PRIORITY)),
         "SCHED": {"urgency": 3, "state": _S.PRIORITY, "t_priority": TE}},
        states(_S.RUN, _S.CLEANUP, _S.INACTIVE)),
    "alloc": Row(
        at(TE, "alloc", annotations={"sched": {"resource_summary": "rank0/core0",
                                               "t_estimate": None}}),
        {"SCHED": {"state": _S.RUN, "has_resources": True, "was_allocated": True,
                   "t_run": TE, "annotations": {"sched": {"resource_summary": "rank0/core0"}},
                   "free_owed": False, "can_start": True},
         # canceled while the request was in flight: held, so a free is owed
         "CLEANUP-unallocated": {"has_resources": True, "was_allocated": True,
                                 "free_owed": True, "can_free": True, "can_clean": False}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.RUN, _S.INACTIVE),
        {"CLEANUP-allocated": "already allocated", "CLEANUP-freed": "already allocated"}),
    "prolog-start": Row(
        at(TE, "prolog-start", description="q"),
        {"RUN": {"prologs": ("q",), "can_start": False},
         "RUN-prolog": {"prologs": ("p", "q"), "can_start": False}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.CLEANUP, _S.INACTIVE),
        {"RUN-started": "after the job started"}),
    "prolog-finish": Row(
        at(TE, "prolog-finish", description="p", status=0),
        {"RUN-prolog": {"prologs": (), "can_start": True},
         "CLEANUP-prolog": {"prologs": ()}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE),
        {"RUN": "without a matching", "CLEANUP-finished": "without a matching"}),
    "prolog-finish (failed)": Row(
        at(TE, "prolog-finish", description="p", status=1),
        {"RUN-prolog": {"prologs": (), "prolog_failed": True, "can_start": False},
         "CLEANUP-prolog": {"prologs": (), "prolog_failed": True}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE)),
    "epilog-start": Row(
        at(TE, "epilog-start", description="q"),
        {"CLEANUP-released": {"epilogs": ("q",), "can_free": False, "can_clean": False},
         "CLEANUP-epilog": {"epilogs": ("e", "q")},
         "CLEANUP-freed": {"epilogs": ("q",), "can_clean": False},
         "CLEANUP-unallocated": {"epilogs": ("q",), "can_clean": False}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE)),
    "epilog-finish": Row(
        at(TE, "epilog-finish", description="e", status=0),
        {"CLEANUP-epilog": {"epilogs": (), "can_free": True}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE),
        {"CLEANUP-released": "without a matching"}),
    "start": Row(
        at(TE, "start"),
        {"RUN": {"started": True, "can_start": False},
         # an exception landed between alloc and the shells starting
         "CLEANUP-allocated": {"started": True, "can_clean": False}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE),
        {"RUN-prolog": "prolog is running", "RUN-started": "twice",
         "CLEANUP-unallocated": "holds no resources"}),
    "release": Row(
        at(TE, "release", ranks="all", final=True),
        {"CLEANUP-finished": {"released": True, "can_free": True},
         "CLEANUP-running": {"released": True},
         "CLEANUP-allocated": {"released": True, "can_free": True}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE),
        {"CLEANUP-released": "after the final release",
         "CLEANUP-freed": "holds no resources"}),
    "release (partial)": Row(
        at(TE, "release", ranks="0", final=False),
        {"CLEANUP-finished": {"can_free": False}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE)),
    "finish": Row(
        at(TE, "finish", status=0),
        {"RUN-started": {"state": _S.CLEANUP, "t_cleanup": TE, "wait_status": 0,
                         "finished": True, "exit_code": 0, "free_owed": True},
         # the exception moved it to CLEANUP already: that time stays
         "CLEANUP-running": {"wait_status": 0, "finished": True, "exit_code": 0}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE),
        {"RUN": "before start", "CLEANUP-allocated": "before start",
         "CLEANUP-finished": "twice"}),
    "finish (killed)": Row(
        at(TE, "finish", status=9),
        {"RUN-started": {"state": _S.CLEANUP, "t_cleanup": TE, "wait_status": 9,
                         "exit_code": 128 + 9},
         "CLEANUP-running": {"wait_status": 9, "exit_code": 128 + 9}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE)),
    "finish (exit 3)": Row(
        at(TE, "finish", status=3 << 8),
        {"RUN-started": {"state": _S.CLEANUP, "t_cleanup": TE, "wait_status": 3 << 8,
                         "exit_code": 3},
         "CLEANUP-running": {"wait_status": 3 << 8, "exit_code": 3}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.INACTIVE)),
    "free": Row(
        at(TE, "free"),
        {"CLEANUP-released": {"has_resources": False, "free_owed": False, "can_clean": True},
         "CLEANUP-allocated": {"has_resources": False, "can_clean": True}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE),
        {"CLEANUP-epilog": "epilog is running", "CLEANUP-freed": "holds no resources",
         "CLEANUP-unallocated": "holds no resources"}),
    "clean": Row(
        at(TE, "clean"),
        {"CLEANUP-freed": {"state": _S.INACTIVE, "t_inactive": TE,
                           "result": JobResult.COMPLETED, "exit_code": 0},
         "CLEANUP-unallocated": {"state": _S.INACTIVE, "t_inactive": TE,
                                 "result": JobResult.CANCELED, "exit_code": None},
         "CLEANUP-failed": {"state": _S.INACTIVE, "t_inactive": TE,
                            "result": JobResult.FAILED, "exit_code": 3},
         "CLEANUP-timeout": {"state": _S.INACTIVE, "t_inactive": TE,
                             "result": JobResult.TIMEOUT, "exit_code": 128 + 15}},
        states(_S.NEW, _S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN, _S.INACTIVE),
        {"CLEANUP-released": "still holds resources", "CLEANUP-allocated": "still holds",
         "CLEANUP-running": "still holds", "CLEANUP-epilog": "still holds",
         "CLEANUP-prolog": "still holds"}),
    "exception (fatal)": Row(
        at(TE, "exception", type="cancel", severity=0, note=""),
        {**everywhere({"state": _S.CLEANUP, "t_cleanup": TE, "fatal": fatal_cancel,
                       "exceptions": more_exceptions},
                      states(_S.DEPEND, _S.PRIORITY, _S.SCHED, _S.RUN)),
         # leaving SCHED drops the volatile annotations (RFC 27)
         "SCHED-annotated": {"state": _S.CLEANUP, "t_cleanup": TE, "fatal": fatal_cancel,
                             "exceptions": more_exceptions, "annotations": None},
         **everywhere({"fatal": fatal_cancel, "exceptions": more_exceptions},
                      states(_S.CLEANUP))},
        states(_S.NEW, _S.INACTIVE)),
    "exception (non-fatal)": Row(
        at(TE, "exception", type="warn", severity=3, note=""),
        everywhere({"exceptions": more_exceptions}, ANY_ACTIVE),
        states(_S.NEW, _S.INACTIVE)),
    "memo": Row(
        at(TE, "memo", k=1),
        everywhere({"memo": {"k": 1}}),
        states(_S.INACTIVE)),
    "debug": Row(at(TE, "debug.thing", x=1), everywhere({}), states(_S.INACTIVE)),
    "unknown": Row(at(TE, "future-event", x=1), everywhere({}), states(_S.INACTIVE)),
}

def _check(before: Job, after: Job, changes: Changes) -> None:
    fields: dict[str, Any] = {"seq": before.seq + 1}
    derived: dict[str, Any] = {}
    for name, change in changes.items():
        value = change(before) if callable(change) else change
        (derived if name in DERIVED else fields)[name] = value
    # every other field is as it was
    assert after == before.replace(**fields)
    for name, value in derived.items():
        assert getattr(after, name) == value, name


ACCEPTED = [(row, fixture) for row, r in ROWS.items() for fixture in r.accepted]
REFUSED_BY_STATE = [(row, fixture) for row, r in ROWS.items() for fixture in FIXTURES
                    if state_of(fixture) in r.refused_in]
REFUSED_OTHERWISE = [(row, fixture, why) for row, r in ROWS.items()
                     for fixture, why in r.refused_otherwise.items()]


@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_fixture_is_in_its_state(fixture: str) -> None:
    assert job_of(fixture).state == state_of(fixture)


def test_every_rfc21_event_has_a_row() -> None:
    named = {row.event.event_name for row in ROWS.values()}
    assert ev.EVENT_NAMES - {"submit", "annotations"} <= named


@pytest.mark.parametrize("row", list(ROWS))
def test_row_says_accepted_or_refused_for_every_state(row: str) -> None:
    accepting = {state_of(name) for name in ROWS[row].accepted}
    assert not accepting & ROWS[row].refused_in
    assert accepting | ROWS[row].refused_in == set(STATES)
    assert {state_of(name) for name in ROWS[row].refused_otherwise} <= accepting


@pytest.mark.parametrize(("row", "fixture"), ACCEPTED)
def test_accepted_with_its_changes(row: str, fixture: str) -> None:
    before = job_of(fixture)
    _check(before, apply(ROWS[row].event, before), ROWS[row].accepted[fixture])


@pytest.mark.parametrize(("row", "fixture"), REFUSED_BY_STATE)
def test_refused_in_state(row: str, fixture: str) -> None:
    job = job_of(fixture)
    before = tuple(job)
    with pytest.raises(TransitionError,
                       match=f"job 42: event '.*' impossible in state {state_of(fixture).name}$"):
        apply(ROWS[row].event, job)
    assert tuple(job) == before


@pytest.mark.parametrize(("row", "fixture", "why"), REFUSED_OTHERWISE)
def test_refused_for_another_reason(row: str, fixture: str, why: str) -> None:
    job = job_of(fixture)
    before = tuple(job)
    with pytest.raises(TransitionError, match=why):
        apply(ROWS[row].event, job)
    assert tuple(job) == before


def test_submit_is_the_first_event_and_only_the_first() -> None:
    job = apply(at(TE, "submit", urgency=3, userid=5, flags=1, version=1), Job(42))
    assert job == Job(42).replace(seq=1, urgency=3, userid=5, flags=1, t_submit=TE)
    assert job.state == JobState.NEW and job.result is None
    for fixture in FIXTURES:
        reason = "impossible in state INACTIVE" if fixture == "INACTIVE" else "first event"
        with pytest.raises(TransitionError, match=reason):
            apply(SUBMIT, job_of(fixture))


@pytest.mark.parametrize("row", list(ROWS))
def test_nothing_before_submit(row: str) -> None:
    with pytest.raises(TransitionError, match="before submit"):
        apply(ROWS[row].event, Job(42))

