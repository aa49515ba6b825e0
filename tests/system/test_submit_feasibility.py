"""Submission refuses what could never run, on a real instance (2 nodes x 4 cores).

Each refused submission prints the scheduler's (or the job manager's) note
as one line, exits 1, and leaves no job behind: neither in the store nor in
``fluxes jobs -a``. A job that needs drained nodes is still accepted: a
drained node may come back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.formats.jobid import encode, parse
from fluxes.proc.launcher import Launcher
from fluxes.store.instance import Instance
from tests.system.clitools import cli

pytestmark = pytest.mark.system

CONFIG = """
[exec]
kill-timeout = "2s"

[policy.jobspec.defaults.system]
queue = "batch"

[queues.batch]

[queues.gpu]
requires = ["gpu"]

[[resource.config]]
hosts = "node[0-1]"
cores = "0-3"
"""

#: A job id no instance hands out (FLUIDs carry a timestamp): never submitted here.
UNKNOWN = encode(12345, "f58")


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance: 2 nodes x 4 cores, a default queue and a ``gpu`` queue."""
    from tests.system.conftest import running_instance

    with running_instance(config_text=CONFIG) as inst:
        yield inst



def stored_jobs(uri: str) -> set[bytes]:
    """The job hashes in the store (the ingest commits before it answers)."""
    inst = Instance.connect(uri)
    return {key for key in inst.redis.scan_iter(match="*:job:*", count=1000)
            if not key.endswith(b":eventlog")}


def all_jobs(uri: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli(uri, "jobs", "-a", "-n", "-o", "{id.dec}") == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("args", "note"), [
    (["-N", "5", "true"], "job requests 5 nodes, only 2 exist"),
    (["-c", "100", "true"], "job requests 100 cores per slot, nodes have at most 4"),
    (["-n", "9", "true"], "job requests 9 cores, only 8 exist"),
    (["-q", "gpu", "true"], "no node matches [gpu]"),
    (["--requires=bigmem", "true"], "no node matches [bigmem]"),
    ([f"--dependency=afterok:{UNKNOWN}", "true"],
     f"dependency: afterok: job {UNKNOWN} not found"),
    (["--dependency=afterany:12345", "true"], "dependency: afterany: job 12345 not found"),
])
@pytest.mark.parametrize("command", ["submit", "run"])
def test_refused_at_submission(uri: str, capsys: pytest.CaptureFixture[str], command: str,
                               args: list[str], note: str) -> None:
    jobs_before, stored_before = all_jobs(uri, capsys), stored_jobs(uri)
    assert cli(uri, command, *args) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"fluxes: {note}\n")
    assert stored_jobs(uri) == stored_before
    assert all_jobs(uri, capsys) == jobs_before


def test_every_copy_of_a_cc_array_is_refused(uri: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    stored_before = stored_jobs(uri)
    assert cli(uri, "submit", "--cc=1-3", "-N", "5", "true") == 1
    assert capsys.readouterr() == ("", "fluxes: job requests 5 nodes, only 2 exist\n" * 3)
    assert stored_jobs(uri) == stored_before


def test_dependency_on_a_job_that_exists_is_accepted(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "submit", "true") == 0
    first = capsys.readouterr().out.strip()
    assert cli(uri, "submit", f"--dependency=afterok:{first}", "true") == 0
    second = parse(capsys.readouterr().out.strip())
    assert cli(uri, "job", "wait", "-t", "60s", str(second)) == 0


def test_job_needing_drained_nodes_is_accepted(uri: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(uri, "resource", "drain", "0-1", "maintenance") == 0
    try:
        assert cli(uri, "submit", "-N", "2", "true") == 0
        out, err = capsys.readouterr()
        jobid = parse(out.strip().splitlines()[-1])
        assert err == ""
    finally:
        assert cli(uri, "resource", "undrain", "0-1") == 0
    assert cli(uri, "job", "wait", "-t", "60s", str(jobid)) == 0


def test_huge_jobspec_file_gives_its_real_size(uri: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x: " + b"a" * ((10 << 20) - 3))
    assert cli(uri, "submit", str(path)) == 1
    err = capsys.readouterr().err
    assert err.endswith("jobspec is larger than 1048576 bytes (10485760)\n")
    assert len(err.splitlines()) == 1
