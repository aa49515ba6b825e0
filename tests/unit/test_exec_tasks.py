"""Tasks as processes (real ``/bin/sh`` wrappers, no Redis): spawning, signals and their
escalation, pidfds, reaping, and finding tasks again after a restart (markers, files)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fluxes.domain.exec.adoption import marker
from fluxes.domain.exec.jobs import ExecJob, RunPlan, TaskProc, plan_run
from fluxes.domain.exec.layout import wait_status
from fluxes.domain.exec.outbox import Outbox
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.proc.adopt import Adopter, has_marker, live_markers
from fluxes.proc.exec_files import TaskFiles
from fluxes.proc.spawner import decode
from fluxes.proc.spawner_client import SpawnerLink
from fluxes.proc.tasks import (
    EXIT_LINGER_MS,
    Launcher,
    StartFailed,
    TaskWatcher,
    nap,
    raise_fd_limit,
    signal_tasks,
)

NS = "unit"
R = ResourceSet.from_ranks({0: ("0-1", None)})


class Rig:
    """A launcher, its watcher and state directory, as a worker holds them."""

    def __init__(self, tmp: Path) -> None:
        self.files = TaskFiles(str(tmp / "state"), [0])
        self.files.make_dirs()
        self.watcher = TaskWatcher()
        self.launcher = Launcher("redis://nowhere", self.files, self.watcher, NS)
        self.jobs: list[ExecJob] = []

    def plan(self, *argv: str, **kw: Any) -> RunPlan:
        return plan_run(Jobspec.from_command(list(argv), **kw).to_dict(), R, 0)

    def launch(self, jobid: int, *argv: str, **kw: Any) -> ExecJob:
        plan = self.plan(*argv, **kw)
        job = ExecJob(jobid, 0, "run", started=True, forward=plan.forward)
        self.launcher.launch(job, plan, self.launcher.prepare(plan.spec))
        self.jobs.append(job)
        return job

    def wait_ended(self, job: ExecJob, adopter: Adopter | None = None) -> None:
        """Wait on the pidfds (no sleeping loop) until every task of ``job`` ended."""
        adopter = adopter or Adopter(NS, self.files, self.watcher)
        deadline = time.monotonic() + 20
        while not all(t.ended for t in job.tasks):
            assert time.monotonic() < deadline, "tasks did not end"
            adopter.watcher.wait(200)
            self.files.forget_listings()
            adopter.look(job, Outbox())

    def wait_output(self, job: ExecJob, task: int, data: bytes) -> None:
        """Wait until task ``task`` wrote ``data`` (so its wrapper has its command line,
        and the wrapper's subshell has exec'd the command)."""
        path = Path(job.tasks[task].streams[0].path)
        deadline = time.monotonic() + 20
        while path.read_bytes() != data:
            assert time.monotonic() < deadline, f"no {data!r} from task {task}"
            self.watcher.wait(10)

    def close(self) -> None:
        """Kill what still runs and reap every child."""
        for job in self.jobs:
            signal_tasks(job.tasks, signal.SIGKILL)
        for pid in list(self.watcher.children):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.watcher.close()


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    r = Rig(tmp_path)
    yield r
    r.close()


def test_prepare_refuses_what_a_shell_could_not_run(rig: Rig, tmp_path: Path) -> None:
    with pytest.raises(StartFailed, match="cannot execute 'no-such-cmd-x'") as info:
        rig.launcher.prepare(rig.plan("no-such-cmd-x").spec)
    assert info.value.code == 127
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(StartFailed) as info:
        rig.launcher.prepare(rig.plan(str(script)).spec)
    assert info.value.code == 126  # there, not executable
    with pytest.raises(ValueError, match="cannot change directory to"):
        rig.launcher.prepare(rig.plan("true", cwd=str(tmp_path / "gone")).spec)


def test_a_job_runs_under_its_wrapper_and_leaves_a_status_file(rig: Rig) -> None:
    job = rig.launch(1, "sh", "-c", 'echo out $FLUXES_TASK_RANK; exit "$FLUXES_TASK_RANK"',
                     ntasks=2)
    assert [t.rank for t in job.tasks] == [0, 1] and all(t.own for t in job.tasks)
    assert all(t.pid in rig.watcher.children and t.pidfd is not None for t in job.tasks)
    rig.wait_ended(job)
    assert [t.status for t in job.tasks] == [0, wait_status(1)]
    assert [t.code for t in job.tasks] == [0, 1]
    assert rig.files.listing(0, fresh=True) == {(1, 0): 0, (1, 1): 1}
    assert not rig.watcher.children  # reaped
    assert rig.watcher.reaped == {t.pid: (t.status, t.code) for t in job.tasks}
    out = [Path(t.streams[0].path).read_bytes() for t in job.tasks]
    assert out == [b"out 0\n", b"out 1\n"]


def test_the_exit_wakes_the_watcher(rig: Rig) -> None:
    job = rig.launch(2, "true")
    rig.watcher.woken.clear()
    deadline = time.monotonic() + 20
    while (0, 2) not in rig.watcher.woken:
        assert time.monotonic() < deadline
        rig.watcher.wait(1000)
    assert job.tasks[0].exited and job.tasks[0].pidfd is None  # no longer polled


class CountingPoll:
    """A poll set that records the timeout of every wait (what lingered, what did not)
    and the fds it waited on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.timeouts: list[int] = []
        self.fds: set[int] = set()
        self.waited_on: list[set[int]] = []

    def register(self, fd: int, mask: int) -> None:
        self.inner.register(fd, mask)
        self.fds.add(fd)

    def unregister(self, fd: int) -> None:
        self.inner.unregister(fd)
        self.fds.discard(fd)

    def poll(self, timeout: int) -> Any:
        self.timeouts.append(timeout)
        self.waited_on.append(set(self.fds))
        return self.inner.poll(timeout)


