"""Staged starts with real workers: the scheduler frees a job early when its end is near and
stages the next job behind it (docs/scheduling-policies.md, "Staged starts"); a scheduler
killed while jobs are staged recovers their overlapping R at hello.

Whether two jobs ever run on one core at once is the exec worker's part (docs/exec.md): each
test checks it with the drills' check (fluxes/drill/invariants.py, check_exclusive).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import staged_info
from fluxes.drill import collect
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.instance import Instance
from tests.system.conftest import check_completed, need_redis, wait_all

pytestmark = pytest.mark.system


@pytest.fixture
def instance() -> Iterator[tuple[Launcher, Instance, Path]]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-stage-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=1, cores_per_node=2)
        uri = launcher.start()
        try:
            yield launcher, Instance.connect(str(uri)), Path(tmp)
        finally:
            launcher.stop()


def sim(runtime: str) -> dict[str, object]:
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()


def staged(logs: dict[int, list[ev.Event]]) -> dict[int, Any]:
    """The jobs whose alloc says they were staged, with what it says."""
    out = {}
    for jobid, log in logs.items():
        for event in log:
            if isinstance(event, ev.Alloc):
                info = staged_info(event.annotations)
                if info is not None:
                    out[jobid] = info
    return out


def test_short_jobs_are_staged_behind_the_running_ones(
        instance: tuple[Launcher, Instance, Path]) -> None:
    launcher, inst, _tmp = instance
    ids = [int(i) for i in Client(inst).submit([{"jobspec": sim("5ms")}] * 100)]
    wait_all(launcher, inst, ids)
    logs = check_completed(inst, ids)
    found = staged(logs)
    assert found, "no job was staged"
    for jobid, what in found.items():
        assert isinstance(what, dict) and what["after"], (jobid, what)
        assert set(what["after"]) <= set(ids)


def test_a_scheduler_killed_with_jobs_staged_recovers_them(
        instance: tuple[Launcher, Instance, Path]) -> None:
    launcher, inst, tmp = instance
    client = Client(inst)
    ids: list[int] = []
    for _round in range(5):
        ids += [int(i) for i in client.submit([{"jobspec": sim("50ms")}] * 20)]
        # wait until some job is staged: its R overlaps a running job's
        deadline = time.monotonic() + 30
        while not staged(collect.eventlogs(inst, ids)):
            assert time.monotonic() < deadline, "no job was staged"
            time.sleep(0.01)
        spec = launcher.worker("scheduler")
        assert spec.proc is not None
        os.kill(spec.proc.pid, signal.SIGKILL)
        spec.proc.wait()
        wait_all(launcher, inst, ids[-1:])
    wait_all(launcher, inst, ids)
    check_completed(inst, ids)
    # the hello recoveries adopted every R, overlapping or not
    log = (tmp / "logs" / "scheduler.log").read_text()
    assert "allocation not recovered" not in log and '"critical"' not in log
    assert log.count('"ready"') >= 6
