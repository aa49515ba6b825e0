"""``fluxes bench cli``: how long the commands a workflow calls per task take (issue 26).

A private instance (1 node x 2 cores) is started for the run; each command
runs N times as a user runs it (the ``fluxes`` script next to this Python,
``FLUXES_URI`` set), after one warm-up, and the median wall time and CPU
time (user + system, of the command's process) of the N runs are reported,
with the issue's targets: ``fluxes --version`` <= 60 ms, ``fluxes submit``
(a held job) <= 80 ms, ``fluxes run -n1 true`` <= 125 ms (Flux's figure on
the machine the issue was measured on); ``fluxes jobs`` has none.

Python writes no bytecode when ``PYTHONDONTWRITEBYTECODE`` is set (and a
source checkout may have none yet): the commands then compile every module
they import, each time. They run with bytecode cached in a directory of the
run (``PYTHONPYCACHEPREFIX``), as an installed package runs.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fluxes.proc.launcher import Launcher

#: (name, arguments, target in ms or None)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("version", ("--version",), 60.0),
    ("submit", ("submit", "--urgency=hold", "true"), 80.0),
    ("jobs", ("jobs",), None),
    ("run", ("run", "-n1", "true"), 125.0),
)


def fluxes_command() -> list[str]:
    """How a user runs fluxes here: the console script beside this interpreter."""
    script = Path(sys.executable).parent / "fluxes"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "fluxes.cli.main"]


def time_command(argv: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    """Median wall and CPU milliseconds of ``runs`` runs of ``argv`` (after a warm-up)."""
    walls: list[float] = []
    cpus: list[float] = []
    for n in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, timeout=60)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if n:  # the first run warms the caches (bytecode, page cache)
            walls.append(wall * 1000)
            cpus.append((after.ru_utime - before.ru_utime
                         + after.ru_stime - before.ru_stime) * 1000)
    return {"wall_ms": round(statistics.median(walls), 1),
            "cpu_ms": round(statistics.median(cpus), 1),
            "wall_min_ms": round(min(walls), 1)}


def run(runs: int = 20) -> dict[str, Any]:
    """Start an instance, time each command, return the figures."""
    if runs < 1:
        raise ValueError("--runs must be >= 1")
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp) / "instance", nodes=1, cores_per_node=2)
        uri = launcher.start()
        try:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env.update(FLUXES_URI=str(uri), PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
            base = fluxes_command()
            figures: dict[str, Any] = {"runs": runs}
            for name, args, target in COMMANDS:
                got = time_command([*base, *args], env, runs)
                figures[f"{name}_wall_ms"] = got["wall_ms"]
                figures[f"{name}_cpu_ms"] = got["cpu_ms"]
                if target is not None:
                    figures[f"{name}_target_ms"] = target
            return figures
        finally:
            launcher.stop()
