"""What an exec worker iteration writes, and when (pure)."""

from __future__ import annotations

import pytest

from fluxes.domain.exec.jobs import ExecJob
from fluxes.domain.exec.outbox import EMPTY, FLUSH, LINGER, FlushPolicy, Outbox


def test_an_empty_outbox_is_false_and_the_finished_list_alone_writes_nothing() -> None:
    box = Outbox()
    assert not box
    box.finished.append(ExecJob(1, 0, "done"))
    assert not box  # the files go after a write; there is nothing to write
    for fill in (lambda b: b.ack(0, b"1-0"), lambda b: b.lines(ExecJob(3, 0, "run")),
                 lambda b: b.dead_letters.append({"error": "x"}),
                 lambda b: b.registry.update({"0": b"{}"}),
                 lambda b: b.forget(ExecJob(2, 0, "done"))):
        other = Outbox()
        fill(other)
        assert other


@pytest.mark.parametrize(("job", "report", "urgent"), [
    (ExecJob(1, 0, "run", started=True), True, False),  # "started": may wait for company
    (ExecJob(1, 0, "sim", started=True), True, False),
    (ExecJob(1, 0, "done", released=True), True, True),
    (ExecJob(1, 0, "run", error="lost"), True, True),
    (ExecJob(1, 0, "done", released=True), False, False),  # a record alone: nobody waits
])
def test_urgent_when_the_job_manager_waits_on_it(job: ExecJob, report: bool,
                                                 urgent: bool) -> None:
    box = Outbox()
    box.touch(job, report=report)
    assert box.urgent() is urgent


def test_finished_jobs_are_urgent() -> None:
    box = Outbox()
    box.finished.append(ExecJob(1, 0, "done"))
    assert box.urgent()


def test_records_and_reports_are_kept_per_rank_and_job() -> None:
    box = Outbox()
    a, b, c = ExecJob(1, 0, "run"), ExecJob(2, 1, "run"), ExecJob(1, 1, "run")
    box.touch(a)
    box.touch(b, report=False)
    box.touch(c)
    box.touch(a)  # once, the latest state
    box.forget(ExecJob(9, 1, "done"))
    sets, dels = box.record_changes()
    assert sets == {0: {"1": a}, 1: {"2": b, "1": c}} and dels == {1: ["9"]}
    assert box.reports_by_partition(lambda jobid: jobid % 2) == {1: [a, c]}
    box.report(b)
    assert box.reports_by_partition(lambda jobid: jobid % 2) == {1: [a, c], 0: [b]}


def test_acks_and_lines_accumulate() -> None:
    box = Outbox()
    box.ack(0, b"1-0")
    box.ack(0, b"2-0")
    box.ack(3, b"1-1", [{"error": "refused"}])
    assert box.acks == {0: [b"1-0", b"2-0"], 3: [b"1-1"]}
    assert box.dead_letters == [{"error": "refused"}]  # written with the acknowledgement
    job = ExecJob(7, 0, "run", owner=5001)
    box.lines(job).append({"x": 1})
    box.lines(job).append({"x": 2})
    box.lines(ExecJob(7, 1, "run", owner=5001)).append({"x": 3})  # another rank, one stream
    # the output stream's key carries the owner: entries go by (owner, job)
    assert box.output == {(5001, 7): [{"x": 1}, {"x": 2}, {"x": 3}]}


def test_a_write_lingers_for_company_then_goes() -> None:
    policy = FlushPolicy(linger=0.005)
    box = Outbox()
    box.touch(ExecJob(1, 0, "sim", started=True))
    assert policy.decide(box, 10.0, False) == LINGER and policy.after == 10.005
    assert policy.decide(box, 10.004, False) == LINGER
    assert policy.decide(box, 10.005, False) == FLUSH  # due exactly at its time
    policy.flushed()
    assert policy.after is None


def test_urgent_or_stopping_writes_at_once() -> None:
    policy = FlushPolicy()
    box = Outbox()
    box.touch(ExecJob(1, 0, "run", started=True))
    assert policy.decide(box, 0.0, True) == FLUSH
    box.touch(ExecJob(2, 0, "done", released=True))
    assert policy.decide(box, 0.0, False) == FLUSH


def test_nothing_to_write_forgets_a_lingering_deadline() -> None:
    policy = FlushPolicy()
    box = Outbox()
    box.touch(ExecJob(1, 0, "sim", started=True))
    policy.decide(box, 0.0, False)
    assert policy.decide(Outbox(), 1.0, False) == EMPTY and policy.after is None
