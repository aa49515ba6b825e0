"""The instance's resources as stored: its inventory, and drain/undrain events.

Shared by the scheduler worker and the CLI (``fluxes resource``, ``fluxes
status``), so that both read the inventory and write resource events the
same way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.domain.graph.table import pool_of_table
from fluxes.domain.jm.feasibility import inventory_table
from fluxes.domain.jm.feasibility import load_inventory as inventory_of
from fluxes.errors import ConfigError, FluxesError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fluxes.domain.sched.inventory import Inventory
    from fluxes.domain.sched.protocol import SchedulerPool
    from fluxes.store.instance import Instance

__all__ = ["LOST_AFTER_S", "exec_heartbeats", "load_inventory", "load_pool",
           "published_summary", "record_resources", "recorded_resources", "resource_event",
           "resource_events_since",
           "resource_summary", "send_resource_event"]

#: An exec target whose worker has not heart-beaten for this long is lost (its
#: jobs fail, its ranks are drained); ``[sched] exec-timeout`` overrides it.
LOST_AFTER_S = 10.0


def resource_event(kind: str, ranks: str, reason: str = "", auto: bool = False) -> bytes:
    """A drain/undrain entry for the resource event stream."""
    return orjson.dumps({"t": kind, "ranks": ranks, "reason": reason, "auto": auto,
                         "timestamp": time.time()})


def recorded_resources(client: Any, keys: Any) -> bytes | None:
    """The resources recorded in the instance (``fluxes start``/``admin init``), as stored;
    None when the configuration's ``[resource]`` table stands instead."""
    raw: bytes | None = client.hget(keys.instance, "resources")
    return raw


def published_summary(client: Any, keys: Any) -> dict[str, Any] | None:
    """The scheduler's last published resource summary (None: none yet, or unreadable)."""
    raw = client.get(keys.sched_status)
    try:
        summary = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None
    return summary if isinstance(summary, dict) else None


def resource_events_since(client: Any, keys: Any, since: str) -> list[tuple[Any, Any]]:
    """The drain/undrain events written after stream id ``since`` (raw entries)."""
    entries: list[tuple[Any, Any]] = client.xrange(keys.resource_events, min="(" + since)
    return entries


def load_inventory(instance: Instance) -> Inventory:
    """The instance inventory: the recorded resources, else the configuration's."""
    raw = recorded_resources(instance.redis, instance.keys)
    try:
        return inventory_of(raw, instance.config())
    except ConfigError as exc:
        raise FluxesError(str(exc)) from None


def load_pool(instance: Instance) -> SchedulerPool:
    """The scheduler's pool of the recorded resources (else the configuration's): a graph
    pool when they come with a graph, else today's pool."""
    raw = recorded_resources(instance.redis, instance.keys)
    try:
        table = inventory_table(raw, instance.config())
        if not table:
            raise ConfigError("the instance has no resources configured ([resource] table)")
        return pool_of_table(table)
    except ConfigError as exc:
        raise FluxesError(str(exc)) from None


def _stream_id(text: str | bytes) -> tuple[int, int]:
    """A stream id as a pair that orders as Redis orders ids."""
    ms, _sep, seq = (text.decode() if isinstance(text, bytes) else text).partition("-")
    return int(ms), int(seq or 0)


def send_resource_event(instance: Instance, kind: str, ranks: str, reason: str = "") -> str:
    """Append a drain/undrain event; its stream id (what :func:`resource_summary` waits for)."""
    sid = instance.redis.xadd(instance.keys.resource_events,
                              {"d": resource_event(kind, ranks, reason)})
    return sid.decode() if isinstance(sid, bytes) else str(sid)


def record_resources(instance: Instance, table: Mapping[str, Any]) -> str:
    """Replace the instance's recorded ``[resource]`` table (``fluxes resource reload``)
    and tell the scheduler, in one transaction: the ingest follows the record's digest,
    the scheduler the ``reload`` event. The event's stream id (what
    :func:`resource_summary` waits for)."""
    import hashlib

    from fluxes.store.instance import RESOURCES_DIGEST

    recorded = orjson.dumps(dict(table))
    pipe = instance.redis.pipeline(transaction=True)
    pipe.hset(instance.keys.instance, mapping={
        "resources": recorded, RESOURCES_DIGEST: hashlib.sha256(recorded).hexdigest()})
    pipe.xadd(instance.keys.resource_events, {"d": resource_event("reload", "")})
    sid = pipe.execute()[1]
    return sid.decode() if isinstance(sid, bytes) else str(sid)


def resource_summary(instance: Instance, timeout: float = 3.0, pause: float = 0.05
                     ) -> tuple[dict[str, Any] | None, bool]:
    """The scheduler's published resource summary, read your writes: waits (up to
    ``timeout`` s) until it has applied every drain/undrain written before this call.

    Returns (the summary or None when none was ever published, whether it is
    caught up). The scheduler applies the events on its next housekeeping
    (about a second) and records the last one it applied in the summary.
    """
    redis = instance.redis
    newest = redis.xrevrange(instance.keys.resource_events, count=1)
    want = _stream_id(newest[0][0]) if newest else (0, 0)
    deadline = time.monotonic() + timeout
    while True:
        summary = published_summary(redis, instance.keys)
        applied = _stream_id(str(summary.get("applied", "0-0"))) if summary else (0, 0)
        if applied >= want or time.monotonic() >= deadline:
            return summary, applied >= want
        time.sleep(pause)


def exec_heartbeats(client: Any, keys: Any) -> dict[int, float]:
    """Rank -> the time of its exec worker's last heartbeat, from the exec registry
    (entries that do not decode are left out: a rank without one is silent)."""
    beats: dict[int, float] = {}
    for rank_b, raw in client.hgetall(keys.exec_registry).items():
        try:
            beats[int(rank_b)] = float(orjson.loads(raw)["heartbeat"])
        except (ValueError, KeyError, TypeError):
            continue
    return beats
