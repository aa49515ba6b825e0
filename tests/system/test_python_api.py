"""Scripts written against flux's Python API run on fluxes with only the import
line changed (``import flux`` -> ``import fluxes as flux``).

The scripts in ``flux_scripts/`` are in the style of flux's documentation and
the flux-workflow-examples repository: submit and wait for any, asynchronous
bulk submission with ``.then`` and ``reactor_run``, watching a job's events,
the executor with futures and event callbacks, a failing and a canceled job.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.proc.launcher import Launcher
from tests.system.conftest import running_instance

SCRIPTS = Path(__file__).parent / "flux_scripts"


@pytest.fixture(scope="module")
def small() -> Iterator[Launcher]:
    """A private instance of 1 node x 2 cores."""
    with running_instance(nodes=1, cores_per_node=2) as inst:
        yield inst


def run_script(launcher: Launcher, name: str, *args: str) -> list[str]:
    """Run a script against the instance; its output lines."""
    env = dict(os.environ, FLUXES_URI=str(launcher.uri))
    proc = subprocess.run([sys.executable, str(SCRIPTS / name), *args], env=env, check=False,
                          capture_output=True, text=True, timeout=120, cwd=SCRIPTS)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_only_the_import_lines_name_fluxes(name: str) -> None:
    # with flux's module name in the import lines, nothing else names fluxes
    text = (SCRIPTS / name).read_text()
    as_flux = re.sub(r"^import fluxes as flux$", "import flux", text, flags=re.M)
    as_flux = re.sub(r"^from fluxes(\.job)? import", r"from flux\1 import", as_flux, flags=re.M)
    assert "fluxes" not in as_flux


def test_submit_and_wait_for_any(small: Launcher) -> None:
    lines = run_script(small, "wait_any.py", "4")
    assert sorted(lines[:4]) == ["wait: 0 Error: task(s) exited with exit code 3",
                                 "wait: 1 Success", "wait: 2 Success", "wait: 3 Success"]
    assert lines[4] == "no more waitable jobs: 10"  # ECHILD, as flux


def test_async_bulk_submit_with_then_and_reactor_run(small: Launcher) -> None:
    assert run_script(small, "bulksubmit.py", "20") == [
        "submitted 20", "distinct ids 20", "completed 20 ok 20"]


def test_watching_a_jobs_events(small: Launcher) -> None:
    assert run_script(small, "events.py") == [
        "start event: start", "finish status: 5", "first: submit last: clean",
        "result: FAILED returncode: 5", "async saw clean: True", "listed: FAILED sh",
        "in my job list: True", "jobid forms agree: True",
        "unknown job errno: 2", "bad jobspec: ValueError"]


def test_executor_futures_callbacks_failing_and_canceled_jobs(small: Launcher) -> None:
    assert run_script(small, "executor.py") == [
        "results: [0] 30", "failing result: 7", "canceled: JobException cancel 0",
        "jobids distinct: 30", "attached result: 7 True", "start callbacks: 30 attached: 1",
        "clean callbacks: 30", "map: [0, 1, 2]"]
