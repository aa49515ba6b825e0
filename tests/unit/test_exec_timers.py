"""The exec worker's clock (pure): timers, kill escalation rules, how long the loop waits."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes.domain.exec.jobs import ExecJob
from fluxes.domain.exec.timers import (
    ESCALATE,
    FINISH,
    SIGKILL,
    SIM,
    Timers,
    action,
    escalate,
    escalation_at,
    request_kill,
    sim_at,
    wait_ms,
)


def run(jobid: int = 1, **kw: Any) -> ExecJob:
    return ExecJob(jobid, 0, "run", started=True, **kw)


def test_timers_fire_in_time_order_and_ties_in_arming_order() -> None:
    timers = Timers()
    a, b, c = run(1), run(2), run(3)
    timers.arm(5.0, SIM, a)
    timers.arm(2.0, ESCALATE, b)
    timers.arm(2.0, SIM, c)
    assert timers.next_due() == 2.0 and len(timers) == 3
    assert timers.due(1.999) == []
    assert timers.due(2.0) == [(ESCALATE, 0, 2), (SIM, 0, 3)]  # due exactly at their time
    assert timers.due(10.0) == [(SIM, 0, 1)]
    assert not timers and timers.next_due() is None


@pytest.mark.parametrize(("kind", "job_kind", "escalated", "expect"), [
    (SIM, "sim", False, FINISH),
    (SIM, "done", False, None),  # killed before its end
    (SIM, "run", False, None),
    (ESCALATE, "run", False, SIGKILL),
    (ESCALATE, "run", True, None),  # already escalated (a restored second timer)
    (ESCALATE, "done", False, None),  # its tasks ended within the grace
    (ESCALATE, "sim", False, None),
])
def test_what_a_due_timer_does(kind: str, job_kind: str, escalated: bool,
                               expect: str | None) -> None:
    job = ExecJob(1, 0, job_kind, escalated=escalated)
    assert action(kind, job) == expect


def test_the_first_kill_arms_the_escalation_and_a_second_does_not() -> None:
    job = run()
    assert request_kill(job, 15, 100.0) is True
    assert (job.kill_signal, job.kill_time) == (15, 100.0)
    assert request_kill(job, 2, 101.0) is False  # its signal goes out; the deadline stays
    assert (job.kill_signal, job.kill_time) == (2, 101.0)


def test_an_escalated_job_gets_no_new_escalation() -> None:
    job = run(escalated=True)  # e.g. its spawn failed and it was SIGKILLed at once
    assert request_kill(job, 15, 1.0) is False


def test_escalation_happens_once() -> None:
    job = run()
    request_kill(job, 15, 0.0)
    assert escalate(job) is True and job.escalated
    assert escalate(job) is False
    assert escalate(ExecJob(2, 0, "done")) is False


def test_a_restored_escalation_keeps_its_deadline() -> None:
    job = run(kill_signal=15, kill_time=1000.0)
    # killed at wall 1000 with a 5 s grace; restored at wall 1003, monotonic 50
    assert escalation_at(job, 5.0, 1003.0, 50.0) == pytest.approx(52.0)
    assert escalation_at(job, 5.0, 1010.0, 50.0) == pytest.approx(45.0)  # overdue: fires now
    assert escalation_at(run(), 5.0, 1003.0, 50.0) is None  # never killed
    assert escalation_at(run(kill_signal=15, escalated=True), 5.0, 1003.0, 50.0) is None


def test_a_restored_simulated_job_ends_at_its_recorded_time() -> None:
    job = ExecJob(1, 0, "sim", started=True, deadline=2000.5)
    assert sim_at(job, 2000.0, 10.0) == pytest.approx(10.5)


def wait(now: float, timers: Timers | None = None, *, busy: bool = False,
         running: bool = False, flush_after: float | None = None) -> float | None:
    """wait_ms with the registry due at 10, the prune at 20, the output look at 1."""
    return wait_ms(now, busy=busy, next_registry=10.0, next_prune=20.0,
                   timers=timers or Timers(), running=running, next_output=1.0,
                   flush_after=flush_after)


def test_wait_is_none_while_requests_may_wait() -> None:
    assert wait(0.0, busy=True) is None


def test_wait_until_the_earliest_thing_due() -> None:
    timers = Timers()
    assert wait(9.0, timers) == pytest.approx(1000.0)  # the registry heartbeat
    timers.arm(9.25, SIM, run())
    assert wait(9.0, timers) == pytest.approx(250.0)
    assert wait(9.0, timers, flush_after=9.005) == pytest.approx(5.0)
    # output files are read now and then, only while tasks run
    assert wait(0.5, running=True) == pytest.approx(500.0)
    assert wait(0.5) == pytest.approx(9500.0)


def test_wait_is_never_negative() -> None:
    timers = Timers()
    timers.arm(1.0, SIM, run())
    assert wait(5.0, timers) == 0.0
