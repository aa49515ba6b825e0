"""``fluxes bench executor``'s CPU by process (fluxes/bench/executor.py): workers of one
kind added up, and the children they waited for (the jobs' tasks) as ``tasks``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fluxes.bench.executor import cpu_by_kind
from fluxes.bench.throughput import _kind
from fluxes.proc.launcher import Launcher, WorkerSpec

#: burns CPU itself, then in a child it waits for, then waits to be read
_BURN = ("import subprocess, sys, time\n"
         "t = time.process_time()\n"
         "while time.process_time() - t < 0.1: pass\n"
         "subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
         "while time.process_time() - t < 0.15: pass'])\n"
         "print('done', flush=True)\n"
         "sys.stdin.read()\n")


def test_kinds() -> None:
    assert _kind("exec-3") == "exec"
    assert _kind("job-manager-0") == "job-manager"
    assert _kind("scheduler") == "scheduler"


def test_cpu_by_kind_adds_workers_and_their_children(tmp_path: Path) -> None:
    launcher = Launcher(state_dir=tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", _BURN], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"done\n"
        launcher.workers = [WorkerSpec("exec-0", [], proc=procs[0]),
                            WorkerSpec("exec-1", [], proc=procs[1])]
        cpu = cpu_by_kind(launcher)
    finally:
        for proc in procs:
            proc.communicate(b"")
    assert set(cpu) == {"exec", "tasks"}
    assert cpu["exec"] >= 0.15  # both workers' own 0.1 s, added up (clock ticks)
    assert cpu["tasks"] >= 0.25  # the children they waited for


def test_commands_per_job_counts_what_the_run_asked_of_redis() -> None:
    from fluxes.bench.throughput import commands_per_job

    before = {"fcall": (10, 1000), "xadd": (5, 10), "ping": (3, 3)}
    after = {"fcall": (40, 7000), "xadd": (65, 130), "ping": (3, 3), "xread": (10, 400)}
    figures = commands_per_job(before, after, jobs=10, top=2)
    assert figures["calls"] == 10.0  # 30 + 60 + 10 calls over 10 jobs; ping not called
    assert figures["by_command"] == {"fcall": {"calls": 3.0, "us": 600.0},
                                     "xread": {"calls": 1.0, "us": 40.0}}
