"""Recovery with real processes: kill -9 of the job manager and the scheduler under load."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher, WorkerSpec
from fluxes.store.client import Client
from fluxes.store.groups import stream_lags
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_JM
from tests.system.conftest import check_completed, need_redis, wait_all

pytestmark = pytest.mark.system


@pytest.fixture
def instance() -> Iterator[tuple[Launcher, Instance]]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-rec-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=2, cores_per_node=4)
        uri = launcher.start()
        try:
            yield launcher, Instance.connect(str(uri))
        finally:
            launcher.stop()


def sim(runtime: str = "20ms") -> dict[str, object]:
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()


def kill(launcher: Launcher, name: str) -> None:
    spec = launcher.worker(name)
    assert spec.proc is not None
    os.kill(spec.proc.pid, signal.SIGKILL)
    spec.proc.wait()


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def allocated(inst: Instance, jobid: int) -> bool:
    """The scheduler wrote the job's R: the work is under way."""
    return bool(inst.redis.hexists(inst.keys.job(jobid), "R"))


def fence(inst: Instance) -> int:
    """The job manager's lease epoch: one more each time a job manager takes it."""
    return int(inst.redis.get(inst.keys.jm_fence(0)) or 0)


def alloc_order(inst: Instance, ids: list[int]) -> list[int]:
    """The jobs of ``ids`` in the order their alloc events were written (journal order)."""
    wanted = set(ids)
    order = []
    for p in range(inst.keys.partitions):
        for _sid, fields in inst.redis.xrange(inst.keys.journal(p)):
            if fields.get(b"n") == b"alloc" and int(fields[b"j"]) in wanted:
                order.append(int(fields[b"j"]))
    return order


def test_job_manager_kill9_mid_thousand_jobs(instance: tuple[Launcher, Instance]) -> None:
    launcher, inst = instance
    ids = Client(inst).submit([{"jobspec": sim()}] * 1000)
    assert all(isinstance(i, int) for i in ids)
    wait_until("the first job to be allocated", lambda: allocated(inst, int(ids[0])))
    kill(launcher, "job-manager-0")
    # while it is down, the reports of the jobs that were running pile up for the next one
    inputs = [inst.keys.sched_resp(0), inst.keys.exec_events(0)]
    wait_until("reports waiting for the job manager", lambda: any(
        g.group == GROUP_JM and g.lag for g in stream_lags(inst.redis, inputs)))
    killed_epoch = fence(inst)
    kill_again = [True]

    def chaos() -> None:
        # the restarted one killed again once it leads (took the lease), mid-rebuild
        proc = launcher.worker("job-manager-0").proc
        if kill_again and proc is not None and proc.poll() is None \
                and fence(inst) > killed_epoch:
            kill(launcher, "job-manager-0")
            kill_again.clear()

    wait_all(launcher, inst, [int(i) for i in ids], chaos=chaos)
    check_completed(inst, [int(i) for i in ids])


def test_standby_job_manager_takes_over(instance: tuple[Launcher, Instance]) -> None:
    launcher, inst = instance
    spare = WorkerSpec("job-manager-standby", [sys.executable, "-m", "workers", "job-manager",
                                               "--uri", str(launcher.uri)])
    launcher.workers.append(spare)
    launcher._spawn(spare)
    ids = [int(i) for i in Client(inst).submit([{"jobspec": sim("50ms")}] * 300)]
    wait_until("the first job to be allocated", lambda: allocated(inst, ids[0]))
    # kill whichever holds the lease, and keep it dead: the other must finish the work
    holder = inst.redis.get(inst.keys.jm_lease(0)).decode()
    victim = next(w for w in launcher.workers
                  if w.proc is not None and holder.startswith(f"{w.name}@"))
    os.kill(victim.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
    launcher.workers.remove(victim)
    started = time.monotonic()
    wait_all(launcher, inst, ids)
    assert time.monotonic() - started < 60
    check_completed(inst, ids)


def test_scheduler_killed_twenty_times_under_load(instance: tuple[Launcher, Instance]) -> None:
    launcher, inst = instance
    client = Client(inst)
    ids: list[int] = []
    for _round in range(20):
        batch = [int(i) for i in client.submit([{"jobspec": sim("30ms")}] * 50)]
        ids += batch
        first = batch[0]
        wait_until("the round's first job to be allocated",
                   lambda: allocated(inst, first))  # noqa: B023 -- called before the loop goes on
        kill(launcher, "scheduler")
        deadline = time.monotonic() + 10
        while (launcher.worker("scheduler").proc.poll() is not None  # type: ignore[union-attr]
               and time.monotonic() < deadline):
            launcher.supervise_once()
            time.sleep(0.05)
    wait_all(launcher, inst, ids)
    check_completed(inst, ids)
    # each new scheduler resumed with the pending jobs in the same order: equal
    # priority, so first come first served, whatever the kills interrupted
    assert alloc_order(inst, ids) == sorted(ids)


def test_hot_standby_scheduler_takes_over_a_killed_leader() -> None:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-rec-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=2, cores_per_node=4,
                            standby_scheduler=True)
        inst = Instance.connect(str(launcher.start()))
        try:
            ids = [int(i) for i in Client(inst).submit([{"jobspec": sim("50ms")}] * 300)]
            wait_until("the first job to be allocated", lambda: allocated(inst, ids[0]))
            # kill -9 whichever leads, and keep it dead: the standby must finish the work
            holder = inst.redis.get(inst.keys.sched_lease(0)).decode()
            victim = next(w for w in launcher.workers
                          if w.name.startswith("scheduler") and holder.startswith(f"{w.name}@"))
            os.kill(victim.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            victim.proc.wait()  # type: ignore[union-attr]
            launcher.workers.remove(victim)
            wait_all(launcher, inst, ids)
            check_completed(inst, ids)
            [standby] = [w for w in launcher.workers if w.name.startswith("scheduler")]
            log = (Path(tmp) / "logs" / f"{standby.name}.log").read_text()
            # it took the leases over from the dead leader, not after they lapsed
            assert "taking over from a dead scheduler" in log
            assert inst.redis.get(inst.keys.sched_lease(0)).decode().startswith(standby.name)
        finally:
            launcher.stop()
