"""Two ingest workers on one repeated request, on a Redis Cluster: the request claims of
each partition live in its slot, and the request is done once."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxes.store.connection import connect
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests.store.test_ingest_progress import announced, created
from tests.store.test_ingest_race import JOBS, after_records_read, answers, send_copy
from tests.system.test_connections import cluster, servers  # noqa: F401 (fixtures)
from workers import ingest as ingest_mod
from workers.ingest import IngestWorker

pytestmark = pytest.mark.system


def test_copy_in_two_ingests_on_a_cluster_is_done_once(cluster: str,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(ingest_mod, "BLOCK_MS", 10)
    monkeypatch.setattr(ingest_mod, "DEFER_S", 0.0)
    monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path / "state"))  # the ingests' logs
    client = connect(cluster)
    keys = Keys("t", 3)
    client.hset(keys.instance, mapping={"partitions": 3, "owner": "me", "owner_uid": 1000})
    instance = Instance(InstanceURI(cluster, "t"), client=client)
    a, b = IngestWorker(instance, name="ingest-a"), IngestWorker(instance, name="ingest-b")
    a.setup()
    b.setup()
    reply_key = send_copy(instance)

    def other_worker_handles_the_copy() -> None:
        send_copy(instance)
        b.step()

    after_records_read(a, other_worker_handles_the_copy)
    a.step()
    for _ in range(3):
        b.step()
    first, second = answers(instance, reply_key, 2)
    assert len(first) == len(JOBS) and first == second
    assert sorted(created(instance)) == sorted(announced(instance)) == sorted(first)
    # records in every partition (the scan reaches every node), no claim left behind
    assert len(list(client.scan_iter(match="{t:p*}:req:*"))) == 3
    assert not list(client.scan_iter(match="{t:p*}:claim:*"))
