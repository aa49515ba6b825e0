"""The scheduler's resource pool: inventory, requests and RFC 16 allocation methods.

* :mod:`fluxes.sched.inventory`: execution targets, loaded from TOML or R;
* :mod:`fluxes.sched.request`: what a job asks for, from its jobspec;
* :mod:`fluxes.sched.pool`: allocations and reservations over time.

See ``docs/scheduler-pool.md``.
"""

from __future__ import annotations

from fluxes.sched.errors import InfeasibleRequest, InsufficientResources, SchedError
from fluxes.sched.inventory import Inventory, Target
from fluxes.sched.placement import POLICIES
from fluxes.sched.pool import ResourcePool
from fluxes.sched.request import Request

__all__ = [
    "POLICIES",
    "InfeasibleRequest",
    "InsufficientResources",
    "Inventory",
    "Request",
    "ResourcePool",
    "SchedError",
    "Target",
]
