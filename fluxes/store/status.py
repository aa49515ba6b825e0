"""What ``fluxes status`` reads besides the job list: the workers' registry, the leases,
the exec registry, the dead letters' tail and the instance's own facts."""

from __future__ import annotations

from typing import Any

from fluxes.store.keys import Keys


def worker_records(client: Any, keys: Keys) -> dict[str, bytes]:
    """Each registered worker's name -> its raw heartbeat record (JSON)."""
    return {name.decode("utf-8", "replace"): raw
            for name, raw in client.hgetall(keys.workers).items()}


def lease_states(client: Any, keys: Keys, leases: list[tuple[str, str]]
                 ) -> list[tuple[bytes | None, int, bytes | None]]:
    """(holder, ttl in ms, fencing epoch) of each (lease key, fence key), one round trip."""
    pipe = client.pipeline(transaction=False)
    for lease, fence in leases:
        pipe.get(lease)
        pipe.pttl(lease)
        pipe.get(fence)
    replies = pipe.execute()
    return [(replies[3 * i], int(replies[3 * i + 1]), replies[3 * i + 2])
            for i in range(len(leases))]


def registered_exec_ranks(client: Any, keys: Keys) -> list[int]:
    """The ranks that have an exec worker registered."""
    return [int(r) for r in client.hkeys(keys.exec_registry) if r.isdigit()]


def dead_letter_tail(client: Any, keys: Keys) -> tuple[int, dict[bytes, bytes] | None]:
    """How many dead letters the stream keeps, and the newest one's fields."""
    pipe = client.pipeline(transaction=False)
    pipe.xlen(keys.dead_letters)
    pipe.xrevrange(keys.dead_letters, count=1)
    count, last = pipe.execute()
    return int(count), (last[0][1] if last else None)


def instance_facts(client: Any, keys: Keys, fields: tuple[str, ...]) -> dict[str, str]:
    """The instance hash's ``fields`` that are set, as text."""
    wanted = {f.encode() for f in fields}
    return {k.decode(): v.decode("utf-8", "replace")
            for k, v in client.hgetall(keys.instance).items() if k in wanted}


def newest_dead_letters(client: Any, keys: Keys, count: int
                        ) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The newest ``count`` dead letters, newest first."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrevrange(keys.dead_letters,
                                                                       count=count)
    return entries


def exec_heartbeats(client: Any, keys: Keys) -> dict[bytes, bytes]:
    """Each registered exec worker's rank -> its raw registry record (JSON, with its
    last ``heartbeat``)."""
    beats: dict[bytes, bytes] = client.hgetall(keys.exec_registry)
    return beats
