"""``fluxes resource reload``: a running instance's resources replaced, pure (flux's
``flux resource reload``).

The instance owner records a new ``[resource]`` table; the scheduler follows with
:func:`reload_pool` (its pool grows by the added ranks and loses the removed ones,
allocations and drains kept) and the ingest's submission check with the recorded
table itself. :func:`plan_reload` says what changes between two inventories and
:func:`reload_refusal` why a reload should not be made without ``--force``: a rank
whose resources change, or a removed rank that still runs jobs (both would take
resources from under running work).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.formats.idset import IDSet


class ReloadPlan(NamedTuple):
    """What a reload changes: ranks added, removed, and kept with other resources."""

    added: IDSet
    removed: IDSet
    changed: IDSet

    @property
    def empty(self) -> bool:
        """True when the new inventory is the old one."""
        return not (self.added or self.removed or self.changed)


def plan_reload(old: Inventory, new: Inventory) -> ReloadPlan:
    """The ranks ``new`` adds to ``old``, those it drops and those whose target (host,
    cores, gpus, properties, memory) differs."""
    before, after = {t.rank: t for t in old}, {t.rank: t for t in new}
    return ReloadPlan(IDSet(set(after) - set(before)), IDSet(set(before) - set(after)),
                      IDSet(r for r in set(before) & set(after) if before[r] != after[r]))


def reload_refusal(plan: ReloadPlan, busy: IDSet) -> str | None:
    """Why the reload would pull resources from under running work (``busy``: the ranks
    holding allocations), for ``--force`` to override; None: it would not."""
    if plan.changed:
        return (f"ranks {plan.changed.encode()} change their resources (remove them, then "
                "add them back)")
    gone = plan.removed & busy
    if gone:
        return f"ranks {gone.encode()} run jobs: removing them takes their resources away"
    return None


def reload_pool(pool: ResourcePool, new: Inventory,
                clock: Callable[[], float]) -> ReloadPlan:
    """Make ``pool`` the pool of ``new``, in place (whoever holds the pool sees it):
    removed and changed ranks leave it (:meth:`ResourcePool.remove_ranks`: allocations
    there lose those parts), added and changed ranks join it free and up; allocations,
    reservations and drains of the other ranks stay. Returns what changed."""
    plan = plan_reload(pool.inventory, new)
    if plan.empty:
        return plan
    leaving = plan.removed | plan.changed
    if leaving:
        pool.remove_ranks(leaving)
    joining = plan.added | plan.changed
    if joining:
        data = pool.save()
        kept = list(pool.inventory)
        data["inventory"] = Inventory([*kept, *(t for t in new if t.rank in joining)]
                                      ).to_dict()
        data["removed"] = (IDSet(data.get("removed", "")) - joining).encode()
        grown = ResourcePool.load(data, clock=clock)
        # the pool is shared (the policy, the planner): it changes in place, as
        # remove_ranks does
        vars(pool).update(vars(grown))
    return plan
