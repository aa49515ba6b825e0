"""The record of a job on a rank (pure): written, read back, refused when unreadable."""

from __future__ import annotations

import orjson
import pytest

from fluxes.domain.exec.jobs import ExecJob, Stream, TaskProc
from fluxes.domain.exec.records import decode, encode


def test_a_running_job_round_trips_with_its_offsets() -> None:
    job = ExecJob(7, 1, "run", started=True, forward="oe", kill_signal=15, kill_time=12.5,
                  escalated=True, forwarded=300, truncated=True, error="oops")
    a, b = TaskProc(0, 111, True), TaskProc(1, 112, True, status=256)
    a.streams = [Stream("stdout", "/o", None, 40), Stream("stderr", "/e", None, 7)]
    b.code, b.lost = 1, False
    c = TaskProc(2, 113, False)
    c.lost = True
    job.tasks = [a, b, c]
    back, offsets = decode(1, 7, encode(job), now=99.0)
    assert (back.id, back.rank, back.kind, back.started, back.forward) == (7, 1, "run", True, "oe")
    assert (back.kill_signal, back.kill_time, back.escalated) == (15, 12.5, True)
    assert (back.forwarded, back.truncated, back.error) == (300, True, "oops")
    assert [(t.rank, t.pid, t.status, t.code, t.lost, t.own) for t in back.tasks] == [
        (0, 111, None, None, False, False), (1, 112, 256, 1, False, False),
        (2, 113, None, None, True, False)]  # whose child a task is, adoption finds out
    assert offsets == {0: (40, 7), 1: (0, 0), 2: (0, 0)}


def test_a_running_job_keeps_its_owner_and_whose_tasks_they_are() -> None:
    job = ExecJob(7, 1, "run", started=True, owner=5001, as_user=True)
    back, _offsets = decode(1, 7, encode(job), now=1.0)
    assert (back.owner, back.as_user) == (5001, True)
    # a record of an older worker: the owner is unknown (the worker looks it up)
    old = orjson.dumps({"k": "run", "s": True, "t": [], "fw": "o"})
    back, _offsets = decode(1, 7, old, now=1.0)
    assert (back.owner, back.as_user) == (-1, False)


def test_only_forwarded_streams_have_offsets() -> None:
    job = ExecJob(1, 0, "run", started=True, forward="e")
    task = TaskProc(0, 5, True)
    task.streams = [Stream("stderr", "/e", None, 9)]
    job.tasks = [task]
    assert orjson.loads(encode(job))["t"] == [[0, 5, 0, 9, None, False, None]]


def test_a_simulated_job_keeps_its_end() -> None:
    back, offsets = decode(0, 3, encode(ExecJob(3, 0, "sim", started=True, deadline=55.25)),
                           1.0)
    assert (back.kind, back.started, back.deadline, offsets) == ("sim", True, 55.25, {})


def test_a_finished_job_keeps_its_answer() -> None:
    job = ExecJob(4, 2, "done", started=True, status=9, released=True, error=None,
                  done_time=77.0)
    back, _ = decode(2, 4, encode(job), 1.0)
    assert (back.kind, back.started, back.status, back.released, back.done_time) == (
        "done", True, 9, True, 77.0)
    old, _ = decode(2, 4, orjson.dumps({"k": "done", "s": False, "st": None, "e": "x"}), 5.0)
    assert old.done_time == 5.0 and old.error == "x" and old.released


def test_a_record_of_another_kind_is_a_running_job() -> None:
    back, _ = decode(0, 1, b'{"k": "future", "s": true}', 1.0)
    assert back.kind == "run" and back.started and back.tasks == []


@pytest.mark.parametrize("raw", [
    b"not json", b"[]", b"{}", b'{"k": "sim"}', b'{"k": "sim", "d": "soon"}',
    b'{"k": "run", "t": [[0, 1, 2]]}', b'{"k": "run", "t": [[0, "pid", 0, 0, null, false, null]]}',
    b'{"k": "run", "ks": "TERM"}', b'{"k": "done", "dt": "yesterday"}', b"null",
])
def test_unreadable_records_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError, match="unreadable exec record of job 9 on rank 1"):
        decode(1, 9, raw, 0.0)
