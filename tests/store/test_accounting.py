"""Accounting in Redis: the worker folds the journal into usage under a lease with fenced
writes, equal to a fold from scratch after kills between blocks and to a rebuild; the
admin stream appends only what applies to the state it was checked against."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.accounting.banks import BankAdd, BankDelete, UserAdd
from fluxes.domain.accounting.usage import JobCharge, UsageState
from fluxes.domain.job import events as ev
from fluxes.store import accounting as store_module
from fluxes.store.accounting import (
    UsageStore,
    append_admin,
    decode_entry,
    fair_share_now,
    load_accounts,
    rebuild,
)
from fluxes.store.eventstore import EventStore, FencedError
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.accounting import AccountingWorker

KEYS = Keys("t")
T = 1000.0
H = 600.0
#: A job's life after submit and validate: (name, context, extras), one step at a time.
LIFE: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("depend", {}, None), ("priority", {"priority": 16}, None),
    ("alloc", {}, {"ranks": "0-1", "nodelist": "n[0-1]"}), ("start", {}, None),
    ("finish", {"status": 0}, None), ("release", {"ranks": "all", "final": True}, None),
    ("free", {}, None), ("clean", {}, None)]


@pytest.fixture(autouse=True)
def _short_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small blocks (many writes), no blocking reads, no linger, no waiting for leases."""
    monkeypatch.setattr(AccountingWorker, "block_ms", 10)
    monkeypatch.setattr(AccountingWorker, "read_count", 7)
    monkeypatch.setattr(AccountingWorker, "linger_s", 0.0)
    monkeypatch.setattr(AccountingWorker, "acquire_every_s", 0.0)


class Workload:
    """Jobs pushed through their life a random step at a time, some canceled while
    pending, with clocks that step back now and then."""

    def __init__(self, client: redis.Redis, njobs: int, seed: int) -> None:
        self.store = EventStore(client, KEYS)
        client.set(KEYS.jm_fence(0), "1")
        self.rng = random.Random(seed)
        self.njobs = njobs
        self.next_id = 1
        self.progress: dict[int, int] = {}
        self.clock = T

    def more(self, n: int) -> None:
        """Write ``n`` more events (new jobs or the next event of a job)."""
        rng = self.rng
        for _ in range(n):
            self.clock += rng.uniform(-2, 30)
            movable = [j for j, done in self.progress.items() if done < 2 + len(LIFE)]
            if self.next_id <= self.njobs and (not movable or rng.random() < 0.3):
                jobid, self.next_id = self.next_id, self.next_id + 1
                submit = ev.decode("submit", self.clock, {"urgency": 16,
                                                          "userid": 1000 + jobid % 3,
                                                          "flags": 0, "version": 1})
                extra: dict[str, Any] | None = {"name": "x", "ncores": rng.randint(1, 8), "nnodes": 1,
                         "ngpus": rng.randint(0, 1), "bank": rng.choice(["", "a", "b"])}
                batch = self.store.batch()
                batch.append(KEYS.eventlog(jobid), jobid, 0,
                             [submit, ev.decode("validate", self.clock)], [extra, None])
                self.store.commit(batch)
                self.progress[jobid] = 2
            elif movable:
                jobid = rng.choice(movable)
                done = self.progress[jobid]
                batch = self.store.batch()
                if done == 3 and rng.random() < 0.2:  # canceled while pending
                    events = [ev.decode("exception", self.clock, {
                        "type": "cancel", "severity": 0, "note": ""}),
                        ev.decode("clean", self.clock)]
                    batch.append(KEYS.eventlog(jobid), jobid, done, events)
                    self.progress[jobid] = 2 + len(LIFE)
                else:
                    name, ctx, extra = LIFE[done - 2]
                    batch.append(KEYS.eventlog(jobid), jobid, done,
                                 [ev.decode(name, self.clock, ctx)], [extra])
                    self.progress[jobid] = done + 1
                self.store.commit(batch, token="1")


def from_scratch(client: redis.Redis, half_life: float = H) -> tuple[UsageState,
                                                                       list[JobCharge]]:
    """The whole journal folded at once, in memory."""
    state = UsageState(half_life)
    for _sid, fields in client.xrange(KEYS.journal(0)):
        decoded = decode_entry(fields)
        if decoded is not None:
            state.feed(*decoded)
    return state, state.take_changes().charges