def test_an_exit_lingers_only_for_tasks_of_its_job_still_running(rig: Rig) -> None:
    """A job whose last task ended is reported at once (the next job waits for it); a
    job with tasks still running waits a moment for them."""
    counting = CountingPoll(rig.watcher.poller)
    rig.watcher.poller = counting  # type: ignore[assignment]
    alone = rig.launch(11, "true")
    assert rig.watcher.wait(-1) == [] and rig.watcher.woken == {(0, 11)}
    assert counting.timeouts == [-1]  # its only task: no linger
    rig.wait_ended(alone)
    counting.timeouts.clear()
    pair = rig.launch(12, "sh", "-c", 'if [ "$FLUXES_TASK_RANK" = 1 ]; then exec sleep 30; fi',
                      ntasks=2)
    assert rig.watcher.wait(-1) == [] and rig.watcher.woken == {(0, 11), (0, 12)}
    assert counting.timeouts == [-1, EXIT_LINGER_MS]  # task 1 still runs: wait for it
    # ... on task 1 alone (task 0's pidfd, still readable, would end the wait at once)
    assert pair.tasks[1].pidfd in counting.waited_on[-1]
    assert pair.tasks[0].pidfd is None and len(counting.waited_on[-1]) == 1
    assert rig.watcher.watched == {12: 1}
    signal_tasks(pair.tasks, signal.SIGKILL)
    rig.wait_ended(pair)
    assert rig.watcher.watched == {}


def test_an_exit_lingers_for_the_jobs_tasks_on_other_ranks_served_here() -> None:
    watcher = TaskWatcher()
    counting = CountingPoll(watcher.poller)
    watcher.poller = counting  # type: ignore[assignment]
    env = {"PATH": os.defpath}
    done = TaskProc(0, os.posix_spawn("/bin/sh", ["sh", "-c", "exit 0"], env), True)
    running = TaskProc(0, os.posix_spawn("/bin/sh", ["sh", "-c", "exec sleep 30"], env), True)
    try:
        watcher.watch((0, 13), done)
        watcher.watch((1, 13), running)  # the same job's task on rank 1
        assert watcher.wait(-1) == [] and watcher.woken == {(0, 13)}
        assert counting.timeouts == [-1, EXIT_LINGER_MS]
        assert counting.waited_on[1] == {running.pidfd}
    finally:
        os.kill(running.pid, signal.SIGKILL)
        for task in (done, running):
            os.waitpid(task.pid, 0)
        watcher.close()


def test_kill_then_escalation_ends_a_task_that_ignores_the_signal(rig: Rig) -> None:
    job = rig.launch(3, "sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done")
    rig.wait_output(job, 0, b"ready\n")  # the trap is set once "ready" is out
    signal_tasks(job.tasks, signal.SIGTERM)
    rig.watcher.wait(300)
    assert rig.watcher.reap(job.tasks[0]) is False  # TERM is ignored: still running
    signal_tasks(job.tasks, signal.SIGKILL)
    rig.wait_ended(job)
    assert job.tasks[0].status == signal.SIGKILL  # the wrapper died with it: no file
    assert rig.files.listing(0, fresh=True) == {}


