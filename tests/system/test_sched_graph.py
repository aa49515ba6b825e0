"""The scheduler on a resource graph: an instance whose [resource] is a GRUG recipe of racks.

Jobs asking for nodes under one rack are placed in one rack; a job the graph could
never hold is refused at submission; a killed scheduler comes back with every
allocation read back from the stored R (and its scheduling subgraph), and new jobs
never land on held resources.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from fluxes.drill import collect
from fluxes.drill.invariants import check_exclusive
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.instance import Instance
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

#: 2 racks x 2 nodes x 4 cores: node0, node1 in rack0, node2, node3 in rack1
RACKS = Path(__file__).parent.parent / "cases" / "graph" / "racks.graphml"
RACK_OF = {0: 0, 1: 0, 2: 1, 3: 1}


@pytest.fixture
def instance() -> Iterator[tuple[Launcher, Instance]]:
    need_redis()
    config = f'[resource]\ngraph = "{RACKS}"\n\n[exec]\nkill-timeout = "2s"\n'
    with tempfile.TemporaryDirectory(prefix="fluxes-graph-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), config_text=config)
        uri = launcher.start()
        try:
            yield launcher, Instance.connect(str(uri))
        finally:
            launcher.stop()


def rack_job(nodes: int, cores: int, runtime: str = "600s") -> dict[str, Any]:
    """``rack[1] -> node[nodes] -> slot[1] -> core[cores]``, a simulated run."""
    return Jobspec.from_dict({
        "version": 1,
        "resources": [{"type": "rack", "count": 1, "with": [
            {"type": "node", "count": nodes, "with": [
                {"type": "slot", "count": 1, "label": "task",
                 "with": [{"type": "core", "count": cores}]}]}]}],
        "tasks": [{"command": ["true"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"cwd": "/tmp", "exec": {"test": {
            "run_duration": runtime}}}}}).to_dict()


def wait_r(inst: Instance, jobid: int, timeout: float = 15.0) -> dict[str, Any]:
    """The job's stored R, once the scheduler wrote it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = inst.redis.hget(inst.keys.job(jobid), "R")
        if raw:
            doc: dict[str, Any] = orjson.loads(raw)
            return doc
        time.sleep(0.05)
    raise AssertionError(f"job {jobid} got no R")


def wait_status(inst: Instance, after: float, timeout: float = 15.0) -> dict[str, Any]:
    """The scheduler's published resource summary, once one newer than *after* is out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = inst.redis.get(inst.keys.sched_status)
        if raw:
            status: dict[str, Any] = orjson.loads(raw)
            if status["time"] > after:
                return status
        time.sleep(0.1)
    raise AssertionError("no scheduler status")


def wait_inactive(launcher: Launcher, inst: Instance, ids: list[int],
                  timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    left = set(ids)
    while left and time.monotonic() < deadline:
        launcher.supervise_once()
        for jobid in list(left):
            if inst.redis.hget(inst.keys.job(jobid), "result"):
                left.discard(jobid)
        time.sleep(0.1)
    assert not left, f"jobs {sorted(left)} still active"


def racks(doc: dict[str, Any]) -> set[int]:
    return {RACK_OF[r] for r in ResourceSet(doc).ranks}


def test_rack_jobs_and_a_scheduler_restart(instance: tuple[Launcher, Instance]) -> None:
    launcher, inst = instance
    client = Client(inst)
    # the graph, not the plain pool, judges at submission: 3 nodes under one rack never fit
    refused = client.submit([{"jobspec": rack_job(3, 1)}])[0]
    assert isinstance(refused, str) and "cannot hold" in refused
    a, b = (int(i) for i in client.submit([{"jobspec": rack_job(2, 3)},
                                           {"jobspec": rack_job(2, 3)}]))
    ra, rb = wait_r(inst, a), wait_r(inst, b)
    # each in one rack, on both its nodes; 3 cores of 4 each, so not the same rack
    assert len(racks(ra)) == 1 and len(racks(rb)) == 1 and racks(ra) != racks(rb)
    assert len(ResourceSet(ra).ranks) == 2 and len(ResourceSet(rb).ranks) == 2
    assert "scheduling" in ra  # what a restarted scheduler reads back

    spec = launcher.worker("scheduler")
    assert spec.proc is not None
    killed_at = time.time()
    os.kill(spec.proc.pid, signal.SIGKILL)
    spec.proc.wait()
    deadline = time.monotonic() + 10
    while (spec.proc is None or spec.proc.poll() is not None) and time.monotonic() < deadline:
        launcher.supervise_once()
        time.sleep(0.05)
    # the new scheduler recovered both allocations from their R: 12 of 16 cores held
    status = wait_status(inst, killed_at)
    assert status["allocated"]["ncores"] == 12 and status["free"]["ncores"] == 4
    # a rack job of 2 cores a node fits nowhere now (1 core free per node); one of 1
    # core a node fits under either rack, on the free cores only
    d, c = (int(i) for i in client.submit([{"jobspec": rack_job(2, 1)},
                                           {"jobspec": rack_job(2, 2)}]))
    rd = wait_r(inst, d)
    assert len(racks(rd)) == 1
    status = wait_status(inst, time.time())
    assert status["free"]["ncores"] == 2 and status["pending"] == 1
    assert inst.redis.hget(inst.keys.job(c), "R") is None
    # freeing a's rack lets c start there
    client.cancel([a])
    rc = wait_r(inst, c)
    assert racks(rc) == racks(ra)
    client.cancel([b, c, d])
    ids = [a, b, c, d]
    wait_inactive(launcher, inst, ids)
    logs = collect.eventlogs(inst, ids)
    double = check_exclusive(logs, collect.rsets(inst, ids))
    assert not double, [str(v) for v in double[:5]]
