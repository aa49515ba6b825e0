"""The scheduler's RFC 27 session core (fluxes/domain/sched/session.py), with no store."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fluxes import messages as proto
from fluxes.domain.accounting.limits import LimitGate
from fluxes.domain.sched.policy import QueuePolicy
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.domain.sched.session import (
    ANNOTATIONS_PER_STEP,
    NO_STORE,
    Allocated,
    Effects,
    Item,
    Quarantined,
    Queued,
    SessionCore,
)
from fluxes.formats.jobspec import Jobspec
from fluxes.sim.workload import Machine

EPOCH = 3
NOW = 1000.0


def wire(ntasks: int = 1, nnodes: int | None = None, duration: float = 60.0) -> str:
    """A job's request as an alloc carries it."""
    return Request.from_jobspec(_spec(ntasks, nnodes, duration)).to_wire()


def _spec(ntasks: int = 1, nnodes: int | None = None, duration: float = 60.0) -> Jobspec:
    return Jobspec.from_command(["x"], ntasks=ntasks, nnodes=nnodes, duration=duration)


class Stored:
    """A dict-backed store port: job -> (R, wire request, jobspec)."""

    def __init__(self, rows: dict[int, tuple[bytes | None, str | None, bytes | None]]
                 ) -> None:
        self.rows = rows
        self.reads: list[list[int]] = []

    def allocations(self, ids: list[int]) -> list[tuple[bytes | None, str | None,
                                                        bytes | None]]:
        self.reads.append(list(ids))
        return [self.rows.get(j, (None, None, None)) for j in ids]

    def effective_jobspecs(self, ids: list[int]) -> list[bytes | None]:
        return [self.rows.get(j, (None, None, None))[2] for j in ids]


def core(nodes: int = 2, cores: int = 4, stored: Any = NO_STORE, **options: Any
         ) -> SessionCore:
    """A core on a ``nodes`` x ``cores`` machine with partition 0 in epoch EPOCH, ready."""
    pool = ResourcePool(Machine.uniform(nodes, cores).inventory, clock=lambda: NOW)
    out = SessionCore(pool, {None: QueuePolicy("easy")}, stored=stored, **options)
    out.begin_epoch(0, EPOCH)
    fx = Effects()
    out.handle(0, [Item(EPOCH, proto.HelloReply(alloc=[]))], fx)
    assert fx.responses[0] == [proto.Ready(mode="unlimited", limit=0)]
    return out


def send(c: SessionCore, *msgs: proto.SchedRequest, epoch: int = EPOCH) -> Effects:
    fx = Effects()
    c.handle(0, [Item(epoch, m, b"%d-0" % n) for n, m in enumerate(msgs, 1)], fx)
    return fx


def alloc(jobid: int, request: str | None = None, priority: int = 16) -> proto.Alloc:
    return proto.Alloc(id=jobid, priority=priority, userid=1, t_submit=float(jobid),
                       request=request if request is not None else wire())


def answers(fx: Effects) -> list[tuple[int, int]]:
    """(job, response type) of every alloc response, in order."""
    return [(m.id, m.type) for m in fx.responses.get(0, []) if isinstance(m, proto.AllocResponse)]


def test_allocs_are_queued_then_allocated_with_their_r_and_one_record_each() -> None:
    c = core()
    fx = send(c, alloc(1), alloc(2, wire(ntasks=8)))
    assert fx.queued == [1, 2] and c.dirty and c.due(NOW)
    queued = c.sched.pending[1]  # the queued job's record is the scheduler's entry
    assert isinstance(queued, Queued) and queued.origin == b"1-0" and 1 not in c.jobs
    c.schedule(NOW, fx)
    assert answers(fx) == [(1, proto.ALLOC_SUCCESS), (2, proto.ALLOC_ANNOTATE)]
    allocated = c.jobs[1]
    assert set(fx.r[0]) == {1} and isinstance(allocated, Allocated)
    assert orjson.loads(fx.r[0][1])["execution"]["R_lite"]
    c.committed(fx.r[0])
    assert not c.jobs and set(c.sched.pending) == {2} and not c.due(NOW)


def test_a_request_that_never_fits_is_denied_and_forgotten() -> None:
    c = core()
    fx = send(c, alloc(1, wire(ntasks=99)), alloc(2, "not a request"))
    assert answers(fx) == [(1, proto.ALLOC_DENY), (2, proto.ALLOC_DENY)]
    assert c.jobs == {} and not c.sched.pending
    assert fx.log and fx.log[0][1].startswith("unreadable request")


