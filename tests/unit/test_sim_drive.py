"""The simulator's driver of the real cores: hand-computed schedules, and its coupling.

The SWF files of tests/cases/swf/ say in their headers what each job is for;
the expected start times below are worked out by hand from the policies'
definitions (docs/scheduling-policies.md).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.sched.policy import QueuePolicy
from fluxes.sim import drive
from fluxes.sim.engine import Outcome, Simulation
from fluxes.sim.run import Workload, load_journal, load_swf, simulate
from fluxes.sim.workload import Machine, SimJob, machine_for_trace

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"
T0 = 1_700_000_000


def _workload(name: str, whole_nodes: bool = False,
              queue_map: dict[int, str] | None = None) -> Workload:
    with open(CASES / name, encoding="utf-8") as f:
        return load_swf(f, queue_map, whole_nodes)


def _run(name: str, policy: str | None, config: InstanceConfig | None = None,
         whole_nodes: bool = False, annotations: bool = False,
         queue_map: dict[int, str] | None = None, **more: Any) -> Outcome:
    workload = _workload(name, whole_nodes, queue_map)
    assert workload.trace is not None
    machine = machine_for_trace(workload.trace, None, None, whole_nodes)
    overrides = {"policy": policy, **more}
    outcome = simulate(workload, machine, config or InstanceConfig(), overrides,
                       label=str(policy), annotations=annotations)
    assert outcome.checked.ok, outcome.checked.to_dict()
    return outcome


def _starts(outcome: Outcome, base: float = T0) -> dict[int, float | None]:
    return {r.job.id: None if r.start is None else r.start - base for r in outcome.runs}


@pytest.mark.parametrize(("policy", "starts"), [
    # fcfs: job 2 (4 cores) blocks the queue until job 1 ends; 3 and 4 follow it at 200,
    # 5 when 3 ends
    ("fcfs", {1: 0, 2: 100, 3: 200, 4: 200, 5: 250}),
    # easy: 2 is reserved at 100; 3 (50 s on the 2 free cores) ends before it and
    # backfills at 20; 4 (200 s) and 5 (60 s, from 70) would run into it: they wait
    ("easy", {1: 0, 2: 100, 3: 20, 4: 200, 5: 200}),
    # conservative: the same here (4 and 5 are reserved behind 2)
    ("conservative", {1: 0, 2: 100, 3: 20, 4: 200, 5: 200}),
])
def test_tiny_trace_by_hand(policy: str, starts: dict[int, float]) -> None:
    outcome = _run("tiny.swf", policy)
    assert _starts(outcome) == starts
    assert all(r.result == "COMPLETED" for r in outcome.runs)


@pytest.mark.parametrize(("policy", "starts"), [
    ("fcfs", {1: 0, 2: 100, 3: 110, 4: 120}),
    # job 4 takes the one core job 2's reservation leaves free, and job 3 (all 6
    # cores) waits until it ends: easy promises nothing to the second blocked job
    ("easy", {1: 0, 2: 100, 3: 1003, 4: 3}),
    # conservative reserves job 3 too: job 4 may not run into it
    ("conservative", {1: 0, 2: 100, 3: 110, 4: 120}),
])
def test_easy_and_conservative_differ_by_hand(policy: str, starts: dict[int, float]) -> None:
    outcome = _run("conservative.swf", policy)
    assert _starts(outcome) == starts
    kept = outcome.checked.reservations["kept"]
    assert kept >= (0 if policy == "fcfs" else 1)


def test_how_jobs_end() -> None:
    outcome = _run("ends.swf", "easy")
    got = {r.job.id: (r.start - T0 if r.start is not None else None,
                      r.end - T0 if r.end is not None else None, r.result)
           for r in outcome.runs}
    assert got == {1: (0, 60, "TIMEOUT"),  # killed at its request
                   2: (0, 20, "FAILED"),
                   3: (0, 30, "CANCELED"),  # canceled by its user after 30 s
                   4: (0, 60, "COMPLETED"),  # done exactly at its limit: not a timeout
                   5: (70, 80, "COMPLETED")}


@pytest.mark.parametrize(("policy", "starts"), [
    ("fcfs", {1: 0, 2: 100, 3: 200}),
    ("easy", {1: 0, 2: 100, 3: 0}),  # 3 ends by 100, when 2's reservation begins
])
def test_whole_nodes(policy: str, starts: dict[int, float]) -> None:
    outcome = _run("nodes.swf", policy, whole_nodes=True)
    assert _starts(outcome) == starts
    for run in outcome.runs:
        assert run.masks is not None
        assert all(mask == 0xFF for mask in run.masks.values())  # every core of each node
        assert len(run.masks) == run.job.size
    # as processors the same trace fits at once
    assert set(_starts(_run("nodes.swf", policy)).values()) == {0}


def test_processors_anywhere_ignore_node_boundaries() -> None:
    """P one-core tasks placed anywhere: the same schedule on one node or several (why a
    trace given in processors runs on one node)."""
    from fluxes.sim.synth import synthetic_swf

    workload = load_swf(synthetic_swf(200, 64, seed=4, load=0.9).splitlines())
    schedules = []
    for nodes, cores in ((1, 64), (8, 8), (16, 4)):
        outcome = simulate(workload, Machine.uniform(nodes, cores), InstanceConfig(),
                           {"policy": "easy"}, label="easy")
        schedules.append({r.job.id: (r.start, r.end) for r in outcome.runs})
    assert schedules[0] == schedules[1] == schedules[2]


def test_refusals_are_the_ingests() -> None:
    config = InstanceConfig.from_toml('[policy.limits]\nduration = "2m"\n')
    outcome = _run("tiny.swf", "easy", config)
    assert [r.job.id for r in outcome.runs] == [1, 2, 3, 5]
    assert outcome.refused == {"job duration 3.33333m exceeds the limit of 2m": 1}
    big = _run("messy.swf", "easy")
    assert big.refused == {"job requests 16 cores, only 8 exist": 1}


def test_queues_with_their_own_policies() -> None:
    config = InstanceConfig.from_toml(
        '[queues.batch]\n[queues.debug]\n[policy.jobspec.defaults.system]\nqueue = "batch"\n'
        '[queues.batch.policy.scheduler]\npolicy = "fcfs"\n'
        '[queues.debug.policy.scheduler]\npolicy = "easy"\n')
    outcome = _run("tiny.swf", None, config, queue_map={1: "batch"})
    assert {r.queue for r in outcome.runs} == {"batch"}
    assert _starts(outcome) == {1: 0, 2: 100, 3: 200, 4: 200, 5: 250}  # batch is fcfs
    assert outcome.policies["batch"].startswith("fcfs")
    assert outcome.policies["debug"].startswith("easy")
    outcome = _run("tiny.swf", None, config, queue_map={1: "debug"})
    assert _starts(outcome) == {1: 0, 2: 100, 3: 20, 4: 200, 5: 200}  # debug backfills


def test_single_mode_and_placements_keep_the_invariants() -> None:
    # RFC 27 single mode: one alloc request at a time, so the blocked job 2 holds the
    # others back at the job manager and nothing can backfill: fcfs's schedule
    config = InstanceConfig.from_toml('[sched]\nmode = "single"\n')
    assert _starts(_run("tiny.swf", "easy", config)) == \
        {1: 0, 2: 100, 3: 200, 4: 200, 5: 250}
    for placement in ("best-fit", "worst-fit", "hinode"):
        _run("conservative.swf", "conservative", placement=placement)


def _short_trace(jobs: int, seed: int) -> str:
    """Short jobs on 16 cores (the timers' passes cost one per 5 virtual seconds)."""
    rng = random.Random(seed)
    lines = ["; MaxProcs: 16"]
    t = 0
    for n in range(1, jobs + 1):
        t += rng.randint(0, 20)
        run = rng.randint(1, 120)
        lines.append(f"{n} {t} -1 {run} -1 -1 -1 {rng.choice([1, 1, 2, 4, 8, 16])} "
                     f"{run + rng.randint(0, 60)} -1 1 {rng.randint(1, 4)} 1 -1 1 -1 -1 -1")
    return "\n".join(lines)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_timer_passes_change_no_start(policy: str) -> None:
    """The worker's full passes and replans (modelled with annotations) start what the
    quick passes alone start: only annotations differ."""
    workload = load_swf(_short_trace(150, seed=7).splitlines())
    machine = Machine.uniform(1, 16)
    runs = [simulate(workload, machine, InstanceConfig(), {"policy": policy},
                     label=policy, annotations=flag) for flag in (False, True)]
    quick, timed = ({r.job.id: (r.start, r.end) for r in o.runs} for o in runs)
    assert quick == timed
    assert runs[1].passes > runs[0].passes  # the timers did run passes
    assert runs[0].checked.ok and runs[1].checked.ok


def test_dependencies_from_a_history() -> None:
    """A journal job that depends on another starts after it, as the job manager rules."""
    records = []
    for jobid, deps in ((1, None), (2, [{"scheme": "afterok", "value": "1"}])):
        x: dict[str, Any] = {"ncores": 1, "nnodes": 0, "duration": 100.0}
        if deps:
            x["dependencies"] = deps
        records += [
            {"j": jobid, "n": "submit", "t": T0, "x": x,
             "c": {"urgency": 16, "userid": 5, "flags": 0, "version": 1}},
            {"j": jobid, "n": "alloc", "t": T0}, {"j": jobid, "n": "start", "t": T0},
            {"j": jobid, "n": "finish", "t": T0 + 30, "c": {"status": 0}}]
    workload = load_journal(records=records)
    outcome = simulate(workload, Machine.uniform(1, 4), InstanceConfig(), {"policy": "easy"},
                       label="easy")
    assert _starts(outcome) == {1: 0, 2: 30}  # 2 waits for 1's end, not for cores


def test_the_workers_constants_and_policies_are_the_drivers() -> None:
    from workers import scheduler as worker

    assert (drive.REPLAN_S, drive.FULL_PASS_S) == (worker.REPLAN_S, worker.FULL_PASS_S)
    config = InstanceConfig.from_toml(
        '[queues.a]\n[queues.b]\n[policy.jobspec.defaults.system]\nqueue = "a"\n'
        '[policy.scheduler]\npolicy = "conservative"\nreservation-depth = 3\n'
        '[queues.b.policy.scheduler]\npolicy = "easy"\nqueue-depth = 7\n'
        'placement = "best-fit"\n')
    mine = drive.queue_policies(config)
    theirs = worker.queue_policies(config)
    assert mine == theirs
    assert mine["b"] == QueuePolicy("easy", 7, 3, "best-fit")
    assert drive.queue_policies(config, {"policy": "fcfs"})["a"].policy == "fcfs"


def test_the_calls_the_driver_makes_exist() -> None:
    """A renamed or reshaped core method fails here first (the driver's coupling)."""
    from fluxes.domain.jm.core import Effects, JobManagerCore
    from fluxes.domain.sched.policy import PassResult
    from fluxes.domain.sched.session import Effects as SessionEffects
    from fluxes.domain.sched.session import SessionCore

    expected: dict[Any, Sequence[str]] = {
        JobManagerCore.__init__: ("owner_uid", "priority", "clock", "lookup"),
        JobManagerCore.on_new: ("fx", "msg"), JobManagerCore.on_sched: ("fx", "epoch", "msg"),
        JobManagerCore.on_exec: ("fx", "msg"), JobManagerCore.on_ctl: ("fx", "msg"),
        JobManagerCore.on_timers: ("fx", "now"), SessionCore.schedule: ("now", "fx"),
        SessionCore.__init__: ("pool", "queues", "graph", "gate", "stored", "mode", "limit",
                               "annotate", "write_r", "clock", "owner_uid"),
        SessionCore.handle: ("partition", "items", "fx"),
        SessionCore.begin_epoch: ("partition", "epoch"), SessionCore.due: ("now",)}
    for func, params in expected.items():
        assert set(params) <= set(inspect.signature(func).parameters), func
    assert {"ops", "base_seq", "sched", "exec", "retired"} <= set(Effects.__dataclass_fields__)
    assert {"responses", "queued", "hellos", "refused"} <= set(
        SessionEffects.__dataclass_fields__)
    assert {"allocated", "denied", "annotations", "reserved"} <= set(
        PassResult.__dataclass_fields__)


def test_duplicate_ids_are_refused() -> None:
    job = SimJob(1, 0.0, 1, 10.0, 5.0, 1, "1", "-")
    with pytest.raises(ValueError, match="unique"):
        Simulation([job, job], Machine.uniform(1, 1), InstanceConfig()).run()


def test_fractional_times_are_kept() -> None:
    workload = load_swf(["; MaxProcs: 2", "1 0.5 -1 1.5 1 -1 -1 1 2.5 -1 1 1 1 -1 1 -1 -1 -1"])
    outcome = simulate(workload, Machine.uniform(1, 2), InstanceConfig(), {"policy": "easy"},
                       label="easy")
    run = outcome.runs[0]
    assert (run.start, run.end) == (0.5, 2.0)


def test_the_multifactor_plugin_orders_the_queue() -> None:
    """[accounting] priority-plugin = multifactor: a heavy job-size weight lets the wide
    job 3 go before job 2, which fcfs order (equal priorities) would start first."""
    lines = ["; MaxProcs: 4", "1 0 -1 100 4 -1 -1 4 100 -1 1 1 1 -1 1 -1 -1 -1",
             "2 1 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1",
             "3 2 -1 10 4 -1 -1 4 10 -1 1 1 1 -1 1 -1 -1 -1"]
    workload = load_swf(lines)
    plain = simulate(workload, Machine.uniform(1, 4), InstanceConfig(), {"policy": "fcfs"},
                     label="fcfs")
    assert _starts(plain, 0) == {1: 0, 2: 100, 3: 110}
    config = InstanceConfig.from_toml(
        '[accounting]\npriority-plugin = "multifactor"\n'
        '[accounting.weights]\nfairshare = 0\nage = 0\njob-size = 100000\n')
    sized = simulate(workload, Machine.uniform(1, 4), config, {"policy": "fcfs"},
                     label="fcfs")
    assert _starts(sized, 0) == {1: 0, 2: 110, 3: 100}
