"""Retention on real instances: ``fluxes job purge``, automatic purge by age, and the
report of writes a power cut lost (the AOF cut back under ``appendfsync everysec``)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis

from fluxes.formats.jobid import parse
from fluxes.store.acklog import lost_jobs
from fluxes.store.instance import Instance
from fluxes.store.joblist import JobListStore
from tests.system.clitools import cli, submit
from tests.system.conftest import running_instance

pytestmark = pytest.mark.system

#: Every wait below is for something that happens within a second or two; this bounds
#: a regression, it is not what the test measures.
DEADLINE_S = 60.0




def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S:g}s: {what}")
        time.sleep(0.1)


def keys_naming(client: redis.Redis, jobid: int) -> list[bytes]:
    return [k for k in client.scan_iter("*") if k.endswith(b":%d" % jobid)
            or b":%d:" % jobid in k]


def test_job_purge(capsys: pytest.CaptureFixture[str]) -> None:
    with running_instance(nodes=1, cores_per_node=2) as launcher:
        uri = str(launcher.uri)
        inst = Instance.connect(uri)
        done = [submit(uri, capsys, "true") for _ in range(4)]
        assert cli(uri, "job", "wait", *map(str, done)) == 0
        held = submit(uri, capsys, "--urgency=hold", "true")
        capsys.readouterr()
        assert all(keys_naming(inst.redis, j) for j in done)

        assert cli(uri, "job", "purge", "--num-limit=1") == 0
        assert capsys.readouterr().out == \
            "3 of 4 inactive jobs would be purged (--force purges them)\n"
        assert all(keys_naming(inst.redis, j) for j in done)

        assert cli(uri, "job", "purge", "--force", str(held)) == 1
        assert "job is active" in capsys.readouterr().err
        assert keys_naming(inst.redis, held)

        assert cli(uri, "job", "purge", "--force", str(done[0])) == 0
        assert capsys.readouterr().out == "purged 1 inactive jobs; 3 inactive jobs remain\n"
        assert cli(uri, "job", "purge", "--force", "--num-limit=1") == 0
        assert capsys.readouterr().out == "purged 2 inactive jobs; 1 inactive jobs remain\n"

        for jobid in done[:3]:
            assert keys_naming(inst.redis, jobid) == []
            assert cli(uri, "job", "info", str(jobid)) == 1
        capsys.readouterr()
        jobs = JobListStore(inst.redis, inst.keys)
        jobs.catch_up(timeout=DEADLINE_S)
        assert sorted(jobs.all_summaries()) == sorted([done[3], held])
        assert cli(uri, "eventlog", "check") == 0


def test_purge_by_age_and_lost_writes_reported(capsys: pytest.CaptureFixture[str]) -> None:
    config = '[exec]\nkill-timeout = "2s"\n[job-manager]\ninactive-age-limit = "1s"\n'
    with running_instance(nodes=1, cores_per_node=2, config_text=config) as launcher:
        uri = str(launcher.uri)
        inst = Instance.connect(uri)
        jobs = [submit(uri, capsys, "true") for _ in range(2)]
        assert cli(uri, "job", "wait", *map(str, jobs)) == 0
        wait_until("the job-list worker purges jobs inactive for 1s",
                   lambda: not any(keys_naming(inst.redis, j) for j in jobs)
                   and not JobListStore(inst.redis, inst.keys).all_summaries())

        # a power cut inside the fsync window: Redis comes back with an older AOF
        assert launcher.server is not None
        aof = launcher.server.dir / "appendonlydir"
        snapshot = launcher.state_dir / "aof-before"
        seen = inst.redis.xinfo_stream(inst.keys.journal(0))["last-generated-id"].decode()
        shutil.copytree(aof, snapshot)
        for _ in range(3):
            submit(uri, capsys, "--urgency=hold", "true")
        marks = launcher.state_dir / "marks" / f"{inst.keys.ns}-p0.json"

        def marked_later() -> bool:
            try:
                recorded = orjson.loads(marks.read_bytes())["journal"]
            except (OSError, orjson.JSONDecodeError):
                return False
            return _key(recorded) > _key(seen)

        wait_until("the job-list worker records what it folded", marked_later)
        launcher.server.kill()
        shutil.rmtree(aof)
        shutil.copytree(snapshot, aof)
        launcher.server.start()

        def reported() -> bool:
            try:
                records = inst.redis.hgetall(inst.keys.workers).values()
            except redis.ConnectionError:
                return False
            return any(b"lost_writes" in r for r in records)

        wait_until("the job-list worker reports the lost writes", reported)
        capsys.readouterr()
        assert cli(uri, "status") == 1
        err = capsys.readouterr().err
        assert "writes lost: partition 0: journal went backwards from" in err
        log = (launcher.state_dir / "logs" / "job-list.log").read_text()
        errors = [orjson.loads(line) for line in log.splitlines()
                  if line.startswith("{") and '"writes lost' in line]
        assert errors and errors[0]["level"] == "error"
        assert _key(errors[0]["now"]) < _key(errors[0]["seen"])


def _key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


def _submit_held(uri: str, capsys: pytest.CaptureFixture[str], count: int) -> list[int]:
    """``count`` held jobs in one request; their ids (acknowledged: the client has them)."""
    assert cli(uri, "submit", "--urgency=hold", f"--cc=1-{count}", "true") == 0
    return [parse(line) for line in capsys.readouterr().out.split()]


def _aof_tail(directory: Path) -> tuple[Path, int]:
    """The AOF file Redis appends to now and its size: what a power cut would keep if
    this were the moment of Redis' last fdatasync."""
    manifest = (directory / "appendonlydir").glob("*.manifest")
    lines = next(manifest).read_text().splitlines()
    name = [line.split()[1] for line in lines if line.split()[-1] == "i"][-1]
    path = directory / "appendonlydir" / name
    return path, path.stat().st_size


