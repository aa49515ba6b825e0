"""Job prolog, epilog and housekeeping run by the exec workers (docs/exec.md,
"Prolog, epilog, housekeeping"): a failing prolog fails its job before any
task runs and drains the node; a slow housekeeping keeps the node from the
scheduler until it ends."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.cli.display import fmt_id
from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

PATIENCE_S = 60.0
#: The control files the hooks look at live here (the config names it).
CTL = Path(tempfile.mkdtemp(prefix="fx-perilog-"))
CONFIG = f"""[exec]
kill-timeout = "2s"
prolog = "test ! -e {CTL}/fail-prolog-$FLUXES_EXEC_RANK"
epilog = "echo $FLUXES_JOB_ID_DEC >> {CTL}/epilog.log; test ! -e {CTL}/fail-epilog"
housekeeping = "touch {CTL}/hk-$FLUXES_JOB_ID_DEC; while [ -e {CTL}/hold ]; do sleep 0.05; done"
"""


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """Two nodes of one core (the housekeeping tests keep to rank 0)."""
    from tests.system.conftest import running_instance

    try:
        with running_instance(config_text=CONFIG, nodes=2, cores_per_node=1) as inst:
            yield inst
    finally:
        shutil.rmtree(CTL, ignore_errors=True)


def wait_for(path: Path) -> None:
    """Return once ``path`` exists; fail after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def resource_status_says(uri: str, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """Wait until ``fluxes resource status`` (the scheduler's published summary) shows
    ``text``; fail after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        capsys.readouterr()
        assert cli(uri, "resource", "status") == 0
        out = capsys.readouterr().out
        if text in out:
            return out
        assert time.monotonic() < deadline, out
        time.sleep(0.1)


def events(uri: str, capsys: pytest.CaptureFixture[str], jobid: int) -> list[tuple[float, str,
                                                                                   dict]]:
    """(timestamp, name, context) of the job's events."""
    capsys.readouterr()
    assert cli(uri, "job", "eventlog", "--format=json", str(jobid)) == 0
    out = []
    for line in capsys.readouterr().out.splitlines():
        entry = orjson.loads(line)
        out.append((entry["timestamp"], entry["name"], entry.get("context", {})))
    return out


def test_a_failing_prolog_fails_the_job_and_drains_the_node(
        uri: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (CTL / "fail-prolog-1").touch()
    try:
        jobid = submit(uri, capsys, "-N2", "--cwd", str(tmp_path), "touch", "ran")
        assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) != 0
        names = [(n, c) for _t, n, c in events(uri, capsys, jobid)]
        order = [n for n, _c in names]
        assert "start" not in order and not (tmp_path / "ran").exists()
        assert ("prolog-start", {"description": "job-manager.prolog"}) in names
        finish = [c for n, c in names if n == "prolog-finish"]
        assert finish and finish[0]["description"] == "job-manager.prolog"
        assert finish[0]["status"] != 0
        exc = [c for n, c in names if n == "exception"]
        assert exc[0]["type"] == "prolog" and "prolog exited with code=1" in exc[0]["note"]
        assert order.index("exception") < order.index("prolog-finish") < order.index("clean")
        # rank 1, whose prolog failed, is drained with the reason; rank 0 is not
        out = resource_status_says(uri, capsys, f"prolog failed for job {fmt_id(jobid)}")
        drained = [line for line in out.splitlines() if "drained" in line]
        assert len(drained) == 1 and " 1 " in drained[0] and "prolog failed" in drained[0]
    finally:
        (CTL / "fail-prolog-1").unlink()
    assert cli(uri, "resource", "undrain", "1") == 0
    # the next job runs: prolog, tasks, epilog, in flux's order
    ok = submit(uri, capsys, "-N2", "true")
    assert cli(uri, "job", "wait", "-t", "60s", str(ok)) == 0
    order = [n for _t, n, _c in events(uri, capsys, ok)]
    assert order.index("prolog-start") < order.index("prolog-finish") < order.index("start")
    assert order.index("finish") < order.index("epilog-start") < order.index("epilog-finish")
    assert order.index("epilog-finish") < order.index("free")
    assert str(ok) in (CTL / "epilog.log").read_text().split()


def test_a_slow_housekeeping_holds_the_node_until_it_ends(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    (CTL / "hold").touch()
    try:
        first = submit(uri, capsys, "--requires=rank:0", "true")
        wait_for(CTL / f"hk-{first}")  # its housekeeping runs, the node is held
        second = submit(uri, capsys, "--requires=rank:0", "true")
        # as flux's: the job itself is over (inactive), its node still held
        assert cli(uri, "job", "wait", "-t", "60s", str(first)) == 0
        assert "clean" in [n for _t, n, _c in events(uri, capsys, first)]
        resource_status_says(uri, capsys, f"housekeeping for job {fmt_id(first)}")
        assert "alloc" not in [n for _t, n, _c in events(uri, capsys, second)]
    finally:
        released_at = time.time()
        (CTL / "hold").unlink()
    # the second job got the node only once the first one's housekeeping ended
    _ran_after(uri, capsys, second, released_at)


def _ran_after(uri: str, capsys: pytest.CaptureFixture[str], jobid: int,
               released_at: float) -> None:
    """Job ``jobid`` ends well, was allocated only once the node was released (at
    ``released_at``), and its own housekeeping ran."""
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    alloc = [t for t, n, _c in events(uri, capsys, jobid) if n == "alloc"]
    assert alloc and alloc[0] >= released_at - 0.01
    wait_for(CTL / f"hk-{jobid}")


def test_stdin_goes_to_task_0_and_input_to_every_task(
        uri: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    data = tmp_path / "in.txt"
    data.write_bytes(b"first line\nsecond \xff line\n")
    with data.open("rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "fluxes.cli.main", "--uri", uri, "run",
                               "cat"], stdin=stdin, capture_output=True, timeout=120,
                              check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == data.read_bytes().replace(b"\xff", "\ufffd".encode())
    # --input=FILE, relative to the working directory, read by the task
    capsys.readouterr()
    assert cli(uri, "run", "--cwd", str(tmp_path), "--input=in.txt", "wc", "-l") == 0
    assert capsys.readouterr().out.strip() == "2"
    assert cli(uri, "run", "--cwd", str(tmp_path), "--input=nosuch", "cat") != 0


def test_signal_before_the_time_limit(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    # a 1 minute limit, USR1 59 s before it: about a second after the start
    assert cli(uri, "run", "-t", "1m", "--signal=USR1@59s", "sh", "-c",
               "trap 'echo got USR1; exit 0' USR1; while :; do sleep 0.1; done") == 0
    assert capsys.readouterr().out == "got USR1\n"


def test_fluxes_exec_runs_on_the_ranks_as_the_owner(
        uri: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    capsys.readouterr()
    assert cli(uri, "exec", "-r", "0", "-l", "-d", str(tmp_path), "sh", "-c",
               "echo on $FLUXES_EXEC_RANK in $(pwd); echo oops >&2; exit 3") == 3
    out, err = capsys.readouterr()
    assert out == f"0: on 0 in {tmp_path}\n" and err == "0: oops\n"
    # every rank by default; the exit code is the largest
    assert cli(uri, "exec", "-l", "sh", "-c", "echo r$FLUXES_EXEC_RANK; exit $FLUXES_EXEC_RANK") == 1
    assert sorted(capsys.readouterr().out.splitlines()) == ["0: r0", "1: r1"]
    assert cli(uri, "exec", "-r", "0", "true") == 0
    assert cli(uri, "exec", "-r", "5", "true") == 1
    assert "not in the instance" in capsys.readouterr().err
    # anyone else is refused in one line
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    monkeypatch.setenv("FLUXES_USER", "mallory")
    import fluxes.store.client as client_mod

    monkeypatch.setattr(client_mod, "current_user", lambda: "mallory")
    assert cli(uri, "exec", "true") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only the instance owner" in err


def test_housekeeping_outlives_an_exec_worker_restart(
        launcher: Launcher, uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    (CTL / "hold").touch()
    try:
        first = submit(uri, capsys, "--requires=rank:0", "true")
        wait_for(CTL / f"hk-{first}")
        second = submit(uri, capsys, "--requires=rank:0", "true")
        spec = launcher.worker("exec-0")
        assert spec.proc is not None
        os.kill(spec.proc.pid, signal.SIGKILL)
        spec.proc.wait()
        deadline = time.monotonic() + PATIENCE_S
        while spec.proc.poll() is not None:  # the supervisor starts a new one
            assert time.monotonic() < deadline
            launcher.supervise_once()
            time.sleep(0.05)
        resource_status_says(uri, capsys, f"housekeeping for job {fmt_id(first)}")
        assert "alloc" not in [n for _t, n, _c in events(uri, capsys, second)]
    finally:
        released_at = time.time()
        (CTL / "hold").unlink()
    # the new worker found the housekeeping still running, saw it end, gave the node back
    _ran_after(uri, capsys, second, released_at)


def test_a_failing_epilog_drains_the_node_and_housekeeping_leaves_it_so(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    (CTL / "fail-epilog").touch()
    try:
        jobid = submit(uri, capsys, "--requires=rank:0", "true")
        # the job's result is its tasks' (a non-fatal epilog exception, as flux's)
        assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
        got = [(n, c) for _t, n, c in events(uri, capsys, jobid)]
        exc = [c for n, c in got if n == "exception"]
        assert exc and exc[0]["type"] == "epilog" and exc[0]["severity"] == 2
        assert [c["status"] for n, c in got if n == "epilog-finish"] == [1 << 8]
        wait_for(CTL / f"hk-{jobid}")
        out = resource_status_says(uri, capsys, f"epilog failed for job {fmt_id(jobid)}")
        # the housekeeping that followed does not give the failed node back
        assert cli(uri, "exec", "-r", "0", "true") == 0
        out = resource_status_says(uri, capsys, f"epilog failed for job {fmt_id(jobid)}")
        assert "housekeeping for job" not in out
    finally:
        (CTL / "fail-epilog").unlink()
    assert cli(uri, "resource", "undrain", "0") == 0
