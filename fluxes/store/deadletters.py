"""Dead letters: the stream of refused inputs and its per-stream counters.

Every worker that refuses an input (it fails to decode, or its handling
raises) writes one entry to ``{ns}:deadletters`` (trimmed to the newest
10,000) and, in the same step, adds one to the refused input's stream in a
counter hash beside it, so ``fluxes status`` can say how many inputs each
stream lost without reading the (trimmed, and possibly large) stream.
"""

from __future__ import annotations

import redis

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
