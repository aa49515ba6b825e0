"""Hostile messages on a running instance (issue 14, sections 1-2): real worker processes,
a real redis-server, entries written with raw commands as an outside tester did.

Each test fails on the code before its fix: a forged hello of an older epoch left new
jobs in SCHED for good, a forged error suspended scheduling until the scheduler was
killed, a ``new`` for a job that does not exist looped the job manager through rebuilds,
a reply key of another type crash-looped it, and ``fluxes status`` said nothing of a
crash-looping worker.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.drill.runner import Drill
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.groups import stream_lags
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_JM
from tests.system.conftest import need_redis, running_instance

pytestmark = pytest.mark.system

#: How long a job may take to run at most before the instance counts as stuck (a
#: bound on liveness, not a measure: jobs here run in well under a second).
STUCK_S = 45.0


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[Launcher, Instance]]:
    with running_instance() as launcher:
        yield launcher, Instance.connect(str(launcher.uri))


def sim() -> dict[str, Any]:
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": "10ms"}}}}).to_dict()


def raw_xadd(inst: Instance, stream: str, payload: bytes) -> str:
    """XADD as redis-cli sends it: ``XADD <stream> * d <payload>``."""
    sid = inst.redis.execute_command("XADD", stream, "*", "d", payload)
    return sid.decode() if isinstance(sid, bytes) else str(sid)


def handled(inst: Instance, stream: str, group: str) -> bool:
    """Every entry of ``stream`` was delivered to ``group`` and acknowledged."""
    return any(g.group == group and g.lag == 0 for g in stream_lags(inst.redis, [stream]))


def jobs_run(launcher: Launcher, inst: Instance, count: int = 2) -> None:
    """Jobs submitted now complete (supervising meanwhile, as ``fluxes start`` does)."""
    ids = [j for j in Client(inst).submit([{"jobspec": sim()}] * count, timeout=STUCK_S)
           if isinstance(j, int)]
    assert len(ids) == count
    deadline = time.monotonic() + STUCK_S
    while True:
        launcher.supervise_once()
        results = [inst.redis.hget(inst.keys.job(j), "result") for j in ids]
        if all(results):
            assert results == [b"COMPLETED"] * count
            return
        assert time.monotonic() < deadline, f"jobs {ids} never ran: scheduling is stuck"
        time.sleep(0.1)


def epoch(inst: Instance) -> int:
    return int(inst.redis.get(inst.keys.sched_fence(0)) or 0)


def letters(inst: Instance, stream: str) -> list[dict[str, str]]:
    out = [{k.decode(): v.decode() for k, v in fields.items()}
           for _sid, fields in inst.redis.xrange(inst.keys.dead_letters)]
    return [g for g in out if g["stream"] == stream]


@pytest.mark.parametrize("kind", ["hello", "ready", "error"])
@pytest.mark.parametrize("age", ["old", "current"])
def test_forged_session_messages(running: tuple[Launcher, Instance], kind: str,
                                 age: str) -> None:
    launcher, inst = running
    jobs_run(launcher, inst)
    msg: dict[str, Any] = {"t": kind}
    if kind == "ready":
        msg.update(mode="single", limit=1)
    now = epoch(inst)
    forged = now - 1 if age == "old" else now
    raw_xadd(inst, inst.keys.sched_resp(0), orjson.dumps({"e": forged, "m": [msg]}))
    # the job manager has read and acknowledged it before the next submission
    deadline = time.monotonic() + 10
    while not handled(inst, inst.keys.sched_resp(0), GROUP_JM):
        assert time.monotonic() < deadline, "the job manager never took the forged message"
        time.sleep(0.02)
    jobs_run(launcher, inst)
    assert all(w.restarts == 0 for w in launcher.workers), "no process was restarted"


def test_new_for_a_job_that_does_not_exist(running: tuple[Launcher, Instance]) -> None:
    launcher, inst = running
    jobs_run(launcher, inst)
    before = epoch(inst)
    stream = inst.keys.jm_new(0)
    sent = raw_xadd(inst, stream, orjson.dumps({"e": 0, "m": [
        {"t": "new", "id": 123456789, "userid": 0, "urgency": 16, "flags": 0,
         "t_submit": 1.0}]}))
    jobs_run(launcher, inst)
    [letter] = [g for g in letters(inst, stream) if g["id"] == sent]
    assert "no such job" in letter["error"]
    assert epoch(inst) == before  # no rebuild: no new scheduler session
    assert launcher.worker("job-manager-0").restarts == 0


def test_reply_key_of_another_type(running: tuple[Launcher, Instance]) -> None:
    launcher, inst = running
    wrong = inst.keys.reply("someone", "r")
    inst.redis.set(wrong, "a string")
    stream = inst.keys.jm_ctl(0)
    sent = raw_xadd(inst, stream, orjson.dumps({"e": 0, "m": [
        {"t": "cancel-request", "ids": [1], "userid": 0, "note": "", "reply": wrong}]}))
    jobs_run(launcher, inst)
    [letter] = [g for g in letters(inst, stream) if g["id"] == sent]
    assert "holds a string" in letter["error"]
    assert launcher.worker("job-manager-0").restarts == 0


def test_status_reports_a_crash_looping_worker(running: tuple[Launcher, Instance],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Last in this module: the instance then counts as unhealthy for a minute."""
    launcher, inst = running
    spec = launcher.worker("job-list")
    for _ in range(3):
        assert spec.proc is not None
        started = spec.restarts
        os.kill(spec.proc.pid, signal.SIGKILL)
        spec.proc.wait()
        deadline = time.monotonic() + STUCK_S
        while spec.restarts == started:
            launcher.supervise_once()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        name = f"job-list@{os.uname().nodename}"
        while True:  # its new start is registered
            raw = inst.redis.hget(inst.keys.workers, name)
            if raw and orjson.loads(raw).get("pid") == spec.proc.pid:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
    code = main(["--uri", str(launcher.uri), "status", "--json"])
    doc = orjson.loads(capsys.readouterr().out)
    [worker] = [w for w in doc["workers"] if w["kind"] == "job-list"]
    assert worker["crash_loop"] and worker["restarts"] == 3
    assert code == 1 and any("crash-looping" in p for p in doc["problems"])
    assert doc["dead_letters"]["by_stream"][inst.keys.jm_ctl(0)] >= 1


def test_hostile_drill() -> None:
    """``fluxes drill --hostile``: poison and forged entries on every stream among the
    workload and the kills; every invariant still holds."""
    need_redis()
    result = Drill(jobs=60, kill="any", rounds=2, seed=3, timeout=150, hostile=True).run()
    figures = result.figures()
    assert result.ok, figures["violations"]
    assert any(note.startswith("hostile:") for note in figures["notes"])
