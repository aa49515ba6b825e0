"""The task spawner (fluxes/proc/spawner.py): the parent of the exec worker's tasks,
which records their ends while no worker runs and survives what is sent to it."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from fluxes.proc.spawner_client import SOCKET_NAME, SpawnerLink, SpawnError
from fluxes.store.keys import GROUP_EXEC
from tests.system.test_exec_worker import (
    KEYS,
    LOST_ERROR,
    Harness,
    _alive,
    _task_pids,
    cmd,
    harness,
)

pytestmark = [pytest.mark.system, pytest.mark.redis]
__all__ = ["harness"]  # the fixture, used by name


def _until(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]


def _spawner_of(state: Path) -> int:
    """The pid of the spawner serving the rank 0 socket under ``state`` (0: none)."""
    path = os.fsencode(state / "rank0" / SOCKET_NAME)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = _cmdline(int(entry))
            if _stat(int(entry))[0] == "Z":
                continue
        except OSError:
            continue
        if b"fluxes.proc.spawner" in argv and argv[-1] == path:
            return int(entry)
    return 0


def _started(harness: Harness, jobid: int) -> list[int]:
    harness.wait(jobid, lambda m: m["started"])
    return _task_pids(harness.client, jobid)


def _sleeping(harness: Harness, jobid: int) -> int:
    """Job ``jobid``: one task sleeping 30 s, started; its pid."""
    harness.job(jobid, cmd("sleep", "30"))
    harness.start(jobid)
    [pid] = _started(harness, jobid)
    return pid


def test_tasks_are_children_of_the_spawner_without_a_shell(harness: Harness) -> None:
    harness.worker()
    pid = _sleeping(harness, 1)
    assert _cmdline(pid) == [b"sleep", b"30"], "the task itself, no wrapper around it"
    parent = int(_stat(pid)[1])
    assert parent == _spawner_of(harness.state) != 0
    harness.kill(1, signal.SIGTERM)
    assert harness.final(1)["status"] == signal.SIGTERM


@pytest.mark.parametrize(("argv", "status"), [
    (("true",), 0),
    (("sh", "-c", "exit 3"), 3 << 8),
    (("sh", "-c", "kill -KILL $$"), signal.SIGKILL),
    (("sh", "-c", "kill -USR1 $$"), signal.SIGUSR1),
])
def test_exit_statuses_come_from_the_spawner(harness: Harness, argv: tuple[str, ...],
                                             status: int) -> None:
    harness.worker()
    harness.job(2, cmd(*argv))
    harness.start(2)
    final = harness.final(2)
    assert final["status"] == status and final["error"] is None


def test_a_script_without_interpreter_line_runs_under_sh(harness: Harness,
                                                         tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("echo from script; exit 4\n")
    script.chmod(0o755)
    harness.worker()
    harness.job(3, cmd(str(script)))
    harness.start(3)
    assert harness.final(3)["status"] == 4 << 8
    assert harness.lines(3) == [("0", "stdout", "from script\n")]


def test_worker_killed_while_tasks_run_and_end(harness: Harness) -> None:
    """A task that ends while no worker runs, one that runs on: the spawner records
    the first, and the restarted worker adopts the second from the same spawner."""
    proc = harness.subprocess_worker(grace=1.0)
    # (one core each: a start whose cores a running job holds waits for them)
    harness.job(10, cmd("sleep", "30"), ranks={0: "0"})  # killed while no worker runs
    harness.job(11, cmd("sleep", "30"), ranks={0: "1"})
    # ends while the worker restarts
    harness.job(12, cmd("sh", "-c", "sleep 0.3; exit 9"), ranks={0: "2"})
    for jobid in (10, 11, 12):
        harness.start(jobid)
    [ending] = _started(harness, 10)
    _started(harness, 11)
    _started(harness, 12)
    spawner = _spawner_of(harness.state)
    assert spawner and int(_stat(ending)[1]) == spawner
    proc.kill()
    proc.wait()
    os.kill(ending, signal.SIGTERM)
    _until("job 10's status file", lambda: any(
        (harness.state / "rank0").glob("10.0.st.*")))
    assert _alive(spawner), "the spawner outlives its worker"
    harness.worker(kill_grace=1.0)
    assert harness.final(10)["status"] == signal.SIGTERM
    assert harness.final(12)["status"] == 9 << 8
    assert _spawner_of(harness.state) == spawner, "the restarted worker uses the same spawner"
    harness.kill(11, signal.SIGTERM)
    final = harness.final(11)
    assert final["status"] == signal.SIGTERM and final["error"] is None


def test_spawner_exits_once_its_worker_stopped_and_its_tasks_ended(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUXES_EXEC_KILL_ON_STOP", "1")
    harness.worker()
    pid = _sleeping(harness, 20)
    spawner = _spawner_of(harness.state)
    assert spawner
    harness.stop()  # as `fluxes stop` does: the tasks are killed
    _until("the task's end", lambda: not _alive(pid))
    _until("the spawner's exit", lambda: not _alive(spawner))
    assert not (harness.state / "rank0" / SOCKET_NAME).exists()


def test_garbage_on_the_spawner_socket_does_not_end_it(harness: Harness) -> None:
    harness.worker()
    harness.job(30, cmd("true"))
    harness.start(30)
    harness.final(30)
    spawner = _spawner_of(harness.state)
    assert spawner
    path = str(harness.state / "rank0" / SOCKET_NAME)
    for garbage in (b"\xff\x00\x01", b"S", b"S\0\0\0\0\0\0\0", b"Sm\0p\0/\0/bin/true\0x\0\0-1",
                    b"Sm\0p\0/\0/bin/true\x000\0\0" + b"1\0true", b"L\0extra",
                    b"Sm\0p\0/nonexistent\0/bin/true\0\0\0" + b"1\0true\0NOEQUALS"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
            sock.connect(path)
            sock.send(garbage)
            sock.settimeout(5)
            answer = sock.recv(4096)
            assert answer[:1] == b"E", (garbage, answer)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(path)  # and one that hangs up at once
    assert _alive(spawner)
    harness.job(31, cmd("sh", "-c", "exit 5"))
    harness.start(31)
    assert harness.final(31)["status"] == 5 << 8
    assert _spawner_of(harness.state) == spawner


def test_a_killed_spawner_loses_its_tasks_and_jobs_still_run(harness: Harness) -> None:
    harness.worker()
    pid = _sleeping(harness, 40)
    spawner = _spawner_of(harness.state)
    os.kill(spawner, signal.SIGKILL)
    final = harness.final(40)
    assert final["error"] == LOST_ERROR and final["released"]
    _until("the orphaned task's end", lambda: not _alive(pid))
    harness.job(41, cmd("sh", "-c", "exit 6"))
    harness.start(41)
    assert harness.final(41)["status"] == 6 << 8


def test_the_spawner_reports_what_a_shell_would(tmp_path: Path) -> None:
    """Straight to the spawner: a missing directory or command is a failed start with
    the shell's code; descriptors given reach the task; the end is in the status file."""
    link = SpawnerLink(str(tmp_path))
    assert link.connect()
    try:
        with pytest.raises(SpawnError) as failed:
            link.spawn(marker="m:1", prefix=str(tmp_path / "1.0.st"), cwd="/nonexistent",
                       path="/bin/true", argv=["true"], env={}, fds={})
        assert failed.value.code == 126
        with pytest.raises(SpawnError) as failed:
            link.spawn(marker="m:2", prefix=str(tmp_path / "2.0.st"), cwd="/",
                       path="/nonexistent", argv=["x"], env={}, fds={})
        assert failed.value.code == 127
        out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
        extra = os.open("/dev/null", os.O_RDONLY)
        pid = link.spawn(marker="m:3", prefix=str(tmp_path / "3.0.st"), cwd=str(tmp_path),
                         path="/bin/sh", argv=["sh", "-c", "pwd; echo $V; ls /proc/self/fd"],
                         env={"V": "v", "PATH": "/usr/bin:/bin"}, fds={1: out, 9: extra})
        os.close(out)
        os.close(extra)
        _until("the task's end", lambda: link.drain() is not None and pid in link.ended)
        assert link.ended[pid] == ("m:3", 0)
        assert (tmp_path / "3.0.st.0").exists()
        lines = (tmp_path / "out").read_text().split()
        assert lines[:2] == [str(tmp_path), "v"]
        assert "9" in lines[2:] and "0" in lines[2:]
    finally:
        link.close()


