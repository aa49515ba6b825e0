"""Adoption after a restart (pure decisions): every combination of what the host says
about a task (reaped, our child, a live process with its marker, a status file)."""

from __future__ import annotations

import itertools
import signal

import pytest

from fluxes.domain.exec.adoption import (
    EXITED,
    KILLED,
    LOST,
    REAPED,
    WATCH,
    lost_error,
    marker,
    marker_task,
    parse_status_name,
    settle_gone,
    settle_recorded,
    settle_unrecorded,
)
from fluxes.domain.exec.jobs import LOST_ERROR, ExecJob, TaskProc
from fluxes.domain.exec.layout import wait_status


def test_marker_names_namespace_rank_job_and_task() -> None:
    assert marker("fx", 2, 77, 3) == "fluxes-task:fx:2:77:3"
    assert marker("fx", 2, 77) == "fluxes-task:fx:2:77:"
    prefix = marker("fx", 2, 77)
    assert marker_task(prefix, marker("fx", 2, 77, 12)) == 12
    assert marker_task(prefix, marker("fx", 2, 771, 1)) is None  # another job's
    assert marker_task(prefix, prefix + "x") is None
    assert marker_task(prefix, "fluxes-task:fy:2:77:1") is None


@pytest.mark.parametrize(("name", "parsed"), [
    ("12.3.st.0", (12, 3, 0)),
    ("12.3.st.137", (12, 3, 137)),
    ("12.3.out", None),
    ("12.3.st", None),
    ("12.3.st.", None),
    ("12.x.st.1", None),
    ("a.3.st.1", None),
    ("12.3.st.-1", None),
    ("12.3.sx.1", None),
    ("12.3.st.1.tmp", None),
])
def test_status_file_names(name: str, parsed: tuple[int, int, int] | None) -> None:
    assert parse_status_name(name) == parsed


@pytest.mark.parametrize(("code", "escalated", "decision", "status", "lost"), [
    (0, False, EXITED, 0, False),
    (3, True, EXITED, 3 << 8, False),  # the file wins over the escalation
    (128 + 15, False, EXITED, 15, False),  # a shell's "killed by SIGTERM"
    (None, True, KILLED, signal.SIGKILL, False),  # killed with its wrapper: no file
    (None, False, LOST, None, True),
])
def test_settle_gone(code: int | None, escalated: bool, decision: str, status: int | None,
                     lost: bool) -> None:
    task = TaskProc(0, 42, False)
    assert settle_gone(task, code, escalated) == decision
    assert (task.status, task.lost, task.code) == (status, lost, code)


class Host:
    """What the host says about pid 42, and which questions were asked."""

    def __init__(self, reaped: bool, child: bool, alive: bool, code: int | None) -> None:
        self.reaped = {42: (wait_status(7), 7)} if reaped else {}
        self.children = {42} if child else set()
        self.is_alive = alive
        self.code = code
        self.asked: list[str] = []

    def alive(self) -> bool:
        self.asked.append("alive")
        return self.is_alive

    def status_code(self) -> int | None:
        self.asked.append("code")
        return self.code


@pytest.mark.parametrize(("reaped", "child", "alive", "code", "escalated"),
                         list(itertools.product([False, True], [False, True], [False, True],
                                                [None, 5], [False, True])))
def test_every_combination_of_a_recorded_task(reaped: bool, child: bool, alive: bool,
                                              code: int | None, escalated: bool) -> None:
    host = Host(reaped, child, alive, code)
    task = TaskProc(0, 42, False)
    decision = settle_recorded(task, reaped=host.reaped, children=host.children,
                               alive=host.alive, status_code=host.status_code,
                               escalated=escalated)
    if reaped:  # this process reaped it before a reload of its state
        assert decision == REAPED and (task.status, task.code) == (wait_status(7), 7)
        assert host.asked == []
    elif child:  # our own child: waitpid will tell
        assert decision == WATCH and task.own and not task.ended
        assert host.asked == []
    elif alive:  # someone else's wrapper, still carrying the marker
        assert decision == WATCH and not task.own and not task.ended
        assert host.asked == ["alive"]
    elif code is not None:
        assert decision == EXITED and task.status == wait_status(code)
        assert host.asked == ["alive", "code"]
    elif escalated:
        assert decision == KILLED and task.status == signal.SIGKILL
    else:
        assert decision == LOST and task.lost and task.ended


def test_unrecorded_start_with_nothing_here_is_started() -> None:
    assert settle_unrecorded(range(3), {}, {}, False, set()) is None


def test_unrecorded_start_with_files_only() -> None:
    """Spawned, then everything ended while no worker ran: the files tell."""
    tasks = settle_unrecorded(range(3), {}, {0: 0, 2: 1}, True, set())
    assert tasks is not None
    assert [(t.rank, t.pid, t.status, t.lost) for t in tasks] == [
        (0, 0, 0, False), (1, 0, None, True), (2, 0, 1 << 8, False)]


def test_unrecorded_start_with_live_wrappers() -> None:
    tasks = settle_unrecorded(range(10, 13), {10: 500, 12: 502}, {11: 0}, False, {502})
    assert tasks is not None
    assert [(t.rank, t.pid, t.own, t.ended) for t in tasks] == [
        (10, 500, False, False), (11, 0, False, True), (12, 502, True, False)]


def test_lost_error_is_given_once_and_never_replaces_another() -> None:
    job = ExecJob(1, 0, "run", tasks=[TaskProc(0, 1, False), TaskProc(1, 2, False)])
    # a tuple: mypy would keep job.error narrowed to None past lost_error(), which sets it
    assert (lost_error(job), job.error) == (False, None)
    job.tasks[1].lost = True
    assert lost_error(job) is True and job.error == LOST_ERROR
    assert lost_error(job) is False
    other = ExecJob(2, 0, "run", error="exec: cannot start task: boom",
                    tasks=[TaskProc(0, 1, False)])
    other.tasks[0].lost = True
    assert lost_error(other) is False and other.error == "exec: cannot start task: boom"
