"""Job urgency (RFC 21 submit context, RFC 27 priority input): its range and named values.

A user sets urgency 0-31 at submission or later (``flux job urgency``); 0
holds the job, 31 expedites it (instance owner only), 16 is the default.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_URGENCY", "MAX_URGENCY", "MIN_URGENCY", "URGENCY_EXPEDITE", "URGENCY_HOLD"]

MIN_URGENCY: Final = 0
MAX_URGENCY: Final = 31
DEFAULT_URGENCY: Final = 16
URGENCY_HOLD: Final = MIN_URGENCY
URGENCY_EXPEDITE: Final = MAX_URGENCY
