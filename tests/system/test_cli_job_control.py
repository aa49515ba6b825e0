"""Commands that act on jobs already submitted (``job kill``, ``job killall``,
``update``), on one real instance shared by this module (2 nodes x 4 cores, queues
``batch``, the default, and ``short``, whose jobs may last 10 minutes at most)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.formats.jobid import encode, parse
from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system

#: Longest wait for something a job does (a bound for a broken build, not a timing).
PATIENCE_S = 60.0


CONFIG = """
[exec]
kill-timeout = "2s"

[policy.jobspec.defaults.system]
queue = "batch"

[queues.batch]

[queues.short]
policy.limits.duration = "10m"
"""


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance."""
    from tests.system.conftest import running_instance

    with running_instance(config_text=CONFIG) as inst:
        yield inst




def wait_for(path: Path) -> None:
    """Return once ``path`` exists; fail after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


#: A job that touches ``got`` on each SIGUSR1 and ends (exit 0) once ``stop`` exists.
TRAPPER = ("trap 'touch got' USR1; touch ready; "
           "while [ ! -e stop ]; do sleep 0.1; done; exit 0")


def test_job_kill_signals_the_tasks_and_the_job_runs_on(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--cwd", str(tmp_path), "sh", "-c", TRAPPER)
    wait_for(tmp_path / "ready")
    assert cli(uri, "job", "kill", "-s", "USR1", str(jobid)) == 0
    assert capsys.readouterr().err == ""
    wait_for(tmp_path / "got")

    # without -f killall only counts; with it, the same signal goes out again
    (tmp_path / "got").unlink()
    assert cli(uri, "job", "killall", "-s", "SIGUSR1") == 0
    assert capsys.readouterr().err == "fluxes: command matched 1 job (-f to confirm)\n"
    assert cli(uri, "job", "killall", "-f", "-s", "10") == 0
    assert capsys.readouterr().err == "fluxes: signaled 1 job\n"
    wait_for(tmp_path / "got")

    # the job survived both signals: it ends when told to, successfully
    (tmp_path / "stop").touch()
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    assert cli(uri, "job", "kill", str(jobid)) == 1
    assert capsys.readouterr().err == f"fluxes: {jobid}: job is inactive or unknown\n"


def test_job_kill_of_a_job_not_running_is_an_error(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    held = submit(uri, capsys, "--urgency=hold", "true")
    assert cli(uri, "job", "kill", "-s", "USR1", str(held)) == 1
    assert capsys.readouterr().err == f"fluxes: {held}: job is not running\n"
    assert cli(uri, "job", "kill", "-s", "NOSUCH", str(held)) == 2
    assert "unknown signal 'NOSUCH'" in capsys.readouterr().err
    assert cli(uri, "cancel", str(held)) == 0


def eventlog(uri: str, capsys: pytest.CaptureFixture[str], jobid: int) -> list[str]:
    """The job's eventlog lines, without their timestamps."""
    capsys.readouterr()
    assert cli(uri, "job", "eventlog", str(jobid)) == 0
    return [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]


