"""Commands that act on jobs already submitted (``job kill``, ``job killall``), on one
real instance shared by this module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.cli.main import main
from fluxes.formats.jobid import parse
from fluxes.proc.launcher import Launcher

pytestmark = pytest.mark.system

#: Longest wait for something a job does (a bound for a broken build, not a timing).
PATIENCE_S = 60.0


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance (2 nodes x 4 cores)."""
    from tests.system.conftest import running_instance

    with running_instance() as inst:
        yield inst


def cli(uri: str, *args: str) -> int:
    return main(["--uri", uri, *args])


def submit(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert cli(uri, "submit", *args) == 0
    return parse(capsys.readouterr().out.strip().splitlines()[-1])


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
