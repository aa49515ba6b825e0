"""The ingest charges every job to an association once banks exist (docs/accounting.md):
the bank a job names or the user's default, recorded in the submit entry's extras;
a user without a bank, a bank the user is not in, and a job over max-active-jobs
are refused, however many come in one request (the fold's lag lets none through)."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.accounting.banks import AccountEvent, BankAdd, UserAdd
from fluxes.domain.accounting.limits import journal_id
from fluxes.domain.job import events as ev
from fluxes.domain.job.record import unpacked_extra
from fluxes.formats.jobspec import Jobspec
from fluxes.store import ingest as ingest_store
from fluxes.store.accounting import UsageStore
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.accounting import AccountingWorker
from workers.ingest import IngestWorker

NS = "t"


def admin(instance: Instance, event: AccountEvent) -> None:
    instance.redis.xadd(instance.keys.accounting, {"d": orjson.dumps(event.to_dict())})


def submit(instance: Instance, worker: IngestWorker, user: str, n: int = 1,
           bank: str | None = None) -> list[dict[str, Any]]:
    attrs = {"system": {"bank": bank}} if bank else None
    spec = Jobspec.from_command(["true"], attributes=attrs).to_dict()
    client = Client(instance, user=user)
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": spec}] * n}])
    worker.step()
    [answer] = client._wait(key, 1.0)
    jobs: list[dict[str, Any]] = answer["jobs"]
    return jobs


def submit_extras(instance: Instance) -> list[dict[str, Any]]:
    return [unpacked_extra(orjson.loads(f[b"x"])) or {}
            for _id, f in instance.redis.xrange(instance.keys.journal(0))
            if f[b"n"] == b"submit"]


class IngestChargesContract:
    """The worker's step is driven by the test."""

    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        keys = Keys(NS)
        client.hset(keys.instance, mapping={"partitions": 1, "owner": "me",
                                            "owner_uid": 1000})
        client.hset(keys.users, mapping={"alice": 1001, "bob": 1002})
        return Instance(InstanceURI("redis://unused", NS), client=client)

    def test_banks_and_the_active_limit_at_submission(self, instance: Instance) -> None:
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        assert "id" in submit(instance, worker, "alice")[0]  # no bank yet: no rule
        t = time.time()
        admin(instance, BankAdd(timestamp=t, bank="root", shares=1))
        admin(instance, BankAdd(timestamp=t, bank="physics", parent="root", shares=1))
        admin(instance, BankAdd(timestamp=t, bank="chem", parent="root", shares=1))
        admin(instance, UserAdd(timestamp=t, username="alice", userid=1001, bank="physics",
                                limits={"max_active_jobs": 2}))
        admin(instance, UserAdd(timestamp=t, username="alice", userid=1001, bank="chem"))
        [refused] = submit(instance, worker, "bob")
        assert "fluxes account add-user --username=bob" in refused["error"]
        [refused] = submit(instance, worker, "alice", bank="biology")
        assert refused["error"] == "user alice is not in bank biology (their banks: chem, " \
                                   "physics)"
        # the first job (before banks) is not charged to physics: two more fit, in one
        # request, and the third is refused although nothing was folded meanwhile
        three = submit(instance, worker, "alice", n=3)
        assert ["id" in r for r in three] == [True, True, False]
        assert three[2]["error"] == "max-active-jobs limit (2) reached for alice/physics"
        [again] = submit(instance, worker, "alice")
        assert again.get("error") == "max-active-jobs limit (2) reached for alice/physics"
        assert "id" in submit(instance, worker, "alice", bank="chem")[0]
        banks = [x.get("bank") for x in submit_extras(instance)]
        assert banks == [None, "physics", "physics", "chem"]

    def test_the_active_limit_counts_what_the_fold_counted_across_restarts(
            self, instance: Instance, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(AccountingWorker, "block_ms", 10)
        monkeypatch.setattr(AccountingWorker, "linger_s", 0.0)
        monkeypatch.setattr(AccountingWorker, "acquire_every_s", 0.0)
        client, keys = instance.redis, instance.keys
        t = time.time()
        admin(instance, BankAdd(timestamp=t, bank="root", shares=1))
        admin(instance, UserAdd(timestamp=t, username="alice", userid=1001, bank="root",
                                limits={"max_active_jobs": 3}))
        admin(instance, UserAdd(timestamp=t, username="bob", userid=1002, bank="root"))
        ingest = IngestWorker(instance, name="ingest-a")
        ingest.setup()
        ids = [r["id"] for r in submit(instance, ingest, "alice", n=2)]
        submit(instance, ingest, "bob", n=2)
        assert len(ingest._ledger.recent) == 4  # nothing folded yet: the ledger counts them

        def fold() -> None:
            folder = AccountingWorker(instance, "acct")
            folder.setup()
            last = client.xrevrange(keys.journal(0), count=1)[0][0].decode()
            for _ in range(100):
                folder.step()
                if 0 in folder.folders and folder.folders[0].position == last:
                    break
            client.delete(keys.acct_lease(0))  # the next fold is a restarted worker

        fold()
        assert UsageStore(client, keys).active(0)[1] == {(1001, "root"): 2, (1002, "root"): 2}
        assert "id" in submit(instance, ingest, "alice")[0]
        assert len(ingest._ledger.recent) == 1  # the fold counted the first four: forgotten
        assert "id" not in submit(instance, ingest, "alice")[0]  # 2 folded + 1 recent
        fresh = IngestWorker(instance, name="ingest-b")  # a restart: an empty ledger
        fresh.setup()
        fold()
        [refused] = submit(instance, fresh, "alice")
        assert refused["error"] == "max-active-jobs limit (3) reached for alice/root"
        # one of alice's jobs ends: once folded, one more fits
        store = EventStore(client, keys)
        client.set(keys.jm_fence(0), "1")
        batch = store.batch()
        batch.append(keys.eventlog(ids[0]), ids[0], 2, [
            ev.decode("exception", t, {"type": "cancel", "severity": 0, "note": ""}),
            ev.decode("clean", t)])
        store.commit(batch, token="1")
        assert "id" not in submit(instance, fresh, "alice")[0]  # not folded yet
        fold()
        assert UsageStore(client, keys).active(0)[1] == {(1001, "root"): 2, (1002, "root"): 2}
        assert "id" in submit(instance, fresh, "alice")[0]
        assert "id" not in submit(instance, fresh, "alice")[0]

    def test_jobs_of_a_block_in_several_batches_wait_for_the_last_one_folded(
            self, instance: Instance, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ingest_store, "MAX_BATCH_EVENTS", 4)  # two jobs per batch
        t = time.time()
        admin(instance, BankAdd(timestamp=t, bank="root", shares=1))
        admin(instance, UserAdd(timestamp=t, username="alice", userid=1001, bank="root",
                                limits={"max_active_jobs": 10}))
        ingest = IngestWorker(instance, name="ingest-a")
        ingest.setup()
        assert all("id" in r for r in submit(instance, ingest, "alice", n=5))
        last = instance.redis.xrevrange(instance.keys.journal(0), count=1)[0][0].decode()
        # a fold that reached an earlier batch's end has not counted the later batches
        assert {r.journal_id for r in ingest._ledger.recent.values()} == {journal_id(last)}


class TestIngestChargesFake(IngestChargesContract, OnFakeRedis):
    """On fakeredis."""


class TestIngestChargesReal(IngestChargesContract, OnRealRedis):
    """On a real redis-server."""