def test_update_of_a_pending_job_is_checked_and_recorded(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--urgency=hold", "-t", "5m", "true")
    assert cli(uri, "update", "-n", str(jobid), "duration=+1m") == 0
    assert capsys.readouterr().out == '{"attributes.system.duration":360.0}\n'
    # all or nothing: the name is fine, the duration is over the new queue's limit
    assert cli(uri, "update", str(jobid), "name=renamed", "queue=short", "duration=+1h") == 1
    assert "duration" in capsys.readouterr().err
    assert cli(uri, "update", str(jobid), "bogus=1") == 1
    assert "updating 'bogus' is not supported" in capsys.readouterr().err
    assert not any("jobspec-update" in line for line in eventlog(uri, capsys, jobid))

    assert cli(uri, "update", str(jobid), "name=renamed", "queue=short", "duration=+2m") == 0
    updates = [line for line in eventlog(uri, capsys, jobid) if "jobspec-update" in line]
    assert updates == ['jobspec-update attributes.system.job.name="renamed" '
                       'attributes.system.queue="short" attributes.system.duration=420.0']
    # job info shows the jobspec with its updates applied, --base as submitted
    current = orjson.loads(out_of(uri, capsys, "job", "info", str(jobid), "jobspec"))
    system = current["attributes"]["system"]
    assert (system["job"]["name"], system["queue"], system["duration"]) == \
        ("renamed", "short", 420.0)
    base = orjson.loads(out_of(uri, capsys, "job", "info", "--base", str(jobid), "jobspec"))
    assert base["attributes"]["system"]["duration"] == 300.0
    assert "job" not in base["attributes"]["system"]
    # the next relative update starts from the updated duration
    assert cli(uri, "update", "-n", str(jobid), "duration=-1m") == 0
    assert capsys.readouterr().out == '{"attributes.system.duration":360.0}\n'
    # -v names the job as every other command does: in F58, whatever form was typed
    assert cli(uri, "update", "-v", str(jobid), "name=renamed2") == 0
    assert capsys.readouterr().out == f'{encode(jobid, "f58")}: updated ' \
        'attributes.system.job.name to "renamed2"\n'
    assert cli(uri, "update", str(jobid), "name=renamed") == 0
    # released, it runs in its new queue under its new name
    assert cli(uri, "job", "urgency", str(jobid), "default") == 0
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    capsys.readouterr()
    assert cli(uri, "jobs", "-n", "-o", "{name} {queue} {duration}", str(jobid)) == 0
    assert capsys.readouterr().out.split() == ["renamed", "short", "420.0"]


def test_update_of_a_running_job_moves_its_time_limit(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--cwd", str(tmp_path), "-t", "1h", "sh", "-c",
                   "touch ready; sleep 60")
    wait_for(tmp_path / "ready")
    assert cli(uri, "update", str(jobid), "queue=short") == 1
    assert "only the duration of a running job" in capsys.readouterr().err
    assert cli(uri, "update", str(jobid), "duration=+1h") == 0
    lines = eventlog(uri, capsys, jobid)
    alloc = [line for line in lines if line.startswith("alloc")]
    assert alloc and [line for line in lines if line.startswith("resource-update")]
    # R as the job holds it now: the new expiration; --base: as the scheduler wrote it
    now_r = orjson.loads(out_of(uri, capsys, "job", "info", str(jobid), "R"))["execution"]
    base_r = orjson.loads(out_of(uri, capsys, "job", "info", "-b", str(jobid), "R"))["execution"]
    assert base_r["expiration"] - base_r["starttime"] == pytest.approx(3600.0, abs=1.0)
    assert now_r["expiration"] - base_r["starttime"] == pytest.approx(7200.0, abs=1.0)
    # shortened to 1s, its time limit (already passed) ends it at once
    assert cli(uri, "update", str(jobid), "duration=1") == 0
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 1
    lines = eventlog(uri, capsys, jobid)
    assert [line.split()[0] for line in lines if line.startswith("resource-update")] == \
        ["resource-update"] * 2
    assert any(line.startswith("exception type=\"timelimit\"") for line in lines)


def out_of(uri: str, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    capsys.readouterr()
    assert cli(uri, *args) == code
    return capsys.readouterr().out


def test_job_timeleft_last_status_taskmap_and_hostpids(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fluxes = os.path.join(os.path.dirname(sys.executable), "fluxes")
    # inside a job, the job is the one in $FLUXES_JOB_ID
    inside = submit(uri, capsys, "--cwd", str(tmp_path), "-t", "1h", "sh", "-c",
                    f"{fluxes} --uri {uri} job timeleft > left; touch ready; sleep 60")
    wait_for(tmp_path / "ready")
    assert 3000 < int((tmp_path / "left").read_text()) <= 3600
    assert 3000 < int(out_of(uri, capsys, "job", "timeleft", str(inside))) <= 3600
    assert out_of(uri, capsys, "job", "timeleft", "-H", str(inside)).strip().endswith("m")
    # where its one task runs: that process group is alive
    host, pid = out_of(uri, capsys, "job", "hostpids", str(inside)).strip().split(":")
    assert host and os.getpgid(int(pid)) == int(pid)
    # -r: only these task ranks (flux's); a rank the job lacks, a bad idset refused
    assert out_of(uri, capsys, "job", "hostpids", "-r", "0", str(inside)) == f"{host}:{pid}\n"
    assert cli(uri, "job", "hostpids", "-r", "0-1", str(inside)) == 1
    assert capsys.readouterr().err.endswith("has no task rank 1 (it has 1 tasks)\n")
    assert cli(uri, "job", "hostpids", "-r", "x", str(inside)) == 2
    held = submit(uri, capsys, "--urgency=hold", "true")
    assert cli(uri, "job", "hostpids", "-t", "0.2s", str(held)) == 1
    assert capsys.readouterr().err.endswith("timeout waiting for its tasks to start\n")
    assert cli(uri, "job", "timeleft", str(held)) == 1
    assert capsys.readouterr().err.endswith("has not started\n")
    # the most recent submissions, newest first
    assert out_of(uri, capsys, "job", "last").split() == [encode(held, "f58")]
    assert out_of(uri, capsys, "job", "last", "[:2]").split() == \
        [encode(held, "f58"), encode(inside, "f58")]
    assert cli(uri, "cancel", str(held), str(inside)) == 0
    assert out_of(uri, capsys, "job", "timeleft", str(inside)) == "0\n"

    spread = submit(uri, capsys, "-N2", "-n4", "sh", "-c", "exit 3")
    assert cli(uri, "job", "status", str(spread)) == 3
    assert cli(uri, "job", "status", "-e", "99", str(spread), str(held)) == 99
    assert cli(uri, "job", "status", str(held)) == 1  # canceled before it ran
    capsys.readouterr()
    # --json: one line per job as it ends, flux's keys and RFC 21 result codes
    assert cli(uri, "job", "status", "--json", str(spread), str(held)) == 3
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = {line["id"]: line for line in lines}
    assert got[spread]["result"] == 2 and got[spread]["waitstatus"] == 3 << 8
    assert got[spread]["exception_occurred"] is False and "t_run" in got[spread]
    assert got[held]["result"] == 4 and got[held]["exception_type"] == "cancel"
    assert "t_run" not in got[held] and "waitstatus" not in got[held]
    assert out_of(uri, capsys, "job", "taskmap", str(spread)) == \
        '{"version":1,"map":[[0,2,2,1]]}\n'
    assert out_of(uri, capsys, "job", "taskmap", "--to=raw", str(spread)) == "0-1;2-3\n"
    assert out_of(uri, capsys, "job", "taskmap", "--nodeid=3", str(spread)) == "1\n"
    assert out_of(uri, capsys, "job", "taskmap", "--ntasks=0", str(spread)) == "2\n"
    assert cli(uri, "job", "hostpids", str(spread)) == 1
    assert capsys.readouterr().err.endswith("is not running\n")


def test_bulksubmit_submits_one_job_per_input(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert cli(uri, "bulksubmit", "--cwd", str(tmp_path), "--job-name=bulk-{seq}", "sh", "-c",
               "echo {0}{1} > out-{seq1}", ":::", "a", "b", ":::+", "x") == 0
    ids = [parse(line) for line in capsys.readouterr().out.split()]
    assert len(ids) == 2
    assert cli(uri, "job", "wait", "-t", "60s", *map(str, ids)) == 0
    assert [(tmp_path / f"out-{n}").read_text() for n in (1, 2)] == ["ax\n", "bx\n"]
    capsys.readouterr()
    assert cli(uri, "jobs", "-a", "-n", "-o", "{name}", *map(str, ids)) == 0
    assert sorted(capsys.readouterr().out.split()) == ["bulk-0", "bulk-1"]