def test_an_alloc_without_a_request_reads_its_jobspec_through_the_port() -> None:
    stored = Stored({1: (None, None, orjson.dumps(_spec(2).to_dict()))})
    c = core(stored=stored)
    fx = send(c, proto.Alloc(id=1, priority=1, userid=1),
              proto.Alloc(id=2, priority=1, userid=1))
    assert answers(fx) == [(2, proto.ALLOC_DENY)]
    assert fx.responses[0][0].note == "job has no jobspec"  # type: ignore[union-attr]
    assert 1 in c.sched.pending and c.sched.pending[1].request.min_cores == 2


def test_cancel_free_and_prioritize() -> None:
    c = core(nodes=1, cores=1)
    fx = send(c, alloc(1), alloc(2), alloc(3))
    c.schedule(NOW, fx)
    c.committed(fx.r[0])
    fx = send(c, proto.Cancel(id=3), proto.Cancel(id=99),
              proto.Prioritize(jobs=[(2, 99), (77, 1)]))
    assert answers(fx) == [(3, proto.ALLOC_CANCEL)] and fx.queued == [2]
    assert 3 not in c.sched.pending and c.sched.pending[2].priority == 99
    fx = send(c, proto.Free(id=1), proto.Free(id=1))  # a second free is answered too
    assert fx.responses[0] == [proto.FreeResponse(id=1), proto.FreeResponse(id=1)]
    c.schedule(NOW, fx)
    assert (2, proto.ALLOC_SUCCESS) in answers(fx)


def test_annotations_are_sent_as_deltas() -> None:
    c = core(nodes=1, cores=1)
    fx = send(c, alloc(1), alloc(2))
    c.schedule(NOW, fx)
    [ann] = [m for m in fx.responses[0] if getattr(m, "type", "") == proto.ALLOC_ANNOTATE]
    first = ann.annotations["sched"]  # type: ignore[union-attr,index]
    record = c.sched.pending[2]
    assert first and isinstance(record, Queued) and record.sent == first
    fx = Effects()
    c.dirty = True
    c.schedule(NOW + 2, fx)  # nothing changed for job 2: nothing sent
    assert answers(fx) == []


def test_a_pass_sends_a_bounded_number_of_annotations_and_owes_the_rest() -> None:
    # a big arrival: the first pass answers the allocation without a thousand
    # annotations beside it; each later step sends more, each job's once
    c = core(nodes=1, cores=1)
    n = 3 * ANNOTATIONS_PER_STEP + 5
    fx = send(c, *(alloc(j) for j in range(1, n + 1)))
    c.schedule(NOW, fx)
    first = answers(fx)
    assert first[0] == (1, proto.ALLOC_SUCCESS)
    assert len(first) == 1 + ANNOTATIONS_PER_STEP and len(c.owed) == n - 1 - ANNOTATIONS_PER_STEP
    sent = [j for j, kind in first if kind == proto.ALLOC_ANNOTATE]
    fx = send(c, proto.Cancel(id=2))  # no longer pending: its annotation is dropped
    while c.owed:
        fx = Effects()
        c.annotate_owed(fx)
        got = answers(fx)
        assert 0 < len(got) <= ANNOTATIONS_PER_STEP
        sent += [j for j, kind in got if kind == proto.ALLOC_ANNOTATE]
    # the newest first: job 2's turn came after its cancel
    assert 2 not in sent and len(sent) == len(set(sent)) == n - 2
    for jobid in range(3, n + 1):
        record = c.sched.pending[jobid]
        assert isinstance(record, Queued) and record.sent
    fx = Effects()
    c.annotate_owed(fx)  # nothing owed: nothing sent
    assert answers(fx) == []


def test_messages_of_another_epoch_are_ignored() -> None:
    c = core()
    fx = send(c, alloc(1), epoch=EPOCH - 1)
    assert fx.responses == {} and not c.jobs and not c.sched.pending


