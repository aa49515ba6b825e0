"""End to end on a real instance: the everyday CLI against real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from fluxes.formats.rset import ResourceSet
from fluxes.proc.launcher import Launcher
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system




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


def test_fluxes_start_on_an_R_file_answers_resource_list_at_once(tmp_path: Path) -> None:
    # [resource] path = an RFC 20 R file; COMMAND runs only once the instance
    # is usable, so its first `resource list` already sees every node online
    from tests.system.conftest import need_redis

    need_redis()
    r_file = tmp_path / "R.json"
    r_file.write_bytes(orjson.dumps({"version": 1, "execution": {
        "R_lite": [{"rank": "0-1", "children": {"core": "0-3"}}],
        "nodelist": ["rnode[0-1]"], "starttime": 0, "expiration": 0}}))
    config = tmp_path / "instance.toml"
    config.write_text('[resource]\npath = "R.json"\n')
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    proc = subprocess.run([exe, "start", "--config", str(config), "--", "fluxes", "resource",
                           "list", "--json"], capture_output=True, text=True, timeout=120,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    free = orjson.loads(proc.stdout)["free"]
    assert free["nodelist"] == "rnode[0-1]" and free["ncores"] == 8


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


def _task_pids(uri: str, jobid: int) -> list[int]:
    """The pids of the job's task wrappers, from the exec worker's record."""
    inst = Instance.connect(uri)
    rank = ResourceSet(inst.redis.hget(inst.keys.job(jobid), "R")).ranks.first()
    assert rank is not None
    record = orjson.loads(inst.redis.hget(inst.keys.exec_jobs(rank), str(jobid)))
    return [int(task[1]) for task in record["t"]]


def _finish_status(launcher: Launcher, jobid: int) -> int:
    inst = Instance.connect(str(launcher.uri))
    finish = next(e for e in EventStore(inst.redis, inst.keys).eventlog(jobid)
                  if e.event_name == "finish")
    return int(finish.context()["status"])


def test_cancel_of_running_sleep_ends_within_grace(uri: str, launcher: Launcher,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "sleep", "100")
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "start") == 0
    pids = _task_pids(uri, jobid)
    assert cli(uri, "cancel", str(jobid)) == 0
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "clean") == 0
    # SIGTERM ended it: no SIGKILL was needed after the grace period
    assert _finish_status(launcher, jobid) == signal.SIGTERM
    assert pids and not any(_running(pid) for pid in pids)
    capsys.readouterr()
    assert cli(uri, "jobs", "-a", "-o", "{id.dec} {result}", "-n") == 0
    assert f"{jobid} CANCELED" in capsys.readouterr().out


def test_time_limit_raises_timelimit_exception(uri: str, launcher: Launcher,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-t", "1s", "sleep", "100")
    assert cli(uri, "job", "wait-event", "-t", "30s", "--match-context=type=timelimit",
               str(jobid), "exception") == 0
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "clean") == 0
    assert _finish_status(launcher, jobid) == signal.SIGTERM


def test_run_exit_codes_follow_flux(uri: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # a task that survives its time limit's SIGTERM and exits 0: the job still
    # failed, so run exits 1 (flux's attach rule), after printing the exception
    assert cli(uri, "run", "-t", "1s", "sh", "-c", 'trap "exit 0" TERM; sleep 30 & wait') == 1
    assert "exception type=timelimit" in capsys.readouterr().err
    # a command that cannot be executed: 127 not found, 126 not executable (as flux)
    assert cli(uri, "run", "nosuchcommand-fluxes") == 127
    err = capsys.readouterr().err
    assert "exception type=exec" in err and "No such file or directory" in err
    (tmp_path / "adirectory").mkdir()
    assert cli(uri, "run", "--cwd", str(tmp_path), "./adirectory") == 126
    assert "Permission denied" in capsys.readouterr().err


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


def _parent_and_cmdline(pid: int) -> tuple[int, bytes]:
    """``pid``'s parent and command line ((0, b"") when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(stat[1]), Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError, ValueError):
        return 0, b""


def test_job_whose_tasks_died_with_the_exec_worker_still_ends(
        uri: str, launcher: Launcher, capsys: pytest.CaptureFixture[str]) -> None:
    # The worker and every process of the job are gone (a node reboot, an OOM
    # kill): the restarted worker cannot adopt anything, so the job must fail
    # and release its resources, never hang in RUN/CLEANUP.
    jobid = submit(uri, capsys, "-N1", "sleep", "300")
    assert cli(uri, "job", "wait-event", "-t", "30s", str(jobid), "start") == 0
    inst = Instance.connect(uri)
    rank = ResourceSet(inst.redis.hget(inst.keys.job(jobid), "R")).ranks.first()
    assert rank is not None
    record = orjson.loads(inst.redis.hget(inst.keys.exec_jobs(rank), str(jobid)))
    task_pids = [int(task[1]) for task in record["t"]]
    worker = launcher.worker(f"exec-{rank}")
    assert worker.proc is not None and task_pids
    # the worker's task spawner goes too (it would record the tasks' deaths): the one
    # serving the socket in its state directory (maybe started by an earlier worker)
    argv = _parent_and_cmdline(worker.proc.pid)[1].split(b"\0")
    socket_path = argv[argv.index(b"--state-dir") + 1] + b"/rank%d/spawner.sock" % rank
    spawners = [int(p) for p in os.listdir("/proc") if p.isdigit() and
                _parent_and_cmdline(int(p))[1].split(b"\0")[-2:-1] == [socket_path]]
    assert spawners
    os.kill(worker.proc.pid, signal.SIGKILL)
    for pid in spawners:
        os.kill(pid, signal.SIGKILL)
    for pid in task_pids:
        os.killpg(pid, signal.SIGKILL)  # the task (or its wrapper): all of the job
    worker.proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and worker.proc.poll() is not None:
        launcher.supervise_once()
        time.sleep(0.1)
    assert cli(uri, "job", "wait-event", "-t", "60s", str(jobid), "clean") == 0
    names = events(launcher, jobid)
    assert names[-4:] == ["finish", "release", "free", "clean"]
    assert "exception" in names


