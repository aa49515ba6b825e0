"""Queue admin: the queues' states, and starting, stopping, enabling and disabling
them (``fluxes queue ...`` and the web's queue page)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fluxes.domain.jm.queues import QueueEvent, QueueState
    from fluxes.store.instance import Instance

#: The admin actions on a queue.
KINDS = ("start", "stop", "enable", "disable")


def queue_states(inst: Instance, at: float | None = None) -> dict[str | None, QueueState]:
    """Every configured queue's admin state, folded from the queue event stream (as it
    was at ``at``, a UNIX time, when given)."""
    from fluxes.domain.jm.queues import fold_queue_events
    from fluxes.store.queues import queue_events

    return fold_queue_events(inst.config().queues, queue_events(inst.redis, inst.keys, at))


def change_queue(inst: Instance, kind: str, queue: str | None, reason: str | None = None,
                 all_queues: bool = False) -> QueueEvent:
    """Append a queue admin event (``kind`` one of :data:`KINDS`) for ``queue`` (None:
    the anonymous queue, or every queue with ``all_queues``) and tell the job managers;
    the event written. ValueError (one line) when the request names no queue, an
    unknown one, or both a queue and all of them; NoPermissionError unless this is the
    instance owner's connection."""
    from fluxes.domain.jm.queues import QueueEvent
    from fluxes.store.queues import post_queue_event

    if kind not in KINDS:
        raise ValueError(f"unknown queue action {kind[:20]!r}")
    config = inst.config().queues
    if queue is not None and all_queues:
        raise ValueError(f"queue {kind}: give QUEUE or --all, not both")
    if queue is not None:
        config.check_queue(queue)
    elif not all_queues and config.queue_names != (None,):
        raise ValueError(f"queue {kind}: name a queue or use --all")
    if kind == "disable" and not reason:
        reason = "disabled by administrator"
    if kind in ("enable", "start"):
        reason = None
    event = QueueEvent(kind=kind, queue=queue, timestamp=time.time(), reason=reason,
                       all_queues=all_queues)
    post_queue_event(inst.redis, inst.keys, event.to_dict())
    return event
