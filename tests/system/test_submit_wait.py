"""``submit``/``bulksubmit`` --wait, --wait-event, --watch, --quiet, --log, --log-stderr,
--cc and --bcc on a real instance (flux's meanings)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli
from tests.system.conftest import running_instance


@pytest.fixture(scope="module")
def uri() -> Iterator[str]:
    """A private instance of 1 node x 2 cores."""
    inst: Launcher
    with running_instance(nodes=1, cores_per_node=2) as inst:
        yield str(inst.uri)


def test_wait_exits_with_the_largest_exit_code(uri: str, capsys: pytest.CaptureFixture[str]
                                               ) -> None:
    assert cli(uri, "submit", "--wait", "--quiet", "--cc=0-2", "sh", "-c", "exit {cc}") == 2
    out, err = capsys.readouterr()
    assert out == ""  # --quiet
    assert err.count("task(s) exited with exit code") == 2
    assert cli(uri, "submit", "--wait", "true") == 0


def test_watch_prints_the_output_and_cc_sets_the_variable_but_bcc_does_not(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    # as flux: both substitute {cc}; --cc also sets the copy's id in its environment
    command = ["sh", "-c", "echo copy {cc} ${FLUXES_JOB_CC:-unset}"]
    assert cli(uri, "submit", "--watch", "--quiet", "--cc=1-3", *command) == 0
    assert capsys.readouterr().out.splitlines() == ["copy 1 1", "copy 2 2", "copy 3 3"]
    assert cli(uri, "submit", "--watch", "--quiet", "--bcc=1-2", *command) == 0
    assert capsys.readouterr().out.splitlines() == ["copy 1 unset", "copy 2 unset"]
    assert cli(uri, "submit", "--cc=1", "--bcc=1", "true") == 2  # one or the other


def test_wait_event_returns_once_the_event_is_in(uri: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "ids"
    assert cli(uri, "submit", "--wait-event=start", f"--log={log}", "sleep", "60") == 0
    assert capsys.readouterr().out == ""  # the id went to the log
    jobid = log.read_text().strip()
    assert cli(uri, "cancel", jobid) == 0
    # an event the job never has: the wait ends with its end, exit 1
    errors = tmp_path / "errors"
    assert cli(uri, "submit", "--wait-event=nonesuch", f"--log-stderr={errors}", "true") == 1
    assert "ended before event nonesuch" in errors.read_text()


def test_wait_event_exec_names_wait_for_their_main_eventlog_stand_ins(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # flux's exec.NAME: fluxes keeps no exec eventlog; exec.shell.init is over once the
    # tasks run (start), never before
    assert cli(uri, "submit", "--wait-event=exec.shell.init", "sleep", "60") == 0
    jobid = capsys.readouterr().out.strip()
    assert cli(uri, "job", "wait-event", "-t", "1s", jobid, "start") == 0
    assert cli(uri, "cancel", jobid) == 0
    capsys.readouterr()
    assert cli(uri, "jobs", "-a", "-n", "-o", "{id}") == 0
    before = capsys.readouterr().out
    # an exec event with no stand-in: a usage error, and nothing is submitted
    assert cli(uri, "submit", "--wait-event=exec.nonesuch", "true") == 2
    assert "exec.nonesuch: not an exec event" in capsys.readouterr().err
    assert cli(uri, "jobs", "-a", "-n", "-o", "{id}") == 0
    assert capsys.readouterr().out == before


def test_bulksubmit_wait_watch_cc_quiet(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "bulksubmit", "--wait", "--quiet", "sh", "-c", "exit {}",
               ":::", "0", "3", "1") == 3
    assert capsys.readouterr().out == ""
    assert cli(uri, "bulksubmit", "--watch", "--quiet", "--cc=1-2", "echo", "{}", "{cc}",
               ":::", "a", "b") == 0
    assert sorted(capsys.readouterr().out.splitlines()) == ["a 1", "a 2", "b 1", "b 2"]