def test_a_killed_fluxes_start_takes_its_redis_and_workers_with_it(tmp_path: Path) -> None:
    from tests.system.conftest import need_redis

    need_redis()
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    marker = tmp_path / "uri"
    proc = subprocess.Popen([exe, "start", "--nodes", "2", "--state-dir", str(tmp_path / "s"),
                             "--", "sh", "-c",
                             f'echo $$ > {marker}.pid; echo "$FLUXES_URI" > {marker}; '
                             'exec sleep 60'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() or not marker.read_text().strip():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        inst = Instance.connect(marker.read_text().strip())
        while len(inst.redis.hkeys(inst.keys.workers)) < 6:  # ingest, jm, sched, jl, 2 exec
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = [int(orjson.loads(v)["pid"]) for v in inst.redis.hvals(inst.keys.workers)]
        pids.append(int(inst.redis.info("server")["process_id"]))
        inst.redis.close()
        proc.kill()  # SIGKILL: the launcher gets no chance to stop anything
        proc.wait()
        deadline = time.monotonic() + 20
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if _running(p)]
            time.sleep(0.1)
        assert not alive, f"still running after their supervisor died: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        pidfile = Path(f"{marker}.pid")
        if pidfile.exists():  # the command, which is not the instance's to stop
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def test_the_readme_demo_workload_ends_with_the_finished_jobs(tmp_path: Path) -> None:
    # The README's first command is scripts/demo: setup, then this workload
    # inside `fluxes start`. The setup (venv, apt) is the machine's business;
    # the workload is run here exactly as the demo runs it.
    from tests.system.conftest import need_redis

    need_redis()
    repo = Path(__file__).resolve().parents[2]
    demo = (repo / "scripts" / "demo").read_text()
    assert "scripts/demo-workload.sh" in demo
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    proc = subprocess.run([exe, "start", "--nodes", "2", "--cores-per-node", "4", "--",
                           "sh", str(repo / "scripts" / "demo-workload.sh")],
                          capture_output=True, text=True, timeout=300, check=False,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    last_section = max(i for i, line in enumerate(lines) if line.startswith("== "))
    assert lines[last_section] == "== fluxes jobs -a --stats"
    stats, header, *jobs = lines[last_section + 1:]
    assert stats.startswith("0 running, ") and stats.endswith(", 0 pending")
    assert header.split() == ["JOBID", "USER", "NAME", "ST", "NTASKS", "NNODES", "TIME", "INFO"]
    assert len(jobs) == 12
    # finished jobs only: every one has a result (CD completed, F, CA, TO)
    assert all(job.split()[3] in ("CD", "F", "CA", "TO") for job in jobs), jobs


def _detach(*args: str) -> tuple[str, Path]:
    """``fluxes start --detach ARGS``: the instance URI and its state directory."""
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    proc = subprocess.run([exe, "start", "--detach", "--nodes", "1", *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    uri = proc.stdout.split("FLUXES_URI='", 1)[1].split("'", 1)[0]
    state = proc.stderr.split("# state and logs: ", 1)[1].splitlines()[0]
    return uri, Path(state.split(" (", 1)[0])


def test_stop_removes_the_state_directory_detach_made(tmp_path: Path) -> None:
    from tests.system.conftest import need_redis

    need_redis()
    exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
    made_uri, made = _detach()
    try:
        given_uri, given = _detach("--state-dir", str(tmp_path / "given"))
        try:
            assert made.is_dir() and given.is_dir()
        finally:
            assert subprocess.run([exe, "--uri", given_uri, "stop"], timeout=120,
                                  check=False).returncode == 0
    finally:
        assert subprocess.run([exe, "--uri", made_uri, "stop"], timeout=120,
                              check=False).returncode == 0
    assert not made.exists(), "the temporary state directory outlived fluxes stop"
    assert (given / "logs").is_dir(), "a --state-dir directory is the user's: kept"


def test_read_model_workers_yield_the_cores_to_the_job_path(uri: str, launcher: Launcher
                                                             ) -> None:
    # niceness is field 19 of /proc/PID/stat (after the parenthesised command name)
    def niceness(name: str) -> int:
        proc = launcher.worker(name).proc
        assert proc is not None and proc.poll() is None
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        return int(stat.rpartition(")")[2].split()[16])

    def settled() -> bool:
        return niceness("job-list") != niceness("scheduler")

    deadline = time.monotonic() + 10  # the worker renices itself once connected
    while time.monotonic() < deadline and not settled():
        time.sleep(0.05)
    base = niceness("scheduler")
    assert niceness("job-manager-0") == niceness("exec-0") == base
    assert niceness("job-list") == niceness("accounting") == min(base + 10, 19)
