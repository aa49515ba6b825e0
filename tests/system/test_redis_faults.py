"""Faults of Redis a site meets, on one running instance: a stall of 12 s and of 30 s (a
busy function), ``maxmemory`` reached (OOM), a failing snapshot (MISCONF) and a new
password. Workers wait them out and never kill a job; a refused command says why in
one line; service resumes when the fault is gone (docs/operations.md, "When Redis
stalls or refuses"). And on the same instance: no identity a user can obtain runs Lua
of its own (docs/security.md)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis

from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.faults import stall as busy
from fluxes.drill.invariants import check_jobs
from fluxes.formats.jobid import parse
from fluxes.proc.launcher import Launcher
from fluxes.store import acl, jobfacts
from fluxes.store.instance import Instance
from fluxes.store.security import ENV_CREDENTIALS, load_credentials, url_credentials
from tests.system.clitools import cli, submit
from tests.system.conftest import running_instance

pytestmark = pytest.mark.system


#: Run by the batch script with the credentials its tasks got: what the identity may do.
PROBE = """
import os, redis
from fluxes.store import acl
from fluxes.store.instance import Instance
r = Instance.connect(os.environ["FLUXES_URI"]).redis
print("whoami=" + r.execute_command("ACL", "WHOAMI").decode())
for name, call in [
        ("eval", lambda: r.eval("return redis.call('TIME')[1]", 0)),
        ("eval_ro", lambda: r.execute_command("EVAL_RO", "return 1", 0)),
        ("script", lambda: r.script_load("return 1")),
        ("function", lambda: r.execute_command(
            "FUNCTION", "LOAD", "#!lua name=mine\\nredis.register_function('mine', "
            "function() return 1 end)")),
        ("memory", lambda: r.execute_command("MEMORY", "STATS"))]:
    try:
        call()
        print(name + "=allowed")
    except redis.exceptions.NoPermissionError:
        print(name + "=refused")
"""



@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """A password-protected instance whose owner credentials this process uses."""
    before = os.environ.get(ENV_CREDENTIALS)
    with running_instance(require_auth=True) as inst:
        assert inst.credentials is not None
        os.environ[ENV_CREDENTIALS] = str(inst.credentials)
        try:
            yield inst
        finally:
            if before is None:
                os.environ.pop(ENV_CREDENTIALS, None)
            else:
                os.environ[ENV_CREDENTIALS] = before


@pytest.fixture
def owner(launcher: Launcher) -> Iterator[redis.Redis]:
    """The instance owner's own connection (what runs the faults)."""
    inst = Instance.connect(str(launcher.uri))
    yield inst.redis
    inst.redis.close()


def until(what: str, check: Callable[[], bool], limit: float = 60.0) -> None:
    """Wait (bounded) until ``check()``, which may meet a Redis that refuses."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError):
            if check():
                return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def events(launcher: Launcher, ids: list[int]) -> dict[int, list[str]]:
    """Each job's event names."""
    inst = Instance.connect(str(launcher.uri))
    return {j: [e.event_name for e in log]
            for j, log in collect.read_eventlogs(inst, ids).logs.items()}


