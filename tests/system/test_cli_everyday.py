"""The everyday CLI on a real instance: waiting for events and jobs, output files,
drain progress, GPUs per node. The instance is this module's own (2 nodes x 4
cores x 2 GPUs), so its job counts are only what these tests submit."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.formats.jobid import encode
from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system

FLUXES = os.path.join(os.path.dirname(sys.executable), "fluxes")


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance: 2 nodes x 4 cores x 2 GPUs."""
    from tests.system.conftest import running_instance

    with running_instance(gpus_per_node=2) as inst:
        yield inst




def test_wait_event_on_an_ended_job_fails_instead_of_blocking(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "true")
    assert cli(uri, "job", "wait", str(jobid)) == 0
    capsys.readouterr()
    # the -t only bounds a regression: the answer must come from the ended eventlog
    assert cli(uri, "job", "wait-event", "-t", "60s", str(jobid), "nosuch") == 1
    assert capsys.readouterr().err == "fluxes: event 'nosuch' never received\n"
    assert cli(uri, "job", "wait-event", "-t", "60s", "-m", "status=99", str(jobid),
               "finish") == 1
    assert capsys.readouterr().err == "fluxes: event 'finish' never received\n"
    assert cli(uri, "job", "wait-event", str(jobid), "clean") == 0


def test_wait_event_without_timeout_ends_with_the_eventlog(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--urgency=hold", "true")
    proc = subprocess.Popen([FLUXES, "--uri", uri, "job", "wait-event", str(jobid), "nosuch"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert cli(uri, "cancel", str(jobid)) == 0
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert (out, err) == ("", "fluxes: event 'nosuch' never received\n")


def test_job_wait_takes_several_ids(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    good = [submit(uri, capsys, "true") for _ in range(3)]
    bad = submit(uri, capsys, "sh", "-c", "exit 3")
    assert cli(uri, "job", "wait", "-t", "60s", *map(str, good)) == 0
    assert capsys.readouterr().err == ""
    assert cli(uri, "job", "wait", "-t", "60s", str(good[0]), str(bad)) == 1
    assert capsys.readouterr().err == \
        f"fluxes: job {encode(bad, 'f58')}: task(s) exited with exit code 3\n"
    assert cli(uri, "job", "wait", "-v", str(good[0]), str(good[1])) == 0
    lines = capsys.readouterr().err.splitlines()
    assert sorted(lines) == sorted(f"fluxes: job {encode(j, 'f58')}: completed successfully"
                                   for j in good[:2])
    assert cli(uri, "job", "wait", str(good[0]), "12345") == 1
    assert capsys.readouterr().err.endswith("not found\n")


def test_job_wait_progress_off_a_terminal_prints_plain_lines(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = [submit(uri, capsys, "true") for _ in range(2)]
    assert cli(uri, "job", "wait", "--progress", *map(str, ids)) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("wait: 2/2 ")
    assert sum(line.startswith("wait: 2/2 ") for line in lines) == 1
    assert all(line.startswith("wait: ") for line in lines)


def test_job_wait_all_waits_for_every_active_job(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    fails = submit(uri, capsys, "sh", "-c", "sleep 1; exit 2")
    works = submit(uri, capsys, "sh", "-c", "sleep 1")
    assert cli(uri, "job", "wait", "--all", "-v", "-t", "60s") == 1
    lines = capsys.readouterr().err.splitlines()
    assert f"fluxes: job {encode(fails, 'f58')}: task(s) exited with exit code 2" in lines
    assert f"fluxes: job {encode(works, 'f58')}: completed successfully" in lines
    # nothing active any more: nothing to wait for
    assert cli(uri, "job", "wait", "--all") == 0
    assert capsys.readouterr().err == ""


def test_job_output_says_where_file_output_went(uri: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "--cwd", str(tmp_path), "--output=out-{{id}}.txt",
                   "sh", "-c", "echo hello")
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    capsys.readouterr()
    assert cli(uri, "job", "output", str(jobid)) == 0
    captured = capsys.readouterr()
    path = tmp_path / f"out-{encode(jobid, 'f58')}.txt"
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"fluxes: job {encode(jobid, 'f58')}: stdout redirected to {path}",
        f"fluxes: job {encode(jobid, 'f58')}: stderr redirected to {path}",
    ]
    assert path.read_text() == "hello\n"
    # a job whose output is in the stream gets no such note
    plain = submit(uri, capsys, "echo", "in the stream")
    assert cli(uri, "job", "wait", "-t", "60s", str(plain)) == 0
    capsys.readouterr()
    assert cli(uri, "job", "output", str(plain)) == 0
    assert capsys.readouterr() == ("in the stream\n", "")


def test_queue_drain_progress_prints_only_changes(uri: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    held = submit(uri, capsys, "--urgency=hold", "true")
    try:
        assert cli(uri, "queue", "drain", "--progress", "--timeout=3500ms") == 1
        lines = capsys.readouterr().err.splitlines()
        assert lines[-1].startswith("fluxes: queue drain: timeout with ")
        counts = lines[:-1]
        assert counts and all(c.startswith("drain: ") for c in counts)
        # a line per change: never the same count twice in a row
        assert all(a != b for a, b in itertools.pairwise(counts))
    finally:
        assert cli(uri, "cancel", str(held)) == 0
    assert cli(uri, "queue", "drain", "--timeout=60s") == 0


def test_run_gpus_per_node(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "run", "-N2", "--gpus-per-node=2", "-l", "sh", "-c",
               "echo $FLUXES_NODE_RANK:$CUDA_VISIBLE_DEVICES") == 0
    lines = sorted(capsys.readouterr().out.splitlines())
    assert lines == ["0: 0:0,1", "1: 1:0,1"]


def test_jobs_on_an_instance_without_queues(uri: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    submit(uri, capsys, "true")
    assert cli(uri, "queue", "drain", "--timeout=60s") == 0
    capsys.readouterr()
    assert cli(uri, "jobs", "-a") == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["JOBID", "USER", "NAME", "ST", "NTASKS", "NNODES", "TIME", "INFO"]
    assert rows
    assert cli(uri, "jobs", "-a", "-c", "-1") == 2
    assert capsys.readouterr().out == ""
