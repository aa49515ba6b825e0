"""``fluxes resource reload``'s pure part: what a new inventory changes, when a reload
needs --force, and the scheduler's pool following it in place."""

from __future__ import annotations

import pytest

from fluxes.domain.sched import Inventory, Request, ResourcePool
from fluxes.domain.sched.reload import plan_reload, reload_pool, reload_refusal
from fluxes.formats.idset import IDSet


def inventory(hosts: str, cores: str = "0-3", **more: str) -> Inventory:
    return Inventory.from_config([{"hosts": hosts, "cores": cores, **more}])


def test_the_plan_names_added_removed_and_changed_ranks() -> None:
    old = inventory("node[0-2]")
    plan = plan_reload(old, inventory("node[0-3]"))
    assert (plan.added, plan.removed, plan.changed) == (IDSet("3"), IDSet(), IDSet())
    plan = plan_reload(old, inventory("node[0-1]"))
    assert plan.removed == IDSet("2") and not plan.added
    assert plan_reload(old, inventory("node[0-2]", cores="0-7")).changed == IDSet("0-2")
    assert plan_reload(old, inventory("node[0-2]")).empty


def test_a_reload_that_takes_resources_from_running_work_needs_force() -> None:
    old = inventory("node[0-2]")
    assert reload_refusal(plan_reload(old, inventory("node[0-1]")), IDSet("0")) is None
    assert reload_refusal(plan_reload(old, inventory("node[0-1]")), IDSet("1-2")) == \
        "ranks 2 run jobs: removing them takes their resources away"
    assert "change their resources" in str(reload_refusal(
        plan_reload(old, inventory("node[0-2]", cores="0-1")), IDSet()))


def test_the_pool_follows_in_place_keeping_allocations_and_drains() -> None:
    pool = ResourcePool(inventory("node[0-1]"), clock=lambda: 100.0)
    same = pool
    pool.alloc(Request(nnodes=1, nslots=1, slot_size=4), 7)
    pool.mark_down("1")
    plan = reload_pool(pool, inventory("node[0-2]"), clock=lambda: 100.0)
    assert plan.added == IDSet("2") and pool is same
    assert pool.inventory.ranks == IDSet("0-2") and pool.down == IDSet("1")
    assert pool.allocation_of(7).ranks == IDSet("0")
    # the new rank takes work; the drained one does not
    assert pool.alloc(Request(nnodes=1, nslots=1, slot_size=4), 8).ranks == IDSet("2")
    # shrink (ranks follow the hosts' order: the last go): rank 2 leaves, its job keeps
    # its id and loses what it held there; the drain of rank 1 stays
    reload_pool(pool, inventory("node[0-1]"), clock=lambda: 100.0)
    assert pool.inventory.ranks == IDSet("0-1") and pool.down == IDSet("1")
    assert sorted(pool.jobids()) == [7, 8]
    pool.free(8)
    # back again: up and free
    reload_pool(pool, inventory("node[0-2]"), clock=lambda: 100.0)
    assert pool.alloc(Request(nnodes=1, nslots=1, slot_size=4), 9).ranks == IDSet("2")
    pool.free(7)
    with pytest.raises(ValueError):
        pool.allocation_of(7)
