"""The queue admin stream (``{ns}:queues``): the events ``fluxes queue start|stop|
enable|disable`` append, read back for folding (fluxes.domain.jm.queues)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from fluxes.store.keys import Keys


def queue_events(client: Any, keys: Keys, until: float | None = None) -> list[Any]:
    """Every queue admin event as stored, oldest first (decoded at the door: a
    malformed entry is skipped, it cannot stop a queue); with ``until``, those
    stamped after it are left out (the web's look at the past)."""
    from fluxes import messages as proto

    out = []
    for _sid, fields in client.xrange(keys.queues):
        try:
            event = proto.load_queue_event(fields)
        except proto.MessageError:
            continue
        stamp = event.get("timestamp") if isinstance(event, dict) else None
        if until is not None and isinstance(stamp, int | float) and stamp > until:
            continue
        out.append(event)
    return out


def post_queue_event(client: Any, keys: Keys, event: Mapping[str, Any]) -> None:
    """Append ``event`` and tell every partition's job manager to re-read the queue
    states, in one round trip (the instance owner's access is needed: a user's
    connection is refused with NoPermissionError)."""
    from fluxes import messages as proto

    pipe = client.pipeline(transaction=False)
    pipe.xadd(keys.queues, {"d": orjson.dumps(dict(event))})
    for p in range(keys.partitions):
        pipe.xadd(keys.jm_ctl(p), proto.encode_entry([proto.QueuesChanged()]))
    pipe.execute()


def administered(client: Any, keys: Keys) -> bool:
    """Whether any queue admin event was ever written (none: every queue is enabled and
    started, as configured, and reading the configuration can be skipped)."""
    return bool(client.exists(keys.queues))
