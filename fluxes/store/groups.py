"""Consumer-group helpers shared by every stream reader."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from fluxes.proc import metrics
from fluxes.store.direct import Direct, slot_tag, stream_entries


def ensure_group(client: redis.Redis, stream: str, group: str, start: str = "0") -> None:
    """Create consumer group ``group`` on ``stream`` (and the stream) unless it exists."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def read_streams(client: redis.Redis, streams: dict[str, str], count: int,
                 block: int | None, group: str | None = None,
                 consumer: str | None = None) -> list[Any]:
    """XREAD (or XREADGROUP) on ``streams``, split per hash slot when they span several.

    Redis Cluster refuses one read across slots; with several partitions the
    streams of each slot are read in turn, the blocking time shared among them.
    """
    by_tag: dict[str, dict[str, str]] = {}
    for key, pos in streams.items():
        by_tag.setdefault(slot_tag(key), {})[key] = pos
    parts = list(by_tag.values())
    out: list[Any] = []
    share = None if block is None else max(1, block // len(parts))
    for part in parts:
        wait = None if out else share  # block only while nothing has arrived yet
        command: list[Any] = ["XREAD"] if group is None else \
            ["XREADGROUP", "GROUP", group, consumer or ""]
        command += ["COUNT", count]
        if wait is not None:
            command += ["BLOCK", wait]
        command += ["STREAMS", *part.keys(), *part.values()]
        out.extend(stream_entries(Direct.of(client, next(iter(part))).call(*command)))
    return out


def stream_lags(client: redis.Redis, streams: Sequence[str]) -> list[metrics.GroupLag]:
    """Every consumer group of ``streams`` with its pending and undelivered counts
    (one round trip; a stream that does not exist yet has no groups)."""
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xinfo_groups(stream)
    out: list[metrics.GroupLag] = []
    for stream, reply in zip(streams, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.ResponseError):
            continue  # "no such key": nothing was ever written or read there
        out.extend(metrics.parse_groups(stream, reply))
    return out
