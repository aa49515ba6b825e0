"""``--signal=SIG@TIME``: the signal a job's tasks get TIME before its time limit.

The job's ``attributes.system.shell.options.signal`` (``{"signum": N,
"timeleft": SECONDS}``, fluxes/formats/shellopts.py) and the expiration of
its R give the moment; the exec worker keeps one entry per job and rank
until it is due (wall clock), then signals the job's tasks there.  Pure.
"""

from __future__ import annotations

import heapq
import signal
from collections.abc import Mapping
from typing import Any

from fluxes.domain.exec.layout import shell_option

__all__ = ["JobSignals", "signal_at"]


def signal_at(spec: Mapping[str, Any], expiration: float | None) -> tuple[float, int] | None:
    """(when, signal) for the job, None without the option or an expiration."""
    option = shell_option(spec, "signal")
    if not isinstance(option, Mapping) or not expiration:
        return None
    signum = option.get("signum", int(signal.SIGUSR1))
    timeleft = option.get("timeleft", 60)
    if isinstance(signum, bool) or not isinstance(signum, int) \
            or not 0 < signum < signal.NSIG:
        raise ValueError(f"shell.options.signal.signum: bad signal {signum!r}")
    if isinstance(timeleft, bool) or not isinstance(timeleft, int | float) or timeleft < 0:
        raise ValueError(f"shell.options.signal.timeleft: bad duration {timeleft!r}")
    return float(expiration) - float(timeleft), signum


class JobSignals:
    """The pending ``--signal`` deliveries of the jobs a worker runs."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, when: float, signum: int, rank: int, jobid: int) -> None:
        """Deliver ``signum`` to the job's tasks on ``rank`` at ``when`` (wall clock)."""
        heapq.heappush(self._heap, (when, rank, jobid, signum))

    def due(self, now: float) -> list[tuple[int, int, int]]:
        """(rank, job id, signal) of the deliveries due at ``now``, removed."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _when, rank, jobid, signum = heapq.heappop(self._heap)
            out.append((rank, jobid, signum))
        return out