def test_reset_forgets_the_partitions_jobs_and_asks_for_a_new_epoch() -> None:
    c = core(nodes=1, cores=1)
    fx = send(c, alloc(1), alloc(2))
    c.schedule(NOW, fx)
    c.committed(fx.r[0])
    fx = send(c, proto.Free(id=7), proto.Reset(), alloc(3))
    assert fx.hellos == [0] and 0 not in fx.responses  # the free's answer goes with it
    assert not c.sched.pending and c.pool.jobids() == [] and not c.jobs
    c.begin_epoch(0, EPOCH + 1)
    fx = send(c, proto.HelloReply(alloc=[]), epoch=EPOCH + 1)
    assert fx.responses[0] == [c.ready_message()] and fx.readied == [(0, 0, 0)]


def test_a_request_that_breaks_the_session_is_refused_and_the_epoch_restarts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = core()

    def broken(jobid: int, priority: int) -> None:
        raise RuntimeError("prioritize broke")

    monkeypatch.setattr(c.sched, "prioritize", broken)
    fx = send(c, proto.Free(id=5), proto.Prioritize(jobs=[(1, 2)]), alloc(9))
    [(partition, item, why)] = fx.refused
    assert (partition, item.origin, why) == (0, b"2-0", "RuntimeError: prioritize broke")
    assert fx.hellos == [0] and fx.responses[0] == [proto.FreeResponse(id=5)]
    assert 9 not in c.sched.pending  # after the broken request: not handled


def test_hello_recovery_adopts_stored_r_and_quarantines_what_it_cannot_read() -> None:
    first = core(nodes=2, cores=4)
    fx = send(first, alloc(1, wire(ntasks=4)), alloc(2, wire(ntasks=4)))
    first.schedule(NOW, fx)
    r1 = fx.r[0][1]
    ranks2 = str(first.pool.shape_of(2).ranks())  # type: ignore[union-attr]
    stored = Stored({1: (r1, wire(ntasks=4), None), 2: (b"", None, None)})
    gate = LimitGate()
    c = SessionCore(ResourcePool(Machine.uniform(2, 4).inventory, clock=lambda: NOW),
                    {None: QueuePolicy()}, stored=stored, gate=gate, owner_uid=42)
    c.begin_epoch(0, EPOCH)
    fx = send(c, proto.HelloReply(alloc=[proto.HeldJob(id=1, expiration=NOW + 5),
                                         proto.HeldJob(id=2, ranks=ranks2)]))
    assert c.pool.jobids() == [1] and set(gate.running) == {1}
    assert fx.responses[0][-1] == c.ready_message()
    [raised] = fx.raises[0]
    assert raised.ids == [2] and raised.userid == 42
    assert fx.resource_events == [("drain", ranks2, "allocation of job 2 not recovered",
                                   False)]
    assert isinstance(c.jobs[2], Quarantined)
    # a repeated hello reply is not recovered twice
    assert send(c, proto.HelloReply(alloc=[])).responses == {}
    # its free undrains what it quarantined
    fx = send(c, proto.Free(id=2))
    assert fx.resource_events == [("undrain", ranks2, "", False)] and 2 not in c.jobs


def test_take_back_frees_and_names_the_request() -> None:
    c = core()
    fx = send(c, alloc(1))
    c.schedule(NOW, fx)
    assert c.allocations == 1
    assert c.take_back([1]) == [(1, b"1-0")]
    assert c.pool.jobids() == [] and c.allocations == 0 and not c.jobs


def test_drains_and_liveness() -> None:
    c = core(nodes=3, cores=1)
    c.apply_resource_event(proto.Drain(ranks="1", reason="broken", auto=False,
                                       timestamp=5.0))
    c.apply_resource_event(proto.Drain(ranks="2", reason="silent", auto=True, timestamp=5.0))
    assert c.drained == {1: ("broken", False, 5.0), 2: ("silent", True, 5.0)}
    lost, back = c.liveness({0: NOW - 60, 1: NOW, 2: NOW}, NOW, grace_over=True,
                            judging=True, lost_after=10)
    assert (str(lost), str(back)) == ("0", "2")
    lost, _ = c.liveness({}, NOW, grace_over=True, judging=False, lost_after=10)
    assert not lost  # right after a stall nobody is judged
    summary = c.summary(NOW, "me", "1-0")
    assert summary["drained"]["1"]["reason"] == "broken" and summary["free"]["nnodes"] == 1
    c.apply_resource_event(proto.Undrain(ranks="1-2", timestamp=6.0))
    assert c.drained == {}


