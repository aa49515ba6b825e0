"""Leader leases with fencing tokens (job manager per partition, scheduler).

A leader holds a lease key with a TTL and renews it well before it expires.
Taking a free lease increments a fence counter; the new value is the
leader's fencing token, which every write it makes carries, so a leader that
lost its lease without noticing (paused, partitioned) is refused by the store.

A stall of Redis longer than the TTL expires the key though every leader is
alive. So a free lease is taken only by a process that Redis has answered for a
whole TTL without a gap (:mod:`fluxes.store.reachability`), or by its last
holder while the fence still holds its token (nobody led since); the leader
itself renews an expired lease on the same condition.
"""

from __future__ import annotations

import time

import redis

from fluxes.store import reachability
from fluxes.store.scripts import Function

#: Default lease time; a standby takes over within about this long of a leader's death.
#: Long enough that a busy Python leader (GC, a big restore) does not lose it.
LEASE_TTL_MS = 10_000


class Lease:
    """One process's claim on a leader lease."""

    def __init__(self, client: redis.Redis, lease_key: str, fence_key: str, holder: str,
                 ttl_ms: int = LEASE_TTL_MS) -> None:
        self.redis = client
        self.lease_key = lease_key
        self.fence_key = fence_key
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.token: str | None = None
        #: the last token this process held (kept after losing it: a stall's proof
        #: that nobody led since is the fence still being this)
        self.last_token = ""
        self._renewed = 0.0
        self._script = Function(client, "lease")

    def _call(self, op: str, *more: str) -> object:
        got = self._script(keys=[self.lease_key, self.fence_key],
                           args=[op, self.holder, self.ttl_ms, *more])
        reachability.answered()
        return got

    def _took(self, token: object) -> str | None:
        if token is None or token is False:
            self.token = None
            return None
        self.token = self.last_token = str(int(token))  # type: ignore[call-overload]
        self._renewed = time.monotonic()
        return self.token

    def try_acquire(self) -> str | None:
        """Take the lease if it is free (or already ours); return the fencing token.

        A free lease waits while this process may not judge its holder dead yet
        (Redis stalled lately), unless this process held it last."""
        # First an answer of its own: a stall that held this very call must count.
        self.redis.exists(self.lease_key)
        wait = "" if reachability.may_judge(self.ttl_ms / 1000) else "wait"
        return self._took(self._call("acquire", self.last_token, wait))

    def bump(self) -> str | None:
        """Start a new epoch while holding the lease (a new token); None if the lease is lost."""
        return self._took(self._call("bump"))

    def renew_if_due(self) -> bool:
        """Renew when a fifth of the TTL has passed; False once the lease is lost."""
        if self.token is None:
            return False
        if time.monotonic() - self._renewed < self.ttl_ms / 5000:
            return True
        if self._call("renew", self.token) == 1:
            self._renewed = time.monotonic()
            return True
        self.token = None
        return False

    def release(self) -> None:
        """Give the lease up (clean shutdown), so a standby takes over at once."""
        if self.token is not None:
            try:
                self._call("release")
            except redis.RedisError:
                pass
            self.token = None
