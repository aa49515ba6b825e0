"""Two job-list worker processes: one folds, the other stands by and takes over when the first
is SIGKILLed; the read model always equals a fresh fold of the journal, and
``fluxes admin rebuild-joblist`` repairs a broken one while both run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.drill import collect
from fluxes.drill.invariants import check_read_model
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.instance import Instance
from tests.system.conftest import need_redis
from tests.system.test_recovery import sim

pytestmark = pytest.mark.system

#: Hang guard for every wait: the lease takeover needs up to its TTL (10 s).
WAIT_S = 90.0


@pytest.fixture
def two() -> Iterator[tuple[Launcher, Instance, subprocess.Popen[bytes]]]:
    """A private instance plus a second job-list worker (``job-list-b``)."""
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-jl2-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=2, cores_per_node=4)
        uri = launcher.start()
        with open(Path(tmp) / "logs" / "job-list-b.log", "ab") as log:
            second = subprocess.Popen(
                [sys.executable, "-m", "workers", "job-list", "--uri", str(uri),
                 "--name", "job-list-b"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=dict(os.environ, FLUXES_LOG_FORMAT="json"))
        try:
            yield launcher, Instance.connect(str(uri)), second
        finally:
            if second.poll() is None:
                second.terminate()
                second.wait(15)
            launcher.stop()


def registered(inst: Instance) -> dict[str, dict[str, object]]:
    """The job-list workers in the registry, by name."""
    out = {}
    for name, raw in inst.redis.hgetall(inst.keys.workers).items():
        rec = orjson.loads(raw)
        if rec.get("kind") == "job-list":
            out[name.decode()] = rec
    return out


def until(what: str, check: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.1)


def run_jobs(inst: Instance, n: int) -> list[int]:
    ids = [int(i) for i in Client(inst).submit([{"jobspec": sim()}] * n, timeout=60)]
    until(f"{n} jobs to finish",
          lambda: all(inst.redis.hget(inst.keys.job(j), "result") for j in ids))
    until("the job list to catch up", lambda: collect.joblist_caught_up(inst))
    return ids


def model_violations(inst: Instance) -> list[str]:
    fresh, stored = collect.read_models(inst)
    return [str(v) for v in check_read_model(fresh, stored)]


def test_one_folds_the_other_takes_over_and_rebuild_repairs(
        two: tuple[Launcher, Instance, subprocess.Popen[bytes]],
        capsys: pytest.CaptureFixture[str]) -> None:
    launcher, inst, second = two
    until("both job-list workers to register", lambda: len(registered(inst)) == 2)
    ids = run_jobs(inst, 60)
    assert model_violations(inst) == []
    assert inst.redis.xlen(inst.keys.dead_letters) == 0
    leader = inst.redis.get(inst.keys.joblist_lease(0)).decode()
    # a worker registers its start before its first heartbeat says whether it leads
    until("the registry to show one leader", lambda: sorted(
        bool(r.get("leader")) for r in registered(inst).values()
        if "leader" in r) == [False, True])
    # SIGKILL the leader (and do not restart it): the standby takes over within the lease time
    if leader == "job-list-b":
        second.send_signal(signal.SIGKILL)
        second.wait()
        standby = next(n for n in registered(inst) if n != "job-list-b")
    else:
        spec = launcher.worker("job-list")
        assert spec.proc is not None
        spec.proc.send_signal(signal.SIGKILL)
        spec.proc.wait()
        standby = "job-list-b"
    ids += run_jobs(inst, 40)
    assert inst.redis.get(inst.keys.joblist_lease(0)).decode() == standby
    assert model_violations(inst) == []
    # break the read model, then repair it while the standby-turned-leader runs
    inst.redis.hincrby(inst.keys.joblist_counts(0), "state:RUN", 3)
    inst.redis.hdel(inst.keys.joblist_jobs(0), str(ids[0]))
    assert model_violations(inst) != []
    capsys.readouterr()
    assert main(["--uri", str(launcher.uri), "admin", "rebuild-joblist", "--json"]) == 0
    [done] = json.loads(capsys.readouterr().out)["partitions"]
    assert done["took_over_from"] == standby and done["skipped"] == 0
    assert done["jobs"] == len(ids)
    assert model_violations(inst) == []
    # the worker leads again and folds on
    run_jobs(inst, 10)
    until("the worker to take the job list back",
          lambda: inst.redis.get(inst.keys.joblist_lease(0)) == standby.encode())
    assert model_violations(inst) == []
    assert inst.redis.xlen(inst.keys.dead_letters) == 0
