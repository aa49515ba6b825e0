"""The history predictor: a job runs as long as its user's last two jobs did, on average.

Tsafrir, Etsion and Feitelson ("Backfilling using system-generated predictions
rather than user runtime estimates", IEEE TPDS 2007) found that the mean of a
user's last two run times, capped by the job's time limit, predicts far better
than the limit users give. A job that outlives its prediction is then assumed
to run to its limit (the upper bound the schedulers use).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

__all__ = ["KEPT", "predict", "remember"]

#: Run times kept per user (the mean is of the last two).
KEPT: Final = 2


def predict(recent: Sequence[float] | None, limit: float) -> float:
    """The predicted run time of a job with time limit ``limit`` (inf: none) whose user's
    recent run times are ``recent`` (newest last): the mean of the last two, at most
    ``limit``; ``limit`` when the user has no history."""
    if not recent:
        return limit
    last = recent[-KEPT:]
    mean = sum(last) / len(last)
    return min(mean, limit) if math.isfinite(mean) else limit


def remember(recent: tuple[float, ...], ran: float) -> tuple[float, ...]:
    """``recent`` with one more run time, keeping only the newest :data:`KEPT`."""
    return (*recent, ran)[-KEPT:]
