"""Exceptions of the scheduler's resource pool.

A request that cannot be placed is either *infeasible* (it could never run,
not even on an empty machine: the job must be denied) or meets *insufficient*
resources (it could run later: the job waits).  Both carry a one-line note
meant for the user, e.g. ``job requests 300 nodes, only 256 match [gpu]``.
"""

from __future__ import annotations

from fluxes.errors import FluxesError

__all__ = ["InfeasibleRequest", "InsufficientResources", "SchedError"]


class SchedError(FluxesError):
    """Base class of the errors the resource pool reports about a request."""


class InfeasibleRequest(SchedError):
    """The request can never be satisfied by this inventory (deny the job).

    Also raised by :meth:`fluxes.domain.sched.request.Request.from_jobspec` for a
    resource shape the pool cannot represent.
    """


class InsufficientResources(SchedError):
    """The request is feasible but does not fit now (or in the asked window): wait."""
