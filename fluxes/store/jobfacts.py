"""Facts of a job read without redis-py (``fluxes run`` talks through the small client,
fluxes.store.lite, and must not import it): who owns it, whether it has an eventlog, and
the entries of its streams (eventlog, output) after a position.

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


def which_exist(client: Any, keys: Keys, jobids: list[int]) -> list[bool]:
    """For each of ``jobids``, whether it has an eventlog; one round trip."""
    if not jobids:
        return []
    pipe = client.pipeline(transaction=False)
    for jobid in jobids:
        pipe.exists(keys.eventlog(jobid))
    return [bool(n) for n in pipe.execute()]


def read_new(client: Any, positions: dict[str, str], block: int | None = None,
             count: int = 1000) -> list[Any]:
    """The entries of the streams in ``positions`` (key -> last id seen) written after
    those ids, waiting up to ``block`` ms (0: for ever; None: not at all) for one; the
    reply as redis-py shapes XREAD's ([(stream, [(id, fields), ...]), ...])."""
    got: list[Any] = client.xread(positions, count=count, block=block) or []
    return got


def read_range(client: Any, key: str, start: str = "-", end: str = "+",
               count: int | None = None) -> list[tuple[Any, dict[Any, Any]]]:
    """A stream's entries from ``start`` to ``end`` (ids, inclusive), oldest first."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrange(key, min=start, max=end,
                                                              count=count)
    return entries


def read_last(client: Any, key: str, count: int = 1) -> list[tuple[Any, dict[Any, Any]]]:
    """A stream's newest ``count`` entries, newest first."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrevrange(key, count=count)
    return entries


def last_events(client: Any, keys: Keys, jobids: list[int]
                ) -> list[tuple[Any, dict[Any, Any]] | None]:
    """Each job's newest eventlog entry (None: no eventlog), one round trip."""
    if not jobids:
        return []
    pipe = client.pipeline(transaction=False)
    for jobid in jobids:
        pipe.xrevrange(keys.eventlog(jobid), count=1)
    return [last[0] if last else None for last in pipe.execute()]


def eventlogs(client: Any, keys: Keys, jobids: list[int]
              ) -> list[list[tuple[Any, dict[Any, Any]]]]:
    """Each job's whole eventlog (empty: none), one round trip."""
    if not jobids:
        return []
    pipe = client.pipeline(transaction=False)
    for jobid in jobids:
        pipe.xrange(keys.eventlog(jobid))
    return list(pipe.execute())