def tasks_alive(launcher: Launcher, owner: redis.Redis, jobid: int) -> bool:
    """Whether a task of ``jobid`` still runs (the exec workers record their pids)."""
    keys = Instance.connect(str(launcher.uri)).keys
    for rank in range(launcher.nodes):
        raw = owner.hget(keys.exec_jobs(rank), str(jobid))
        for task in orjson.loads(raw)["t"] if raw else []:
            try:
                stat = Path(f"/proc/{task[1]}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                return True
    return False


def started(launcher: Launcher, ids: list[int]) -> bool:
    """True when every job of ``ids`` started."""
    return all("start" in names for names in events(launcher, ids).values())


def ended_well(launcher: Launcher, ids: list[int]) -> None:
    """Wait for every job of ``ids`` to end, then check each COMPLETED with status 0."""
    until("the jobs to end", lambda: all(
        names[-1:] == ["clean"] for names in events(launcher, ids).values()))
    inst = Instance.connect(str(launcher.uri))
    logs = collect.read_eventlogs(inst, ids).logs
    jobs, report = check_jobs(logs, dict.fromkeys(ids, JobResult.COMPLETED))
    assert not report.violations, report.violations
    assert {j: (job.wait_status, job.fatal) for j, job in jobs.items()} == \
        dict.fromkeys(ids, (0, None))


def no_worker_died(launcher: Launcher) -> None:
    """Every worker process still runs, never restarted (the test never supervises)."""
    dead = [w.name for w in launcher.workers if w.proc is None or w.proc.poll() is not None
            or w.restarts]
    assert not dead, f"workers died: {dead}"


def no_drain(owner: redis.Redis, launcher: Launcher) -> None:
    """No exec rank was declared lost (the scheduler writes a drain event for it)."""
    keys = Instance.connect(str(launcher.uri)).keys
    drains = [f for _i, f in owner.xrange(keys.resource_events) if b'"drain"' in f[b"d"]]
    assert not drains, drains


def log_says(launcher: Launcher, text: str) -> list[str]:
    """The worker logs that contain ``text``."""
    logs = Path(launcher.state_dir) / "logs"
    return sorted(p.name for p in logs.glob("*.log") if text in p.read_text())


def stall(owner: redis.Redis, seconds: float) -> None:
    """Stall Redis for ``seconds`` with a busy function on the owner's connection."""
    busy(owner, seconds)


def test_jobs_live_through_a_12_s_and_a_30_s_stall(launcher: Launcher, owner: redis.Redis,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """One job runs through both stalls; another ends inside the 30 s one and its end is
    reported when Redis answers again. No worker dies, no rank is drained, no lease
    changes hands."""
    uri = str(launcher.uri)
    through = submit(uri, capsys, "--cwd", "/tmp", "sleep", "47")
    inside = submit(uri, capsys, "--cwd", "/tmp", "sleep", "25")
    until("the jobs to start", lambda: started(launcher, [through, inside]))
    stall(owner, 12)
    until("the workers to find Redis answering again",
          lambda: bool(log_says(launcher, "redis answers again")))
    stall(owner, 30)
    ended_well(launcher, [through, inside])
    no_worker_died(launcher)
    no_drain(owner, launcher)
    assert log_says(launcher, "redis answers again")
    keys = Instance.connect(uri).keys
    holders = owner.mget([keys.jm_lease(0), keys.sched_lease(0)])
    assert all(h is not None for h in holders), holders


def test_maxmemory_reached(launcher: Launcher, owner: redis.Redis,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """Writes refused with OOM: submit says so in one line and writes nothing, the running
    job keeps running (and ends meanwhile), and all resumes when memory frees."""
    uri = str(launcher.uri)
    job = submit(uri, capsys, "--cwd", "/tmp", "sleep", "1")
    until("the job to start", lambda: started(launcher, [job]))
    keys = Instance.connect(uri).keys
    journal = owner.xlen(keys.journal(0))
    owner.config_set("maxmemory", "1")
    try:
        assert cli(uri, "submit", "--cwd", "/tmp", "true") == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("fluxes: Redis is full (maxmemory reached)"), err
        assert "\n" not in err and "nothing was written" in err
        until("the job's task to end while Redis refuses its report",
              lambda: not tasks_alive(launcher, owner, job))
        assert owner.xlen(keys.journal(0)) == journal  # nothing half-written
    finally:
        owner.config_set("maxmemory", "0")
    ended_well(launcher, [job])
    ended_well(launcher, [submit(uri, capsys, "--cwd", "/tmp", "true")])
    no_worker_died(launcher)
    assert log_says(launcher, "maxmemory reached")


def test_a_snapshot_that_cannot_be_written(launcher: Launcher, owner: redis.Redis,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """MISCONF (a disk that cannot take the snapshot: here its file is a directory, so the
    BGSAVE fails): writes are refused, submit says why, the running job lives, and all
    resumes once a snapshot succeeds."""
    uri = str(launcher.uri)
    assert launcher.server is not None
    dump = launcher.server.dir / "dump.rdb"
    job = submit(uri, capsys, "--cwd", "/tmp", "sleep", "1")
    until("the job to start", lambda: started(launcher, [job]))
    owner.config_set("save", "3600 1")
    try:
        (dump / "in-the-way").mkdir(parents=True)
        owner.bgsave()
        until("the snapshot to fail",
              lambda: owner.info("persistence")["rdb_last_bgsave_status"] == "err")
        assert cli(uri, "submit", "--cwd", "/tmp", "true") == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("fluxes: Redis cannot save its data to disk"), err
        until("the job's task to end while Redis refuses its report",
              lambda: not tasks_alive(launcher, owner, job))
    finally:
        shutil.rmtree(dump, ignore_errors=True)
        owner.bgsave()
        until("a snapshot to succeed",
              lambda: owner.info("persistence")["rdb_last_bgsave_status"] == "ok")
        owner.config_set("save", "")
    ended_well(launcher, [job])
    no_worker_died(launcher)
    assert log_says(launcher, "cannot save its data to disk")


def test_a_new_password_is_named_and_waited_out(launcher: Launcher, owner: redis.Redis,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Redis back with another password (the default user's changed, every connection
    dropped): workers log why they cannot connect and keep trying; the running job lives;
    with the password back they carry on."""
    uri = str(launcher.uri)
    assert launcher.credentials is not None
    password = url_credentials(load_credentials(launcher.credentials).uri)[1]
    job = submit(uri, capsys, "--cwd", "/tmp", "sleep", "3")
    until("the job to start", lambda: started(launcher, [job]))
    owner.execute_command("ACL", "SETUSER", "default", "resetpass", ">another-password")
    try:
        owner.execute_command("CLIENT", "KILL", "TYPE", "normal")
        until("the workers to say why",
              lambda: len(log_says(launcher, "was it restarted with another password")) >= 3)
        no_worker_died(launcher)
    finally:
        owner.execute_command("ACL", "SETUSER", "default", "resetpass", f">{password}")
    ended_well(launcher, [job])
    ended_well(launcher, [submit(uri, capsys, "--cwd", "/tmp", "true")])
    no_worker_died(launcher)


def eventlog(inst: Instance, jobid: int) -> list[tuple[str, dict[str, object]]]:
    return [(f[b"n"].decode(), orjson.loads(f.get(b"c", b"{}")))
            for _i, f in jobfacts.eventlogs(inst.redis, inst.keys, [jobid])[0]]


def ended(inst: Instance, jobid: int) -> dict[str, object]:
    """Wait for the job's end; its finish event's context."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        events = eventlog(inst, jobid)
        if any(n == "clean" for n, _c in events):
            return next(c for n, c in events if n == "finish")
        time.sleep(0.1)
    raise AssertionError(f"job {jobid} did not end: {eventlog(inst, jobid)}")


def test_a_child_identity_runs_no_lua_of_its_own_while_its_instance_works(
        launcher: Launcher, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """No identity a user can obtain runs Lua of its own (docs/security.md): a batch
    job's child identity may not EVAL, load a function or read the memory report while
    its child instance works on our functions; the attribute set by hand on a plain job
    gets no identity."""
    uri = str(launcher.uri)
    admin = Instance.connect(uri)
    fluxes = f"{sys.executable} -m fluxes.cli.main"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "out.txt"
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/sh\n"
                      f"{fluxes} run -N2 -n2 echo step-ran || exit 90\n"
                      f"{sys.executable} {probe} || exit 91\n")
    assert cli(uri, "batch", "-N2", "--cwd", str(tmp_path), f"--output={out}",
               str(script)) == 0, capsys.readouterr().err
    jobid = parse(capsys.readouterr().out.strip().splitlines()[-1])
    finish = ended(admin, jobid)
    assert out.exists(), eventlog(admin, jobid)
    text = out.read_text()
    assert finish["status"] == 0, text
    # the child instance worked (its workers call our functions as the child identity)
    assert text.count("step-ran\n") == 2, text
    assert f"whoami=child:fx.{jobid}:" in text, text
    for what in ("eval", "eval_ro", "script", "function", "memory"):
        assert f"{what}=refused" in text, text
    # a plain job with the attribute set by hand mints no identity
    before = acl.users(admin.redis)
    plain = submit(uri, capsys, "--setattr=system.child-instance=true", "--cwd", "/tmp",
                   "sh", "-c", 'echo "creds=${FLUXES_CREDENTIALS:-none}"; sleep 1')
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            n == "start" for n, _c in eventlog(admin, plain)):
        time.sleep(0.1)
    assert not {u for u in acl.users(admin.redis) - before if u.startswith("child:")}
    assert ended(admin, plain)["status"] == 0
    assert cli(uri, "job", "attach", str(plain)) == 0
    shown = capsys.readouterr().out
    assert "creds=" in shown and "child-credentials" not in shown, shown
