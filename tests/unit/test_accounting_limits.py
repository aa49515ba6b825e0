"""Limits per association and per bank: may a job be submitted, may it start now."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.accounting.banks import (
    Accounts,
    BankAdd,
    BankEdit,
    UserAdd,
    UserEdit,
    apply,
    replay,
)
from fluxes.domain.accounting.limits import (
    RECENT_S,
    UNFOLDED_S,
    ActiveIndex,
    Held,
    HeldJob,
    Holdings,
    LimitGate,
    SubmitLedger,
    active_holdings,
    check_submit,
    holdings,
    journal_id,
    limits_active_jobs,
    start_refusal,
)
from fluxes.domain.sched import Inventory, Request, ResourcePool
from fluxes.domain.sched.policy import PendingJob, QueuePolicy, Scheduler
from fluxes.errors import PolicyError

T = 0.0
ALICE, BOB = 1001, 1002


def accounts() -> Accounts:
    """root -> physics (max 3 running, 10 cores) -> theory, root -> chem (max 2 active);
    alice in physics (max 2 running, 4 nodes, 3 active) and chem, bob in theory."""
    return replay([
        BankAdd(timestamp=T, bank="root", shares=1),
        BankAdd(timestamp=T, bank="physics", parent="root", shares=1,
                limits={"max_running_jobs": 3, "max_cores": 10}),
        BankAdd(timestamp=T, bank="theory", parent="physics", shares=1),
        BankAdd(timestamp=T, bank="chem", parent="root", shares=1,
                limits={"max_active_jobs": 2}),
        UserAdd(timestamp=T, username="alice", userid=ALICE, bank="physics",
                limits={"max_running_jobs": 2, "max_nodes": 4, "max_active_jobs": 3}),
        UserAdd(timestamp=T, username="alice", userid=ALICE, bank="chem"),
        UserAdd(timestamp=T, username="bob", userid=BOB, bank="theory")])


def running(uid: int, bank: str | None, nodes: int = 1, cores: int = 1) -> HeldJob:
    return HeldJob(uid, bank, True, nodes, cores)


def test_the_running_limit_of_an_association() -> None:
    acc = accounts()
    held = holdings(acc, [running(ALICE, None)])
    assert start_refusal(acc, held, running(ALICE, "physics")) is None
    held.add(acc, running(ALICE, "physics"))
    assert start_refusal(acc, held, running(ALICE, None)) == \
        "max-running-jobs limit (2) reached for alice/physics"
    # another bank of the same user is another association
    assert start_refusal(acc, held, running(ALICE, "chem")) is None
    held.remove(acc, running(ALICE, None))
    assert start_refusal(acc, held, running(ALICE, None)) is None


def test_a_bank_limit_covers_the_banks_below_it() -> None:
    acc = accounts()
    held = holdings(acc, [running(ALICE, None), running(BOB, None), running(BOB, None)])
    assert held.by_bank["physics"] == Held(3, 3, 3, 3) and held.by_bank["theory"].running == 2
    assert held.by_bank["root"].running == 3
    assert start_refusal(acc, held, running(BOB, None)) == \
        "max-running-jobs limit (3) reached for bank physics"


def test_node_and_core_limits_count_what_the_job_adds() -> None:
    acc = accounts()
    held = holdings(acc, [running(ALICE, None, nodes=3, cores=6)])
    assert start_refusal(acc, held, running(ALICE, None, nodes=2)) == \
        "max-nodes limit (4) reached for alice/physics (3 held, the job needs 2)"
    assert start_refusal(acc, held, running(BOB, None, nodes=1, cores=5)) == \
        "max-cores limit (10) reached for bank physics (6 held, the job needs 5)"
    assert start_refusal(acc, held, running(BOB, None, nodes=1, cores=4)) is None


def test_pending_jobs_count_as_active_only() -> None:
    held = holdings(accounts(), [HeldJob(ALICE, None, False, 8, 80)])
    assert held.by_assoc[("alice", "physics")] == Held(0, 1, 0, 0)


def test_jobs_of_no_association_are_never_held_back() -> None:
    acc = accounts()
    assert start_refusal(acc, Holdings(), running(4242, None)) is None
    assert start_refusal(Accounts(), Holdings(), running(ALICE, None)) is None


def test_submission_needs_an_association_once_banks_exist() -> None:
    acc = accounts()
    assert check_submit(Accounts(), Holdings(), "carol", HeldJob(7, None, False)) is None
    with pytest.raises(PolicyError, match="user carol belongs to no bank: the instance owner "
                       "adds them with 'fluxes account add-user --username=carol"):
        check_submit(acc, Holdings(), "carol", HeldJob(7, None, False))
    with pytest.raises(PolicyError, match=r"user bob is not in bank chem \(their banks: "
                                          r"theory\)"):
        check_submit(acc, Holdings(), "bob", HeldJob(BOB, "chem", False))
    assert check_submit(acc, Holdings(), "alice", HeldJob(ALICE, None, False)) == \
        acc.association("alice", "physics")
    assert check_submit(acc, Holdings(), "alice", HeldJob(ALICE, "chem", False)) == \
        acc.association("alice", "chem")
    # the uid of the request must be the association's
    with pytest.raises(PolicyError, match="belongs to no bank"):
        check_submit(acc, Holdings(), "alice", HeldJob(BOB, None, False))


def test_the_active_limit_refuses_a_submission() -> None:
    acc = accounts()
    held = holdings(acc, [HeldJob(ALICE, None, False)] * 2 + [running(ALICE, "chem")])
    assert check_submit(acc, held, "alice", HeldJob(ALICE, None, False)) is not None
    held.add(acc, HeldJob(ALICE, None, False))
    with pytest.raises(PolicyError, match=r"max-active-jobs limit \(3\) reached for "
                                          "alice/physics"):
        check_submit(acc, held, "alice", HeldJob(ALICE, None, False))
    held.add(acc, HeldJob(ALICE, "chem", False))
    with pytest.raises(PolicyError, match=r"max-active-jobs limit \(2\) reached for bank chem"):
        check_submit(acc, held, "alice", HeldJob(ALICE, "chem", False))


def test_a_job_bigger_than_a_limit_is_refused_at_once() -> None:
    acc = accounts()
    with pytest.raises(PolicyError, match=r"requests 5 nodes, more than the max-nodes limit "
                                          r"\(4\) of alice/physics"):
        check_submit(acc, Holdings(), "alice", HeldJob(ALICE, None, False, 5, 5))
    with pytest.raises(PolicyError, match=r"requests 11 cores, more than the max-cores limit "
                                          r"\(10\) of bank physics"):
        check_submit(acc, Holdings(), "bob", HeldJob(BOB, None, False, 1, 11))


def _pending(jobid: int, uid: int, bank: str | None, priority: int) -> PendingJob:
    return PendingJob(jobid, priority, float(jobid), uid, None, Request(nslots=1, duration=10.0),
                      bank=bank)


def _scheduler(gate: LimitGate, depth: int = 1000) -> Scheduler:
    pool = ResourcePool(Inventory.from_config([{"hosts": "n[0-1]", "cores": "0-3"}]),
                        clock=lambda: 0.0)
    return Scheduler(pool, default=QueuePolicy("fcfs", queue_depth=depth), gate=gate)


def test_a_job_over_a_running_limit_waits_with_the_reason_and_blocks_nobody() -> None:
    gate = LimitGate(accounts())
    sched = _scheduler(gate, depth=4)
    # alice's five jobs come first (fcfs, higher priority); her limit is 2 running
    for jobid in range(1, 6):
        sched.add(_pending(jobid, ALICE, "physics", 100))
    for jobid in range(6, 9):
        sched.add(_pending(jobid, BOB, None, 50))
    result = sched.schedule(0.0)
    assert [jobid for jobid, _r in result.allocated] == [1, 2, 6]
    assert result.annotations[3]["reason_pending"] == \
        "max-running-jobs limit (2) reached for alice/physics"
    # held-back jobs did not use up the depth of 4: bob's jobs behind them were reached,
    # his next ones meet the limit of his bank's parent (physics: 3 running)
    for jobid in (7, 8):
        assert result.annotations[jobid]["reason_pending"] == \
            "max-running-jobs limit (3) reached for bank physics"
    assert gate.held.by_assoc[("alice", "physics")].running == 2
    assert gate.held.by_bank["physics"].running == 3  # theory is below physics
    gate.end(1)
    result = sched.schedule(0.0)
    assert [jobid for jobid, _r in result.allocated] == [3]


def test_the_gate_counts_recovered_jobs_and_follows_new_limits() -> None:
    gate = LimitGate(accounts())
    gate.adopt(10, ALICE, None, 1, 1)  # recovered after a restart: the default bank
    gate.adopt(11, ALICE, "physics", 1, 1)
    job = _pending(1, ALICE, "physics", 1)
    assert gate.refusal(job) == "max-running-jobs limit (2) reached for alice/physics"
    gate.set_accounts(apply(UserEdit(timestamp=T, username="alice", bank="physics",
                                     limits={"max_running_jobs": None}), gate.accounts))
    assert gate.refusal(job) is None
    assert LimitGate().refusal(job) is None  # no bank yet: nothing is held back


def test_the_ingest_ledger_counts_jobs_the_fold_does_not_show_yet() -> None:
    acc = accounts()
    ledger = SubmitLedger()
    key = (ALICE, "physics")
    ledger.created(1, 0, key, 100.0)
    ledger.created(2, 0, key, 100.0)
    ledger.committed(0, "5000-3")  # both are at or before journal entry 5000-3
    ledger.created(3, 1, key, 100.0)  # its commit failed: no journal id
    assert ledger.counts({}, ["5000-2", None], 100.5) == {key: 3}  # folded neither
    held = ledger.holdings(acc, {key: 1}, ["5000-3", "0-0"], 101.0)  # the fold has both
    assert held.by_assoc[("alice", "physics")].active == 2 and list(ledger.recent) == [3]
    assert ledger.counts({}, ["5000-3", "0-0"], 100.0 + RECENT_S + 1) == {}
    ledger.created(4, 0, key, 200.0)
    ledger.committed(0, "6000-0")
    # a fold that does not move (the accounting worker is down): kept a while, not forever
    assert ledger.counts({}, ["5000-3"], 200.0 + UNFOLDED_S - 1) == {key: 1}
    assert ledger.counts({}, ["5000-3"], 200.0 + UNFOLDED_S + 1) == {} == ledger.recent
    ledger.created(5, 0, key, 300.0)
    ledger.created(6, 0, key, 300.0)
    with pytest.raises(PolicyError, match=r"max-active-jobs limit \(3\) reached"):
        check_submit(acc, ledger.holdings(acc, {key: 1}, ["6000-0"], 300.0), "alice",
                     HeldJob(ALICE, "physics", False))


def test_stream_ids_order_as_the_stream() -> None:
    assert journal_id("10-2") < journal_id("10-10") < journal_id("11-0") == journal_id("11")
    with pytest.raises(ValueError):
        journal_id("x-1")


USERS = {"alice": ALICE, "bob": BOB}
JOBS = st.lists(st.builds(HeldJob, st.sampled_from([ALICE, BOB, 4242]),
                          st.sampled_from([None, "physics", "chem", "theory", "root", "x"]),
                          st.booleans(), st.integers(0, 3), st.integers(0, 9)), max_size=30)


def by_key(jobs: list[HeldJob]) -> dict[tuple[int, str], int]:
    out: dict[tuple[int, str], int] = {}
    for job in jobs:
        key = (job.userid, job.bank or "")
        out[key] = out.get(key, 0) + 1
    return out


@settings(max_examples=150, deadline=None)
@given(JOBS)
def test_counts_per_association_give_the_active_holdings_of_the_jobs(
        jobs: list[HeldJob]) -> None:
    acc = accounts()
    whole = holdings(acc, jobs)
    counted = active_holdings(acc, by_key(jobs))
    assert {k: h.active for k, h in whole.by_assoc.items() if h.active} == \
        {k: h.active for k, h in counted.by_assoc.items()}
    assert {k: h.active for k, h in whole.by_bank.items() if h.active} == \
        {k: h.active for k, h in counted.by_bank.items()}
    assert ActiveIndex(acc).holdings(by_key(jobs)) == counted  # resolved once, alike


@settings(max_examples=150, deadline=None)
@given(JOBS, st.sampled_from(["alice", "bob"]),
       st.sampled_from([None, "physics", "chem", "theory"]))
def test_the_wanted_counts_alone_decide_a_submission_as_all_jobs_do(
        jobs: list[HeldJob], user: str, bank: str | None) -> None:
    acc = apply(BankEdit(timestamp=T, bank="root", limits={"max_active_jobs": 5}),
                accounts())
    counts = by_key(jobs)
    wanted = ActiveIndex(acc).wanted([user])
    some = active_holdings(acc, {k: n for k, n in counts.items() if k in wanted})
    job = HeldJob(USERS[user], bank, False)

    def outcome(held: Holdings) -> str:
        try:
            return repr(check_submit(acc, held, user, job))
        except PolicyError as exc:
            return str(exc)

    assert outcome(some) == outcome(holdings(acc, jobs))


def test_only_the_counts_a_limit_needs_are_wanted() -> None:
    acc = accounts()
    index = ActiveIndex(acc)
    # alice: her own physics limit (physics is her default bank), chem's bank limit
    assert index.wanted(["alice"]) == {(ALICE, "physics"), (ALICE, ""), (ALICE, "chem")}
    assert index.wanted(["bob"]) == set()  # nothing caps bob's active jobs
    assert index.wanted(["nobody"]) == set()


def test_active_jobs_are_counted_only_when_some_limit_caps_them() -> None:
    acc = accounts()
    assert limits_active_jobs(acc)
    plain = replay([BankAdd(timestamp=T, bank="root", shares=1,
                            limits={"max_running_jobs": 3}),
                    UserAdd(timestamp=T, username="bob", userid=BOB, bank="root")])
    assert not limits_active_jobs(plain)
    assert limits_active_jobs(apply(UserEdit(timestamp=T, username="bob",
                                             limits={"max_active_jobs": 1}), plain))


def test_a_bank_name_from_the_user_is_shown_bounded() -> None:
    with pytest.raises(PolicyError) as caught:
        check_submit(accounts(), Holdings(), "alice", HeldJob(ALICE, "x\n" * 5000, False))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 150


LEDGER_OPS = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 1), st.sampled_from([(1, "a"), (2, "")])),
    st.tuples(st.just("commit"), st.integers(0, 1), st.integers(0, 3)),
    st.tuples(st.just("count"), st.integers(0, 3), st.integers(0, 40))), max_size=40)


@settings(max_examples=200, deadline=None)
@given(LEDGER_OPS)
def test_the_ledger_counts_what_a_job_by_job_model_counts(ops: list[tuple[str, int, Any]]
                                                          ) -> None:
    """Each job: counted until its partition's fold reaches its commit's journal id, an
    uncommitted one for RECENT_S, a committed one the fold does not reach for
    UNFOLDED_S."""
    ledger = SubmitLedger()
    model: dict[int, list[Any]] = {}  # jobid -> [partition, key, t, journal id]
    now, ms, jobid = 0.0, 0, 0
    positions: list[str | None] = [None, None]
    for op, a, b in ops:
        if op == "create":
            jobid += 1
            ledger.created(jobid, a, b, now)
            model[jobid] = [a, b, now, None]
        elif op == "commit":
            ms += 1 + b
            ledger.committed(a, f"{ms}-0")
            for job in model.values():
                if job[0] == a and job[3] is None:
                    job[3] = (ms, 0)
        else:
            now += a * 10.0
            reached = max(0, ms - b // 10)  # the fold lags the journal a little or a lot
            positions = [f"{reached}-0" if b % 3 else None, f"{reached}-0"]
            for job_id in list(model):
                p, _key, t, at = model[job_id]
                folded = at is not None and positions[p] is not None \
                    and at <= journal_id(positions[p] or "0")
                if folded or (at is None and now - t > RECENT_S) \
                        or (at is not None and now - t > UNFOLDED_S):
                    del model[job_id]
            expected: dict[tuple[int, str], int] = {}
            for _p, key, _t, _at in model.values():
                expected[key] = expected.get(key, 0) + 1
            assert ledger.counts({}, positions, now) == expected
            assert len(ledger) == len(model)


def _queued(**limits: int | None) -> Accounts:
    """accounts() with an accounting queue 'debug' carrying ``limits``."""
    from fluxes.domain.accounting.banks import QueueAdd

    return apply(QueueAdd(timestamp=T, queue="debug", priority=5, queue_limits=limits),
                 accounts())


def test_queue_limits_are_events_that_edit_keeps_and_other_changes_carry() -> None:
    from fluxes.domain.accounting.banks import AccountError, QueueDelete, QueueEdit, event_from_dict
    from fluxes.domain.accounting.queuelimits import QueueLimits

    acc = _queued(max_nodes_per_job=2, max_running_jobs=1)
    assert acc.queue_limits["debug"] == QueueLimits(max_nodes_per_job=2, max_running_jobs=1)
    edit = QueueEdit(timestamp=T, queue="debug", queue_limits={"max_running_jobs": None,
                                                                "max_time_per_job": 600})
    assert event_from_dict(edit.to_dict()) == edit
    acc = apply(edit, acc)
    assert acc.queues["debug"] == 5  # no --priority: kept
    assert acc.queue_limits["debug"] == QueueLimits(max_nodes_per_job=2,
                                                    max_time_per_job=600)
    # a change of anything else keeps them
    acc = apply(BankAdd(timestamp=T, bank="bio", parent="root", shares=1), acc)
    assert acc.queue_limits["debug"].max_time_per_job == 600
    assert "debug" not in apply(QueueDelete(timestamp=T, queue="debug"), acc).queue_limits
    for bad in ({"max_nodes": 1}, {"max_running_jobs": -2}, {"min_nodes_per_job": "1"}):
        with pytest.raises(AccountError):
            event_from_dict({**edit.to_dict(), "queue_limits": bad})
    # an event from before queue limits reads as before
    old = {"kind": "edit-queue", "timestamp": T, "queue": "debug", "priority": 3}
    assert apply(event_from_dict(old), acc).queue_limits["debug"].max_time_per_job == 600


def test_queue_node_and_time_limits_refuse_a_submission() -> None:
    acc = _queued(min_nodes_per_job=2, max_nodes_per_job=3, max_time_per_job=600)

    def submit(nodes: int, duration: float, queue: str | None = "debug") -> None:
        check_submit(acc, Holdings(), "alice", HeldJob(ALICE, None, False, nodes, 1,
                                                       duration), queue)

    submit(2, 600.0)
    submit(1, 0.0, queue=None)  # no queue, no queue limits
    with pytest.raises(PolicyError, match=r"requests 1 nodes, fewer than the "
                                          r"min-nodes-per-job \(2\) of queue debug"):
        submit(0, 60.0)  # no node count: one node
    with pytest.raises(PolicyError, match=r"more than the max-nodes-per-job \(3\)"):
        submit(4, 60.0)
    with pytest.raises(PolicyError, match=r"a time limit of 601s, over the "
                                          r"max-time-per-job \(600s\) of queue debug"):
        submit(2, 601.0)
    with pytest.raises(PolicyError, match="no time limit"):
        submit(2, 0.0)


def test_a_queue_running_limit_holds_back_an_associations_next_job_there() -> None:
    gate = LimitGate(_queued(max_running_jobs=1))
    job = PendingJob(1, 1, 1.0, BOB, "debug", Request(nslots=1, duration=10.0))
    other = PendingJob(2, 1, 2.0, BOB, "batch", Request(nslots=1, duration=10.0))
    assert gate.refusal(job) is None
    gate.adopt(10, BOB, None, 1, 1, "debug")
    assert gate.refusal(job) == \
        "max-running-jobs limit (1) of queue debug reached for bob/theory"
    assert gate.refusal(other) is None  # another queue
    assert gate.refusal(PendingJob(3, 1, 3.0, ALICE, "debug", Request(
        nslots=1, duration=10.0), bank="physics")) is None  # another association
    gate.set_accounts(apply(UserEdit(timestamp=T, username="bob", bank="theory",
                                     shares=2), gate.accounts))
    assert gate.refusal(job) is not None  # counted again under the new accounts
    gate.end(10)
    assert gate.refusal(job) is None and gate.in_queue == {}
