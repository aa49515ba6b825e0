"""A child instance's namespace and inventory from its job's R (fluxes.domain.nested)."""

from __future__ import annotations

import pytest

from fluxes.domain.nested import child_namespace, child_resources, parent_of
from fluxes.domain.sched.inventory import Inventory
from fluxes.formats.rset import ResourceSet
from fluxes.store.keys import Keys


def test_child_namespace_is_a_valid_namespace_with_its_own_tag() -> None:
    ns = child_namespace("fx", 1234)
    assert Keys(ns).g != Keys("fx").g
    assert parent_of(ns) == ("fx", 1234)
    assert parent_of(child_namespace(ns, 9)) == (ns, 9)
    assert parent_of("fx") is None
    with pytest.raises(ValueError):
        child_namespace("fx", -1)


def test_child_inventory_is_the_jobs_ranks_renumbered_with_their_hosts() -> None:
    rset = ResourceSet.from_ranks({1: ("0-3", None), 3: ("2-3", "0")},
                               hostnames={1: "node1", 3: "node3"})
    table, ranks = child_resources(rset.encode())
    assert ranks == [1, 3]
    inv = Inventory.from_table(table)
    assert len(inv) == 2
    got = [(t.rank, t.hostname, str(t.cores), str(t.gpus)) for t in inv]
    assert got == [(0, "node1", "0-3", ""), (1, "node3", "2-3", "0")]


def test_ranks_without_distinct_hostnames_get_rank_names() -> None:
    rset = ResourceSet.from_ranks({0: ("0", None), 2: ("1", None)})
    table, _ = child_resources(rset.encode())
    assert [e["hosts"] for e in table["config"]] == ["rank0", "rank2"]


def test_an_empty_R_is_refused() -> None:
    with pytest.raises(ValueError, match="no ranks"):
        child_resources({"version": 1, "execution": {"R_lite": []}})
