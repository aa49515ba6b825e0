"""MPI jobs through the exec workers' PMI servers, on a real 4 nodes x 4 cores instance.

Small MPICH programs are built with ``mpicc.mpich`` once per session (the tests
skip without it, and fail under CI, where ``scripts/_setup.sh`` installs it):
an allreduce whose sum every rank prints, a token passed around a ring, an
``MPI_Abort`` in one rank, a rank that exits after ``MPI_Init`` without
finalizing and one that exits before ``MPI_Init``. The simulated nodes share
this machine, so the ranks of different nodes talk through MPICH's network
module (UCX here) and those of one node through shared memory, as the PMI
process mapping tells MPICH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.cli.main import main
from fluxes.formats.jobid import parse
from fluxes.proc.launcher import Launcher
from fluxes.store.instance import Instance

pytestmark = pytest.mark.system

FLUXES = os.path.join(os.path.dirname(sys.executable), "fluxes")
#: No run here may take this long: a hang (a barrier nobody completes) fails the test.
HANG_S = 60

PROGRAMS = {
    # every rank prints the sum of 1..size, its rank and its node (FLUXES_NODE_RANK)
    "allreduce": r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, one;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *node = getenv("FLUXES_NODE_RANK");
    printf("rank %d of %d sum %d node %s\n", rank, size, sum, node ? node : "?");
    MPI_Finalize();
    return 0;
}
""",
    # a token goes round the ring twice, each rank adding its rank
    "ring": r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, token = 0, lap;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (lap = 0; lap < 2; lap++) {
        if (rank == 0 && lap == 0) {
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        }
        MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        printf("rank %d lap %d got from %d token %d\n", rank, lap, prev, token);
        if (!(rank == 0 && lap == 1)) {
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Finalize();
    return 0;
}
""",
    # rank 1 aborts; the others would sleep for a minute
    "abort": r"""
#include <mpi.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) MPI_Abort(MPI_COMM_WORLD, 7);
    sleep(60);
    MPI_Finalize();
    return 0;
}
""",
    # rank argv[1] exits after MPI_Init without finalizing; the others wait in a barrier
    "early": r"""
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == atoi(argv[1])) exit(0);
    MPI_Barrier(MPI_COMM_WORLD);
    sleep(60);
    MPI_Finalize();
    return 0;
}
""",
    # rank argv[1] (PMI_RANK) exits before MPI_Init: the others never get past it
    "noinit": r"""
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    const char *r = getenv("PMI_RANK");
    if (r && strcmp(r, argv[1]) == 0) return 0;
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
""",
    # ranks meet in a barrier, rank 0 then creates the file argv[1]; all sleep a minute
    "hold": r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) fclose(fopen(argv[1], "w"));
    sleep(60);
    MPI_Finalize();
    return 0;
}
""",
}


@pytest.fixture(scope="session")
def mpi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the MPICH programs of :data:`PROGRAMS`, built once."""
    if shutil.which("mpicc.mpich") is None:
        if os.environ.get("CI"):
            pytest.fail("mpicc.mpich is not installed, and CI is set")
        pytest.skip("mpicc.mpich is not installed (apt-get install mpich libmpich-dev)")
    out = tmp_path_factory.mktemp("mpi")
    for name, source in PROGRAMS.items():
        (out / f"{name}.c").write_text(source)
        subprocess.run(["mpicc.mpich", "-O1", "-o", str(out / name), str(out / f"{name}.c")],
                       check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance: 4 nodes x 4 cores, a 2 s kill grace."""
    from tests.system.conftest import running_instance

    with running_instance(nodes=4) as inst:
        yield inst


