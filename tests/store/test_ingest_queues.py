"""The ingest applies every queue admin event written before a submission it handles.

Runs against fakeredis and a real redis-server. The ingest re-reads users
and configuration once a second, but queue states before every block of
requests, so no test here waits.
"""

from __future__ import annotations

import time

import orjson
import pytest
import redis

from fluxes.domain.jm.queues import QueueEvent
from fluxes.domain.job.record import unpacked_extra
from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.ingest import IngestWorker

NS = "t"
CONFIG = """
[policy.jobspec.defaults.system]
queue = "batch"

[queues.batch]

[queues.debug]
"""


def admin(instance: Instance, kind: str, queue: str, reason: str | None = None) -> None:
    event = QueueEvent(kind=kind, queue=queue, timestamp=time.time(), reason=reason)
    instance.redis.xadd(instance.keys.queues, {"d": orjson.dumps(event.to_dict())})


def submit(instance: Instance, worker: IngestWorker, queue: str) -> dict[str, object]:
    spec = Jobspec.from_command(["true"], queue=queue).to_dict()
    client = Client(instance, user="me")
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": spec}]}])
    worker.step()
    [answer] = client._wait(key, 1.0)
    result: dict[str, object] = answer["jobs"][0]
    return result


class QueueStateContract:
    """Subclasses provide ``client``."""

    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        client.hset(Keys(NS).instance, mapping={"partitions": 1, "owner": "me",
                                                "owner_uid": 1000, "config": CONFIG})
        return Instance(InstanceURI("redis://unused", NS), client=client)

    def test_an_association_with_queues_submits_only_to_them(
            self, instance: Instance) -> None:
        from fluxes.domain.accounting.banks import BankAdd, QueueAdd, UserAdd

        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        t = time.time()
        for event in (BankAdd(timestamp=t, bank="root"), QueueAdd(timestamp=t, queue="debug"),
                      UserAdd(timestamp=t, username="me", userid=1000, bank="root",
                              queues=["debug"])):
            instance.redis.xadd(instance.keys.accounting,
                                {"d": orjson.dumps(event.to_dict())})
        assert "id" in submit(instance, worker, "debug")
        assert submit(instance, worker, "batch") == {
            "error": "me/root may not use queue batch (its queues: debug)"}

    def test_a_job_s_project_is_checked_and_recorded(self, instance: Instance) -> None:
        from fluxes.domain.accounting.banks import BankAdd, ProjectAdd, UserAdd

        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        t = time.time()
        for event in (BankAdd(timestamp=t, bank="root"), ProjectAdd(timestamp=t, project="p1"),
                      ProjectAdd(timestamp=t, project="p2"),
                      UserAdd(timestamp=t, username="me", userid=1000, bank="root",
                              projects=["p1"])):
            instance.redis.xadd(instance.keys.accounting,
                                {"d": orjson.dumps(event.to_dict())})

        def submit_project(project: str | None) -> dict[str, object]:
            attrs = {"system": {"project": project}} if project else None
            spec = Jobspec.from_command(["true"], attributes=attrs).to_dict()
            client = Client(instance, user="me")
            [key] = client._send([{"t": "submit", "jobs": [{"jobspec": spec}]}])
            worker.step()
            [answer] = client._wait(key, 1.0)
            result: dict[str, object] = answer["jobs"][0]
            return result

        assert "id" in submit_project(None)
        assert "id" in submit_project("*")
        assert submit_project("p2") == {
            "error": "me/root is not in project p2 (its projects: p1, *)"}
        projects = [(unpacked_extra(orjson.loads(f[b"x"])) or {}).get("project")
                    for _i, f in instance.redis.xrange(instance.keys.journal(0))
                    if f[b"n"] == b"submit"]
        assert projects == ["p1", "*"]  # none named: the association's default

    def test_disable_then_submit_is_refused_and_enable_then_submit_accepted(
            self, instance: Instance) -> None:
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        assert "id" in submit(instance, worker, "debug")
        admin(instance, "disable", "debug", "maintenance")
        assert submit(instance, worker, "debug") == {
            "error": "queue debug is disabled: maintenance"}
        assert "id" in submit(instance, worker, "batch")
        admin(instance, "enable", "debug")
        assert "id" in submit(instance, worker, "debug")

    def test_malformed_admin_entry_changes_nothing(self, instance: Instance) -> None:
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        instance.redis.xadd(instance.keys.queues, {"d": b"not json"})
        admin(instance, "disable", "debug", "later")
        assert submit(instance, worker, "debug") == {"error": "queue debug is disabled: later"}


class TestFakeRedis(QueueStateContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(QueueStateContract, OnRealRedis):
    """The contract on a private redis-server."""
