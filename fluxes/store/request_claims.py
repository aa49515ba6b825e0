"""Claims on ingest requests: one ingest worker at a time handles a given (user, request id).

Several ingest workers may hold the same request at once: a client that sends
a request again under the same id, or an XAUTOCLAIM of a slow worker's
pending entry. Each reads the request's progress records and creates what they
do not name, so both would create its jobs. The records live in every
partition (each partition's commit records its jobs), and no atomic step can
span partitions on a cluster, so the check cannot simply move into one commit.

Instead a worker claims the request in every partition, partition 0 first,
before it reads the records; the claim is a string with a time to live holding
the worker's token. Every commit that records the request in a partition
checks, in the same atomic step (``commit.lua``, op ``C``), that the claim
there still holds the token, and the worker's last commit in the partition
drops it. So:

* two live workers: the second fails to take partition 0's claim and puts the
  request aside; once the first dropped its claims it takes them, reads the
  complete records and answers with the first one's jobs;
* a worker that stalls past the claim's lifetime (or dies): another takes the
  claims in every partition before reading the records, so each commit of the
  stale worker either came before (and is in the records read) or comes after
  and is refused (``CLAIMED``): no job is created twice. A claim that is
  missing does not do: it lapsed, and another worker may have taken it, read
  the records, committed and dropped it since.

A worker restarted under the same name (its token is ``<name>#<incarnation>``)
takes its predecessor's claims at once, as a lease is taken by a restarted
holder: its requests, pending under that name, need not wait for the claims to
lapse, and the new token fences out whatever the old process may still send.

Taking partition 0 first decides who wins; the other partitions only fence
(a request that wins partition 0 but finds a later one held, which only a
stale claim of a stalled worker can cause, drops what it took and waits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis

from fluxes.store.keys import Keys
from fluxes.store.scripts import Function


class RequestClaims:
    """Take and drop the claims of one ingest worker (``token``) on requests, by record
    name (``<user>:<req>``)."""

    def __init__(self, client: redis.Redis, keys: Keys, token: str, ttl_ms: int) -> None:
        self.redis = client
        self.keys = keys
        self.token = token
        self.ttl_ms = ttl_ms
        self._script = Function(client, "request_claim")

    def take(self, names: Sequence[str]) -> set[str]:
        """Claim each request in every partition; the names now held by this token (the
        others are held by another worker: what this call took for them is dropped)."""
        if not names:
            return set()
        got = self._script(keys=[self.keys.request_claim(0, n) for n in names],
                           args=["take", self.token, self.ttl_ms])
        won = [n for n, ok in zip(names, got, strict=True) if int(ok)]
        if self.keys.partitions == 1 or not won:
            return set(won)
        lost: set[str] = set()
        for _part, got in self._call_each("take", won):
            lost.update(n for n, ok in zip(won, got, strict=True) if not int(ok))
        if lost:
            self.drop(lost)
        return set(won) - lost

    def renew(self, names: Iterable[str]) -> None:
        """Give this token's claims on ``names`` (every partition) a fresh lifetime, so
        that a block longer than the claims' lifetime keeps them; a claim that lapsed
        stays lapsed (the commits that depend on it are refused)."""
        names = sorted(names)
        if names:
            self._call_each("renew", names, range(self.keys.partitions))

    def drop(self, names: Iterable[str], partitions: Iterable[int] | None = None) -> None:
        """Drop this token's claims on ``names`` in ``partitions`` (default: all)."""
        names = sorted(names)
        if names:
            parts = range(self.keys.partitions) if partitions is None else sorted(partitions)
            self._call_each("drop", names, parts)

    def _call_each(self, op: str, names: list[str], parts: Iterable[int] | None = None
                   ) -> list[tuple[int, list[int]]]:
        """Run the script in each partition (default: all but 0), one call each (each
        partition may live on another cluster node)."""
        parts = list(range(1, self.keys.partitions) if parts is None else parts)
        return [(part, self._script(keys=[self.keys.request_claim(part, n) for n in names],
                                    args=[op, self.token, self.ttl_ms]))
                for part in parts]