def test_power_cuts_report_every_lost_acknowledged_job(
        capsys: pytest.CaptureFixture[str]) -> None:
    with running_instance(nodes=1, cores_per_node=2) as launcher:
        uri = str(launcher.uri)
        inst = Instance.connect(uri)
        server = launcher.server
        assert server is not None and server.appendfsync == "everysec"
        kept: list[int] = []
        lost: set[int] = set()
        for _cut in range(3):
            kept += _submit_held(uri, capsys, 2)
            aof, synced = _aof_tail(server.dir)
            # acknowledged after Redis' last fdatasync: a power cut loses them
            lost |= set(_submit_held(uri, capsys, 3) + _submit_held(uri, capsys, 1))
            server.kill()
            with aof.open("r+b") as out:
                out.truncate(synced)
            server.start()

            def reported(lost: set[int] = lost) -> bool:
                try:
                    return set(lost_jobs(inst.redis, inst.keys)) == lost
                except redis.ConnectionError:
                    return False

            wait_until("the ingest reports every lost job", reported)
        for jobid in kept:
            assert inst.redis.exists(inst.keys.job(jobid)), jobid
        for jobid in lost:
            assert not inst.redis.exists(inst.keys.job(jobid)), jobid
        capsys.readouterr()
        assert cli(uri, "admin", "lost-jobs", "--json") == 0
        listed = orjson.loads(capsys.readouterr().out)["lost"]
        assert {row["id"] for row in listed} == lost
        assert {row["user"] for row in listed} == {inst.owner()[0]}
        assert cli(uri, "status") == 1
        err = capsys.readouterr().err
        assert f"{len(lost)} acknowledged jobs lost by Redis" in err
        log = (launcher.state_dir / "logs" / "ingest.log").read_text()
        assert '"jobs lost: ' in log
        assert cli(uri, "admin", "lost-jobs", "--clear") == 0
        assert capsys.readouterr().out == f"forgot {len(lost)} lost jobs\n"
        assert cli(uri, "admin", "lost-jobs") == 0
        assert capsys.readouterr().out == "no acknowledged job was lost\n"
