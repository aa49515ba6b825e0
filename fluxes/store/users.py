"""The instance's users table: fluxes user name -> uid (``fluxes admin adduser``).

Only the instance owner's connection may read or write it; a user's own
connection is refused (Redis ACL), which the readers here answer as "not known
here" (None, or nothing), so a caller falls back to this machine's password
database. No redis-py import: ``fluxes jobs`` reads it through the small client
(fluxes.store.lite).
"""

from __future__ import annotations

from typing import Any

from fluxes.store.keys import Keys


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing this ACL user (redis-py's NoPermissionError,
    told by name: naming it would import redis-py into the short commands)."""
    return type(exc).__name__ == "NoPermissionError"


class UserTable:
    """Reads and writes of the users table."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def uid(self, name: str) -> int | None:
        """``name``'s uid; None when the table has no such user or may not be read."""
        try:
            raw = self.redis.hget(self.keys.users, name)
        except Exception as exc:
            if refused(exc):
                return None
            raise
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    def entries(self) -> dict[str, int]:
        """Every user name -> uid (refused: empty)."""
        try:
            raw = self.redis.hgetall(self.keys.users)
        except Exception as exc:
            if refused(exc):
                return {}
            raise
        out: dict[str, int] = {}
        for name, uid in raw.items():
            try:
                out[name.decode()] = int(uid)
            except (UnicodeDecodeError, ValueError):
                continue
        return out

    def readable(self) -> bool:
        """Whether this connection may read the table (the instance owner's may)."""
        try:
            self.redis.hlen(self.keys.users)
        except Exception as exc:
            if refused(exc):
                return False
            raise
        return True

    def add(self, name: str, uid: int) -> None:
        """Record ``name`` as ``uid``."""
        self.redis.hset(self.keys.users, name, uid)

    def remove(self, name: str) -> bool:
        """Forget ``name``; whether it was there."""
        return bool(self.redis.hdel(self.keys.users, name))