def assert_stored_equals_scratch(client: redis.Redis, half_life: float = H) -> None:
    state, charges = from_scratch(client, half_life)
    assert charges and state.accums  # the workload ended some allocations
    stored = UsageStore(client, KEYS)
    part = stored.partition(0)
    assert part.half_life == half_life
    assert part.accums == state.accums  # exactly: the same operations in the same order
    assert part.open == state.open
    assert sorted(stored.charges(0.0)) == sorted(charges)
    last = client.xrevrange(KEYS.journal(0), count=1)[0][0].decode()
    assert stored.position(0)[0] == last
    # the active jobs per association, kept by each block's write: a count from scratch
    counts: dict[tuple[int, str], int] = {}
    for job in state.open.values():
        counts[job.key] = counts.get(job.key, 0) + 1
    assert stored.active(0) == (last, counts)
    wanted = [*counts, (4242, "nobody")]
    assert stored.active_counts(wanted) == (counts, [last])


def _field(key: tuple[int, str]) -> str:
    return f"{key[0]}:{key[1]}"


def catch_up(worker: AccountingWorker, client: redis.Redis) -> None:
    """Step ``worker`` until it leads and has folded the whole journal."""
    last = client.xrevrange(KEYS.journal(0), count=1)[0][0].decode()
    for _ in range(1000):
        folder = worker.folders.get(0)
        if folder is not None and folder.position == last:
            return
        worker.step()
    raise AssertionError("the worker never caught up")


