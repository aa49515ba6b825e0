"""The checks every simulated run ends with: each one fails when its invariant breaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.sched.planner import PassPlanner
from fluxes.domain.sched.request import Request
from fluxes.sim.invariants import Checked, Ran, ReservationCheck, check_schedule
from fluxes.sim.run import load_swf, simulate
from fluxes.sim.synth import synthetic_swf
from fluxes.sim.workload import Machine

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"
MACHINE = Machine.uniform(2, 4)  # ranks 0 and 1, cores 0-3 each


def _ran(jobid: int, start: float | None, end: float | None, masks: dict[int, int] | None,
         submit: float = 0.0, ended: bool = True) -> Ran:
    ncores = sum(bin(m).count("1") for m in (masks or {}).values())
    return Ran(jobid, submit, start, end, masks, ncores, ended)


def test_a_clean_schedule_passes_back_to_back_jobs_included() -> None:
    runs = [_ran(1, 0, 10, {0: 0b0011}), _ran(2, 10, 20, {0: 0b0011}),
            _ran(3, 0, 20, {0: 0b1100, 1: 0b1111}), _ran(4, None, None, None)]
    assert check_schedule(runs, MACHINE).ok


@pytest.mark.parametrize(("runs", "broken"), [
    ([_ran(1, 0, 10, {0: 0b0011}), _ran(2, 5, 20, {0: 0b0010})],
     "no core used by two jobs at once"),
    ([_ran(1, 5, 10, {0: 1}, submit=6)], "no start before submit"),
    ([_ran(1, 0, 10, {0: 0b10000})], "capacity never exceeded"),
    ([_ran(1, 0, 10, {2: 1})], "capacity never exceeded"),
    ([_ran(1, 0, None, {0: 1})], "every job ends"),
    ([_ran(1, None, None, None, ended=False)], "every job ends"),
])
def test_each_invariant_catches_its_violation(runs: list[Ran], broken: str) -> None:
    checked = check_schedule(runs, MACHINE)
    assert not checked.ok
    assert broken in checked.violations
    assert any(e.startswith(broken) for e in checked.examples)


def test_capacity_counts_cores_in_use() -> None:
    # the masks are consistent but the cores in use exceed the machine's count: a
    # Ran that lies about its size shows the count is checked on its own
    liar = Ran(1, 0.0, 0.0, 10.0, {0: 1}, 9, True)
    assert "capacity never exceeded" in check_schedule([liar], MACHINE).violations


def test_leftovers_mean_a_job_never_ended() -> None:
    checked = check_schedule([], MACHINE, leftovers=[7])
    assert checked.violations == {"every job ends": 1}


def _key(prio: int, t: float, jobid: int) -> tuple[int, float, int]:
    return (-prio, t, jobid)


def test_reservation_kept_broken_and_yielded() -> None:
    checked = Checked()
    check = ReservationCheck(checked)
    check.queued(1, _key(16, 0, 1), "easy")
    check.queued(2, _key(16, 1, 2), "easy")
    check.observe(10, {1: 100.0}, [])
    check.observe(20, {1: 100.0}, [])
    check.observe(100, {}, [1])  # started at its reservation: kept
    assert checked.reservations == {"kept": 1, "yielded": 0, "broken": 0}
    check.observe(100, {2: 150.0}, [])
    check.observe(110, {2: 160.0}, [])  # moved later with nothing ahead of it: broken
    assert checked.violations == {
        "easy: the first blocked job never starts later than its reservation": 1}
    # a higher-priority job arrives: the next move is yielded, not broken
    check.queued(3, _key(20, 111, 3), "easy")
    check.observe(112, {3: 160.0, 2: 170.0}, [])
    check.observe(160, {}, [3])  # kept
    assert checked.reservations == {"kept": 2, "yielded": 1, "broken": 1}


def test_reservation_yields_to_a_job_ahead_that_moved_earlier() -> None:
    checked = Checked()
    check = ReservationCheck(checked)
    check.queued(1, _key(16, 0, 1), "conservative")
    check.queued(2, _key(16, 1, 2), "conservative")
    check.observe(10, {1: 100.0, 2: 200.0}, [])
    check.observe(20, {1: 50.0, 2: 210.0}, [])  # 1 moved earlier (an early end): yielded
    assert checked.ok and checked.reservations["yielded"] == 1
    check.observe(30, {1: 50.0, 2: 220.0}, [])  # nothing ahead moved this time: broken
    assert checked.violations == {"conservative: no reservation is delayed": 1}


def test_a_scheduler_that_breaks_its_reservations_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A planner that publishes reservations without holding them lets backfill delay
    the first blocked job: the run's own check says so."""
    def reserve(self: PassPlanner, request: Request, jobid: int, placement: str) -> Any:
        when = self.estimate(request, jobid)
        if when is not None:
            self.reserved[jobid] = when  # announced, never held in the pool
        return when

    monkeypatch.setattr(PassPlanner, "reserve", reserve)
    with open(CASES / "tiny.swf", encoding="utf-8") as f:
        workload = load_swf(f)
    outcome = simulate(workload, Machine.uniform(1, 4), InstanceConfig(), {"policy": "easy"},
                       label="easy")
    assert not outcome.checked.ok
    assert outcome.checked.reservations["broken"] >= 1


@pytest.mark.parametrize(("nodes", "cores", "whole"), [(1, 64, False), (8, 8, False),
                                                       (16, 4, True)])
def test_synthetic_traces_keep_every_invariant(nodes: int, cores: int, whole: bool) -> None:
    text = synthetic_swf(250, nodes if whole else nodes * cores, seed=nodes, load=0.9)
    workload = load_swf(text.splitlines(), whole_nodes=whole)
    for policy in ("fcfs", "easy", "conservative"):
        outcome = simulate(workload, Machine.uniform(nodes, cores), InstanceConfig(),
                           {"policy": policy}, label=policy)
        assert outcome.checked.ok, outcome.checked.to_dict()
        assert len(outcome.runs) == 250
        if policy == "easy":
            assert outcome.checked.reservations["yielded"] == 0  # one queue, fixed order


def test_a_job_whose_start_and_end_share_a_timestamp_holds_its_cores_for_no_time() -> None:
    # fluxes run true in a real history: start and finish stamped alike, and the next
    # job on the same core at that very instant
    runs = [_ran(1, 5, 5, {0: 0b0001, 1: 0b0001}), _ran(2, 5, 10, {0: 0b0001}),
            _ran(3, 10, 10, {0: 0b0001}), _ran(4, 10, 10, {0: 0b0001})]
    assert check_schedule(runs, MACHINE).to_dict()["ok"]
    # ... but not on cores another job holds across that instant
    overlap = check_schedule([_ran(1, 0, 10, {0: 0b0011}), _ran(2, 5, 5, {0: 0b0010})],
                             MACHINE)
    assert overlap.violations == {"no core used by two jobs at once": 1}
