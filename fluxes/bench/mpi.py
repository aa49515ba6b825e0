"""``fluxes bench mpi``: what PMI adds to a job, on a private instance.

* ``run_mpi_s`` / ``run_true_s``: launch to exit of ``fluxes run -N2 -n4`` of a
  trivial MPICH program (``MPI_Init``, ``MPI_Finalize``, built with
  ``mpicc.mpich``) and of ``true``, the median of ``--runs`` each, run in
  turn (the CLI's start-up included, as a user sees it); ``mpi_minus_true_s``
  their difference; ``*_start_to_finish_s`` the same from the job's ``start``
  to its ``finish`` event (no CLI); ``mpi_alone_s`` the program's four ranks
  spawned by the benchmark itself with the same PMI protocol code in-process
  (no exec worker, no Redis, no fluxes): what MPICH itself costs here, the
  floor of ``mpi_start_to_finish_s``;
* ``barrier_us``: a PMI barrier across ``--ranks`` tasks on ``--nodes`` nodes
  (four per node by default: 64 on 16), as the tasks see it: per round, the
  shortest ``barrier_in`` to ``barrier_out`` over the ranks (the last rank to
  enter waits only for the barrier itself), the median over ``--rounds``
  rounds (the first, which waits for every task to start, left out);
  ``barrier_us_p90`` the 90th percentile. The tasks speak the wire protocol
  directly (a few lines of Python), so MPI's own start-up is not in it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from fluxes.domain.exec.pmi import PmiShare, pmi_environment
from fluxes.formats.jobid import parse as parse_jobid
from fluxes.proc.launcher import Launcher
from fluxes.store import jobfacts
from fluxes.store.instance import Instance

TRIVIAL = r"""
#include <mpi.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
"""

#: A task that times PMI barriers through its PMI_FD and prints them (microseconds).
PROBE = r"""
import json, os, socket, sys, time
s = socket.socket(fileno=int(os.environ["PMI_FD"]))
r = s.makefile("rb")
def ask(line):
    s.sendall(line.encode() + b"\n")
    return r.readline()
ask("cmd=init pmi_version=1 pmi_subversion=1")
times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    ask("cmd=barrier_in")
    times.append((time.perf_counter() - t0) * 1e6)
ask("cmd=finalize")
print(json.dumps({"rank": int(os.environ["PMI_RANK"]), "t": times}), flush=True)
"""

FLUXES = os.path.join(os.path.dirname(sys.executable), "fluxes")


def _build(work: Path) -> Path:
    compiler = shutil.which("mpicc.mpich")
    if compiler is None:
        raise ValueError("bench mpi needs mpicc.mpich (apt-get install mpich libmpich-dev)")
    (work / "trivial.c").write_text(TRIVIAL)
    subprocess.run([compiler, "-O1", "-o", str(work / "trivial"), str(work / "trivial.c")],
                   check=True, capture_output=True, timeout=120)
    return work / "trivial"


def _run(uri: str, args: list[str], timeout: float) -> tuple[float, str]:
    """Seconds from launching ``fluxes run ARGS`` to its exit, and its stdout."""
    t0 = time.perf_counter()
    done = subprocess.run([FLUXES, "--uri", uri, "run", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"bench mpi: fluxes run {' '.join(args)} failed: "
                           f"{done.stderr.strip()[-300:]}")
    return elapsed, done.stdout


def _floor(program: Path, ntasks: int = 4, nnodes: int = 2) -> float:
    """Seconds the program's ``ntasks`` ranks take with nothing but a PMI server in this
    process (the same protocol code, no exec worker, no Redis): MPICH's own cost."""
    per = ntasks // nnodes
    share = PmiShare(jobid=1, size=ntasks, nnodes=1, node_rank=0, tasks=list(range(ntasks)),
                     mapping=f"(vector,(0,{nnodes},{per}))")
    socks: dict[int, socket.socket] = {}
    procs = []
    t0 = time.perf_counter()
    for rank in range(ntasks):
        ours, theirs = socket.socketpair()
        os.set_inheritable(theirs.fileno(), True)
        env = {**os.environ, **pmi_environment(rank, ntasks, rank % per, per,
                                               theirs.fileno())}
        procs.append(subprocess.Popen([str(program)], env=env, pass_fds=[theirs.fileno()]))
        theirs.close()
        socks[ours.fileno()] = ours
    ranks = {fd: rank for rank, fd in enumerate(socks)}
    poller = select.poll()
    for fd in socks:
        poller.register(fd, select.POLLIN)
    open_fds = set(socks)
    while open_fds:
        for fd, _event in poller.poll(1000):
            data = socks[fd].recv(65536)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
            share.feed(ranks[fd], data)
            for rank, line in share.drain():
                with contextlib.suppress(OSError):
                    list(socks.values())[rank].send(line)
    for proc in procs:
        proc.wait()
    elapsed = time.perf_counter() - t0
    for sock in socks.values():
        sock.close()
    return elapsed


