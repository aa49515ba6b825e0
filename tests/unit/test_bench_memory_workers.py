"""fluxes bench memory --workers: resident sets summed per worker kind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fluxes.bench.memory_workers import rss_bytes, worker_rss
from fluxes.proc.launcher import Launcher, WorkerSpec


def test_resident_sets_per_kind(tmp_path: Path) -> None:
    assert rss_bytes(os.getpid()) > 1 << 20
    launcher = Launcher(state_dir=tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
             for _ in range(3)]
    try:
        launcher.workers = [WorkerSpec("job-manager-0", [], procs[0]),
                            WorkerSpec("exec-0", [], procs[1]),
                            WorkerSpec("exec-1", [], procs[2]),
                            WorkerSpec("scheduler", [])]  # not started: not counted
        sizes = worker_rss(launcher)
        assert set(sizes) == {"job-manager", "exec"}
        assert sizes["exec"] > 0 and sizes["job-manager"] > 0
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert rss_bytes(procs[0].pid) == 0  # gone
