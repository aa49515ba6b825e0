"""The pure parts of ``fluxes job timeleft``, ``job last`` and ``job status``."""

from __future__ import annotations

import math

import pytest

from fluxes.cli.attach import Outcome
from fluxes.cli.cmd_jobtools import pick_last, status_code, time_left
from fluxes.cli.util import UsageError
from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, apply


def job(*events: ev.Event) -> Job:
    out = Job(7)
    for event in (ev.Submit(timestamp=1.0, urgency=16, userid=1, flags=0),
                  ev.Validate(timestamp=1.0), ev.Depend(timestamp=1.0),
                  ev.Priority(timestamp=1.0, priority=1), *events):
        out = apply(event, out)
    return out


RUNNING = (ev.Alloc(timestamp=10.0), ev.Start(timestamp=10.0))


def test_time_left() -> None:
    assert time_left(job(*RUNNING), 110.0, 50.0) == 60.0
    assert time_left(job(*RUNNING), 110.0, 200.0) == 0.0  # past it: 0, never negative
    assert time_left(job(*RUNNING), None, 50.0) == math.inf
    moved = job(*RUNNING, ev.ResourceUpdate(timestamp=20.0, expiration=500.0))
    assert time_left(moved, 110.0, 50.0) == 450.0  # the update wins over R
    ended = job(*RUNNING, ev.Finish(timestamp=30.0, status=0))
    assert time_left(ended, 110.0, 50.0) == 0.0
    with pytest.raises(ValueError, match="has not started"):
        time_left(job(), 110.0, 50.0)


@pytest.mark.parametrize(("which", "picked"), [
    ("1", [5]), ("3", [5, 4, 3]), ("9", [5, 4, 3, 2, 1]), ("[:2]", [5, 4]),
    ("[1:3]", [4, 3]), ("[-1:]", [1]), ("[::2]", [5, 3, 1]),
])
def test_pick_last(which: str, picked: list[int]) -> None:
    assert pick_last([5, 4, 3, 2, 1], which) == picked


@pytest.mark.parametrize("which", ["0", "x", "[1]", "[::0]", "-1"])
def test_pick_last_refuses(which: str) -> None:
    with pytest.raises(UsageError):
        pick_last([1], which)


def test_status_code() -> None:
    failed = job(*RUNNING, ev.Finish(timestamp=30.0, status=3 << 8))
    assert status_code(Outcome(failed), None) == 3
    assert status_code(Outcome(failed), 99) == 3  # no exception: its own code
    canceled = job(ev.JobException(timestamp=5.0, type="cancel", severity=0))
    assert status_code(Outcome(canceled), None) == 1
    assert status_code(Outcome(canceled), 99) == 99
