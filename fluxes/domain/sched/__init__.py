"""The scheduler's resource pool: inventory, requests and RFC 16 allocation methods.

* :mod:`fluxes.domain.sched.inventory`: execution targets, loaded from TOML or R;
* :mod:`fluxes.domain.sched.request`: what a job asks for, from its jobspec;
* :mod:`fluxes.domain.sched.pool`: allocations and reservations over time.

See ``docs/scheduler-pool.md``.
"""

from __future__ import annotations

from fluxes.domain.sched.errors import InfeasibleRequest, InsufficientResources, SchedError
from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.domain.sched.placement import POLICIES
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request

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
