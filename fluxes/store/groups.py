"""Consumer-group helpers shared by every stream reader."""

from __future__ import annotations

from typing import Any

import redis


def ensure_group(client: redis.Redis, stream: str, group: str, start: str = "0") -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream) unless it exists."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _tag(key: str) -> str:
    """The hash-tag part of a key (``{fx:p1}``), which decides its Cluster slot."""
    end = key.find("}")
    return key[: end + 1] if key.startswith("{") and end > 0 else key


def read_streams(client: redis.Redis, streams: dict[str, str], count: int,
                 block: int | None, group: str | None = None,
                 consumer: str | None = None) -> list[Any]:
    """XREAD (or XREADGROUP) on ``streams``, split per hash slot when they span several.

    Redis Cluster refuses one read across slots; with several partitions the
    streams of each slot are read in turn, the blocking time shared among them.
    """
    by_tag: dict[str, dict[str, str]] = {}
    for key, pos in streams.items():
        by_tag.setdefault(_tag(key), {})[key] = pos
    parts = list(by_tag.values())
    out: list[Any] = []
    share = None if block is None else max(1, block // len(parts))
    for part in parts:
        wait = None if out else share  # block only while nothing has arrived yet
        if group is not None:
            reply = client.xreadgroup(group, consumer or "", part, count=count, block=wait)
        else:
            reply = client.xread(part, count=count, block=wait)
        out.extend(reply or [])
    return out