def test_signals_skip_ended_tasks() -> None:
    done = TaskProc(0, 1, True, status=0)  # pid 1 must never be signalled
    lost = TaskProc(1, 1, True)
    lost.lost = True
    never = TaskProc(2, 0, True)
    signal_tasks([done, lost, never], signal.SIGKILL)  # would raise PermissionError otherwise


def test_user_output_files_are_truncated_by_the_first_rank(rig: Rig, tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("stale\n")
    job = rig.launch(4, "echo", "hi", cwd=str(tmp_path), output=str(target))
    assert job.forward == "" and all(not t.streams for t in job.tasks)
    rig.wait_ended(job)
    assert target.read_text() == "hi\n"


def test_a_bad_output_path_runs_nothing(rig: Rig, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot open output file"):
        rig.launch(5, "true", cwd=str(tmp_path), output=str(tmp_path / "no" / "dir" / "f"))
    assert not rig.watcher.children


# ----------------------------------------------------------------------------- adoption


def test_markers_find_the_wrappers_of_a_job(rig: Rig) -> None:
    job = rig.launch(6, "sh", "-c", "echo up; exec sleep 30", ntasks=2)
    rig.wait_output(job, 0, b"up\n")
    rig.wait_output(job, 1, b"up\n")
    found = dict(live_markers(marker(NS, 0, 6)))
    assert found == {t.pid: marker(NS, 0, 6, t.rank) for t in job.tasks}
    assert has_marker(job.tasks[0].pid, marker(NS, 0, 6, 0))
    assert not has_marker(job.tasks[0].pid, marker(NS, 0, 6, 1))  # a reused pid
    assert not has_marker(job.tasks[0].pid, marker(NS, 0, 6))  # the whole marker, not a prefix
    assert not has_marker(job.tasks[0].pid, marker("other", 0, 6, 0))


def test_a_restarted_worker_adopts_live_wrappers_and_reads_ended_ones(rig: Rig) -> None:
    job = rig.launch(7, "sh", "-c",
                     'if [ "$FLUXES_TASK_RANK" = 0 ]; then exit 4; fi; echo up; exec sleep 30',
                     ntasks=2)
    first, second = job.tasks
    rig.wait_output(job, 1, b"up\n")
    while not rig.files.listing(0, fresh=True):
        rig.watcher.wait(50)  # task 0 left its status file
    # A new worker: nothing is its child; the record says both were running.
    fresh = TaskWatcher()
    adopter = Adopter(NS, rig.files, fresh)
    again = ExecJob(7, 0, "run", started=True, forward="oe",
                    tasks=[TaskProc(first.rank, first.pid, False),
                           TaskProc(second.rank, second.pid, False)])
    adopter.restore(again, {0: (0, 0), 1: (0, 0)})
    a, b = again.tasks
    # task 0's wrapper is an unreaped zombie of the old worker: no marker, its file tells
    assert (a.status, a.code, a.own) == (wait_status(4), 4, False)
    assert b.status is None and b.pidfd is not None and not b.own  # watched, not ours
    assert again.error is None and [s.name for s in a.streams] == ["stdout", "stderr"]
    signal_tasks([second], signal.SIGKILL)
    rig.wait_ended(again, adopter)
    # killed without its wrapper's file, not escalated by us: lost, and the job says so
    assert b.lost and again.error == "exec: lost the job's processes (exec worker restarted)"


def test_a_redelivered_start_finds_its_tasks_instead_of_starting_twice(rig: Rig) -> None:
    argv = ("sh", "-c", 'if [ "$FLUXES_TASK_RANK" = 1 ]; then exit 2; fi; echo up; exec sleep 30')
    plan = rig.plan(*argv, ntasks=2)
    adopter = Adopter(NS, rig.files, rig.watcher)
    assert adopter.unrecorded(0, 8, plan.share, plan.forward) is None  # never spawned
    job = rig.launch(8, *argv, ntasks=2)
    rig.wait_output(job, 0, b"up\n")
    while (8, 1) not in rig.files.listing(0, fresh=True):
        rig.watcher.wait(50)
    again = adopter.unrecorded(0, 8, plan.share, plan.forward)
    assert again is not None and again.started and again.error is None
    a, b = again.tasks
    assert (a.pid, a.own, a.ended) == (job.tasks[0].pid, True, False)  # ours, still running
    assert (b.pid, b.status, b.code) == (0, wait_status(2), 2)  # ended: its file says how
    assert (0, 8) in rig.watcher.woken  # looked at in the same iteration


def test_a_redelivered_start_with_only_a_trace_left_is_lost(rig: Rig) -> None:
    plan = rig.plan("true")
    Path(rig.files.path(0, 9, 0, "out")).write_bytes(b"")  # spawned once, then gone
    job = Adopter(NS, rig.files, rig.watcher).unrecorded(0, 9, plan.share, plan.forward)
    assert job is not None and job.tasks[0].lost
    assert job.error == "exec: lost the job's processes (exec worker restarted)"


def test_look_reports_a_task_found_lost() -> None:
    class NoFiles(TaskFiles):
        def status_code(self, rank: int, jobid: int, task: int,
                        uid: int | None = None) -> int | None:
            return None

    adopter = Adopter(NS, NoFiles("/nonexistent", [0]), TaskWatcher())
    job = ExecJob(10, 0, "run", started=True, tasks=[TaskProc(0, 2**22 + 7, False)])
    box = Outbox()
    assert adopter.look(job, box)  # no such process, no file: lost
    assert job.tasks[0].lost and box.reports == {(0, 10): job}
    assert not adopter.look(job, box)


def test_a_child_reaped_elsewhere_without_a_trace_is_lost_and_reported() -> None:
    """(It used to end with no error: the job released as if nothing was amiss.)"""
    class NoFiles(TaskFiles):
        def status_code(self, rank: int, jobid: int, task: int,
                        uid: int | None = None) -> int | None:
            return None

    watcher = TaskWatcher()
    task = TaskProc(0, 2**22 + 9, True)  # "our child", but waitpid knows no such child
    watcher.children.add(task.pid)
    job = ExecJob(11, 0, "run", started=True, tasks=[task])
    box = Outbox()
    assert Adopter(NS, NoFiles("/nonexistent", [0]), watcher).look(job, box)
    assert task.lost and not task.own and task.pid not in watcher.children
    assert job.error == "exec: lost the job's processes (exec worker restarted)"
    assert box.reports == {(0, 11): job}


# ------------------------------------------------------------------ as the job's owner


@pytest.fixture
def public_rig() -> Any:
    """A rig whose state directory other users can pass through (a root worker's)."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("running tasks as another user needs root")
    base = Path(tempfile.mkdtemp(prefix="fluxes-tasks-", dir="/tmp"))
    base.chmod(0o711)
    r = Rig(base)
    yield r
    r.close()
    shutil.rmtree(base, ignore_errors=True)


def test_a_root_worker_runs_a_task_as_the_jobs_owner(public_rig: Rig) -> None:
    import pwd

    rig = public_rig
    nobody = pwd.getpwnam("nobody")
    share = Path(rig.files.state_dir).parent / "shared"
    share.mkdir(mode=0o1777)
    share.chmod(0o1777)
    plan = rig.plan("sh", "-c", 'id -u; id -g; echo "$HOME $USER"; echo e >&2', ntasks=2,
                    cwd="/")
    job = ExecJob(3, 0, "run", started=True, forward=plan.forward, owner=nobody.pw_uid,
                  as_user=True)
    prepared = rig.launcher.prepare(plan.spec, nobody.pw_uid)
    assert prepared.account is not None and prepared.account.name == "nobody"
    assert prepared.env["HOME"] == nobody.pw_dir and prepared.env["USER"] == "nobody"
    rig.launcher.launch(job, plan, prepared)
    rig.jobs.append(job)
    assert set(rig.watcher.popens) == {t.pid for t in job.tasks}
    rig.wait_ended(job)
    assert [t.status for t in job.tasks] == [0, 0]
    assert not rig.watcher.popens  # reaped by us, not by subprocess
    out = [Path(t.streams[0].path).read_text().split("\n") for t in job.tasks]
    assert all(o[:3] == [str(nobody.pw_uid), str(nobody.pw_gid), f"{nobody.pw_dir} nobody"]
               for o in out)
    assert rig.files.listing(0, fresh=True, uid=nobody.pw_uid) == {(3, 0): 0, (3, 1): 0}
    # a file output: opened by the user (the wrapper), truncated once by the first rank
    output = {"system": {"shell": {"options": {"output": {"stdout": {
        "type": "file", "path": str(share / "x.out")}}}}}}
    for jobid, ntasks in ((4, 1), (5, 2)):
        plan = rig.plan("echo", f"job {jobid}", ntasks=ntasks, cwd="/", attributes=output)
        job = ExecJob(jobid, 0, "run", started=True, forward=plan.forward,
                      owner=nobody.pw_uid, as_user=True)
        rig.launcher.launch(job, plan, rig.launcher.prepare(plan.spec, nobody.pw_uid))
        rig.jobs.append(job)
        rig.wait_ended(job)
    written = share / "x.out"
    assert written.read_text() == "job 5\n" * 2 and written.stat().st_uid == nobody.pw_uid
    os.chown(written, 0, 0)  # root's file now: the user may not truncate it
    plan = rig.plan("true", cwd="/", attributes=output)
    job = ExecJob(6, 0, "run", started=True, forward=plan.forward, owner=nobody.pw_uid,
                  as_user=True)
    with pytest.raises(ValueError, match=r"cannot open output file .*x\.out.* as user nobody"):
        rig.launcher.launch(job, plan, rig.launcher.prepare(plan.spec, nobody.pw_uid))
    assert written.read_text() == "job 5\n" * 2
    # where the user may not write, the job fails before anything runs
    private = share / "root-only"
    private.mkdir(mode=0o700)
    plan = rig.plan("true", cwd="/", attributes={"system": {"shell": {"options": {"output": {
        "stdout": {"type": "file", "path": str(private / "y.out")}}}}}})
    job = ExecJob(7, 0, "run", started=True, forward=plan.forward, owner=nobody.pw_uid,
                  as_user=True)
    with pytest.raises(ValueError, match=r"cannot open output file .*root-only.* as user nobody"):
        rig.launcher.launch(job, plan, rig.launcher.prepare(plan.spec, nobody.pw_uid))
    assert not job.tasks and not (private / "y.out").exists()


def _fake_spawner(rig: Rig, tmp: Path) -> socket.socket:
    """A link to a spawner the test plays (the worker sends; the test answers)."""
    link = SpawnerLink(str(tmp), enabled=False)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link.sock = ours
    rig.watcher.spawner = link
    return theirs


def test_a_jobs_only_task_is_requested_and_its_answer_taken_later(rig: Rig,
                                                                   tmp_path: Path) -> None:
    spawner = _fake_spawner(rig, tmp_path)
    job = rig.launch(1, "true")
    # the request is out, nothing waited for: the job's one task is pending
    assert job.key in rig.launcher.deferred and job.tasks == []
    kind, fields = decode(spawner.recv(1 << 20))
    assert kind == b"S" and fields[0] == marker(NS, 0, 1, 0).encode()
    # the command could not run after all: the job fails as a shell would have
    spawner.send(b"E126\0cannot execute")
    with pytest.raises(StartFailed) as failed:
        rig.launcher.complete(job.key)
    assert failed.value.code == 126 and job.key not in rig.launcher.deferred


def test_a_pending_task_whose_spawner_went_away_runs_under_the_wrapper(rig: Rig,
                                                                       tmp_path: Path) -> None:
    spawner = _fake_spawner(rig, tmp_path)
    job = rig.launch(3, "sh", "-c", "echo fell back")
    assert job.key in rig.launcher.deferred
    spawner.close()  # before it answered
    link = rig.watcher.spawner
    assert link is not None
    link.read()
    assert not link.up
    rig.launcher.complete(job.key)
    [task] = job.tasks
    assert task.own and not task.spawned and task.pid in rig.watcher.children
    rig.wait_ended(job)
    assert task.status == 0 and Path(task.streams[0].path).read_bytes() == b"fell back\n"


@pytest.mark.parametrize("high", [False, True])
def test_nap_ends_when_its_fd_is_readable(high: bool) -> None:
    """The exec worker naps a fraction of a millisecond until a simulated job is due; a
    request that comes meanwhile ends the nap (an hour here: only readability ends it)."""
    r, w = os.pipe()
    if high:  # beyond select()'s reach (a worker with many tasks): poll() is used
        raise_fd_limit()  # as the exec worker does
        try:
            high_r = fcntl.fcntl(r, fcntl.F_DUPFD, 2000)
        except OSError:
            pytest.skip("cannot open an fd above 1024 here")
        os.close(r)
        r = high_r
    try:
        threading.Timer(0.05, os.write, (w, b"x")).start()
        done = threading.Event()

        def napper() -> None:
            nap(3600.0, r)
            done.set()

        threading.Thread(target=napper, daemon=True).start()
        assert done.wait(30.0)
        nap(0.0001, -1)  # no fd: a plain sleep
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.skipif(not Path("/proc/self/timerslack_ns").exists(), reason="Linux only")
def test_tight_timers_sets_the_process_timer_slack() -> None:
    """The exec worker ends simulated jobs on time: its timed waits may not be grouped
    50 us late (Linux's default slack)."""
    out = subprocess.run([sys.executable, "-c", "from fluxes.proc.tasks import tight_timers; "
                          "ok = tight_timers(); "
                          "print(ok, open('/proc/self/timerslack_ns').read().strip())"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "1000"]
