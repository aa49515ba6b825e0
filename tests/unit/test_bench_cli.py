"""``fluxes bench cli``'s timing of one command (fluxes/bench/cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fluxes.bench.cli import time_command


def test_a_command_s_wall_time_is_split_into_cpu_waiting_and_blocked() -> None:
    """Wall, CPU, the wait for a CPU (the kernel's schedstat, read before the process
    is reaped) and the rest; a sleeping command is blocked, not on a CPU."""
    got = time_command([sys.executable, "-c", "import time; time.sleep(0.05)"],
                       dict(os.environ), runs=2)
    assert got["wall_ms"] >= 50 and got["wall_ms"] >= got["cpu_ms"]
    if os.path.exists(f"/proc/{os.getpid()}/schedstat"):
        assert got["runqueue_ms"] >= 0
        assert got["blocked_ms"] >= 40  # the sleep
        assert got["cpu_ms"] + got["runqueue_ms"] + got["blocked_ms"] <= got["wall_ms"] + 1


def test_a_failing_command_is_an_error() -> None:
    with pytest.raises(subprocess.CalledProcessError):
        time_command([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), runs=1)
