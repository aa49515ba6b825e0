"""End to end on a real instance: the everyday CLI against real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fluxes.cli.main import main
from fluxes.instance import Instance
from fluxes.jobid import parse
from fluxes.launcher import Launcher
from fluxes.rset import ResourceSet
from fluxes.store.eventstore import EventStore

pytestmark = pytest.mark.system


def cli(uri: str, *args: str) -> int:
    return main(["--uri", uri, *args])


def submit(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert cli(uri, "submit", *args) == 0
    return parse(capsys.readouterr().out.strip().splitlines()[-1])


def events(launcher: Launcher, jobid: int) -> list[str]:
    inst = Instance.connect(str(launcher.uri))
    return [e.event_name for e in EventStore(inst.redis, inst.keys).eventlog(jobid)]


def test_fluxes_start_runs_a_command_and_tears_down(tmp_path: object) -> None:
    from tests.system.conftest import need_redis

    need_redis()
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    proc = subprocess.run([exe, "start", "--nodes", "2", "--", "fluxes", "run", "-N2", "-n4",
                           "hostname"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 4


def test_run_prints_labelled_output_and_exit_code(uri: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "run", "-N2", "-n4", "-l", "sh", "-c", "echo task $FLUXES_TASK_RANK") == 0
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == [f"{r}: task {r}" for r in range(4)]
    assert cli(uri, "run", "sh", "-c", "exit 7") == 7
    assert "exit code 7" in capsys.readouterr().err


def test_output_is_complete_after_the_job_ends(uri: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "sh", "-c", "seq 1 2000")
    assert cli(uri, "job", "wait", str(jobid)) == 0
    capsys.readouterr()
    assert cli(uri, "job", "output", str(jobid)) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in range(1, 2001)]


def test_cancel_of_running_sleep_ends_within_grace(uri: str, launcher: Launcher,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "sleep", "100")
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "start") == 0
    started = time.monotonic()
    assert cli(uri, "cancel", str(jobid)) == 0
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "clean") == 0
    assert time.monotonic() - started < 10
    capsys.readouterr()
    assert cli(uri, "jobs", "-a", "-o", "{id.dec} {result}", "-n") == 0
    assert f"{jobid} CANCELED" in capsys.readouterr().out


def test_time_limit_raises_timelimit_exception(uri: str, launcher: Launcher,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-t", "1s", "sleep", "100")
    assert cli(uri, "job", "wait-event", "-t", "30s", "--match-context=type=timelimit",
               str(jobid), "exception") == 0
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "clean") == 0


def test_exec_worker_killed_during_job_then_restarted(uri: str, launcher: Launcher,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    jobid = submit(uri, capsys, "-N1", "sh", "-c", "sleep 2; echo survived")
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "start") == 0
    inst = Instance.connect(uri)
    rank = ResourceSet(inst.redis.hget(inst.keys.job(jobid), "R")).ranks.first()
    worker = launcher.worker(f"exec-{rank}")
    assert worker.proc is not None
    os.kill(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and worker.proc.poll() is not None:
        launcher.supervise_once()  # the supervisor restarts it (after a short delay)
        time.sleep(0.1)
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    capsys.readouterr()
    assert cli(uri, "job", "output", str(jobid)) == 0
    assert "survived" in capsys.readouterr().out
