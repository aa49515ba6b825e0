"""Writing a job's events behind the writers' back, as a foreign or broken write would."""

from __future__ import annotations

from typing import Any

from fluxes.store.keys import Keys


def forge_event(client: Any, keys: Keys, jobid: int, fields: dict[str, Any]) -> bytes:
    """Append an entry with ``fields`` (``n``, ``t``, ``c``...) to the job's eventlog as it
    is stored: a journal entry, and its id in the job's eventlog index. Its id."""
    # a short index is the job hash's field (fluxes.store.jobfacts.INDEX_FIELD): moved
    # to the eventlog key, which takes the forged id
    field = client.hget(keys.job(jobid), "ev") or b""
    index = client.get(keys.eventlog(jobid)) or field
    entry = {"j": jobid, "s": len(index.split()), **fields}
    sid: bytes = client.xadd(keys.journal(keys.partition_of(jobid)), entry)
    if field:
        client.hdel(keys.job(jobid), "ev")
    client.set(keys.eventlog(jobid), index + sid + b" ")
    return sid
