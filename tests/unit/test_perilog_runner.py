"""The hook runner (fluxes/proc/perilog.py): status, timeout, and finding runs again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fluxes.domain.exec.perilog import Hook, failure_text
from fluxes.proc import perilog
from fluxes.proc.perilog import HookRun, HookRunner


def wait_done(runner: HookRunner, timeout: float = 20.0) -> list[HookRun]:
    deadline = time.monotonic() + timeout
    while True:
        done = runner.poll()
        if done:
            return done
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_status_environment_and_log(tmp_path: Path) -> None:
    runner = HookRunner(str(tmp_path), "fx", [3])
    out = tmp_path / "env"
    run = runner.start("epilog", Hook(("/bin/sh", "-c", f"env > {out}; echo last words; "
                                       "exit 4"), 0), 3, 1234, 1000)
    [done] = wait_done(runner)
    assert done is run and done.status == 4 << 8 and done.failed
    env = out.read_text()
    assert "FLUXES_JOB_ID_DEC=1234" in env and "FLUXES_EXEC_RANK=3" in env
    assert "FLUXES_JOB_USERID=1000" in env and "FLUXES_HOOK=epilog" in env
    assert runner.log_tail(run) == "last words"
    assert failure_text("epilog", done.status, False, "n3", 3) == \
        "epilog exited with code=4 on n3 (rank 3)"
    runner.forget(run)
    assert runner.get(3, 1234) is None


def test_a_timeout_kills_the_hook(tmp_path: Path) -> None:
    runner = HookRunner(str(tmp_path), "fx", [0])
    runner.start("prolog", Hook(("/bin/sh", "-c", "sleep 30"), 0.2), 0, 7, 0)
    [done] = wait_done(runner)
    assert done.timed_out and done.failed
    assert failure_text("prolog", done.status, True, "n0", 0) == "prolog timed out on n0 (rank 0)"


def test_a_new_runner_finds_running_ended_and_lost_hooks(tmp_path: Path) -> None:
    first = HookRunner(str(tmp_path), "fx", [0])
    gate = tmp_path / "gate"
    first.start("housekeeping", Hook(("/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; "
                                      "done; exit 0"), 0), 0, 1, 0)
    first.hold(first.runs[(0, 1)], "5-0")
    ended = first.start("epilog", Hook(("/bin/sh", "-c", "exit 3"), 0), 0, 2, 0)
    os.waitpid(ended.pid, 0)
    lost = first.start("prolog", Hook(("/bin/sh", "-c", "exit 0"), 0), 0, 3, 0, waits_start=True)
    os.waitpid(lost.pid, 0)
    for name in os.listdir(tmp_path / "hooks" / "rank0"):  # as if it died unrecorded
        if name.startswith("3.prolog.st."):
            os.unlink(tmp_path / "hooks" / "rank0" / name)
    # a restarted worker: not its children, found through the files and /proc
    second = HookRunner(str(tmp_path), "fx", [0])
    found = {run.jobid: run for run in second.restore()}
    assert set(found) == {1, 2, 3} and found[1].drain_id == "5-0" and found[3].waits_start
    done = {run.jobid: run for run in second.poll()}
    assert done[2].status == 3 << 8 and done[3].status is None and done[3].failed
    assert 1 not in done  # still running
    for run in done.values():
        second.forget(run)
    gate.touch()
    [hk] = wait_done(second)
    assert hk.jobid == 1 and hk.status == 0 and not hk.failed


def test_a_hook_ending_between_the_two_looks_is_not_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted worker looks for the status file, then at /proc: a hook that writes its
    status and exits in between ended well (it was taken as lost, which drains the node)."""
    first = HookRunner(str(tmp_path), "fx", [0])
    gate = tmp_path / "gate"
    run = first.start("housekeeping", Hook(("/bin/sh", "-c", f"while [ ! -e {gate} ]; do "
                                            "sleep 0.02; done; exit 0"), 0), 0, 1, 0)
    second = HookRunner(str(tmp_path), "fx", [0])
    [found] = second.restore()

    def ends_meanwhile(pid: int, marker: str) -> bool:
        gate.touch()
        os.waitpid(run.pid, 0)  # its status file is written before it exits
        return False

    monkeypatch.setattr(perilog, "_alive", ends_meanwhile)
    [done] = second.poll()
    assert done is found and done.status == 0 and not done.failed