class AccountingContract:
    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        client.hset(KEYS.instance, "config", f'[accounting]\nhalf-life = "{H}s"\n')
        return Instance(InstanceURI("redis://unused", "t"), client=client)

    def worker(self, instance: Instance, name: str) -> AccountingWorker:
        w = AccountingWorker(instance, name)
        w.setup()
        return w

    def test_the_worker_s_usage_equals_a_fold_from_scratch(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 25, seed=1)
        a, b = self.worker(instance, "a"), self.worker(instance, "b")
        for _ in range(40):
            load.more(6)
            a.step()
            b.step()
        catch_up(a, client)
        assert not b.folders and b.processed == 0  # one folder at a time
        assert client.xlen(KEYS.dead_letters) == 0
        assert_stored_equals_scratch(client)

    def test_kills_between_blocks_change_nothing(self, instance: Instance,
                                                 client: redis.Redis) -> None:
        load = Workload(client, 30, seed=2)
        rng = random.Random(2)
        for round_ in range(30):
            load.more(rng.randint(1, 12))
            w = self.worker(instance, f"w{round_ % 2}")
            for _ in range(rng.randint(1, 3)):
                w.step()
            # killed without a word: its lease runs out
            client.delete(KEYS.acct_lease(0))
        catch_up(self.worker(instance, "last"), client)
        assert_stored_equals_scratch(client)

    def test_a_rebuild_equals_the_fold_and_the_worker_goes_on_after_it(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 20, seed=3)
        w = self.worker(instance, "w")
        load.more(60)
        w.step()
        [done] = rebuild(client, KEYS, H, holder="rebuilder")
        assert done.took_over_from == "w" and done.entries == client.xlen(KEYS.journal(0))
        assert_stored_equals_scratch(client)
        load.more(40)
        w.step()  # its first write is refused (fenced): it stands by, then takes over
        assert not w.folders
        catch_up(w, client)
        assert_stored_equals_scratch(client)

    def test_a_deposed_worker_writes_nothing(self, instance: Instance,
                                             client: redis.Redis) -> None:
        load = Workload(client, 10, seed=4)
        a = self.worker(instance, "a")
        load.more(20)
        a.step()
        client.delete(KEYS.acct_lease(0))
        b = self.worker(instance, "b")
        load.more(20)
        catch_up(b, client)
        before = client.hgetall(KEYS.acct_usage(0)), client.hgetall(KEYS.acct_open(0))
        folded = a.processed
        a.step()  # its renewal is not due: it folds, its write is refused
        assert a.processed == folded and not a.folders
        assert (client.hgetall(KEYS.acct_usage(0)), client.hgetall(KEYS.acct_open(0))) == \
            before

    def test_a_fenced_write_raises(self, client: redis.Redis) -> None:
        store = UsageStore(client, KEYS)
        store.ensure_groups()
        token = store.take_over(0, "x", 10_000)
        store.take_over(0, "y", 10_000)
        with pytest.raises(FencedError, match="stale"):
            store.reset(0, token, H)

    def test_a_new_half_life_refolds_the_partition(self, instance: Instance,
                                                   client: redis.Redis) -> None:
        load = Workload(client, 10, seed=5)
        load.more(50)
        w = self.worker(instance, "w")
        catch_up(w, client)
        w.teardown()
        client.hset(KEYS.instance, "config", '[accounting]\nhalf-life = "0"\n')
        w = self.worker(Instance(InstanceURI("redis://unused", "t"), client=client), "w")
        catch_up(w, client)
        assert_stored_equals_scratch(client, half_life=0.0)

    def test_bad_entries_are_dead_lettered_and_passed_over(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 3, seed=6)
        load.more(5)
        client.xadd(KEYS.journal(0), {"j": "77", "s": "0", "n": "submit", "t": "5.0",
                                      "c": orjson.dumps({"userid": "root"})})
        client.xadd(KEYS.journal(0), {"j": "78", "n": "alloc", "t": "oops"})
        load.more(10)
        catch_up(self.worker(instance, "w"), client)
        letters = [f[b"error"].decode() for _i, f in client.xrange(KEYS.dead_letters)]
        assert len(letters) == 2 and "userid" in letters[0]
        assert 77 not in UsageStore(client, KEYS).partition(0).open

    def test_the_admin_stream_appends_what_applies_after_a_race(
            self, client: redis.Redis) -> None:
        append_admin(client, KEYS, lambda _a: BankAdd(timestamp=T, bank="root", shares=1))
        seen: list[list[str]] = []

        def racing(sneak: BankAdd | BankDelete, user: str) -> Any:
            def make(accounts: Any) -> UserAdd:
                seen.append(sorted(b for b, bank in accounts.banks.items() if bank.active))
                if len(seen) == 1:  # another administrator writes between read and append
                    append_admin(client, KEYS, lambda _a: sneak)
                return UserAdd(timestamp=T, username=user, userid=len(user), bank="root")
            return make

        _event, after = append_admin(client, KEYS, racing(
            BankAdd(timestamp=T, bank="b", parent="root", shares=1), "u"))
        assert seen == [["root"], ["b", "root"]]  # checked again on the newer state
        assert after == load_accounts(client, KEYS) and after.association("u", "root")
        seen.clear()
        with pytest.raises(ValueError, match="no bank 'root'"):
            # the race made the event impossible: it is never written
            append_admin(client, KEYS, racing(BankDelete(timestamp=T, bank="root"), "vv"))
        assert client.xlen(KEYS.accounting) == 4

    def test_the_admin_stream_appends_many_events_all_or_none(
            self, client: redis.Redis) -> None:
        from fluxes.store.accounting import append_admin_many

        added, after = append_admin_many(client, KEYS, lambda _a: [
            BankAdd(timestamp=T, bank="root", shares=1),
            BankAdd(timestamp=T, bank="a", parent="root", shares=2),
            UserAdd(timestamp=T, username="x", userid=7, bank="a")])
        assert len(added) == 3 and client.xlen(KEYS.accounting) == 3
        assert after == load_accounts(client, KEYS) and after.association("x", "a")
        with pytest.raises(ValueError, match="no bank 'nope'"):
            append_admin_many(client, KEYS, lambda _a: [
                BankAdd(timestamp=T, bank="b", parent="root", shares=1),
                UserAdd(timestamp=T, username="y", userid=8, bank="nope")])
        assert client.xlen(KEYS.accounting) == 3  # the good one before it was not written

    def test_fair_share_from_the_stored_usage(self, instance: Instance,
                                              client: redis.Redis) -> None:
        for event in (BankAdd(timestamp=T, bank="root", shares=1),
                      BankAdd(timestamp=T, bank="a", parent="root", shares=1),
                      BankAdd(timestamp=T, bank="b", parent="root", shares=3),
                      UserAdd(timestamp=T, username="x", userid=1000, bank="a"),
                      UserAdd(timestamp=T, username="y", userid=1001, bank="b"),
                      UserAdd(timestamp=T, username="z", userid=1002, bank="b")):
            append_admin(client, KEYS, lambda _a, e=event: e)  # type: ignore[misc]
        load = Workload(client, 12, seed=7)
        load.more(120)
        rebuild(client, KEYS, H)
        now = load.clock + 10
        table = fair_share_now(client, KEYS, instance.config(), now)
        usage = UsageStore(client, KEYS).decayed(now)
        assert table.total_usage == pytest.approx(sum(f.core_seconds for f in usage.values()))
        assert table.enabled and {(1000, "a"), (1001, "b"), (1002, "b")} <= set(table.factors)


    def test_counts_missing_or_wrong_are_counted_again_by_the_next_holder(
            self, instance: Instance, client: redis.Redis) -> None:
        load = Workload(client, 20, seed=9)
        load.more(60)
        rebuild(client, KEYS, H)
        client.delete(KEYS.acct_active(0))  # a model written before the counts existed
        catch_up(self.worker(instance, "w"), client)
        assert_stored_equals_scratch(client)
        assert UsageStore(client, KEYS).active(0)[1]  # some jobs are still active
        client.delete(KEYS.acct_lease(0))
        client.hset(KEYS.acct_active(0), mapping={"1000:a": 99, "x:y": "z", "1001:b": "?"})
        load.more(10)
        catch_up(self.worker(instance, "v"), client)
        assert_stored_equals_scratch(client)
        # a rebuild from a base copy (as after a journal trim) counts the base's open jobs
        assert store_module.save_base(client, KEYS, 0) is not None
        client.delete(KEYS.acct_active(0))
        stored = UsageStore(client, KEYS)
        before = stored.position(0)[0]
        stored.reset(0, stored.take_over(0, "x", 10_000), H)
        state, _charges = from_scratch(client)
        assert stored.active(0) == (before, state.active)
        rebuild(client, KEYS, H)
        assert_stored_equals_scratch(client)

    def test_the_usage_mark_moves_with_blocks_that_change_usage_only(
            self, instance: Instance, client: redis.Redis) -> None:
        store, events = UsageStore(client, KEYS), EventStore(client, KEYS)
        client.set(KEYS.jm_fence(0), "1")
        w = self.worker(instance, "w")
        contexts: dict[str, dict[str, Any]] = {
            "submit": {"urgency": 16, "userid": 1000, "flags": 0, "version": 1},
            "priority": {"priority": 16}, "finish": {"status": 0},
            "release": {"ranks": "all", "final": True}}

        def write(jobid: int, seq: int, names: list[str], extras: list[Any]) -> None:
            batch = events.batch()
            batch.append(KEYS.eventlog(jobid), jobid, seq,
                         [ev.decode(n, T, contexts.get(n, {})) for n in names], extras)
            events.commit(batch, token="1")
            catch_up(w, client)

        assert store.usage_marks() == (None,)
        write(1, 0, ["submit", "validate", "depend", "priority"], [{"ncores": 2}, None,
                                                                    None, None])
        assert store.usage_marks() == (None,)  # a pending job uses nothing yet
        write(1, 4, ["alloc"], [{"ranks": "0"}])
        started = store.usage_marks()
        assert started[0] is not None
        write(2, 0, ["submit", "validate"], [{"ncores": 1}, None])
        assert store.usage_marks() == started
        write(1, 5, ["start", "finish", "release", "free"], [None] * 4)
        ended = store.usage_marks()
        assert ended[0] is not None and ended != started

    def test_holdings_from_the_folded_active_jobs(self, instance: Instance,
                                                  client: redis.Redis) -> None:
        for event in (BankAdd(timestamp=T, bank="root", shares=1),
                      BankAdd(timestamp=T, bank="a", parent="root", shares=1),
                      UserAdd(timestamp=T, username="x", userid=1000, bank="a"),
                      UserAdd(timestamp=T, username="y", userid=1001, bank="root")):
            append_admin(client, KEYS, lambda _a, e=event: e)  # type: ignore[misc]
        load = Workload(client, 12, seed=8)
        load.more(70)
        rebuild(client, KEYS, H)
        accounts = load_accounts(client, KEYS)
        held = UsageStore(client, KEYS).holdings(accounts)
        state, _charges = from_scratch(client)
        mine = [j for j in state.open.values() if j.userid == 1000 and j.bank in ("", "a")]
        assert mine  # the workload left some of x's jobs active
        got = held.by_assoc[("x", "a")]
        assert got.active == len(mine)
        assert got.running == sum(1 for j in mine if j.t_alloc is not None)
        assert got.cores == sum(j.ncores for j in mine if j.t_alloc is not None)
        assert held.by_bank["root"].active >= got.active


class TestFakeRedis(AccountingContract, OnFakeRedis):
    pass


@pytest.mark.redis
class TestRealRedis(AccountingContract, OnRealRedis):
    pass


def test_decode_entry_reads_only_what_usage_needs() -> None:
    assert decode_entry({b"j": b"1", b"n": b"finish", b"t": b"x"}) is None
    # a start is read for its time only (a staged job is charged from it)
    assert decode_entry({b"j": b"1", b"n": b"start", b"t": b"7", b"c": b"not json"}) == \
        (1, "start", 7.0, {}, {})
    assert decode_entry({b"j": b"1", b"n": b"free", b"t": b"5", b"c": b"not json"}) == \
        (1, "free", 5.0, {}, {})
    with pytest.raises(ValueError):
        decode_entry({b"j": b"1", b"n": b"submit", b"t": b"5", b"c": b"[1]"})
    assert store_module.HALF_LIFE_FIELD.startswith("@")  # never a uid:bank field
