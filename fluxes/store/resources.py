"""The instance's resources as stored: its inventory, and drain/undrain events.

Shared by the scheduler worker and the CLI (``fluxes resource``, ``fluxes
status``), so that both read the inventory and write resource events the
same way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from fluxes.domain.graph.table import pool_of_table
from fluxes.domain.jm.feasibility import inventory_table
from fluxes.domain.jm.feasibility import load_inventory as inventory_of
from fluxes.errors import ConfigError, FluxesError

if TYPE_CHECKING:
    from fluxes.domain.sched.inventory import Inventory
    from fluxes.domain.sched.protocol import SchedulerPool
    from fluxes.store.instance import Instance

__all__ = ["LOST_AFTER_S", "load_inventory", "load_pool", "resource_event"]

#: An exec target whose worker has not heart-beaten for this long is lost (its
#: jobs fail, its ranks are drained); ``[sched] exec-timeout`` overrides it.
LOST_AFTER_S = 10.0


def resource_event(kind: str, ranks: str, reason: str = "", auto: bool = False) -> bytes:
    """A drain/undrain entry for the resource event stream."""
    return orjson.dumps({"t": kind, "ranks": ranks, "reason": reason, "auto": auto,
                         "timestamp": time.time()})


def load_inventory(instance: Instance) -> Inventory:
    """The instance inventory: the recorded resources, else the configuration's."""
    raw = instance.redis.hget(instance.keys.instance, "resources")
    try:
        return inventory_of(raw, instance.config())
    except ConfigError as exc:
        raise FluxesError(str(exc)) from None


def load_pool(instance: Instance) -> SchedulerPool:
    """The scheduler's pool of the recorded resources (else the configuration's): a graph
    pool when they come with a graph, else today's pool."""
    raw = instance.redis.hget(instance.keys.instance, "resources")
    try:
        table = inventory_table(raw, instance.config())
        if not table:
            raise ConfigError("the instance has no resources configured ([resource] table)")
        return pool_of_table(table)
    except ConfigError as exc:
        raise FluxesError(str(exc)) from None