def run(uri: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``fluxes run ARGS`` (a process of its own, so that a hang is caught)."""
    return subprocess.run([FLUXES, "--uri", uri, "run", *args], capture_output=True,
                          text=True, timeout=HANG_S, cwd=cwd, check=False)


def last_job(uri: str, capsys: pytest.CaptureFixture[str]) -> int:
    capsys.readouterr()
    assert main(["--uri", uri, "job", "last"]) == 0
    return parse(capsys.readouterr().out.strip())


def instance_of(launcher: Launcher) -> Instance:
    assert launcher.uri is not None, "the launcher has not started"
    return Instance(launcher.uri)


def eventlog(inst: Instance, jobid: int) -> list[tuple[str, dict[str, object]]]:
    """The job's events as its owner reads them (exception notes are private)."""
    from fluxes.store.eventstore import EventStore
    from fluxes.store.private import revealed_events

    events = EventStore(inst.redis, inst.keys).eventlog(jobid)
    return [(name, context) for _t, name, context
            in revealed_events(inst.redis, inst.keys, jobid, events)]


def running(program: Path) -> list[int]:
    """Pids of the processes running ``program`` (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0", 1)[0] == os.fsencode(program):
            pids.append(int(entry))
    return pids


def sums(stdout: str) -> dict[int, tuple[int, int, str]]:
    """rank -> (size, sum, node) from the allreduce's lines."""
    out = {}
    for line in stdout.splitlines():
        words = line.split()
        if words[:1] == ["rank"] and "sum" in words:
            out[int(words[1])] = (int(words[3]), int(words[5]), words[7])
    return out


@pytest.mark.parametrize(("nodes", "ntasks"), [(2, 4), (4, 16)])
def test_allreduce_over_nodes_gives_every_rank_the_sum(
        launcher: Launcher, mpi: Path, nodes: int, ntasks: int) -> None:
    done = run(str(launcher.uri), f"-N{nodes}", f"-n{ntasks}", str(mpi / "allreduce"))
    assert done.returncode == 0, done.stderr
    got = sums(done.stdout)
    assert sorted(got) == list(range(ntasks)), done.stdout
    per_node = ntasks // nodes
    for rank, (size, total, node) in got.items():
        assert (size, total) == (ntasks, ntasks * (ntasks + 1) // 2)
        assert node == str(rank // per_node)  # block order: whole blocks per node
    assert _no_pmi_left(launcher)  # the last rank to leave removed the exchange


def _no_pmi_left(launcher: Launcher) -> bool:
    """Whether the instance holds no PMI exchange (waiting for the ranks' leave steps,
    which follow their final reports)."""
    inst = instance_of(launcher)
    deadline = time.monotonic() + HANG_S
    while list(inst.redis.scan_iter(match=inst.keys.pmi(0, 0).rsplit(":", 2)[0] + ":*")):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_token_goes_round_the_ring(launcher: Launcher, mpi: Path) -> None:
    done = run(str(launcher.uri), "-N4", "-n8", str(mpi / "ring"))
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    total = sum(range(8))
    want = []
    for rank in range(8):
        # rank 0 starts the token at 0 and gets it back after each lap
        prev = (rank + 7) % 8
        first = total if rank == 0 else sum(range(rank + 1))
        want.append(f"rank {rank} lap 0 got from {prev} token {first}")
        want.append(f"rank {rank} lap 1 got from {prev} token {total + first}")
    assert lines == sorted(want)


def test_cyclic_taskmap_places_ranks_round_the_nodes(
        launcher: Launcher, mpi: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    done = run(uri, "-N2", "-n4", "--taskmap=cyclic", str(mpi / "allreduce"))
    assert done.returncode == 0, done.stderr
    got = sums(done.stdout)
    assert {rank: node for rank, (_s, _t, node) in got.items()} == \
        {0: "0", 1: "1", 2: "0", 3: "1"}
    assert all(total == 10 for _size, total, _node in got.values())
    jobid = last_job(uri, capsys)
    assert main(["--uri", uri, "job", "taskmap", "--to=pmi", str(jobid)]) == 0
    assert capsys.readouterr().out == "(vector,(0,2,1),(0,2,1))\n"


def test_pmi_off_runs_singletons(launcher: Launcher, mpi: Path) -> None:
    done = run(str(launcher.uri), "-N2", "-n2", "-o", "pmi=off", str(mpi / "allreduce"))
    assert done.returncode == 0, done.stderr
    # each task is an MPI world of its own: rank 0 of 1, once per node
    lines = sorted(done.stdout.splitlines())
    assert lines == ["rank 0 of 1 sum 1 node 0", "rank 0 of 1 sum 1 node 1"]


@pytest.mark.parametrize(("program", "args", "note"), [
    ("abort", ("-N2", "-n4"), ("PMI_Abort: task 1 exit code 7",)),
    # MPICH may notice the lost peer first and abort (an MPI error code as exit code)
    ("early", ("-N2", "-n4"), ("PMI: task 2 exited before PMI_Finalize", "PMI_Abort: ")),
    # alone on its node: the other node learns it through the exchange
    ("noinit", ("-N2", "-n2"), ("PMI: task 1 exited before PMI_Finalize",)),
])
def test_a_rank_failing_ends_the_job_with_an_exception_and_no_task_left(
        launcher: Launcher, mpi: Path, capsys: pytest.CaptureFixture[str], program: str,
        args: tuple[str, ...], note: tuple[str, ...]) -> None:
    uri = str(launcher.uri)
    extra = [] if program == "abort" else ["2" if program == "early" else "1"]
    done = run(uri, *args, str(mpi / program), *extra)
    assert done.returncode != 0
    jobid = last_job(uri, capsys)
    assert _wait_clean(launcher, jobid)
    events = eventlog(instance_of(launcher), jobid)
    exceptions = [c for n, c in events if n == "exception"]
    assert exceptions and exceptions[0]["type"] == "exec", events
    assert str(exceptions[0]["note"]).startswith(note), exceptions
    assert exceptions[0]["severity"] == 0
    finish = next(c for n, c in events if n == "finish")
    assert finish["status"] != 0
    assert running(mpi / program) == []
    assert _no_pmi_left(launcher)


def _wait_clean(launcher: Launcher, jobid: int) -> bool:
    inst = instance_of(launcher)
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if any(n == "clean" for n, _ in eventlog(inst, jobid)):
            return True
        time.sleep(0.05)
    return False


def test_mpi_inside_a_batch_job(launcher: Launcher, mpi: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    script = tmp_path / "mpi.sh"
    script.write_text(f"#!/bin/sh\nfluxes run -N2 -n4 {mpi / 'allreduce'}\n")
    out = tmp_path / "batch.out"
    capsys.readouterr()
    assert main(["--uri", uri, "batch", "-N2", f"--output={out}", str(script)]) == 0
    jobid = parse(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["--uri", uri, "job", "wait", str(jobid)]) == 0
    got = sums(out.read_text())
    assert sorted(got) == [0, 1, 2, 3], out.read_text()
    assert all((size, total) == (4, 10) for size, total, _node in got.values())
    assert {node for _s, _t, node in got.values()} == {"0", "1"}


def test_a_canceled_mpi_job_gets_only_its_cancel(launcher: Launcher, mpi: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Tasks killed in the middle of their PMI life are the cancel's doing: no PMI
    exception is added (as flux's shell, which knows the job is being torn down)."""
    uri = str(launcher.uri)
    ready = tmp_path / "ready"
    capsys.readouterr()
    assert main(["--uri", uri, "submit", "-N2", "-n4", str(mpi / "hold"), str(ready)]) == 0
    jobid = parse(capsys.readouterr().out.strip())
    deadline = time.monotonic() + HANG_S
    while not ready.exists():
        assert time.monotonic() < deadline, "the MPI job never got past its barrier"
        time.sleep(0.05)
    assert main(["--uri", uri, "cancel", str(jobid)]) == 0
    assert _wait_clean(launcher, jobid)
    events = eventlog(instance_of(launcher), jobid)
    assert [c["type"] for n, c in events if n == "exception"] == ["cancel"], events
    assert running(mpi / "hold") == []
