"""Starts that wait for their cores (docs/exec.md, "Starts that wait for their cores"):
a start whose cores a job running on the rank still holds starts once that job ends,
with a real exec worker: simulated and real jobs, a kill of the waiting job, a worker
SIGKILLed while a start waits."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from fluxes import messages as proto
from fluxes.store.keys import GROUP_EXEC
from tests import wire
from tests.system.test_exec_worker import KEYS, Harness, cmd, harness, sim

pytestmark = [pytest.mark.system, pytest.mark.redis]
__all__ = ["harness"]  # the fixture, used by name

STREAM = KEYS.exec_rank(0)


def _until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _entries(harness: Harness) -> list[list[dict[str, Any]]]:
    """The report entries of partition 0, each as its list of messages (one write's)."""
    return [wire.full(proto.EXEC_EVENTS, fields)
            for _id, fields in harness.client.xrange(KEYS.exec_events(0))]


def _first(entries: list[list[dict[str, Any]]], jobid: int,
           pred: Callable[[dict[str, Any]], bool]) -> int:
    """The index of the first entry with a report of ``jobid`` that ``pred`` accepts."""
    for i, msgs in enumerate(entries):
        if any(m["id"] == jobid and pred(m) for m in msgs):
            return i
    raise AssertionError(f"no such report of job {jobid} in {entries}")


def _pending(harness: Harness) -> int:
    return int(harness.client.xpending(STREAM, GROUP_EXEC)["pending"])


def _started(m: dict[str, Any]) -> bool:
    return bool(m["started"])


def _released(m: dict[str, Any]) -> bool:
    return bool(m["released"])


def test_a_start_on_busy_cores_starts_with_the_report_of_their_end(harness: Harness) -> None:
    worker = harness.worker()
    harness.job(1, sim("1s"), ranks={0: "0"})
    harness.job(2, sim("10ms"), ranks={0: "0-1"})
    harness.job(3, sim("10ms"), ranks={0: "2"})  # other cores: not held up
    harness.start(1)
    harness.wait(1, _started)
    harness.start(2)
    _until("job 2 waits", lambda: worker.table.cores.waiting(0, 2))
    harness.start(3)
    assert harness.final(3)["status"] == 0
    assert worker.table.cores.waiting(0, 2)
    assert not any(m["id"] == 2 for msgs in _entries(harness) for m in msgs)
    assert _pending(harness) == 1  # the waiting start's entry, and it alone
    assert harness.final(2)["status"] == 0
    entries = _entries(harness)
    end_of_1 = _first(entries, 1, _released)
    assert _first(entries, 2, _started) == end_of_1  # one write: the end and the start
    assert any(m["id"] == 2 and m["started"] and not m["released"]
               for m in entries[end_of_1])
    _until("every entry acknowledged", lambda: _pending(harness) == 0)
    assert worker.status()["waiting"] == 0


def test_waiting_starts_start_in_arrival_order(harness: Harness) -> None:
    worker = harness.worker()
    harness.job(1, sim("300ms"), ranks={0: "0"})
    harness.job(2, sim("300ms"), ranks={0: "0-1"})
    harness.job(3, sim("10ms"), ranks={0: "1"})  # core 1 is free, but job 2 wants it first
    harness.start(1)
    harness.wait(1, _started)
    harness.start(2)
    harness.start(3)
    _until("jobs 2 and 3 wait", lambda: worker.status()["waiting"] == 2)
    harness.final(3)
    entries = _entries(harness)
    assert _first(entries, 2, _started) == _first(entries, 1, _released)
    assert _first(entries, 3, _started) == _first(entries, 2, _released)


def _second_waits(harness: Harness, first: str) -> None:
    """Job 1 (simulated ``first``) runs on core 0 of rank 0; job 2's start waits behind it."""
    worker = harness.worker()
    harness.job(1, sim(first), ranks={0: "0"})
    harness.job(2, sim("10ms"), ranks={0: "0"})
    harness.start(1)
    harness.wait(1, _started)
    harness.start(2)
    _until("job 2 waits", lambda: worker.table.cores.waiting(0, 2))


def test_a_killed_waiting_start_never_starts(harness: Harness) -> None:
    _second_waits(harness, "100s")
    harness.kill(2, signal.SIGTERM)
    final = harness.final(2)
    # what a job killed before its tasks started gets: released, never started
    assert final == {"t": "exec", "id": 2, "rank": 0, "started": False, "status": None,
                     "released": True, "error": None}
    _until("its start's entry acknowledged with the kill's", lambda: _pending(harness) == 0)
    harness.kill(1, signal.SIGTERM)
    assert harness.final(1)["status"] == signal.SIGTERM
    harness.start(2)  # a late start again: remembered as killed, not run
    harness.job(3, sim("0s"), ranks={0: "0"})
    harness.start(3)
    harness.final(3)
    assert not any(m["id"] == 2 and m["started"] for msgs in _entries(harness) for m in msgs)


def test_a_signal_to_a_waiting_job_is_nothing_to_send(harness: Harness) -> None:
    _second_waits(harness, "300ms")
    harness.client.xadd(STREAM, wire.entry([{"t": "signal", "id": 2, "signal": 10}]))
    assert harness.final(2)["status"] == 0  # it runs on when its cores free


def test_a_start_waiting_when_the_worker_is_killed_waits_again_after(
        harness: Harness) -> None:
    proc = harness.subprocess_worker()
    harness.job(1, sim("2s"), ranks={0: "0"})
    harness.job(2, sim("10ms"), ranks={0: "0"})
    harness.start(1)
    harness.wait(1, _started)
    _until("job 1's start acknowledged", lambda: _pending(harness) == 0)
    harness.start(2)
    # delivered and held: the worker read it (it waits behind job 1)
    _until("job 2's start delivered", lambda: _pending(harness) == 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    worker = harness.worker()
    _until("job 2 waits again", lambda: worker.table.cores.waiting(0, 2))
    assert harness.final(2)["status"] == 0
    entries = _entries(harness)
    assert _first(entries, 2, _started) == _first(entries, 1, _released)
    runs = [m for msgs in entries for m in msgs if m["id"] == 2 and m["started"]
            and not m["released"]]
    assert len(runs) == 1, "started once"
    _until("every entry acknowledged", lambda: _pending(harness) == 0)


def test_real_jobs_wait_the_same_way(harness: Harness) -> None:
    worker = harness.worker()
    harness.job(1, cmd("sh", "-c", "sleep 0.5; echo first"), ranks={0: "0"})
    harness.job(2, cmd("echo", "second"), ranks={0: "0"})
    harness.start(1)
    harness.wait(1, _started)
    harness.start(2)
    _until("job 2 waits", lambda: worker.table.cores.waiting(0, 2))
    assert harness.final(2)["status"] == 0
    assert harness.lines(2) == [("0", "stdout", "second\n")]
    entries = _entries(harness)
    assert _first(entries, 2, _started) >= _first(entries, 1, _released)
    _until("every entry acknowledged", lambda: _pending(harness) == 0)
