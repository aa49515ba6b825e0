"""Two facts of a job read without redis-py (``fluxes run`` talks through the small client,
fluxes.store.lite, and must not import it): who owns it, and whether it has an eventlog.

The job hash's field names are those of fluxes/store/jobhash.py, its owner module.
"""

from __future__ import annotations

from typing import Any

from fluxes.store.keys import Keys

#: The job hash's owner field (fluxes.store.jobhash.OWNER).
OWNER_FIELD = "owner"


def owner_of(client: Any, keys: Keys, jobid: int) -> int | None:
    """The uid that submitted the job; None when it has no hash (unknown or purged) or
    the field is not a number."""
    raw = client.hget(keys.job(jobid), OWNER_FIELD)
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def has_eventlog(client: Any, keys: Keys, jobid: int) -> bool:
    """Whether the job's eventlog exists (it was submitted and not purged)."""
    return bool(client.exists(keys.eventlog(jobid)))
