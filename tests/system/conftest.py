"""System-test fixtures: a real instance (redis-server + worker processes) per module."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluxes.domain.job.events import Event
from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.invariants import check_exclusive, check_jobs
from fluxes.proc.launcher import Launcher
from fluxes.proc.redis_server import redis_server_binary
from fluxes.store.instance import Instance


def need_redis() -> None:
    """Skip without redis-server, except under CI where it must be there."""
    import os

    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI is set")
        pytest.skip("redis-server is not installed")


@contextlib.contextmanager
def running_instance(**options: Any) -> Iterator[Launcher]:
    """A private instance (2 nodes x 4 cores unless ``options`` say otherwise, a 2 s
    kill grace), every worker a real process; stopped and removed afterwards."""
    need_redis()
    settings: dict[str, Any] = {"nodes": 2, "cores_per_node": 4,
                                "config_text": '[exec]\nkill-timeout = "2s"\n', **options}
    with tempfile.TemporaryDirectory(prefix="fluxes-sys-") as tmp:
        inst = Launcher(state_dir=Path(tmp), **settings)
        inst.start()
        try:
            yield inst
        finally:
            inst.stop()


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """A private instance: 2 nodes x 4 cores, every worker a real process."""
    with running_instance() as inst:
        yield inst


@pytest.fixture
def uri(launcher: Launcher) -> str:
    """The instance URI for ``fluxes --uri``."""
    return str(launcher.uri)


def wait_all(launcher: Launcher, inst: Instance, ids: list[int], timeout: float = 120.0,
             chaos: object = None) -> None:
    """Supervise (restarting killed workers, calling ``chaos`` each round) until every
    job of ``ids`` is inactive."""
    deadline = time.monotonic() + timeout
    left = set(ids)
    while left and time.monotonic() < deadline:
        launcher.supervise_once()
        if callable(chaos):
            chaos()
        pipe = inst.redis.pipeline(transaction=False)
        batch = sorted(left)[:2000]
        for jobid in batch:
            pipe.hget(inst.keys.job(jobid), "result")
        for jobid, result in zip(batch, pipe.execute(), strict=True):
            if result:
                left.discard(jobid)
        time.sleep(0.05)
    assert not left, f"{len(left)} jobs still active"


def check_completed(inst: Instance, ids: list[int]) -> dict[int, list[Event]]:
    """Every job of ``ids`` completed, and no core or gpu ran two of them at once (the
    drills' checks); their eventlogs."""
    logs = collect.eventlogs(inst, ids)
    _jobs, report = check_jobs(logs, dict.fromkeys(ids, JobResult.COMPLETED))
    assert report.ok, [str(v) for v in report.violations[:5]]
    double = check_exclusive(logs, collect.rsets(inst, ids))
    assert not double, [str(v) for v in double[:5]]
    return logs
