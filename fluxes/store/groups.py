"""Consumer-group helpers shared by every stream reader, and the lag of each group."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import redis

from fluxes.store.direct import Direct, slot_tag, stream_entries


class GroupLag(NamedTuple):
    """How far one consumer group of one stream is behind."""

    stream: str
    group: str
    consumers: int
    pending: int
    #: entries not yet delivered to the group; None when Redis cannot tell
    undelivered: int | None

    @property
    def lag(self) -> int | None:
        """Entries the group has not finished: pending plus undelivered (None if unknown)."""
        return None if self.undelivered is None else self.pending + self.undelivered


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _count(value: Any) -> int | None:
    if value is None or value in (b"", ""):
        return None
    number = int(value)
    if number < 0:
        raise ValueError(f"XINFO GROUPS count must be >= 0, got {number}")
    return number


def parse_groups(stream: str, reply: Iterable[Mapping[Any, Any]]) -> list[GroupLag]:
    """The groups of an ``XINFO GROUPS stream`` reply (field names as str or bytes).

    Redis 7 reports ``lag`` (entries not yet delivered) and ``pending``; an
    older server or a stream with deleted entries leaves ``lag`` unknown.
    """
    out = []
    for raw in reply:
        info = {_text(k): v for k, v in raw.items()}
        try:
            name = info["name"]
        except KeyError:
            raise ValueError(f"XINFO GROUPS reply for {stream} has a group without a name") \
                from None
        try:
            consumers = _count(info.get("consumers")) or 0
            pending = _count(info.get("pending")) or 0
            undelivered = _count(info.get("lag"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"XINFO GROUPS reply for {stream}: bad count ({exc})") from None
        out.append(GroupLag(stream, _text(name), consumers, pending, undelivered))
    return out


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


def stream_lags(client: redis.Redis, streams: Sequence[str]) -> list[GroupLag]:
    """Every consumer group of ``streams`` with its pending and undelivered counts
    (one round trip; a stream that does not exist yet has no groups)."""
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xinfo_groups(stream)
    out: list[GroupLag] = []
    for stream, reply in zip(streams, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(reply, redis.ResponseError):
            continue  # "no such key": nothing was ever written or read there
        out.extend(parse_groups(stream, reply))
    return out
