"""``fluxes bench cli``: how long the commands a workflow calls per task take (issue 26).

A private instance (1 node x 2 cores) is started for the run; each command
runs N times as a user runs it (the ``fluxes`` script next to this Python,
``FLUXES_URI`` set), after one warm-up, and the median wall time and CPU
time (user + system, of the command's process) of the N runs are reported,
with the issue's targets: ``fluxes --version`` <= 60 ms, ``fluxes submit``
(a held job) <= 80 ms, ``fluxes run -n1 true`` <= 125 ms (Flux's figure on
the machine the issue was measured on); ``fluxes jobs`` has none.

Where the wall time goes besides the command's own CPU: before each run is
reaped, the kernel's scheduler statistics of the process
(``/proc/PID/schedstat``: time on a CPU, time runnable but waiting for one)
are read, so each command also reports the median ``runqueue`` milliseconds
(waiting for a CPU: other processes, the instance's workers among them, held
both cores) and ``blocked`` (the rest of the wall time: Redis' answers,
starting the process). On a loaded machine the first dominates the gap.

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


def _schedstat(pid: int) -> tuple[float, float] | None:
    """Milliseconds process ``pid`` spent on a CPU and runnable waiting for one (None
    where the kernel does not say: no schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
            ran, waited = f.read().split()[:2]
    except (OSError, ValueError):
        return None
    return int(ran) / 1e6, int(waited) / 1e6


def _run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float | None]:
    """One run of ``argv``: its wall milliseconds and its wait for a CPU (None: unknown).
    The process is reaped only after its schedstat was read (waitid WNOWAIT)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        wall = (time.perf_counter() - started) * 1000
        sched = _schedstat(proc.pid)
    finally:
        code = proc.wait(timeout=60)
    if code != 0:
        raise subprocess.CalledProcessError(code, argv)
    return wall, None if sched is None else sched[1]


def time_command(argv: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    """Median wall and CPU milliseconds of ``runs`` runs of ``argv`` (after a warm-up),
    and of the time each waited for a CPU and was blocked (see the module's doc)."""
    walls: list[float] = []
    cpus: list[float] = []
    waits: list[float] = []
    for n in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, waited = _run_once(argv, env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if n:  # the first run warms the caches (bytecode, page cache)
            cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
            walls.append(wall)
            cpus.append(cpu)
            if waited is not None:
                waits.append(waited)
    got = {"wall_ms": round(statistics.median(walls), 1),
           "cpu_ms": round(statistics.median(cpus), 1),
           "wall_min_ms": round(min(walls), 1)}
    if len(waits) == len(walls):
        got["runqueue_ms"] = round(statistics.median(waits), 1)
        got["blocked_ms"] = round(statistics.median(
            max(0.0, w - c - q) for w, c, q in zip(walls, cpus, waits, strict=True)), 1)
    return got


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
                for part in ("runqueue_ms", "blocked_ms"):
                    if part in got:
                        figures[f"{name}_{part}"] = got[part]
                if target is not None:
                    figures[f"{name}_target_ms"] = target
            return figures
        finally:
            launcher.stop()
