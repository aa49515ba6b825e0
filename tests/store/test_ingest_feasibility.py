"""The ingest refuses at submission what could never run, and stores nothing for it.

Runs against fakeredis and a real redis-server, with three partitions so
that a dependency's target usually lives in another partition than the
job naming it. Covered: infeasible jobs (the scheduler's note), unknown
``after*`` targets (the id as typed), a request mixing good and refused
jobs, the inventory re-read when the recorded resources change, and an
inventory the ingest cannot read (the check is off, the job is stored).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes.config import InstanceConfig
from fluxes.domain.graph.table import recorded_table
from fluxes.formats.jobid import encode
from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
from fluxes.store.instance import Instance, InstanceURI, record_instance
from fluxes.store.keys import Keys
from tests.backends import OnFakeRedis, OnRealRedis
from workers.ingest import IngestWorker

NS = "t"
RACKS = Path(__file__).parent.parent / "cases" / "graph" / "racks.graphml"
PARTITIONS = 3


def resources(nodes: int) -> bytes:
    return orjson.dumps({"config": [{"hosts": f"node[0-{nodes - 1}]", "cores": "0-3"}]})


def rack_spec(nodes: int) -> dict[str, Any]:
    """Nodes under one rack, a shape only a graph can hold."""
    return Jobspec.from_dict({
        "version": 1,
        "resources": [{"type": "rack", "count": 1, "with": [
            {"type": "node", "count": nodes, "with": [
                {"type": "slot", "count": 1, "label": "task",
                 "with": [{"type": "core", "count": 1}]}]}]}],
        "tasks": [{"command": ["true"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"cwd": "/tmp"}}}).to_dict()


def spec(**kw: Any) -> dict[str, Any]:
    return Jobspec.from_command(["true"], **kw).to_dict()


def submit(instance: Instance, worker: IngestWorker, *docs: dict[str, Any]) -> list[Any]:
    """Each job's id, or its error line."""
    client = Client(instance, user="me")
    [key] = client._send([{"t": "submit", "jobs": [{"jobspec": d} for d in docs]}])
    worker.step()
    [answer] = client._wait(key, 1.0)
    return [r.get("id", r.get("error")) for r in answer["jobs"]]


def stored_jobs(client: redis.Redis) -> set[bytes]:
    """Every job hash and eventlog in the store."""
    return set(client.scan_iter(match="{t*}:job:*"))


