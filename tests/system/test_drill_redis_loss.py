"""The appendfsync everysec loss window, simulated: Redis restarts on a copy of its AOF taken
before the last acknowledged writes (``fluxes drill --lose-writes``), and the system notices:
workers rebuild from what is stored, every job that survived finishes, nothing hangs, and the
jobs whose submission was lost are unknown to clients."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fluxes.cli.main import main
from fluxes.domain.job.events import Event
from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.invariants import check_jobs
from fluxes.drill.runner import Drill, simulated_job
from fluxes.drill.targets import OwnInstance
from fluxes.formats.jobid import encode
from fluxes.store.client import Client
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system


class AskingClient(Drill):
    """A drill that, before it stops its instance, asks the CLI about a lost job."""

    answer: int | None = None

    def _check(self, target: Any, expected: Any) -> None:
        super()._check(target, expected)
        if self.lost_ids:
            self.answer = main(["--uri", str(target.inst.uri), "job", "info",
                                encode(min(self.lost_ids), "f58")])


def test_lost_writes_are_noticed_and_lost_jobs_are_unknown(
        capsys: pytest.CaptureFixture[str]) -> None:
    need_redis()
    drill = AskingClient(jobs=60, kill="redis", rounds=1, seed=5, appendfsync="everysec",
                         lose_writes=0.5, timeout=180)
    result = drill.run()
    figures = result.figures()
    assert result.ok, figures["violations"]
    assert drill.lost_ids and figures["lost_submissions"] == len(drill.lost_ids)
    assert figures["jobs"] == 60 + len(drill.window_ids)
    assert drill.answer == 1 and "not found" in capsys.readouterr().err
    # and every one of them was reported by id (the ingest's acknowledgement log)
    n = len(drill.lost_ids)
    assert f"{n} of the {n} lost submissions are reported by id (fluxes admin lost-jobs)" \
        in figures["notes"]


def test_lose_writes_needs_an_everysec_redis_drill() -> None:
    with pytest.raises(ValueError, match="--lose-writes needs --kill redis --appendfsync"):
        Drill(kill="redis", appendfsync="always", lose_writes=0.5)
    with pytest.raises(ValueError, match="--lose-writes must be > 0"):
        Drill(kill="redis", appendfsync="everysec", lose_writes=0)


def test_jobs_that_ended_inside_the_window_end_again() -> None:
    """Jobs that ran to the end after the AOF copy are back in RUN after the restart (their
    last events are lost); the exec workers report them again and they end once."""
    need_redis()
    target = OwnInstance(2, 4, "everysec")
    try:
        ids = [int(i) for i in Client(target.inst).submit(
            [{"jobspec": simulated_job("300ms")}] * 4, timeout=30)]
        until(target, "the jobs to start", lambda: all(
            "start" in names(log) for log in collect.read_eventlogs(target.inst, ids)
            .logs.values()))
        copy = target.snapshot_aof()
        until(target, "the jobs to end", lambda: all(
            names(log)[-1:] == ["clean"]
            for log in collect.read_eventlogs(target.inst, ids).logs.values()))
        inst = target.kill_redis_losing(copy)
        logs = collect.read_eventlogs(inst, ids).logs
        assert {names(log)[-1] for log in logs.values()} <= {"start", "alloc"}
        until(target, "the jobs to end again", lambda: all(
            names(log)[-1:] == ["clean"]
            for log in collect.read_eventlogs(target.inst, ids).logs.values()))
        logs = collect.read_eventlogs(target.inst, ids).logs
        _jobs, report = check_jobs(logs, dict.fromkeys(ids, JobResult.COMPLETED))
        assert report.ok, [str(v) for v in report.violations]
    finally:
        target.close()


def names(log: list[Event]) -> list[str]:
    return [e.event_name for e in log]


def until(target: OwnInstance, what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 60  # a hang guard, not a measurement
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        target.supervise()
        time.sleep(0.05)
