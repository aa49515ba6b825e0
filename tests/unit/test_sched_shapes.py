"""Allocation shapes (fluxes/domain/sched/shapes.py): R built once per shape, the same R."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.sched import shapes
from fluxes.domain.sched.errors import SchedError
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

R_DOC = {"version": 1, "execution": {
    "R_lite": [{"rank": "0-3", "children": {"core": "0-3", "gpu": "0"}}],
    "nodelist": ["node[0-3]"], "properties": {"big": "2-3"}}}


def _pool() -> ResourcePool:
    return ResourcePool(ResourceSet(R_DOC), clock=lambda: 100.0)


def _uncached(pool: ResourcePool, rset: ResourceSet) -> ResourceSet:
    """The R the pool built before shapes: from_ranks with hosts, properties, times."""
    nodes = {r: (rset.cores(r), rset.gpus(r)) for r in rset.ranks}
    return ResourceSet.from_ranks(
        nodes, hostnames={r: f"node{r}" for r in nodes},
        properties={"big": rset.ranks_with_property("big")} if
        rset.ranks_with_property("big") else None,
        starttime=rset.starttime, expiration=rset.expiration)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["{}", '{"c":2}', '{"n":2,"c":2}', '{"g":1}', '{"d":60.0}',
                                 '{"n":1,"x":true}']), min_size=1, max_size=12))
def test_allocations_get_the_r_the_pool_built_without_shapes(wires: list[str]) -> None:
    pool = _pool()
    for jobid, wire in enumerate(wires, 1):
        try:
            rset = pool.alloc(Request.from_wire(wire), jobid)
        except SchedError:
            continue  # no room now
        assert rset == _uncached(pool, rset)
        assert rset.dumps() == _uncached(pool, rset).dumps()
        shape = pool.shape_of(jobid)
        assert shape is not None
        assert shape.dumps(rset.starttime, rset.expiration) == rset.dumps()
        assert (shape.summary(), shape.ranks(), shape.nodelist()) == (
            rset.summary(), str(rset.ranks), str(rset.hostlist))
        if jobid % 3 == 0:
            pool.free(jobid)


def test_an_allocation_is_a_copy_never_the_shared_template() -> None:
    now = [100.0]
    pool = ResourcePool(ResourceSet(R_DOC), clock=lambda: now[0])
    first = pool.alloc(Request.from_wire('{"d":60.0}'), 1)
    assert (first.starttime, first.expiration) == (100.0, 160.0)
    pool.free(1)
    now[0] = 200.0
    # the same core again, for a job without a time limit: nothing of the first's
    # times (or of any R handed out) may stick to the shape
    second = pool.alloc(Request.from_wire("{}"), 2)
    assert second.ranks == first.ranks and second.cores(0) == first.cores(0)
    assert (second.starttime, second.expiration) == (200.0, None)
    assert pool.shape_of(2) is not None
    assert pool.shape_of(2).dumps(200.0, None) == second.dumps()  # type: ignore[union-attr]
    held = pool.allocation_of(2)
    held.set_property("mine")  # a caller changing its copy changes nothing held
    assert "mine" not in pool.allocation_of(2).properties


def test_large_allocations_are_not_cached_and_the_cache_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []

    def build(nodes: object) -> ResourceSet:
        built.append(1)
        return ResourceSet.from_ranks({0: ("0", None)})

    cache = shapes.ShapeCache(build)
    core = (IDSet("0"), IDSet(), 0)
    assert cache.get({r: core for r in range(shapes.MAX_RANKS_CACHED + 1)}) is None
    assert cache.get({0: core}) is cache.get({0: core}) and len(built) == 1
    monkeypatch.setattr(shapes, "MAX_SHAPES", 2)
    cache.get({1: core})
    cache.get({2: core})  # full: emptied first
    assert cache.get({0: core}) is not None and len(built) == 4


def test_shape_json_puts_the_times_where_resourceset_does() -> None:
    shape = shapes.Shape(ResourceSet(R_DOC))
    doc = orjson.loads(shape.dumps(1.5, 2.5))
    assert list(doc["execution"])[-2:] == ["starttime", "expiration"]
    assert shape.dumps(None, None) == ResourceSet(R_DOC).dumps()
    assert shape.rset(1.5, None).dumps() == shape.dumps(1.5, None)


def test_the_shape_of_a_job_follows_a_partial_release() -> None:
    # the pool keeps each allocation's shape for the session's look-up after the pass;
    # a partial release changes the parts, and the shape must say what is left
    pool = _pool()
    whole = pool.alloc(Request.from_wire('{"c":2}'), 1)
    assert pool.shape_of(1).summary() == whole.summary()  # type: ignore[union-attr]
    core = whole.cores(0).first_n(1)
    pool.free(ResourceSet.from_ranks({0: (core, IDSet())}))
    left = pool.allocation_of(1)
    assert len(left.cores(0)) == 1
    shape = pool.shape_of(1)
    assert shape is not None
    assert (shape.summary(), shape.ranks()) == (left.summary(), str(left.ranks))
