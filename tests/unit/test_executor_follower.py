"""How the executor turns a job's events into its future (fluxes/job/executor.py), and
what a submission of a JobspecV1 carries (fluxes/job/api.py): the fast paths taken for
every event and every submission keep the API's behaviour."""

from __future__ import annotations

import concurrent.futures

import pytest

from fluxes.job import EventLogEvent, JobException, JobspecV1
from fluxes.job.api import _spec_item
from fluxes.job.executor import FluxExecutorFuture, _Follower
from fluxes.store.client import _submission_item


def running() -> FluxExecutorFuture:
    future = FluxExecutorFuture()
    assert future.set_running_or_notify_cancel()
    return future


def event(name: str, **context: object) -> EventLogEvent:
    return EventLogEvent(name, 1.5, dict(context))


def test_finish_sets_the_exit_code_once_and_later_events_still_reach_callbacks() -> None:
    future = running()
    seen: list[str] = []
    future.add_event_callback("clean", lambda _f, e: seen.append(e.name))
    follower = _Follower(future)
    follower._event(event("start"))
    assert not future.done()
    follower._event(event("finish", status=3 << 8))
    follower._event(event("exception", type="cancel", severity=0, note="late"))
    follower._event(event("clean"))
    assert future.result() == 3
    assert seen == ["clean"]
    # every event is kept: a callback added now replays it
    late: list[str] = []
    future.add_event_callback("exception", lambda _f, e: late.append(e.name))
    assert late == ["exception"]


def test_a_signal_gives_the_negative_signal_number() -> None:
    future = running()
    _Follower(future)._event(event("finish", status=9))
    assert future.result() == -9


def test_a_fatal_exception_fails_the_future_and_the_finish_after_it_is_ignored() -> None:
    future = running()
    follower = _Follower(future)
    follower._event(event("exception", type="test", severity=1, note="not fatal"))
    assert not future.done()
    follower._event(event("exception", type="cancel", severity=0, note="canceled"))
    follower._event(event("finish", status=0))
    error = future.exception()
    assert isinstance(error, JobException) and error.type == "cancel"


def test_a_future_failed_meanwhile_keeps_its_error() -> None:
    future = running()
    follower = _Follower(future)
    future.set_exception(RuntimeError("connection lost"))
    follower._event(event("finish", status=0))  # no InvalidStateError
    with pytest.raises(RuntimeError, match="connection lost"):
        future.result()
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(0)


def spec() -> JobspecV1:
    jobspec = JobspecV1.from_command(["true"])
    jobspec.cwd = "/tmp"
    return jobspec


def test_a_submission_carries_the_jobspec_as_it_is_when_submitted() -> None:
    jobspec = spec()
    first = _submission_item(_spec_item(jobspec, None, 0))
    assert first.jobspec == jobspec.checked().to_dict()
    jobspec.cwd = "/var/tmp"  # a workflow changes the jobspec between submissions
    second = _submission_item(_spec_item(jobspec, None, 0))
    assert second.jobspec is not None and first.jobspec is not None
    assert second.jobspec["attributes"]["system"]["cwd"] == "/var/tmp"
    assert first.jobspec["attributes"]["system"]["cwd"] == "/tmp"


def test_a_submission_names_the_urgency_it_was_given() -> None:
    assert _submission_item(_spec_item(spec(), 7, 0)).urgency == 7
    assert _submission_item(_spec_item(spec(), None, 0)).urgency is None