def test_no_status_file_is_left_behind(harness: Harness) -> None:
    """Whichever tells the worker of an end first (the task's pidfd and zombie, or
    the spawner's message), the status file goes with the job's other files."""
    harness.worker()
    jobs = range(50, 70)
    for jobid in jobs:
        harness.job(jobid, cmd("sh", "-c", f"exit {jobid % 3}"))
        harness.start(jobid)
    for jobid in jobs:
        assert harness.final(jobid)["status"] == (jobid % 3) << 8
    rank_dir = harness.state / "rank0"
    _until("the status files' removal", lambda: not list(rank_dir.glob("*.st.*")))


def test_ends_taken_before_the_spawner_reaps_leave_no_status_file(harness: Harness) -> None:
    """A stopped spawner cannot reap: the worker reads the ends from the zombies
    (their pidfds woke it) and reports them; the status files the spawner makes once
    it goes on are removed when its messages come."""
    harness.worker()
    jobs = (80, 81, 82)
    for jobid in jobs:
        harness.job(jobid, cmd("sh", "-c", f"sleep 0.5; exit {jobid - 79}"),
                    ranks={0: str(jobid - 80)})  # one core each: they run together
        harness.start(jobid)
    for jobid in jobs:
        _started(harness, jobid)
    spawner = _spawner_of(harness.state)
    os.kill(spawner, signal.SIGSTOP)
    try:
        for jobid in jobs:
            assert harness.final(jobid)["status"] == (jobid - 79) << 8
    finally:
        os.kill(spawner, signal.SIGCONT)
    rank_dir = harness.state / "rank0"
    _until("the spawner's status files", lambda: not _alive(spawner) or any(
        (rank_dir / f"{jobid}.0.st.{jobid - 79}").exists() for jobid in jobs) or
        not list(rank_dir.glob("*.st.*")))
    _until("the status files' removal", lambda: not list(rank_dir.glob("*.st.*")))
    harness.job(83, cmd("true"))
    harness.start(83)
    assert harness.final(83)["status"] == 0


