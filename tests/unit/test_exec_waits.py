"""Starts that wait for their cores (pure): what an R holds on a rank, which waiting
starts may start when a job ends, their entries' held acknowledgements, and the job
table and records that carry what a running job holds across a restart."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.exec import records
from fluxes.domain.exec.jobs import ExecJob
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.table import JobTable
from fluxes.domain.exec.waits import MAX_ID, Cores, RankUse, UseReader, Waiting, use_of_texts
from fluxes.formats.rset import ResourceSet


def r_of(ranks: dict[int, tuple[str, str | None]], start: float = 0.0) -> bytes:
    rset = ResourceSet.from_ranks(ranks)
    doc = orjson.loads(rset.dumps())
    doc["execution"]["starttime"] = start
    return orjson.dumps(doc)


def use(cores: str, gpus: str = "") -> RankUse:
    got = use_of_texts(cores, gpus)
    assert got is not None
    return got


def waiting(cores: Cores, rank: int, jobid: int, u: RankUse, entry: bytes = b"1-0") -> Waiting:
    start = Waiting(rank, jobid, u, None, False, None, entry)
    cores.wait(start)
    return start


# ----------------------------------------------------------------------------- reading R


def test_the_reader_takes_a_rank_s_cores_and_gpus() -> None:
    reader = UseReader()
    raw = r_of({0: ("0-1", "0"), 1: ("2,5", None)})
    assert reader.of(raw, 0) == use("0-1", "0")
    assert reader.of(raw, 1) == use("2,5")
    assert reader.of(raw, 7) is None  # not in R: nothing known, never waits


def test_the_reader_caches_by_allocation_not_times() -> None:
    reader = UseReader()
    first = reader.of(r_of({0: ("1", None)}, start=1.0), 0)
    again = reader.of(r_of({0: ("1", None)}, start=2.0), 0)
    assert first is again and len(reader) == 1


@pytest.mark.parametrize("raw", [None, b"", b"not json", b"[]", b"{}", b'{"execution": 3}',
                                 b'{"execution": {"R_lite": 3}}',
                                 b'{"execution": {"R_lite": [{"rank": "x"}]}}',
                                 b'{"execution": {"R_lite": [{"rank": "0", "children": 5}]}}',
                                 orjson.dumps({"execution": {"R_lite": [
                                     {"rank": "0", "children": {"core": f"0-{MAX_ID + 1}"}}]}})])
def test_an_unreadable_r_holds_nothing_known(raw: Any) -> None:
    assert UseReader().of(raw, 0) is None


def test_the_cache_is_bounded() -> None:
    reader = UseReader(size=3)
    for core in range(10):
        reader.of(r_of({0: (str(core), None)}), 0)
    assert len(reader) == 3


# ----------------------------------------------------------------------------- waiting


def test_a_start_waits_only_for_what_it_overlaps() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    assert cores.busy(0, 2, use("0"))
    assert cores.busy(0, 2, use("0-1"))
    assert not cores.busy(0, 2, use("1"))
    assert not cores.busy(1, 2, use("0"))  # another rank
    assert not cores.busy(0, 1, use("0"))  # its own hold (a start again after its prolog)
    second = waiting(cores, 0, 2, use("0"))
    assert not cores.busy(0, 1, use("0"))  # it holds them: never behind those waiting
    cores.hold(0, 1, use("0"))
    assert not cores.shared  # held again alike: nothing changes
    cores.release(0, 1)
    assert cores.ready() == [second]


def test_held_jobs_that_overlap_free_only_what_none_still_holds() -> None:
    """Restored records may name jobs sharing a core (an older worker ran them so)."""
    cores = Cores()
    cores.hold(0, 1, use("0-1"))
    cores.hold(0, 2, use("1-2"))
    cores.release(0, 1)
    assert cores.busy(0, 3, use("1")) and not cores.busy(0, 3, use("0"))
    cores.release(0, 2)
    assert not cores.busy(0, 3, use("0-2")) and not cores.shared


def test_gpus_block_as_cores_do() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0", "0"))
    assert cores.busy(0, 2, use("1", "0"))
    assert not cores.busy(0, 2, use("1", "1"))


def test_an_earlier_waiting_start_blocks_a_later_one() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    waiting(cores, 0, 2, use("0-1"))
    assert cores.busy(0, 3, use("1"))  # core 1 is free, but job 2 waits for it


def test_an_end_lets_the_waiting_starts_start_in_arrival_order() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    cores.hold(0, 2, use("1"))
    a = waiting(cores, 0, 3, use("0"))
    b = waiting(cores, 0, 4, use("0"))  # behind a
    c = waiting(cores, 0, 5, use("1"))
    assert cores.ready() == []  # nothing ended
    cores.release(0, 1)
    assert cores.freed == {0}
    assert cores.ready() == [a]
    assert cores.queue[0] == [b, c]
    cores.hold(0, 3, a.use)
    cores.release(0, 2)
    assert cores.ready() == [c]  # b still waits for a
    cores.release(0, 3)
    assert cores.ready() == [b] and len(cores) == 0


def test_starts_that_do_not_overlap_start_together() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0-3"))
    starts = [waiting(cores, 0, 10 + c, use(str(c))) for c in range(4)]
    cores.release(0, 1)
    assert cores.ready() == starts


def two_waiting(cores: Cores) -> tuple[Waiting, Waiting]:
    """Jobs 1 and 2 run on cores 0 and 1; start 3 (cores 0-1) waits, then 4 (core 1)."""
    cores.hold(0, 1, use("0"))
    cores.hold(0, 2, use("1"))
    return waiting(cores, 0, 3, use("0-1")), waiting(cores, 0, 4, use("1"))


def test_a_later_start_never_jumps_an_earlier_one_it_overlaps() -> None:
    cores = Cores()
    a, b = two_waiting(cores)
    cores.release(0, 2)  # core 1 frees: b wants it, but a (first) wants it too
    assert cores.ready() == []
    cores.release(0, 1)
    assert cores.ready() == [a]
    assert cores.queue[0] == [b]


def test_an_end_where_nothing_waits_costs_no_look() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    cores.release(0, 1)
    cores.release(0, 99)  # never held
    assert not cores.freed


def test_a_killed_waiting_start_leaves_and_lets_those_behind_it_start() -> None:
    cores = Cores()
    a, b = two_waiting(cores)
    assert cores.waiting(0, 3) and not cores.waiting(0, 9)
    assert cores.cancel(0, 9) is None
    cores.release(0, 2)
    assert cores.ready() == []
    assert cores.cancel(0, 3) is a
    assert cores.ready() == [b]


@given(st.lists(st.tuples(st.sampled_from(["hold", "wait", "end", "kill", "ready"]),
                          st.integers(0, 7), st.integers(0, 15)), max_size=60))
def test_two_started_jobs_never_share_a_core(ops: list[tuple[str, int, int]]) -> None:
    """Whatever the order of starts, ends and kills: a start held is never busy-free
    of another one held unless they are disjoint, and the order of a rank's starts
    that overlap is their arrival order."""
    cores = Cores()
    jobid = 0

    def start(jobid: int, u: RankUse) -> None:
        # no start that arrived before it and overlaps it still waits
        assert not any(w.jobid < jobid and w.use.overlaps(u) for w in cores.queue.get(0, []))
        cores.hold(0, jobid, u)

    for op, pick, mask in ops:
        if op == "wait" and mask:
            jobid += 1
            u = use(",".join(str(i) for i in range(4) if mask >> i & 1))
            if cores.busy(0, jobid, u):
                waiting(cores, 0, jobid, u)
            else:
                start(jobid, u)
        elif op == "end" and cores.held.get(0):
            cores.release(0, sorted(cores.held[0])[pick % len(cores.held[0])])
        elif op == "kill" and cores.queue.get(0):
            cores.cancel(0, cores.queue[0][pick % len(cores.queue[0])].jobid)
        elif op == "ready":
            for ready in cores.ready():
                start(ready.jobid, ready.use)
        held = list(cores.held.get(0, {}).values())
        for i, one in enumerate(held):
            assert not any(one.overlaps(other) for other in held[i + 1:])
    # once everything ends, every start left starts
    for held_id in list(cores.held.get(0, {})):
        cores.release(0, held_id)
    while cores.freed:
        for ready in cores.ready():
            start(ready.jobid, ready.use)
            cores.release(0, ready.jobid)
    assert len(cores) == 0


# ----------------------------------------------------------------------------- entries


def test_an_entry_holding_a_waiting_start_is_acknowledged_when_it_leaves() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    a = waiting(cores, 0, 2, use("0"), entry=b"5-0")
    b = waiting(cores, 0, 3, use("0"), entry=b"5-0")
    assert not cores.entry_handled(0, b"4-0", [])  # holds no waiting start: acked now
    dead: list[Any] = [{"reason": "x"}]
    assert cores.entry_handled(0, b"5-0", dead)
    assert cores.entry_released(a) is None  # b still waits
    assert cores.entry_released(b) is dead


def test_an_entry_whose_starts_left_before_it_was_handled_is_acknowledged_then() -> None:
    cores = Cores()
    cores.hold(0, 1, use("0"))
    a = waiting(cores, 0, 2, use("0"), entry=b"5-0")
    assert cores.entry_released(a) is None  # its entry's other requests are not handled
    assert not cores.entry_handled(0, b"5-0", [])
    assert not cores.entries


# ----------------------------------------------------------------------------- table, records


def test_the_table_releases_a_job_s_cores_when_it_ends() -> None:
    table, box = JobTable([0]), Outbox()
    cores = table.cores
    cores.hold(0, 1, use("0"))
    job = table.add(table.simulate(0, 1, 0.0, 0.0, 1.0))
    assert (job.cores, job.gpus) == ("0", "")
    start = waiting(cores, 0, 2, use("0"))
    table.fire(box, 1.0, 1.0)
    assert job.kind == "done" and cores.ready() == [start]


def test_a_kill_of_a_simulated_job_frees_its_cores() -> None:
    table, box = JobTable([0]), Outbox()
    table.cores.hold(0, 1, use("0"))
    table.add(table.simulate(0, 1, 0.0, 0.0, 100.0))
    start = waiting(table.cores, 0, 2, use("0"))
    table.kill(box, 0, 1, 15, 1.0, 1.0, 5.0)
    assert table.cores.ready() == [start]


def test_a_restored_running_job_holds_its_cores_again() -> None:
    sim = ExecJob(1, 0, "sim", started=True, deadline=10.0, cores="0-1", gpus="0")
    run = ExecJob(2, 0, "run", started=True, cores="2")
    done = ExecJob(3, 0, "done", cores="3")
    old = orjson.dumps({"k": "sim", "d": 10.0})  # recorded before waits existed
    table = JobTable([0])
    recs = {0: {b"1": records.encode(sim), b"2": records.encode(run),
                b"3": records.encode(done), b"4": old}}
    assert table.restore_all(Outbox(), recs, 0.0, 0.0, 5.0, lambda _j, _o: None) == []
    assert table.cores.held[0] == {1: use("0-1", "0"), 2: use("2")}
    assert table.cores.busy(0, 9, use("1")) and not table.cores.busy(0, 9, use("3-4"))


def test_records_keep_what_a_running_job_holds() -> None:
    for job in (ExecJob(1, 0, "sim", started=True, deadline=5.0, cores="0-3", gpus="1"),
                ExecJob(1, 0, "run", started=True, cores="4")):
        back, _ = records.decode(0, 1, records.encode(job), 0.0)
        assert (back.cores, back.gpus) == (job.cores, job.gpus)
    plain = ExecJob(1, 0, "sim", started=True, deadline=5.0)
    assert b'"c"' not in records.encode(plain)  # a simulated record stays as small
