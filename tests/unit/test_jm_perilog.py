"""The job manager's prolog/epilog events from the ranks' reports (fluxes/domain/jm/perilog.py)."""

from __future__ import annotations

from fluxes.domain.jm.perilog import EPILOG, PROLOG, RUNNING, HookProgress, hook_events
from fluxes.domain.job.model import Job
from fluxes.domain.job.states import JobState

RUN = Job(1, state=JobState.RUN, has_resources=True)


def names(events: list) -> list[str]:
    return [e.name for e in events]


def test_prolog_start_then_finish_once_every_rank_ended() -> None:
    hooks = HookProgress()
    hooks.note(0, RUNNING, None)
    assert names(hook_events(RUN, hooks, [0, 1], set(), None, 1.0)) == ["prolog-start"]
    hooks.note(0, 0, None)
    assert hook_events(RUN.replace(prologs=(PROLOG,)), hooks, [0, 1], set(), None, 2.0) == []
    hooks.note(1, 0, None)
    [finish] = hook_events(RUN.replace(prologs=(PROLOG,)), hooks, [0, 1], set(), None, 3.0)
    assert finish.name == "prolog-finish" and finish.status == 0  # type: ignore[attr-defined]


def test_a_failed_prolog_is_an_exception_at_once() -> None:
    hooks = HookProgress()
    hooks.note(0, 256, None)
    hooks.note(1, RUNNING, None)
    events = hook_events(RUN, hooks, [0, 1], set(), "prolog exited with code=1", 1.0)
    assert names(events) == ["prolog-start", "exception"]
    assert events[1].type == "prolog" and events[1].severity == 0  # type: ignore[attr-defined]
    # the other rank, killed, is released without finishing its prolog
    job = RUN.replace(prologs=(PROLOG,), state=JobState.CLEANUP)
    [finish] = hook_events(job, hooks, [0, 1], {1}, None, 2.0)
    assert finish.name == "prolog-finish" and finish.status == 256  # type: ignore[attr-defined]


def test_epilog_waits_for_cleanup_and_a_failure_is_not_fatal() -> None:
    hooks = HookProgress()
    hooks.note(0, None, RUNNING)
    assert hook_events(RUN.replace(started=True), hooks, [0], set(), None, 1.0) == []
    cleanup = RUN.replace(started=True, state=JobState.CLEANUP, wait_status=0)
    assert names(hook_events(cleanup, hooks, [0], set(), None, 2.0)) == ["epilog-start"]
    hooks.note(0, None, 512)
    events = hook_events(cleanup.replace(epilogs=(EPILOG,)), hooks, [0], set(), "bad", 3.0)
    assert names(events) == ["exception", "epilog-finish"]
    assert events[0].severity == 2  # type: ignore[attr-defined]
    # a finished status is never taken back, and the flags survive a restart
    hooks.note(0, None, RUNNING)
    assert hooks.epilog[0] == 512
    assert HookProgress.from_wire(hooks.to_wire()) == hooks


def test_a_restarted_job_manager_goes_on_from_the_eventlog() -> None:
    # nothing saved (a one-rank job), the prolog-start in the eventlog
    hooks = HookProgress()
    hooks.note(0, 0, None)
    [finish] = hook_events(RUN.replace(prologs=(PROLOG,)), hooks, [0], set(), None, 1.0)
    assert finish.name == "prolog-finish"
    hooks = HookProgress()
    hooks.note(0, None, 0)
    cleanup = RUN.replace(started=True, state=JobState.CLEANUP, wait_status=0,
                          epilogs=(EPILOG,))
    assert names(hook_events(cleanup, hooks, [0], set(), None, 2.0)) == ["epilog-finish"]
