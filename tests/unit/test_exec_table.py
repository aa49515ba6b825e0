"""The exec worker's job table (pure): kills and their escalation, simulated jobs, ends,
restored records, pruning."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from fluxes.domain.exec import records
from fluxes.domain.exec.jobs import LOST_ERROR, ExecJob, Stream, TaskProc
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.table import JobTable

GRACE = 5.0


def running(table: JobTable, jobid: int = 1, ntasks: int = 2) -> ExecJob:
    job = ExecJob(jobid, 0, "run", started=True)
    job.tasks = [TaskProc(t, 100 + t, True) for t in range(ntasks)]
    table.add(job)
    table.watch(job)
    return job


# ----------------------------------------------------------------------------- kill


def test_kill_of_an_unknown_job_answers_released_and_is_remembered() -> None:
    table, box = JobTable([0]), Outbox()
    assert table.kill(box, 0, 9, 15, 1.0, 1.0, GRACE) == []
    job = table.get(0, 9)
    assert job is not None and job.kind == "done" and job.released and not job.started
    assert box.reports[(0, 9)] is job and box.records[(0, 9)] is job
    assert table.knows(0, 9)  # a late start finds it and does not run it


def test_kill_escalation_order() -> None:
    """Signal at once; SIGKILL once, GRACE after the *first* kill; never re-armed."""
    table, box = JobTable([0]), Outbox()
    job = running(table)
    assert table.kill(box, 0, 1, 15, 100.0, 10.0, GRACE) == job.tasks
    assert table.timers.next_due() == 10.0 + GRACE
    assert (0, 1) in box.records and (0, 1) not in box.reports  # nothing to tell the JM yet
    assert table.kill(box, 0, 1, 2, 101.0, 11.0, GRACE) == job.tasks  # its signal goes out
    assert len(table.timers) == 1  # the deadline stays the first one's
    assert table.fire(box, 10.0 + GRACE - 0.001, 0.0) == []
    assert table.fire(box, 10.0 + GRACE, 0.0) == [job]
    assert job.escalated and job.kill_signal == 2
    assert table.fire(box, 100.0, 0.0) == []
    assert table.kill(box, 0, 1, 15, 102.0, 12.0, GRACE) == job.tasks
    assert not table.timers  # an escalated job is not armed again


def test_no_sigkill_for_a_job_that_ended_within_the_grace() -> None:
    table, box = JobTable([0]), Outbox()
    job = running(table)
    table.kill(box, 0, 1, 15, 0.0, 0.0, GRACE)
    for task in job.tasks:
        task.status = 15
    table.settle(box, job, True, 1.0)
    assert job.kind == "done"
    assert table.fire(box, GRACE, 0.0) == [] and not job.escalated


def test_kill_of_a_finished_job_reports_it_again() -> None:
    table, box = JobTable([0]), Outbox()
    job = table.add(table.done(ExecJob(3, 0, "run", started=True), 1.0, status=0))
    assert table.kill(box, 0, 3, 15, 2.0, 2.0, GRACE) == []
    assert box.reports == {(0, 3): job} and not box.records
    assert job.status == 0


def test_kill_of_a_simulated_job_ends_it_with_the_signal() -> None:
    table, box = JobTable([0]), Outbox()
    job = table.add(table.simulate(0, 4, 50.0, 5.0, 100.0))
    assert table.kill(box, 0, 4, 9, 51.0, 6.0, GRACE) == []
    assert (job.kind, job.status, job.released, job.started) == ("done", 9, True, True)
    assert table.fire(box, 105.0, 150.0) == [] and job.status == 9  # its end timer is moot


def test_signal_names_the_running_tasks_and_changes_nothing() -> None:
    table, box = JobTable([0]), Outbox()
    job = running(table, ntasks=3)
    job.tasks[1].status = 0
    assert [t.pid for t in table.signal(0, 1)] == [100, 102]
    assert (job.kind, job.kill_signal, job.status) == ("run", 0, None)
    assert table.timers.next_due() is None  # no escalation armed
    assert not box.reports and not box.records


def test_signal_leaves_jobs_not_running_here_alone() -> None:
    table = JobTable([0])
    assert table.signal(0, 9) == []
    assert not table.knows(0, 9)  # unlike a kill, nothing remembered
    table.add(table.simulate(0, 4, 50.0, 5.0, 100.0))
    assert table.signal(0, 4) == []
    done = running(table, jobid=5)
    table.done(done, 1.0, status=0)
    assert table.signal(0, 5) == []


# ----------------------------------------------------------------------------- simulated


def test_a_simulated_job_ends_with_status_zero_at_its_time() -> None:
    finished: list[int] = []
    table = JobTable([0], on_finish=lambda: finished.append(1))
    box = Outbox()
    job = table.add(table.simulate(0, 5, 1000.0, 10.0, 0.5))
    assert job.started and job.deadline == 1000.5 and job.kind == "sim"
    table.fire(box, 10.49, 1000.49)
    assert job.kind == "sim"
    table.fire(box, 10.5, 1000.5)
    assert (job.kind, job.status, job.done_time) == ("done", 0, 1000.5)
    assert box.reports[(0, 5)] is job and finished == [1]


def test_a_simulated_job_that_runs_forever_has_no_timer() -> None:
    table = JobTable([0])
    table.simulate(0, 6, 0.0, 0.0, math.inf)
    assert not table.timers


# ----------------------------------------------------------------------------- ends


def test_a_job_ends_when_all_tasks_ended_and_all_output_is_forwarded() -> None:
    table, box = JobTable([0]), Outbox()
    job = running(table)
    job.tasks[0].status = 0
    table.settle(box, job, True, 1.0)
    assert job.kind == "run" and (0, 1) in box.records and (0, 1) not in box.reports
    job.tasks[1].status = 3 << 8
    stream = Stream("stdout", "/x", None)
    job.tasks[1].streams.append(stream)
    table.settle(box, job, False, 2.0)
    assert job.kind == "run"  # output still to forward
    stream.done = True
    table.settle(box, job, False, 3.0)
    assert (job.kind, job.status, job.done_time) == ("done", 3 << 8, 3.0)
    assert box.finished == [job] and box.reports[(0, 1)] is job
    assert box.output[(-1, 1)] == [{"eof": "1", "rank": "0", "tasks": "0-1"}]
    assert (0, 1) not in table.live


def test_a_lost_task_counts_as_ended() -> None:
    table, box = JobTable([0]), Outbox()
    job = running(table, ntasks=1)
    job.tasks[0].lost = True
    table.settle(box, job, True, 1.0)
    assert job.kind == "done" and job.status is None


def test_nothing_changed_writes_nothing() -> None:
    table, box = JobTable([0]), Outbox()
    job = running(table)
    table.settle(box, job, False, 1.0)
    assert not box


def test_done_keeps_the_first_error_and_counts_once() -> None:
    finished: list[int] = []
    table = JobTable([0], on_finish=lambda: finished.append(1))
    job = running(table)
    job.error = "first"
    table.done(job, 1.0, error="second")
    table.done(job, 2.0, status=9)
    assert (job.error, job.status, job.done_time, finished) == ("first", None, 1.0, [1])


def test_fail_gives_the_error_and_the_end_marker() -> None:
    table, box = JobTable([0]), Outbox()
    job = table.fail(box, ExecJob(8, 0, "run", started=True), 1.0, "cannot execute", 127 << 8)
    assert (job.kind, job.error, job.status) == ("done", "cannot execute", 127 << 8)
    assert box.output[(-1, 8)] == [{"eof": "1", "rank": "0", "tasks": ""}]


# ----------------------------------------------------------------------------- restore


def record(**rec: Any) -> bytes:
    return orjson.dumps(rec)


def test_restore_all_carries_on_every_kind_and_reports_each() -> None:
    table, box = JobTable([0, 1]), Outbox()
    adopted: list[tuple[int, records.Offsets]] = []
    recs = {
        0: {b"1": record(k="done", s=True, st=0, e=None, dt=900.0),
            b"2": record(k="sim", d=1002.0),
            b"3": record(k="run", s=True, t=[[0, 123, 10, 0, None, False, None]], fw="oe",
                         ks=15, kt=998.0, x=False)},
        1: {b"4": b"not json"},
    }
    bad = table.restore_all(box, recs, 1000.0, 50.0, GRACE,
                            lambda job, offsets: adopted.append((job.id, offsets)))
    assert bad == [(1, 4)]
    assert set(box.reports) == {(0, 1), (0, 2), (0, 3), (1, 4)}
    lost = table.get(1, 4)
    assert lost is not None and lost.error == LOST_ERROR and lost.released
    assert adopted == [(3, {0: (10, 0)})]
    assert (0, 3) in table.live
    # the simulated end and the escalation keep their recorded wall-clock deadlines
    assert table.timers.due(51.999) == []
    assert table.timers.due(52.0) == [("sim", 0, 2)]
    assert table.timers.due(53.0) == [("escalate", 0, 3)]  # killed at 998 + 5 s grace
    assert table.prune_candidates(900.0) == [table.get(0, 1)]


# ----------------------------------------------------------------------------- prune


def test_prune_forgets_jobs_the_job_manager_is_done_with() -> None:
    table, box = JobTable([0]), Outbox()
    a = table.add(table.done(ExecJob(1, 0, "run"), 10.0))
    b = table.add(table.done(ExecJob(2, 0, "run"), 20.0))
    assert table.prune_candidates(15.0) == [a]
    assert table.prune_candidates(25.0) == [b]  # a was taken already
    table.prune(box, [a, b], [True, False], 30.0)
    assert not table.knows(0, 1) and table.knows(0, 2)
    assert box.records == {(0, 1): None}
    assert table.prune_candidates(29.0) == [] and table.prune_candidates(30.0) == [b]


def test_prune_skips_jobs_that_are_no_longer_done() -> None:
    table = JobTable([0])
    job = table.add(table.done(ExecJob(1, 0, "run"), 10.0))
    table.jobs[0][1] = ExecJob(1, 0, "sim")  # replaced since (a start after a prune)
    assert table.prune_candidates(100.0) == []
    assert job.kind == "done"


@pytest.mark.parametrize("n", [0, 1, 3])
def test_running_counts_per_rank(n: int) -> None:
    table = JobTable([0, 1])
    for i in range(n):
        running(table, jobid=i + 1)
    assert table.running() == ({0: n} if n else {})
    assert table.done_ids(0) == set()
