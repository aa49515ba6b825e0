"""flux behaviour users expect of the CLI, on a real instance: ``jobs ID`` with flux's
returncode and waitstatus, INFO texts (failed dependency, stopped queue), ``job attach``
of a job writing to a file, ids echoed as typed. One instance serves the module."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.formats.jobid import encode
from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system

#: Upper bound of the wait for the job list to show a state (it lags by milliseconds).
CATCH_UP_S = 30.0


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance (2 nodes x 4 cores, the anonymous queue only)."""
    from tests.system.conftest import running_instance

    with running_instance() as inst:
        yield inst




def listed(uri: str, capsys: pytest.CaptureFixture[str], fmt: str, *ids: str) -> list[str]:
    assert cli(uri, "jobs", "-n", "-o", fmt, *ids) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


def wait_listed_state(uri: str, capsys: pytest.CaptureFixture[str], jobid: int,
                      state: str) -> None:
    """Until ``fluxes jobs ID`` shows ``state`` (the read model folds the journal a
    little after the eventlog has the event)."""
    deadline = time.monotonic() + CATCH_UP_S
    while listed(uri, capsys, "{state}", str(jobid)) != [state]:
        assert time.monotonic() < deadline, f"job never listed as {state}"
        time.sleep(0.05)


def test_jobs_lists_given_ids_in_any_state_with_returncode_and_waitstatus(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    ok = submit(uri, capsys, "true")
    three = submit(uri, capsys, "sh", "-c", "exit 3")
    killed = submit(uri, capsys, "sh", "-c", "kill -9 $$")
    held = submit(uri, capsys, "--urgency=hold", "-t", "1-0", "true")
    canceled = submit(uri, capsys, "--urgency=hold", "true")
    assert cli(uri, "cancel", str(canceled)) == 0
    for jobid in (ok, three, killed, canceled):
        cli(uri, "job", "wait", "-t", "60s", str(jobid))
    capsys.readouterr()
    for jobid in (ok, three, killed, canceled):
        wait_listed_state(uri, capsys, jobid, "INACTIVE")
    # any encoding, in the order given, active and inactive together
    ids = [str(ok), encode(three, "hex"), encode(killed, "f58"), encode(held, "words"),
           str(canceled)]
    assert listed(uri, capsys, "{id.dec} {status} {returncode} {waitstatus} {duration!F}",
                  *ids) == [
        f"{ok} COMPLETED 0 0", f"{three} FAILED 3 768", f"{killed} FAILED -9 9",
        f"{held} SCHED   1d", f"{canceled} CANCELED -128"]
    assert cli(uri, "jobs", "--json", str(three), str(held)) == 0
    first, second = orjson.loads(capsys.readouterr().out)["jobs"]
    assert (first["returncode"], first["waitstatus"]) == (3, 768)
    assert "returncode" not in second and "waitstatus" not in second
    # an unknown id: the others are listed, the unknown one named as typed
    assert cli(uri, "jobs", "-n", "-o", "{id.dec}", str(ok), "12345") == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (f"{ok}\n", "fluxes: job 12345 not found\n")
    assert cli(uri, "cancel", str(held)) == 0


def test_jobs_refuses_an_unknown_queue(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "queue", "status", "nosuch") == 1
    expected = capsys.readouterr().err
    assert cli(uri, "jobs", "-q", "nosuch") == 1
    assert capsys.readouterr() == ("", expected)
    assert expected == "fluxes: unknown queue 'nosuch'\n"


def test_failed_dependency_info_says_dependency_once(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = submit(uri, capsys, "false")
    after = submit(uri, capsys, f"--dependency=afterok:{first}", "true")
    assert cli(uri, "job", "wait", "-t", "60s", str(after)) == 1
    capsys.readouterr()
    wait_listed_state(uri, capsys, after, "INACTIVE")
    [info] = listed(uri, capsys, "{contextual_info}", str(after))
    assert info == f"dependency: afterok: job {first} failed"  # the id as written


def test_jobs_in_a_stopped_queue_say_why(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "queue", "stop", "-m", "maintenance") == 0
    try:
        jobid = submit(uri, capsys, "true")
        wait_listed_state(uri, capsys, jobid, "SCHED")
        assert listed(uri, capsys, "{contextual_info}", str(jobid)) == [
            "queue stopped: maintenance"]
    finally:
        assert cli(uri, "queue", "start") == 0
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0


def test_attach_says_where_file_output_went(uri: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--cwd", str(tmp_path), "--output=out.txt", "echo", "hello")
    assert cli(uri, "job", "attach", encode(jobid, "dec")) == 0
    captured = capsys.readouterr()
    path = tmp_path / "out.txt"
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"fluxes: job {encode(jobid, 'f58')}: stdout redirected to {path}",
        f"fluxes: job {encode(jobid, 'f58')}: stderr redirected to {path}",
    ]
    assert path.read_text() == "hello\n"


def test_ids_are_echoed_as_typed(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["job", "info", "12345"], ["job", "attach", "12345"], ["jobs", "12345"],
                 ["job", "wait", "12345"]):
        assert cli(uri, *argv) == 1
        assert capsys.readouterr().err == "fluxes: job 12345 not found\n"
    assert cli(uri, "cancel", "12345") == 1
    assert capsys.readouterr().err == "fluxes: 12345: job is inactive or unknown\n"


def test_queue_list_json_marks_the_anonymous_queue_default(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "queue", "list", "--json") == 0
    [row] = orjson.loads(capsys.readouterr().out)["queues"]
    assert (row["queue"], row["default"]) == ("(default)", True)