def test_timers_only_with_annotations() -> None:
    c = core(nodes=1, cores=1)
    fx = send(c, alloc(1), alloc(2))
    c.schedule(NOW, fx)
    assert c.next_timer() is not None and not c.due(NOW + 0.5) and c.due(NOW + 5)
    quiet = core(nodes=1, cores=1, annotate=False)
    fx = send(quiet, alloc(1), alloc(2))
    quiet.schedule(NOW, fx)
    assert quiet.next_timer() is None and not quiet.due(NOW + 100)
    assert answers(fx) == [(1, proto.ALLOC_SUCCESS)]  # no annotations at all


def test_a_snapshot_of_live_state_runs_forward() -> None:
    """The recipe of the module docstring (what a forecast does)."""
    machine = Machine.uniform(3, 4)
    running = Request.from_wire(wire(ntasks=4, duration=100.0))
    elsewhere = ResourcePool(machine.inventory, clock=lambda: NOW)
    raw_r = elsewhere.alloc(running, 1, now=NOW - 50).dumps().encode()
    # 1. the core on the live machine
    c = SessionCore(ResourcePool(machine.inventory, clock=lambda: NOW),
                    {None: QueuePolicy("easy")}, gate=LimitGate(), annotate=False,
                    write_r=False)
    # 2. the session, ready with an empty pool
    c.begin_epoch(0, 1)
    fx = Effects()
    c.handle(0, [Item(1, proto.HelloReply(alloc=[]))], fx)
    # 3. a drained node, 4. the running job (its end moved to NOW + 100)
    c.apply_resource_event(proto.Drain(ranks="1", reason="repair", timestamp=NOW))
    c.hold(1, raw_r, running, proto.HeldJob(id=1, expiration=NOW + 100))
    assert c.pool.jobids() == [1]
    # 5. pending: a whole-machine-sized job first, then a small one
    fx = Effects()
    c.handle(0, [Item(1, alloc(2, wire(ntasks=8), priority=20)),
                 Item(1, alloc(3, wire(ntasks=2), priority=10))], fx)
    # 6. forward: the big one (8 cores: nodes 0 and 2, node 1 is drained) is reserved
    # at the running job's end, the small one backfills on node 2 now; once both
    # have ended the big one starts
    result = c.schedule(NOW, fx)
    assert [j for j, _ in result.allocated] == [3]
    assert 2 in result.reserved and result.reserved[2] >= NOW + 100 - 1e-6
    fx = Effects()
    c.handle(0, [Item(1, proto.Free(id=1)), Item(1, proto.Free(id=3))], fx)
    result = c.schedule(NOW + 100, fx)
    assert [j for j, _ in result.allocated] == [2]


def test_a_replayed_alloc_of_a_queued_job_keeps_what_was_sent() -> None:
    c = core(nodes=1, cores=1)
    fx = send(c, alloc(1), alloc(2))
    c.schedule(NOW, fx)
    before = c.sched.pending[2]
    assert isinstance(before, Queued) and before.sent
    fx = send(c, alloc(2))  # the job manager sent it again (a replay)
    after = c.sched.pending[2]
    assert isinstance(after, Queued) and after.sent == before.sent
    assert after.origin == b"1-0" and answers(fx) == []


def test_a_session_that_does_not_answer_allocates_the_same_and_sends_no_success() -> None:
    """``answer=False`` (the forecast's): the same allocations, counted, with no SUCCESS
    (nor its R summary) built; only with no R written and no latency measured."""
    with pytest.raises(ValueError, match="answer=False"):
        core(answer=False)
    with pytest.raises(ValueError, match="answer=False"):
        core(answer=False, write_r=False, latency=True)
    quiet, loud = core(answer=False, write_r=False), core(write_r=False)
    results = []
    for c in (quiet, loud):
        fx = send(c, alloc(1), alloc(2, wire(ntasks=4)), alloc(3, wire(ntasks=8)))
        result = c.schedule(NOW, fx)
        results.append(([(j, r.dumps()) for j, r in result.allocated], c.allocations,
                         answers(fx)))
    (got, count, told), (want, want_count, want_told) = results
    assert got == want and count == want_count == 2
    assert (1, proto.ALLOC_SUCCESS) in want_told
    assert not any(kind == proto.ALLOC_SUCCESS for _j, kind in told)
    assert not quiet.jobs and set(quiet.sched.pending) == {3}