def test_without_the_spawner_tasks_run_under_the_wrapper(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUXES_EXEC_SPAWNER", "0")
    harness.worker()
    pid = _sleeping(harness, 90)
    assert b"fluxes-task:t:0:90:0" in _cmdline(pid)
    assert not _spawner_of(harness.state)
    harness.kill(90, signal.SIGTERM)
    assert harness.final(90)["status"] == signal.SIGTERM


def test_a_start_is_acknowledged_with_its_record_once_the_spawner_answered(
        harness: Harness) -> None:
    """The worker does not wait for the spawner's answer to a job's only task; until it
    has it, the start stays unacknowledged and the job unrecorded, through writes of
    other things (the heartbeat): a crash meanwhile delivers the start again."""
    worker = harness.worker()
    harness.job(20, cmd("true"))
    harness.start(20)
    assert harness.final(20)["status"] == 0
    spawner = _spawner_of(harness.state)
    stream, jobs = KEYS.exec_rank(0), KEYS.exec_jobs(0)

    def heartbeat() -> float:
        raw = harness.client.hget(KEYS.exec_registry, "0")
        return float(orjson.loads(raw)["heartbeat"]) if raw else 0.0

    _until("job 20's start acknowledged",
           lambda: harness.client.xpending(stream, GROUP_EXEC)["pending"] == 0)
    os.kill(spawner, signal.SIGSTOP)  # it cannot answer
    try:
        harness.job(21, cmd("true"))
        harness.start(21)
        _until("the request sent", lambda: (0, 21) in worker.awaiting)
        since = heartbeat()
        _until("a write since (the heartbeat)", lambda: heartbeat() > since)
        assert (0, 21) in worker.awaiting
        assert harness.client.xpending(stream, GROUP_EXEC)["pending"] == 1
        assert harness.client.hget(jobs, "21") is None
    finally:
        os.kill(spawner, signal.SIGCONT)
    final = harness.final(21)
    assert final["status"] == 0 and final["error"] is None
    _until("job 21's start acknowledged",
           lambda: harness.client.xpending(stream, GROUP_EXEC)["pending"] == 0)
