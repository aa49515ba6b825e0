"""Consumer-group helpers shared by every stream reader."""

from __future__ import annotations

import redis


def ensure_group(client: redis.Redis, stream: str, group: str, start: str = "0") -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream) unless it exists."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
