"""Writing a job's events behind the writers' back, as a foreign or broken write would."""

from __future__ import annotations

from typing import Any

from fluxes.store.keys import Keys


def forge_event(client: Any, keys: Keys, jobid: int, fields: dict[str, Any]) -> bytes:
    """Append an entry with ``fields`` (``n``, ``t``, ``c``...) to the job's eventlog as it
    is stored: a journal entry, and its id in the job's eventlog index. Its id."""
    index = client.get(keys.eventlog(jobid)) or b""
    entry = {"j": jobid, "s": len(index.split()), **fields}
    sid: bytes = client.xadd(keys.journal(keys.partition_of(jobid)), entry)
    client.append(keys.eventlog(jobid), sid + b" ")
    return sid
