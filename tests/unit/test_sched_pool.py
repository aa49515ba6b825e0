"""Tests for fluxes.domain.sched.pool: RFC 16 methods, policies, time, and invariants."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxes.domain.sched import (
    POLICIES,
    InfeasibleRequest,
    InsufficientResources,
    Inventory,
    Request,
    ResourcePool,
    SchedError,
)
from fluxes.domain.sched.placement import socket_slots
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.formats.constraints import parse
from fluxes.formats.counts import Count
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet

USE_CASES = Path(__file__).parent.parent / "spec-data" / "rfc14"
GiB = 1 << 30


def inventory(*entries: dict[str, Any]) -> Inventory:
    """An inventory from resource.config entries."""
    return Inventory.from_config(list(entries))


def nodes(n: int, cores: int = 4, **extra: Any) -> dict[str, Any]:
    """An entry for hosts n0..n{n-1}."""
    return {"hosts": f"n[0-{n - 1}]", "cores": f"0-{cores - 1}", **extra}


def pool_of(*entries: dict[str, Any]) -> ResourcePool:
    """A pool whose clock stays at 0."""
    return ResourcePool(inventory(*entries), clock=lambda: 0.0)


def use_case(name: str) -> Request:
    """The request of RFC 14 use case *name*."""
    text = (USE_CASES / f"use_case_{name}.yaml").read_text()
    return Request.from_jobspec(Jobspec.from_yaml(text))


def per_rank(R: ResourceSet) -> dict[int, tuple[str, str]]:  # noqa: N803
    """{rank: (cores, gpus)} of an R, for compact assertions."""
    return {r: (str(R.cores(r)), str(R.gpus(r))) for r in R.ranks}


def fill(pool: ResourcePool, rank: int, cores: int, jobid: int) -> None:
    """Allocate *cores* cores on *rank* to *jobid* (through a ranks constraint)."""
    pool.alloc(Request(nslots=cores, constraint=parse({"ranks": [str(rank)]})), jobid)


# -- RFC 14 use cases ----------------------------------------------------------------------


def test_use_case_1_1_four_whole_nodes() -> None:
    pool = pool_of(nodes(6))
    R = pool.alloc(use_case("1.1"), 1)  # noqa: N806
    assert per_rank(R) == {r: ("0-3", "") for r in range(4)}
    assert R.starttime == 0.0 and R.expiration == 3600.0
    assert list(R.hostlist) == ["n0", "n1", "n2", "n3"]


def test_use_case_1_2_node_range_takes_the_most_available() -> None:
    pool = pool_of(nodes(40))
    assert pool.alloc(use_case("1.2"), 1).nnodes == 30
    pool = pool_of(nodes(8))
    fill(pool, 0, 1, 9)
    fill(pool, 1, 1, 10)
    assert pool.alloc(use_case("1.2"), 1).ranks == IDSet("2-7")
    with pytest.raises(InsufficientResources):
        pool.alloc(use_case("1.2"), 2)
    with pytest.raises(InfeasibleRequest, match="job requests 3 nodes, only 2 exist"):
        pool_of(nodes(2)).alloc(use_case("1.2"), 1)


def test_use_case_1_3_sockets_and_cores_take_the_most_available() -> None:
    pool = pool_of(nodes(4, 16, sockets=2), {"hosts": "m[0-3]", "cores": "0-15"})
    fill(pool, 0, 3, 9)  # rank 0 socket 0 keeps 5 free cores
    R = pool.alloc(use_case("1.3"), 1)  # noqa: N806
    assert R.ranks == IDSet("0-3")
    assert per_rank(R)[0] == ("3-15", "")
    assert per_rank(R)[1] == ("0-15", "")
    assert pool.allocation_of(1).ncores == 13 + 3 * 16


def test_use_case_1_3_needs_two_sockets_with_four_cores() -> None:
    pool = pool_of(nodes(4, 8, sockets=2))
    fill(pool, 0, 1, 9)  # socket 0 of rank 0 keeps only 3 cores: rank 0 does not qualify
    with pytest.raises(InsufficientResources):
        pool.alloc(use_case("1.3"), 1)
    with pytest.raises(InfeasibleRequest,
                       match="job requests 2 sockets per slot, nodes have at most 1"):
        pool_of(nodes(4, 8)).alloc(use_case("1.3"), 1)


def test_use_case_1_4_exclusive_nodes_with_sockets() -> None:
    pool = pool_of({"hosts": "one[0-3]", "cores": "0-7"},
                   {"hosts": "two[0-3]", "cores": "0-7", "sockets": 2},
                   {"hosts": "small[0-3]", "cores": "0-5", "sockets": 2})
    R = pool.alloc(use_case("1.4"), 1)  # noqa: N806
    assert R.ranks == IDSet("4-7")
    assert all(R.cores(r) == IDSet("0-7") for r in R.ranks)
    with pytest.raises(InfeasibleRequest,
                       match=re.escape("job requests 4 cores per socket, sockets have at "
                                       "most 3")):
        pool_of({"hosts": "n[0-3]", "cores": "0-5", "sockets": 2}).alloc(use_case("1.4"), 1)


def test_use_case_1_8_node_set_takes_the_largest_member() -> None:
    pool = pool_of(nodes(20))
    assert pool.alloc(use_case("1.8"), 1).nnodes == 16
    assert pool.alloc(use_case("1.8"), 2).nnodes == 4
    with pytest.raises(InsufficientResources):
        pool.alloc(use_case("1.8"), 3)


@pytest.mark.parametrize("name", ["2.1", "2.2"])
def test_use_case_2_1_and_2_2(name: str) -> None:
    pool = pool_of(nodes(4))
    assert pool.alloc(use_case(name), 1).ranks == IDSet("0-3")


def test_use_case_2_3_ten_slots_of_two_cores() -> None:
    pool = pool_of(nodes(2, 16))
    R = pool.alloc(use_case("2.3"), 1)  # noqa: N806
    assert per_rank(R) == {0: ("0-15", ""), 1: ("0-3", "")}


def test_use_case_2_4_node_with_memory() -> None:
    pool = pool_of(nodes(2, 16, memory="32G"), {"hosts": "big0", "cores": "0-31",
                                                "memory": "128G"})
    R = pool.alloc(use_case("2.4"), 1)  # noqa: N806
    assert per_rank(R) == {2: ("0-15", "")}
    # 16 cores are left on big0 but only 64G of memory: one more fits, not two.
    pool.alloc(use_case("2.4"), 2)
    with pytest.raises(InsufficientResources):
        pool.alloc(use_case("2.4"), 3)
    with pytest.raises(InfeasibleRequest,
                       match="job requests 64G memory per slot, nodes have at most 32G"):
        pool_of(nodes(2, 16, memory="32G")).alloc(use_case("2.4"), 1)


def test_use_case_2_5_memory_limits_slots_per_node() -> None:
    pool = pool_of(nodes(6, 4, memory="4G"))
    R = pool.alloc(use_case("2.5"), 1)  # noqa: N806
    assert R.ranks == IDSet("0-4")
    assert all(len(R.cores(r)) == 2 for r in R.ranks)
    with pytest.raises(InfeasibleRequest,
                       match="job requests 2G memory per slot, no node declares memory"):
        pool_of(nodes(6, 4)).alloc(use_case("2.5"), 1)


def test_use_case_2_6_exclusive_nodes_with_memory() -> None:
    pool = pool_of(nodes(3, 4, memory="2G"), {"hosts": "m[0-2]", "cores": "0-3",
                                              "memory": "8G"})
    R = pool.alloc(use_case("2.6"), 1)  # noqa: N806
    assert R.ranks == IDSet("3-4")
    assert pool.save()["allocations"][0]["memory"] == {"3": 8 * GiB, "4": 8 * GiB}


@pytest.mark.parametrize("name", ["2.7", "2.8"])
def test_use_case_2_7_and_2_8(name: str) -> None:
    assert pool_of(nodes(1)).alloc(use_case(name), 1).ranks == IDSet("0")


def test_use_case_2_9_constraint() -> None:
    pool = pool_of(nodes(4), {"hosts": "gpu[0-1]", "cores": "0-3", "gpus": "0",
                              "properties": ["amd-mi50"]})
    R = pool.alloc(use_case("2.9"), 1)  # noqa: N806
    assert R.ranks == IDSet("4")
    assert R.properties == {"amd-mi50": IDSet("4")}
    with pytest.raises(InfeasibleRequest, match=re.escape("no node matches [amd-mi50]")):
        pool_of(nodes(4)).alloc(use_case("2.9"), 1)


# -- infeasible and insufficient --------------------------------------------------------------

INFEASIBLE = [
    (Request(nnodes=300, exclusive=True, constraint=parse({"properties": ["gpu"]})),
     "job requests 300 nodes, only 256 match [gpu]"),
    (Request(nnodes=2, nslots=1, slot_size=128), "job requests 128 cores per slot, nodes have "
                                                 "at most 64"),
    (Request(slot_size=8, gpu_per_slot=5), "job requests 5 gpus per slot, nodes have at most 4"),
    (Request(gpu_per_slot=1, constraint=parse({"properties": ["^gpu"]})),
     "job requests 1 gpus per slot, nodes matching [^gpu] have at most 0"),
    (Request(nslots=30000), "job requests 30000 cores, only 20480 exist"),
    (Request(nslots=3000, slot_size=64, constraint=parse({"properties": ["gpu"]})),
     "job requests 192000 cores, only 16384 match [gpu]"),
    (Request(nnodes=400), "job requests 400 nodes, only 320 exist"),
    (Request(nnodes=300, nslots=2, slot_size=64),
     "job requests 300 nodes with 2 slots of 64 cores per node, no node can hold it"),
    (Request(nnodes=200, nslots=1, slot_size=2, gpu_per_slot=3),
     "job requests 200 nodes with 1 slot of 2 cores, 3 gpus per node, only 128 nodes can hold "
     "it"),
    (Request(nslots=10, slot_size=1, gpu_per_slot=1, constraint=parse({"ranks": ["0"]})),
     "job requests 1 gpus per slot, nodes matching ranks=0 have at most 0"),
    (Request(constraint=parse({"hostlist": ["nowhere"]})), "no node matches hostlist=nowhere"),
    (Request(nslots=600, slot_size=32, gpu_per_slot=1),
     "job requests 600 slots of 32 cores, 1 gpu, at most 512 fit on the nodes"),
]


@pytest.fixture
def big_pool() -> ResourcePool:
    """64 cpu nodes and 256 gpu nodes of 64 cores (128 of them with 4 gpus, 128 with 2)."""
    return pool_of({"hosts": "cpu[0-63]", "cores": "0-63"},
                   {"hosts": "gpu[0-127]", "cores": "0-63", "gpus": "0-3",
                    "properties": ["gpu"]},
                   {"hosts": "gpu[128-255]", "cores": "0-63", "gpus": "0-1",
                    "properties": ["gpu"]})


@pytest.mark.parametrize(("request_", "note"), INFEASIBLE)
def test_infeasible_notes(big_pool: ResourcePool, request_: Request, note: str) -> None:
    with pytest.raises(InfeasibleRequest, match="^" + re.escape(note) + "$"):
        big_pool.alloc(request_, 1)
    with pytest.raises(InfeasibleRequest):
        big_pool.check(request_)
    assert big_pool.earliest_start(request_, now=0.0) is None


def test_check_passes_feasible(big_pool: ResourcePool) -> None:
    big_pool.check(Request(nnodes=256, exclusive=True))


def test_insufficient_notes() -> None:
    pool = pool_of(nodes(4))
    pool.alloc(Request(nnodes=3, exclusive=True), 1)
    with pytest.raises(InsufficientResources,
                       match=r"^job requests 2 whole nodes, 1 suitable node is idle$"):
        pool.alloc(Request(nnodes=2, exclusive=True), 2)
    with pytest.raises(InsufficientResources, match=r"^job requests 5 cores, 4 are free$"):
        pool.alloc(Request(nslots=5), 2)
    with pytest.raises(InsufficientResources, match=r"^no room for 1 node × 2 slots of 1 core"):
        pool_with_one_core_each().alloc(Request(nnodes=1, nslots=2), 2)
    assert issubclass(InsufficientResources, SchedError)


def pool_with_one_core_each() -> ResourcePool:
    """4 nodes with 2 cores, one of them used on each."""
    pool = pool_of(nodes(4, 2))
    for r in range(4):
        fill(pool, r, 1, 100 + r)
    return pool


def test_drained_nodes_make_insufficient_not_infeasible() -> None:
    pool = pool_of(nodes(4))
    pool.mark_down("2-3")
    assert pool.down == IDSet("2-3")
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(nnodes=3, exclusive=True), 1)
    assert pool.earliest_start(Request(nnodes=3, exclusive=True), now=0.0) == math.inf
    assert pool.alloc(Request(nnodes=2, exclusive=True), 1).ranks == IDSet("0-1")
    pool.mark_up([2])
    assert pool.alloc(Request(nnodes=1, exclusive=True), 2).ranks == IDSet("2")


def test_drain_keeps_running_work() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nslots=2), 1)
    pool.mark_down([0])
    assert pool.allocation_of(1).ranks == IDSet("0")
    assert pool.counts()["free_cores"] == 4
    pool.free(1)
    assert pool.counts()["free_cores"] == 4  # rank 0 is down
    assert pool.available().ranks == IDSet("1")  # drained ranks are never available
    assert pool.available(include_down=False).ranks == IDSet("1")
    assert pool.available(include_down=True).ncores == 8
    pool.mark_up("0")
    assert pool.counts()["free_cores"] == 8
    assert pool.available().ncores == 8


def test_hostname_is_a_property_for_placement() -> None:
    # As in flux: {"properties": ["n2"]} matches host n2, "^n2" every other host.
    pool = pool_of(nodes(4))
    R = pool.alloc(Request(nnodes=1, constraint=parse({"properties": ["n2"]})), 1)  # noqa: N806
    assert list(R.hostlist) == ["n2"]
    R = pool.alloc(Request(nnodes=3, exclusive=True,  # noqa: N806
                           constraint=parse({"properties": ["^n2"]})), 2)
    assert list(R.hostlist) == ["n0", "n1", "n3"]
    assert pool.find({"properties": ["n3"]}).ranks == IDSet("3")
    with pytest.raises(InfeasibleRequest, match=re.escape("no node matches [n9]")):
        pool.alloc(Request(constraint=parse({"properties": ["n9"]})), 3)


def test_available_never_counts_down_ranks() -> None:
    # As in flux: a pool whose every rank is down has nothing available.
    pool = pool_of(nodes(4))
    assert pool.available().ncores == 16
    pool.mark_down("0-3")
    assert pool.available().ncores == 0
    assert pool.available().is_empty()
    pool.mark_up("0-1")
    assert pool.available().ncores == 8
    assert pool.available().ranks == IDSet("0-1")
    pool.alloc(Request(nslots=3), 1)
    assert pool.available().ncores == 5
    assert pool.available(include_down=True).ncores == 13


def test_remove_ranks_shrinks_the_pool() -> None:
    pool = pool_of(nodes(4), {"hosts": "g0", "cores": "0-3", "gpus": "0", "properties": ["gpu"]})
    pool.alloc(Request(nnodes=2, exclusive=True), 1)  # ranks 0-1
    on_2 = parse({"ranks": ["2"]})
    pool.alloc(Request(nslots=2, constraint=on_2), 2, duration=10.0)
    pool.alloc(Request(nnodes=1, exclusive=True, constraint=on_2), 3, start=50.0, duration=10.0)
    assert pool.allocation_of(3).ranks == IDSet("2")
    pool.mark_down("3")
    pool.remove_ranks("1-2,4")
    assert pool.inventory.ranks == IDSet("0,3")
    assert pool.down == IDSet("3")
    assert pool.counts()["nodes"] == 2
    # Allocations are kept on the ranks that remain; job 2 held only rank 2.
    assert pool.allocation_of(1).ranks == IDSet("0")
    assert pool.allocation_of(2).is_empty()
    assert pool.jobids() == [1, 2]
    assert pool.reservations() == {}  # it planned on a removed rank
    assert pool.find({"properties": ["gpu"]}).is_empty()
    with pytest.raises(InfeasibleRequest):
        pool.alloc(Request(nnodes=3), 4)
    # Frees and drains naming removed ranks ignore them; removing again is a no-op.
    pool.free(ResourceSet.from_ranks({1: ("0-3", None)}))
    pool.mark_down("1")
    pool.mark_up("1,3")
    pool.remove_ranks("2")
    pool.free(2)
    pool.free(1)
    assert pool.jobids() == []
    assert pool.available().ranks == IDSet("0,3")
    with pytest.raises(ValueError, match=re.escape("remove_ranks: unknown rank(s) 9")):
        pool.remove_ranks("9")
    with pytest.raises(ValueError, match="remove_ranks: invalid idset"):
        pool.remove_ranks("x")
    data = pool.save()
    assert data["removed"] == "1-2,4"
    assert ResourcePool.load(data).save() == data


def test_removed_ranks_cannot_be_adopted() -> None:
    # flux's register_alloc refuses an R naming ranks the pool no longer has.
    pool = pool_of(nodes(2))
    pool.remove_ranks([1])
    with pytest.raises(ValueError, match="rank 1 is not in the inventory"):
        pool.adopt(5, ResourceSet.from_ranks({1: ("0", None)}))


def test_mark_down_unknown_rank() -> None:
    with pytest.raises(ValueError, match=re.escape("mark_down: unknown rank(s) 7")):
        pool_of(nodes(2)).mark_down([7])
    with pytest.raises(ValueError, match="mark_up: invalid idset"):
        pool_of(nodes(2)).mark_up("x")


# -- placement policies ----------------------------------------------------------------------


def shaped(free: list[int]) -> ResourcePool:
    """Nodes of 4 cores with the given numbers of free cores (jobs 100+ hold the rest)."""
    pool = pool_of(nodes(len(free)))
    for r, n in enumerate(free):
        if n < 4:
            fill(pool, r, 4 - n, 100 + r)
    return pool


def test_policies_are_listed() -> None:
    assert POLICIES == ("first-fit", "best-fit", "worst-fit", "lonode", "hinode")
    with pytest.raises(ValueError, match="unknown policy 'random'"):
        pool_of(nodes(1)).alloc(Request(), 1, "random")


@pytest.mark.parametrize(("policy", "expected"), [
    ("first-fit", {0: ("1-2", "")}),        # lowest rank where it fits
    ("best-fit", {3: ("2-3", "")}),         # fewest free cores that fit
    ("worst-fit", {2: ("0-1", "")}),        # most free cores
    ("lonode", {0: ("1-2", "")}),           # lowest node id where it fits
    ("hinode", {4: ("0-1", "")}),           # highest node id where it fits
])
def test_policy_one_slot(policy: str, expected: dict[int, tuple[str, str]]) -> None:
    pool = shaped([3, 1, 4, 2, 4])
    assert per_rank(pool.alloc(Request(slot_size=2), 1, policy)) == expected


@pytest.mark.parametrize(("policy", "expected"), [
    ("first-fit", {0: ("1-3", ""), 1: ("3", ""), 2: ("0", "")}),
    ("best-fit", {1: ("3", ""), 3: ("2-3", ""), 0: ("1-2", "")}),
    ("worst-fit", {2: ("0-1", ""), 4: ("0-1", ""), 0: ("1", "")}),
    ("lonode", {0: ("1-3", ""), 1: ("3", ""), 2: ("0", "")}),
    ("hinode", {4: ("0-3", ""), 3: ("2", "")}),
])
def test_policy_five_one_core_slots(policy: str, expected: dict[int, tuple[str, str]]) -> None:
    pool = shaped([3, 1, 4, 2, 4])
    assert per_rank(pool.alloc(Request(nslots=5), 1, policy)) == expected


@pytest.mark.parametrize(("policy", "ranks"), [
    ("first-fit", "0,2"),
    ("best-fit", "0,3"),    # 3 and 2 free cores: the tightest two
    ("worst-fit", "2,4"),
    ("lonode", "0,2"),
    ("hinode", "3-4"),
])
def test_policy_shared_nodes(policy: str, ranks: str) -> None:
    pool = shaped([3, 1, 4, 2, 4])
    R = pool.alloc(Request(nnodes=2, slot_size=2), 1, policy)  # noqa: N806
    assert R.ranks == IDSet(ranks)


@pytest.mark.parametrize(("policy", "ranks"), [
    ("first-fit", "0-1"), ("lonode", "0-1"), ("hinode", "4-5"),
    ("best-fit", "0-1"),   # smallest nodes that qualify
    ("worst-fit", "4-5"),  # largest nodes
])
def test_policy_exclusive(policy: str, ranks: str) -> None:
    pool = pool_of({"hosts": "s[0-1]", "cores": "0-3"}, {"hosts": "m[0-1]", "cores": "0-7"},
                   {"hosts": "l[0-1]", "cores": "0-15"})
    assert pool.alloc(Request(nnodes=2, exclusive=True), 1, policy).ranks == IDSet(ranks)


def test_worst_fit_spreads_best_fit_packs() -> None:
    spread = pool_of(nodes(4)).alloc(Request(nslots=4), 1, "worst-fit")
    assert spread.ranks == IDSet("0-3")
    packed = pool_of(nodes(4)).alloc(Request(nslots=4), 1, "best-fit")
    assert packed.ranks == IDSet("0")


def test_gpu_slots() -> None:
    pool = pool_of(nodes(2, 8), {"hosts": "g[0-1]", "cores": "0-7", "gpus": "0-3"})
    R = pool.alloc(Request(nslots=3, slot_size=2, gpu_per_slot=2), 1)  # noqa: N806
    assert per_rank(R) == {2: ("0-3", "0-3"), 3: ("0-1", "0-1")}
    only = pool.alloc(Request(nslots=2, slot_size=0, gpu_per_slot=1), 2)
    assert per_rank(only) == {3: ("", "2-3")}
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(slot_size=0, gpu_per_slot=1), 3)


def test_gpu_slots_worst_fit_by_free_gpus() -> None:
    pool = pool_of({"hosts": "g[0-2]", "cores": "0-3", "gpus": "0-3"})
    pool.alloc(Request(slot_size=0, gpu_per_slot=3, constraint=parse({"ranks": ["0"]})), 1)
    R = pool.alloc(Request(nslots=2, slot_size=0, gpu_per_slot=1), 2, "worst-fit")  # noqa: N806
    assert R.ranks == IDSet("1-2")


def test_count_slots_take_the_most_available() -> None:
    pool = shaped([3, 1, 4, 2])
    R = pool.alloc(Request(nslots=Count(2, None), slot_size=2), 1)  # noqa: N806
    assert per_rank(R) == {0: ("1-2", ""), 2: ("0-3", ""), 3: ("2-3", "")}
    pool = shaped([4, 4])
    R = pool.alloc(Request(nslots=Count(1, 5, "+", 2), slot_size=1), 1)  # noqa: N806
    assert R.ncores == 5


def test_count_slots_per_node() -> None:
    pool = shaped([3, 1, 4])
    R = pool.alloc(Request(nnodes=2, nslots=Count(1, None), slot_size=1), 1)  # noqa: N806
    assert per_rank(R) == {0: ("1-3", ""), 1: ("3", "")}


def test_count_cores_per_slot_grow() -> None:
    pool = shaped([4, 4])
    R = pool.alloc(Request(nslots=2, slot_size=Count(1, 3)), 1)  # noqa: N806
    assert per_rank(R) == {0: ("0-3", "")}  # two slots of 2 on one node (4 // 2)


def test_sockets_several_slots_per_node() -> None:
    pool = pool_of(nodes(1, 8, sockets=4))
    R = pool.alloc(Request(nnodes=1, nslots=3, sockets_per_slot=2,  # noqa: N806
                           cores_per_socket=1), 1)
    # Three slots of one core on two distinct sockets each: 6 cores over 4 sockets
    # (sockets 0+1, 2+3, then 0+1 again).
    assert R.ncores == 6
    assert R.cores(0) == IDSet("0-4,6")
    assert socket_slots([2, 2, 2, 2], 2, 100) == 4
    assert socket_slots([5, 1, 0], 2, 100) == 1
    assert socket_slots([3, 3, 3], 2, 100) == 4
    assert socket_slots([3, 3, 3], 4, 100) == 0


# -- time: reservations and earliest start ---------------------------------------------------


def test_reservation_blocks_overlapping_work() -> None:
    pool = pool_of(nodes(4))
    pool.alloc(Request(nnodes=2, exclusive=True), 1, now=0.0, duration=100.0)
    big = Request(nnodes=4, exclusive=True, duration=50.0)
    with pytest.raises(InsufficientResources):
        pool.alloc(big, 2, now=0.0)
    assert pool.earliest_start(big, now=0.0) == 100.0
    R = pool.alloc(big, 2, start=100.0)  # noqa: N806
    assert R.starttime == 100.0 and R.expiration == 150.0
    assert pool.reservations() == {2: (100.0, 150.0)}
    # Backfill: ends before the reservation starts.
    pool.alloc(Request(nnodes=1, exclusive=True), 3, now=10.0, duration=90.0)
    # Would still run at 100: refused, whether timed or unlimited.
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(nnodes=1, exclusive=True), 4, now=10.0, duration=91.0)
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(), 4, now=10.0)
    # A reservation is a plan: nothing is allocated now.
    assert pool.allocated().ranks == IDSet("0-2")
    assert pool.allocation_of(2) == R
    # Another job can be planned after it.
    assert pool.earliest_start(big, now=10.0) == 150.0


def test_reserve_holds_what_alloc_with_a_start_holds() -> None:
    """``reserve`` (the planner's) is ``alloc(start=...)`` without the R: the same window
    on the same ranks, the same refusals."""
    big = Request(nnodes=4, exclusive=True, duration=50.0)
    pools = []
    for reserving in (True, False):
        pool = pool_of(nodes(4))
        pool.alloc(Request(nnodes=2, exclusive=True), 1, now=0.0, duration=100.0)
        if reserving:
            pool.reserve(big, 2, "first-fit", 100.0)
        else:
            pool.alloc(big, 2, start=100.0)
        with pytest.raises(InsufficientResources):
            pool.reserve(big, 3, "first-fit", 120.0)
        with pytest.raises(ValueError, match="already has an allocation"):
            pool.reserve(big, 1, "first-fit", 200.0)
        pools.append(pool)
    assert pools[0].reservations() == pools[1].reservations() == {2: (100.0, 150.0)}
    assert pools[0].allocation_of(2) == pools[1].allocation_of(2)


def test_reservation_becomes_allocation() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nnodes=2, exclusive=True), 1, start=50.0, duration=10.0)
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(nnodes=1, exclusive=True), 2, now=45.0, duration=10.0)
    R = pool.alloc(Request(nnodes=2, exclusive=True), 1, now=50.0, duration=10.0)  # noqa: N806
    assert R.ranks == IDSet("0-1")
    assert pool.reservations() == {}
    assert pool.jobids() == [1]


def test_reserving_again_replaces() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nnodes=2, exclusive=True), 1, start=50.0, duration=10.0)
    pool.alloc(Request(nnodes=2, exclusive=True), 1, start=55.0, duration=10.0)
    assert pool.reservations() == {1: (55.0, 65.0)}


def test_cancel_and_clear_reservations() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nnodes=1, exclusive=True), 1, start=5.0, duration=1.0)
    pool.alloc(Request(nnodes=1, exclusive=True), 2, start=5.0, duration=1.0)
    with pytest.raises(InsufficientResources):
        pool.alloc(Request(nnodes=1, exclusive=True), 3, start=5.5, duration=1.0)
    pool.cancel_reservation(1)
    assert pool.reservations() == {2: (5.0, 6.0)}
    with pytest.raises(ValueError, match="job 1 has no reservation"):
        pool.cancel_reservation(1)
    pool.free(2)  # freeing a reserved job drops its reservation
    assert pool.reservations() == {}
    pool.alloc(Request(nnodes=1, exclusive=True), 1, start=5.0, duration=1.0)
    pool.clear_reservations()
    assert pool.reservations() == {}


def test_earliest_start_walks_release_times() -> None:
    pool = pool_of(nodes(1, 4))
    pool.alloc(Request(nslots=1), 1, now=0.0, duration=10.0)
    pool.alloc(Request(nslots=1), 2, now=0.0, duration=30.0)
    pool.alloc(Request(nslots=2), 3, now=0.0, duration=20.0)
    # Free cores: none until 10, 1 until 20, 3 until 30, then 4.
    assert pool.earliest_start(Request(nslots=1), now=1.0) == 10.0
    assert pool.earliest_start(Request(nslots=2), now=1.0) == 20.0
    assert pool.earliest_start(Request(nslots=3), now=1.0) == 20.0
    assert pool.earliest_start(Request(nslots=4), now=1.0) == 30.0
    assert pool.earliest_start(Request(nnodes=1, exclusive=True), now=1.0) == 30.0
    # Past its end time, a job still running is expected to end now.
    assert pool.earliest_start(Request(nslots=1), now=15.0) == 15.0
    assert pool.earliest_start(Request(nslots=2), now=15.0) == 20.0
    # An unlimited reservation of the node from 30: only windows ending by then fit.
    pool.alloc(Request(nnodes=1, exclusive=True), 4, start=30.0)
    assert pool.earliest_start(Request(nslots=1, duration=5.0), now=1.0) == 10.0
    assert pool.earliest_start(Request(nslots=1, duration=25.0), now=1.0) == math.inf
    assert pool.earliest_start(Request(nslots=1), now=1.0) == math.inf


def test_earliest_start_waits_for_a_reservation_to_end() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nnodes=2, exclusive=True), 1, start=10.0, duration=10.0)
    req = Request(nnodes=1, exclusive=True, duration=15.0)
    assert pool.earliest_start(req, now=0.0) == 20.0
    assert pool.earliest_start(req, now=0.0, duration=5.0) == 0.0
    pool.alloc(req, 2, start=20.0)


def test_earliest_start_ignores_the_jobs_own_reservation() -> None:
    pool = pool_of(nodes(2))
    req = Request(nnodes=2, exclusive=True, duration=15.0)
    pool.alloc(req, 1, start=10.0)
    assert pool.earliest_start(req, now=0.0) == 25.0
    assert pool.earliest_start(req, now=0.0, jobid=1) == 0.0


def test_earliest_start_then_reserve_succeeds() -> None:
    pool = pool_of(nodes(4, 4))
    for j, (n, dur) in enumerate([(3, 10.0), (5, 40.0), (4, 25.0), (2, 5.0)]):
        pool.alloc(Request(nslots=n), j, now=0.0, duration=dur)
    for k, req in enumerate([Request(nnodes=2, exclusive=True, duration=7.0),
                             Request(nslots=12, duration=3.0),
                             Request(nnodes=4, nslots=1, slot_size=3, duration=1.0)]):
        when = pool.earliest_start(req, now=0.0)
        assert when is not None and when < math.inf
        pool.alloc(req, 100 + k, start=when)


# -- release, queries, persistence ----------------------------------------------------------


def test_free_and_errors() -> None:
    pool = pool_of(nodes(2))
    pool.alloc(Request(nslots=3), 1)
    with pytest.raises(ValueError, match="alloc: job 1 already has an allocation"):
        pool.alloc(Request(), 1)
    with pytest.raises(ValueError, match="job id must be a non-negative integer"):
        pool.alloc(Request(), -1)
    pool.free(1)
    with pytest.raises(ValueError, match="free: job 1 has no allocation"):
        pool.free(1)
    with pytest.raises(ValueError, match="allocation_of: job 1 has no allocation"):
        pool.allocation_of(1)
    assert pool.allocated().is_empty()
    assert pool.counts()["idle"] == 2


def test_free_part_of_an_allocation() -> None:
    pool = pool_of(nodes(2), {"hosts": "g0", "cores": "0-3", "gpus": "0-1", "memory": "8G"})
    pool.alloc(Request(nnodes=3, exclusive=True), 1)
    pool.free(ResourceSet.from_ranks({0: ("0-1", None), 2: ("0-3", "0")}))
    assert per_rank(pool.allocation_of(1)) == {0: ("2-3", ""), 1: ("0-3", ""), 2: ("", "1")}
    assert pool.available().ncores == 6
    # Memory comes back with the last resource of a rank.
    assert pool.save()["allocations"][0]["memory"] == {"2": 8 * GiB}
    pool.free(ResourceSet.from_ranks({2: ("", "1")}))
    assert pool.save()["allocations"][0]["memory"] == {}
    with pytest.raises(ValueError, match="free: rank 0 cores 0 are not allocated"):
        pool.free(ResourceSet.from_ranks({0: ("0", None)}))
    pool.free(pool.allocation_of(1))
    assert pool.jobids() == []
    assert pool.allocated().is_empty()


def test_free_part_across_jobs() -> None:
    pool = pool_of(nodes(1))
    pool.alloc(Request(nslots=2), 1)
    pool.alloc(Request(nslots=2), 2)
    pool.free(ResourceSet.from_ranks({0: ("1-2", None)}))
    assert pool.allocation_of(1).cores(0) == IDSet("0")
    assert pool.allocation_of(2).cores(0) == IDSet("3")


def test_allocated_available_find() -> None:
    pool = pool_of(nodes(2), {"hosts": "g[0-1]", "cores": "0-3", "gpus": "0",
                              "properties": ["gpu"]})
    pool.alloc(Request(nnodes=1, exclusive=True, constraint=parse({"properties": ["gpu"]})), 1)
    pool.alloc(Request(nslots=2), 2)
    allocated = pool.allocated()
    assert per_rank(allocated) == {0: ("0-1", ""), 2: ("0-3", "0")}
    assert allocated.properties == {"gpu": IDSet("2")}
    assert allocated.hostname(2) == "g0"
    available = pool.available()
    assert per_rank(available) == {0: ("2-3", ""), 1: ("0-3", ""), 3: ("0-3", "0")}
    assert (allocated | available) == pool.inventory.to_rset()
    assert pool.find({"properties": ["gpu"]}).ranks == IDSet("2-3")
    assert pool.find(parse({"properties": ["^gpu"]})).ranks == IDSet("0-1")
    assert pool.find(Request(slot_size=1, gpu_per_slot=1)).ranks == IDSet("2-3")
    assert pool.find(Request(nnodes=1, nslots=5)).is_empty()


def test_alloc_returns_a_copy() -> None:
    pool = pool_of(nodes(1))
    R = pool.alloc(Request(), 1)  # noqa: N806
    R.set_property("mine")
    assert pool.allocation_of(1).properties == {}


def test_save_load_round_trip() -> None:
    pool = pool_of(nodes(3, 4, memory="4G", sockets=2),
                   {"hosts": "g0", "cores": "0-7", "gpus": "0-1", "properties": ["gpu"]})
    pool.alloc(Request(nslots=2, memory_per_slot=GiB), 1, now=5.0, duration=60.0)
    pool.alloc(Request(nnodes=1, exclusive=True), 2, now=5.0)
    pool.alloc(Request(nnodes=2, exclusive=True), 3, start=100.0, duration=10.0)
    pool.mark_down([1])
    data = pool.save()
    back = ResourcePool.load(data)
    assert back.save() == data
    assert back.allocated() == pool.allocated()
    assert back.reservations() == pool.reservations()
    assert back.down == IDSet("1")
    assert back.earliest_start(Request(nnodes=3, exclusive=True), now=5.0) == \
        pool.earliest_start(Request(nnodes=3, exclusive=True), now=5.0)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(version=2), "pool: expected an object with version 1"),
    (lambda d: d["allocations"].append(d["allocations"][0]), "job 1 appears twice"),
    (lambda d: d["allocations"].append({**d["allocations"][0], "jobid": 9}),
     "job 9 overlaps another allocation on rank 0"),
    (lambda d: d["allocations"][0].update(start="x"), "start: expected a finite number"),
    (lambda d: d["allocations"][0]["R"]["execution"]["R_lite"][0].update(rank="7"),
     "rank 7 holds resources the inventory lacks"),
    (lambda d: d["allocations"][0].update(memory={"0": 10 ** 20}), "bad amount for rank 0"),
    (lambda d: d.update(down=3), "pool.down: expected a string"),
])
def test_load_rejects(change: Any, message: str) -> None:
    pool = pool_of(nodes(2, 4, memory="1G"))
    pool.alloc(Request(nslots=2), 1)
    data = pool.save()
    change(data)
    with pytest.raises(ValueError, match=re.escape(message)):
        ResourcePool.load(data)


def test_pool_from_rset() -> None:
    R = ResourceSet.from_ranks({r: ("0-1", None) for r in range(3)})  # noqa: N806
    pool = ResourcePool(R.encode())
    got = pool.alloc(Request(nnodes=3, exclusive=True), 1, now=0.0)
    assert got.ncores == 6
    assert not got.has_hostnames


def test_clock_is_used() -> None:
    times = iter([42.0, 43.0])
    pool = ResourcePool(inventory(nodes(1)), clock=lambda: next(times))
    assert pool.alloc(Request(duration=8.0), 1).expiration == 50.0
    assert pool.earliest_start(Request(nslots=3)) == 43.0


# -- invariants under random operations ------------------------------------------------------

INV: list[dict[str, Any]] = [
    {"hosts": "a[0-2]", "cores": "0-3", "memory": "4G", "sockets": 2},
    {"hosts": "g[0-1]", "cores": "0-7", "gpus": "0-1", "memory": "8G",
     "properties": ["gpu"]},
]

requests = st.builds(
    Request,
    nnodes=st.sampled_from([0, 0, 1, 2, Count(1, 3)]),
    nslots=st.sampled_from([1, 1, 2, 3, Count(1, None)]),
    slot_size=st.sampled_from([1, 2, 3, Count(1, 2)]),
    gpu_per_slot=st.sampled_from([0, 0, 1]),
    memory_per_slot=st.sampled_from([0, 0, GiB]),
    constraint=st.sampled_from([None, None, parse({"properties": ["gpu"]}),
                                parse({"ranks": ["0-3"]})]),
    duration=st.sampled_from([0.0, 5.0, 20.0]),
)
exclusive_requests = st.builds(
    Request, nnodes=st.sampled_from([1, 2, Count(1, 5)]), exclusive=st.just(True),
    slot_size=st.sampled_from([0, 4]), duration=st.sampled_from([0.0, 5.0, 20.0]),
    constraint=st.sampled_from([None, parse({"properties": ["^gpu"]})]))
socket_requests = st.builds(
    Request, nnodes=st.just(1), sockets_per_slot=st.sampled_from([1, 2, Count(1, 2)]),
    cores_per_socket=st.sampled_from([1, 2, Count(1, None)]), duration=st.just(10.0))

operations = st.lists(st.one_of(
    st.tuples(st.just("alloc"), st.one_of(requests, exclusive_requests, socket_requests),
              st.sampled_from(POLICIES)),
    st.tuples(st.just("reserve"), st.one_of(requests, exclusive_requests),
              st.floats(0, 30)),
    st.tuples(st.just("plan"), st.one_of(requests, exclusive_requests)),
    st.tuples(st.just("free"), st.integers(0, 50)),
    st.tuples(st.just("free_part"), st.integers(0, 50)),
    st.tuples(st.just("down"), st.integers(0, 4)),
    st.tuples(st.just("up"), st.integers(0, 4)),
    st.tuples(st.just("remove"), st.integers(0, 4)),
    st.tuples(st.just("tick"), st.floats(0, 10)),
    st.tuples(st.just("clear"), st.none()),
), max_size=40)


def windows(data: dict[str, Any]) -> list[tuple[float, float, bool, ResourceSet,
                                                 dict[str, int]]]:
    """(start, end, exclusive, R, memory) of every record of a saved pool."""
    out = []
    for job in data["allocations"] + data["reservations"]:
        end = math.inf if job["end"] is None else job["end"]
        out.append((job["start"], end, job["exclusive"], ResourceSet(job["R"]), job["memory"]))
    return out


def check_invariants(pool: ResourcePool) -> None:
    """RFC 16 rules, checked from the outside."""
    inventory_r = pool.inventory.to_rset()
    allocated = pool.allocated()
    available = pool.available(include_down=True)
    assert (allocated | available) == inventory_r
    assert allocated.intersection(available).is_empty()
    # What new work may use: never a drained rank.
    assert pool.available() == available.copy_ranks(available.ranks - pool.down)
    held = ResourceSet()
    for jobid in pool.jobids():
        held = held | pool.allocation_of(jobid)
    assert held.ncores == allocated.ncores and held.ngpus == allocated.ngpus
    assert held.issubset(allocated) and allocated.issubset(held)
    data = pool.save()
    records = windows(data)
    for i, (s1, e1, x1, r1, _) in enumerate(records):
        for s2, e2, x2, r2, _ in records[i + 1:]:
            if s1 < e2 and s2 < e1:
                both = r1.intersection(r2)
                assert both.is_empty(), f"double allocation {both}"
                if x1 or x2:
                    assert not r1.ranks.intersects(r2.ranks), "exclusive node shared"
    # Memory: at every record start, what the records running then hold fits.
    for start, _, _, _, _ in records:
        used: dict[str, int] = {}
        for s, e, _, _, mem in records:
            if s <= start < e:
                for rank, amount in mem.items():
                    used[rank] = used.get(rank, 0) + amount
        for rank, amount in used.items():
            target = pool.inventory[int(rank)]
            assert amount <= (target.memory or 0)
    # Exclusive allocations hold whole nodes.
    for _, _, exclusive, rset, mem in records:
        if exclusive:
            for r in rset.ranks:
                target = pool.inventory[r]
                assert rset.cores(r) == target.cores and rset.gpus(r) == target.gpus
                assert mem.get(str(r), 0) == (target.memory or 0)
    assert ResourcePool.load(data).save() == data
    counts = pool.counts()
    up_free = sum(len(available.cores(r)) for r in available.ranks if r not in pool.down)
    assert counts["free_cores"] == up_free


def _op_alloc(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    try:
        pool.alloc(op[1], next_id, op[2])
    except SchedError:
        pass
    return next_id + 1


def _op_reserve(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    try:
        pool.alloc(op[1], next_id, start=now[0] + op[2])
    except SchedError:
        pass
    return next_id + 1


def _op_plan(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    when = pool.earliest_start(op[1])
    if op[1].exclusive and when is not None and when > now[0]:
        # The whole-node shortcut agrees with the general walk.
        plan = pool._plan(op[1])
        length = op[1].duration or math.inf
        assert pool._walk(plan, now[0], length, None) == when
    if when is not None and when < math.inf:
        # What earliest_start promises, alloc must keep: a reservation
        # at that time always succeeds; "now" starts now unless it
        # counts on an overdue job ending.
        try:
            if when != now[0]:
                raise InsufficientResources("later")
            pool.alloc(op[1], next_id)
        except InsufficientResources:
            pool.alloc(op[1], next_id, start=when)
        next_id += 1
    return next_id


def _op_free(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    jobs = pool.jobids() + list(pool.reservations())
    if jobs:
        pool.free(jobs[op[1] % len(jobs)])
    return next_id


def _op_free_part(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    jobs = pool.jobids()
    if jobs:
        jobid = jobs[op[1] % len(jobs)]
        R = pool.allocation_of(jobid)  # noqa: N806
        first = R.ranks.first()
        if first is None:  # all its ranks were removed
            pool.free(jobid)
        else:
            pool.free(R.copy_ranks([first]))
    return next_id


def _op_tick(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    now[0] += op[1]
    return next_id


def _op_simple(pool: ResourcePool, op: Any, now: list[float], next_id: int) -> int:
    if op[0] == "down":
        pool.mark_down([op[1]])
    elif op[0] == "up":
        pool.mark_up([op[1]])
    elif op[0] == "remove":
        pool.remove_ranks([op[1]])
    else:
        pool.clear_reservations()
    return next_id


#: operation kind -> what it does; it returns the next job id
_OPS = {"alloc": _op_alloc, "reserve": _op_reserve, "plan": _op_plan, "free": _op_free,
        "free_part": _op_free_part, "tick": _op_tick}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_random_operations_keep_invariants(ops: list[tuple[str, Any, Any] | tuple[str, Any]]
                                           ) -> None:
    now = [0.0]
    pool = ResourcePool(inventory(*INV), clock=lambda: now[0])
    next_id = 0
    for op in ops:
        next_id = _OPS.get(op[0], _op_simple)(pool, op, now, next_id)
        check_invariants(pool)


# -- a running job's new end (fluxes update duration=..., RFC 27 sched.expiration) ---------


def test_set_expiration_moves_when_the_resources_free_in_every_plan() -> None:
    pool = pool_of(nodes(1, 4))
    pool.alloc(Request(nslots=3), 1, now=0.0, duration=10.0)
    pool.alloc(Request(nslots=1), 2, now=0.0, duration=20.0)
    three = Request(nslots=3, duration=1.0)
    assert pool.earliest_start(three, now=1.0) == 10.0
    pool.alloc(three, 9, start=15.0)  # a reservation: planned on job 1's cores
    pool.cancel_reservation(9)
    assert pool.set_expiration(1, 30.0) and pool.set_expiration(2, 12.0)
    with pytest.raises(InsufficientResources):
        pool.alloc(three, 9, start=15.0)
    # the plan made before (job 1's cores free at 10) is gone: at 12 only job 2's core is
    assert pool.earliest_start(three, now=1.0) == 30.0
    assert pool.earliest_start(Request(nnodes=1, exclusive=True), now=1.0) == 30.0
    assert pool.allocation_of(1).expiration == 30.0
    with pytest.raises(InsufficientResources):
        pool.alloc(three, 3, start=10.0)
    # shortened again: the node's last end follows it down
    assert pool.set_expiration(1, 15.0)
    assert pool.earliest_start(Request(nnodes=1, exclusive=True), now=1.0) == 15.0
    assert pool.set_expiration(1, None)
    assert pool.earliest_start(three, now=1.0) == math.inf
    assert pool.allocation_of(1).expiration in (None, 0.0)


def test_set_expiration_of_a_job_holding_nothing_or_a_bad_time() -> None:
    pool = pool_of(nodes(1, 4))
    pool.alloc(Request(nslots=1), 1, now=0.0, duration=10.0)
    assert not pool.set_expiration(2, 50.0)
    pool.free(1)
    assert not pool.set_expiration(1, 50.0)
    pool.alloc(Request(nslots=1), 1, now=0.0, duration=10.0)
    for bad in (math.nan, math.inf, "5", True):
        with pytest.raises(ValueError, match="set_expiration"):
            pool.set_expiration(1, bad)  # type: ignore[arg-type]
    assert pool.allocation_of(1).expiration == 10.0


def check_holders(pool: SchedulerPool) -> None:
    """``holders`` of any pool kind whose ranks 0 and 1 have cores 0-3 and gpus 0-1, and
    no rank 7: the jobs holding any of an R (a staged start's recovery,
    docs/scheduling-policies.md)."""
    pool.adopt(1, ResourceSet.from_ranks({0: ("0-1", None)}))
    pool.adopt(2, ResourceSet.from_ranks({0: ("2", "0"), 1: ("0-3", None)}))
    assert pool.holders(ResourceSet.from_ranks({0: ("1-2", None)})) == {1, 2}
    assert pool.holders(ResourceSet.from_ranks({0: ("3", "0")})) == {2}
    assert pool.holders(ResourceSet.from_ranks({0: ("3", "1")})) == set()
    assert pool.holders(ResourceSet.from_ranks({7: ("0", None)})) == set()


def test_holders_name_the_jobs_holding_any_of_an_r() -> None:
    check_holders(pool_of({"hosts": "n[0-1]", "cores": "0-3", "gpus": "0-1"}))
