"""Dead letters: the stream of refused inputs and its per-stream counters.

Every worker that refuses an input (it fails to decode, or its handling
raises) writes one entry to ``{ns}:deadletters`` (trimmed to the newest
10,000) and, in the same step, adds one to the refused input's stream in a
counter hash beside it, so ``fluxes status`` can say how many inputs each
stream lost without reading the (trimmed, and possibly large) stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import redis

from fluxes.store.errors import ResponseError
from fluxes.store.keys import Keys


def counts_key(keys: Keys) -> str:
    """The hash of dead letters per refused stream (``stream -> count``), in the
    dead-letter stream's slot so that both are written in one atomic step."""
    return f"{keys.dead_letters}:counts"


def read_counts(client: redis.Redis, keys: Keys) -> dict[str, int]:
    """Dead letters written per stream since the instance was created."""
    out: dict[str, int] = {}
    for stream, count in client.hgetall(counts_key(keys)).items():
        try:
            out[stream.decode("utf-8", "replace")] = int(count)
        except ValueError:
            continue  # only workers write it; a foreign value counts as nothing
    return out


def append(client: redis.Redis, keys: Keys, records: Sequence[Mapping[str, bytes | str]],
           counts: Mapping[str, int], maxlen: int) -> None:
    """Write dead-letter ``records`` and add ``counts`` (refused stream -> n) to the
    counters, in one MULTI/EXEC (the stream trimmed to about ``maxlen`` entries)."""
    pipe = client.pipeline(transaction=True)
    for record in records:
        pipe.xadd(keys.dead_letters, dict(record), maxlen=maxlen, approximate=True)
    for stream, n in counts.items():
        pipe.hincrby(counts_key(keys), stream, n)
    pipe.execute()


def refuse(client: redis.Redis, keys: Keys, stream: str, group: str,
           records: Sequence[Mapping[str, bytes | str]], ids: Sequence[bytes],
           replies: Sequence[tuple[str, bytes, int]], maxlen: int) -> list[ResponseError]:
    """Dead-letter inputs of ``stream`` and acknowledge them (``ids``, read through
    ``group``) in one MULTI/EXEC, with the ``replies`` (key, data, TTL ms) that answer
    them; return the error replies of the commands Redis refused (the rest applied)."""
    pipe = client.pipeline(transaction=True)
    for record in records:
        pipe.xadd(keys.dead_letters, dict(record), maxlen=maxlen, approximate=True)
    pipe.hincrby(counts_key(keys), stream, len(records))
    pipe.xack(stream, group, *ids)
    for key, data, ttl_ms in replies:
        pipe.rpush(key, data)
        pipe.pexpire(key, ttl_ms)
    return [r for r in pipe.execute(raise_on_error=False) if isinstance(r, ResponseError)]


def deliveries(client: redis.Redis, stream: str, group: str, consumer: str,
               ids: Sequence[bytes]) -> dict[bytes, int]:
    """How many times each of ``ids`` (pending for ``consumer`` of ``group``, in stream
    order) was delivered: one XPENDING over their range."""
    if not ids:
        return {}
    got = client.xpending_range(stream, group, min=ids[0], max=ids[-1], count=len(ids),
                                consumername=consumer)
    wanted = set(ids)
    return {row["message_id"]: int(row["times_delivered"]) for row in got
            if row["message_id"] in wanted}
