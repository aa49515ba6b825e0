"""Hand-off latencies on a job's critical path, kept per process as histograms.

Every message stream entry carries its sender's clock (``s`` in the
envelope, :func:`fluxes.messages.encode_entry`). A receiver that has
finished what an entry asked for (committed its effects, or started the
job) records ``now - s`` under the hop's name here: the time from the
sender's commit to the receiver's, waiting in the stream, waking up and the
receiver's own work included. Clocks of different hosts may disagree: the
figures are exact only for workers on one host (``fluxes bench throughput``).

The histogram is log-bucketed (:data:`PER_OCTAVE` buckets per doubling, so a
percentile read back is within ~4.5% of the true one) and sparse; workers
put :func:`snapshot` in their heartbeat, and readers add snapshots up and
read percentiles with :func:`percentile`. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

#: Buckets per doubling of the latency.
PER_OCTAVE = 8
#: Hop names, in the order of the critical path (exec -> job manager ->
#: scheduler -> job manager -> exec), then the exec worker's own part.
EXEC_TO_JM = "exec->jm"
JM_TO_SCHED = "jm->sched"
SCHED_TO_JM = "sched->jm"
JM_TO_EXEC = "jm->exec"
EXEC_END_TO_REPORT = "exec end->report"
ORDER = (EXEC_TO_JM, JM_TO_SCHED, SCHED_TO_JM, JM_TO_EXEC, EXEC_END_TO_REPORT)

_counts: dict[str, dict[int, int]] = {}


def bucket(seconds: float) -> int:
    """The bucket of a latency (1 us and less share bucket 0)."""
    us = seconds * 1e6
    if not us > 1.0:  # also NaN
        return 0
    if us >= 2.0 ** 64:  # also infinity
        return 64 * PER_OCTAVE
    return int(math.log2(us) * PER_OCTAVE)


def value(index: int) -> float:
    """The latency (seconds) a bucket stands for: its geometric middle."""
    return float(2.0 ** ((index + 0.5) / PER_OCTAVE) / 1e6)


def record(hop: str, seconds: float, n: int = 1) -> None:
    """Count ``n`` hand-offs of ``hop`` that took ``seconds`` (negative: clock skew, as 0)."""
    if seconds < 0:
        seconds = 0.0
    per = _counts.get(hop)
    if per is None:
        per = _counts[hop] = {}
    index = bucket(seconds)
    per[index] = per.get(index, 0) + n


def record_since(hop: str, sent: Iterable[float], now: float) -> None:
    """Record one hand-off per send time in ``sent`` (0: the sender stamped none)."""
    for stamp in sent:
        if stamp > 0:
            record(hop, now - stamp)


def snapshot() -> dict[str, dict[str, int]]:
    """This process's counts so far (JSON-ready: bucket indexes as strings)."""
    return {hop: {str(i): n for i, n in per.items()} for hop, per in _counts.items()}


def reset() -> None:
    """Forget every count (tests)."""
    _counts.clear()


def merge(snapshots: Iterable[Any]) -> dict[str, dict[int, int]]:
    """The sum of several :func:`snapshot` s, as read back from JSON (malformed parts
    are skipped)."""
    out: dict[str, dict[int, int]] = {}
    for snap in snapshots:
        if not isinstance(snap, Mapping):
            continue
        for hop, per in snap.items():
            if not isinstance(per, Mapping):
                continue
            into = out.setdefault(str(hop), {})
            for index, n in per.items():
                try:
                    i, k = int(index), int(n)
                except (TypeError, ValueError):
                    continue
                into[i] = into.get(i, 0) + k
    return out


def subtract(after: Mapping[str, Mapping[int, int]], before: Mapping[str, Mapping[int, int]]
             ) -> dict[str, dict[int, int]]:
    """``after`` minus ``before``, bucket by bucket (what happened in between)."""
    out: dict[str, dict[int, int]] = {}
    for hop, per in after.items():
        base = before.get(hop, {})
        left = {i: n - base.get(i, 0) for i, n in per.items() if n - base.get(i, 0) > 0}
        if left:
            out[hop] = left
    return out


def percentile(counts: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0 < q <= 1) of a histogram, in seconds; None when empty."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index in sorted(counts):
        seen += counts[index]
        if seen >= rank:
            return value(index)
    return value(max(counts))


def summary(counts: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, float | int]]:
    """Per hop: the number of hand-offs and their p50 and p99 in microseconds, critical
    path first."""
    out: dict[str, dict[str, float | int]] = {}
    names = [h for h in ORDER if h in counts] + sorted(h for h in counts if h not in ORDER)
    for hop in names:
        per = counts[hop]
        p50, p99 = percentile(per, 0.5), percentile(per, 0.99)
        out[hop] = {"n": sum(per.values()),
                    "p50_us": round((p50 or 0.0) * 1e6, 1),
                    "p99_us": round((p99 or 0.0) * 1e6, 1)}
    return out