def _start_to_finish(inst: Instance, uri: str) -> float:
    last = subprocess.run([FLUXES, "--uri", uri, "job", "last"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stamps: dict[bytes, float] = {}
    [entries] = jobfacts.eventlogs(inst.redis, inst.keys, [parse_jobid(last)])
    for _id, fields in entries:
        stamps.setdefault(fields[b"n"], float(fields[b"t"]))
    return stamps[b"finish"] - stamps[b"start"]


def _barrier(uri: str, nodes: int, ranks: int, rounds: int, timeout: float
             ) -> tuple[float, float]:
    _elapsed, out = _run(uri, [f"-N{nodes}", f"-n{ranks}", sys.executable, "-c", PROBE,
                               str(rounds + 1)], timeout)
    per_rank = [orjson.loads(line)["t"] for line in out.splitlines() if line.startswith("{")]
    if len(per_rank) != ranks:
        raise RuntimeError(f"bench mpi: {len(per_rank)} of {ranks} probes reported")
    shortest = sorted(min(times[i] for times in per_rank) for i in range(1, rounds + 1))
    return statistics.median(shortest), shortest[int(0.9 * (len(shortest) - 1))]


def run(runs: int = 20, nodes: int = 16, ranks: int = 64, rounds: int = 50,
        timeout: float = 600.0) -> dict[str, Any]:
    """Start an instance of ``nodes`` x 4 cores, time the runs and the barrier."""
    if runs < 1 or rounds < 1 or nodes < 2 or ranks < nodes:
        raise ValueError("bench mpi: --runs and --rounds >= 1, --nodes >= 2, "
                         "--ranks >= --nodes")
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        work = Path(tmp)
        trivial = _build(work)
        per_node = max(4, -(-ranks // nodes))
        launcher = Launcher(state_dir=work / "state", nodes=nodes, cores_per_node=per_node)
        uri = str(launcher.start())
        try:
            inst = Instance.connect(uri)
            figures: dict[str, list[float]] = {"mpi": [], "true": [], "mpi_sf": [],
                                               "true_sf": [], "floor": []}
            _run(uri, ["-N2", "-n4", str(trivial)], timeout)  # warm the page cache
            for _ in range(runs):
                figures["floor"].append(_floor(trivial))
                for name, command in (("mpi", str(trivial)), ("true", "true")):
                    elapsed, _out = _run(uri, ["-N2", "-n4", command], timeout)
                    figures[name].append(elapsed)
                    figures[name + "_sf"].append(_start_to_finish(inst, uri))
            barrier, barrier_p90 = _barrier(uri, nodes, ranks, rounds, timeout)
        finally:
            launcher.stop()
    med = {name: statistics.median(values) for name, values in figures.items()}
    return {
        "layout": "run -N2 -n4", "runs": runs,
        "run_mpi_s": round(med["mpi"], 4), "run_true_s": round(med["true"], 4),
        "mpi_minus_true_s": round(med["mpi"] - med["true"], 4),
        "mpi_start_to_finish_s": round(med["mpi_sf"], 4),
        "true_start_to_finish_s": round(med["true_sf"], 4),
        "mpi_alone_s": round(med["floor"], 4),
        "barrier_layout": f"{ranks} ranks on {nodes} nodes", "barrier_rounds": rounds,
        "barrier_us": round(barrier, 1), "barrier_us_p90": round(barrier_p90, 1),
    }