class FeasibilityContract:
    """Subclasses provide ``client``."""

    @pytest.fixture
    def instance(self, client: redis.Redis) -> Instance:
        client.hset(Keys(NS).instance, mapping={
            "partitions": PARTITIONS, "owner": "me", "owner_uid": 1000,
            "resources": resources(2)})
        return Instance(InstanceURI("redis://unused", NS), client=client)

    @pytest.fixture
    def worker(self, instance: Instance) -> IngestWorker:
        worker = IngestWorker(instance, name="ingest-a")
        worker.setup()
        return worker

    def test_infeasible_jobs_are_refused_and_nothing_is_stored(
            self, instance: Instance, worker: IngestWorker) -> None:
        assert submit(instance, worker, spec(nnodes=5, ntasks=5, exclusive=True),
                      spec(cores_per_task=100)) == [
            "job requests 5 nodes, only 2 exist",
            "job requests 100 cores per slot, nodes have at most 4"]
        assert stored_jobs(instance.redis) == set()
        for p in range(PARTITIONS):
            assert instance.redis.xlen(instance.keys.jm_new(p)) == 0
        assert worker.submitted == 0

    def test_dependencies_on_existing_jobs_in_any_partition_are_accepted(
            self, instance: Instance, worker: IngestWorker) -> None:
        targets = submit(instance, worker, *[spec()] * 6)
        assert {t % PARTITIONS for t in targets} == set(range(PARTITIONS))
        docs = [spec(dependencies=[f"{scheme}:{encode(t, 'f58')}"])
                for scheme, t in zip(("afterok", "afterany", "afternotok", "after",
                                      "afterexcept", "afterok"), targets, strict=True)]
        dependents = submit(instance, worker, *docs)
        assert all(isinstance(j, int) for j in dependents)

    def test_unknown_dependency_target_is_refused_naming_the_id_as_typed(
            self, instance: Instance, worker: IngestWorker) -> None:
        [real] = submit(instance, worker, spec())
        before = stored_jobs(instance.redis)
        # ids in every partition, in three encodings, none of them submitted
        typed = [encode(real + 1, "f58"), str(real + 2), hex(real + 3)]
        docs = [spec(dependencies=[f"afterok:{encode(real, 'f58')}", f"afterok:{t}"])
                for t in typed]
        assert submit(instance, worker, *docs) == [
            f"dependency: afterok: job {t} not found" for t in typed]
        assert stored_jobs(instance.redis) == before

    def test_other_schemes_are_not_looked_up(self, instance: Instance,
                                             worker: IngestWorker) -> None:
        [jobid] = submit(instance, worker, spec(dependencies=["begin-time:+1h"]))
        assert isinstance(jobid, int)

    def test_mixed_request_stores_only_the_good_job(self, instance: Instance,
                                                    worker: IngestWorker) -> None:
        good, infeasible, orphan = submit(
            instance, worker, spec(), spec(nnodes=3, ntasks=3, exclusive=True),
            spec(dependencies=["afterany:12345"]))
        assert isinstance(good, int)
        assert infeasible == "job requests 3 nodes, only 2 exist"
        assert orphan == "dependency: afterany: job 12345 not found"
        # the job hash, holding its short eventlog index
        assert stored_jobs(instance.redis) == {instance.keys.job(good).encode()}
        assert instance.redis.hget(instance.keys.job(good), "ev")

    def test_inventory_is_reloaded_when_the_resources_change(
            self, instance: Instance, worker: IngestWorker) -> None:
        five = spec(nnodes=5, ntasks=5, exclusive=True)
        assert submit(instance, worker, five) == ["job requests 5 nodes, only 2 exist"]
        instance.redis.hset(instance.keys.instance, "resources", resources(8))
        worker.refresh(force=True)
        assert isinstance(submit(instance, worker, five)[0], int)

    def test_unreadable_inventory_turns_the_check_off(
            self, instance: Instance, worker: IngestWorker) -> None:
        instance.redis.hset(instance.keys.instance, "resources",
                            orjson.dumps({"path": "/nonexistent/R.json"}))
        worker.refresh(force=True)
        assert worker.feasibility is None
        # stored: the scheduler, which reads its R where it runs, judges it
        assert isinstance(submit(instance, worker, spec(nnodes=5, ntasks=5,
                                                        exclusive=True))[0], int)

    def test_a_recorded_graph_judges_rack_jobs_and_is_reread_by_its_digest(
            self, instance: Instance, worker: IngestWorker) -> None:
        table = recorded_table({"graph": str(RACKS)})
        record_instance(instance.redis, NS, PARTITIONS, InstanceConfig(), table, ("me", 1000))
        worker.refresh(force=True)
        ok, refused = submit(instance, worker, rack_spec(2), rack_spec(3))
        assert isinstance(ok, int)
        assert "cannot hold" in refused
        # the resources are read again only when their digest changes
        instance.redis.hset(instance.keys.instance, "resources", resources(2))
        worker.refresh(force=True)
        assert isinstance(submit(instance, worker, rack_spec(2))[0], int)
        record_instance(instance.redis, NS, PARTITIONS, InstanceConfig(),
                        orjson.loads(resources(2)), ("me", 1000))
        worker.refresh(force=True)
        # a new record (a new digest): the plain pool cannot hold a rack
        assert not isinstance(submit(instance, worker, rack_spec(2))[0], int)


class TestFakeRedis(FeasibilityContract, OnFakeRedis):
    """The contract on fakeredis."""


class TestRealRedis(FeasibilityContract, OnRealRedis):
    """The contract on a real redis-server."""
