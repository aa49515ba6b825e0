"""Tests for fluxes.domain.sched.request: Request fields and the jobspec mapping."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from fluxes.domain.sched.errors import InfeasibleRequest, SchedError
from fluxes.domain.sched.request import Request
from fluxes.formats.constraints import parse
from fluxes.formats.counts import Count
from fluxes.formats.jobspec import Jobspec

USE_CASES = Path(__file__).parent.parent / "spec-data" / "rfc14"
GiB = 1 << 30

# Every RFC 14 use case naming only node, slot, core, gpu, memory and socket.
EXPECTED: dict[str, Request] = {
    "1.1": Request(nnodes=4, slot_size=0, exclusive=True, duration=3600.0),
    "1.2": Request(nnodes=Count(3, 30), slot_size=0, exclusive=True, duration=3600.0),
    "1.3": Request(nnodes=4, sockets_per_slot=Count(2, None), cores_per_socket=Count(4, None),
                   duration=3600.0),
    "1.4": Request(nnodes=4, exclusive=True, sockets_per_slot=2, cores_per_socket=4,
                   duration=3600.0),
    "1.8": Request(nnodes=Count.decode("4,9,16,25"), slot_size=0, exclusive=True,
                   duration=3600.0),
    "2.1": Request(nnodes=4, slot_size=0, exclusive=True, duration=3600.0),
    "2.2": Request(nnodes=4, slot_size=0, exclusive=True, duration=3600.0),
    "2.3": Request(nslots=10, slot_size=2, duration=3600.0),
    "2.4": Request(nnodes=1, slot_size=16, memory_per_slot=64 * GiB, duration=3600.0),
    "2.5": Request(nslots=10, slot_size=1, memory_per_slot=2 * GiB, duration=3600.0),
    "2.6": Request(nnodes=2, slot_size=0, exclusive=True, memory_per_slot=4 * GiB,
                   duration=3600.0),
    "2.7": Request(nnodes=1, slot_size=0, exclusive=True, duration=3600.0),
    "2.8": Request(nnodes=1, slot_size=0, exclusive=True, duration=3600.0),
    "2.9": Request(nnodes=1, slot_size=0, exclusive=True, duration=3600.0,
                   constraint=parse({"properties": ["amd-mi50"]})),
}

# The use cases naming other resource types, and why they are refused.
UNSUPPORTED = {
    "1.5": "unsupported resource type 'cluster' in resources[0]",
    "1.6": "unsupported resource type 'cluster' in resources[0]",
    "1.7": "unsupported resource type 'switch' in resources[0]",
}


def use_case(name: str) -> str:
    """The YAML text of RFC 14 use case *name*."""
    return (USE_CASES / f"use_case_{name}.yaml").read_text()


def test_every_use_case_is_covered() -> None:
    names = {p.stem.removeprefix("use_case_") for p in USE_CASES.glob("use_case_*.yaml")}
    assert names == set(EXPECTED) | set(UNSUPPORTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_use_case_from_jobspec(name: str) -> None:
    assert Request.from_jobspec(Jobspec.from_yaml(use_case(name))) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_use_case_from_dict(name: str) -> None:
    assert Request.from_jobspec(yaml.safe_load(use_case(name))) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_use_case_unsupported(name: str) -> None:
    with pytest.raises(InfeasibleRequest, match="^" + re.escape(UNSUPPORTED[name]) + "$"):
        Request.from_jobspec(Jobspec.from_yaml(use_case(name)))


def jobspec(resources: list[dict[str, Any]], system: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """A minimal jobspec dict around *resources*."""
    return {"version": 1, "resources": resources,
            "tasks": [{"command": ["x"], "slot": "s", "count": {"per_slot": 1}}],
            "attributes": {"system": system or {}}}


def slot(count: Any, *children: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A slot vertex."""
    return {"type": "slot", "count": count, "label": "s", "with": list(children), **extra}


def res(kind: str, count: Any, *children: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A resource vertex."""
    vertex = {"type": kind, "count": count, **extra}
    if children:
        vertex["with"] = list(children)
    return vertex


def test_node_slot_core_gpu() -> None:
    req = Request.from_jobspec(jobspec([res("node", 2, slot(3, res("core", 4), res("gpu", 1)))]))
    assert req == Request(nnodes=2, nslots=3, slot_size=4, gpu_per_slot=1)
    assert req.min_cores == 24
    assert req.min_gpus == 6


def test_node_exclusive_flag() -> None:
    req = Request.from_jobspec(jobspec([res("node", 1, slot(1, res("core", 1)),
                                            exclusive=True)]))
    assert req.exclusive


def test_slot_node_not_exclusive() -> None:
    req = Request.from_jobspec(jobspec([slot(2, res("node", 1, res("core", 4),
                                                    exclusive=False))]))
    assert req == Request(nnodes=2, slot_size=4)


def test_slot_of_several_nodes() -> None:
    req = Request.from_jobspec(jobspec([slot(2, res("node", 3))]))
    assert req == Request(nnodes=6, slot_size=0, exclusive=True)


def test_gpu_only_slot() -> None:
    req = Request.from_jobspec(jobspec([slot(4, res("gpu", 1))]))
    assert req == Request(nslots=4, slot_size=0, gpu_per_slot=1)


def test_count_ranges() -> None:
    req = Request.from_jobspec(jobspec([slot("2-8:2:*", res("core", {"min": 2}))]))
    assert req.nslots == Count(2, 8, "*", 2)
    assert req.slot_size == Count(2, None)
    assert req.min_slots == 2
    assert req.min_cores_per_slot == 2


@pytest.mark.parametrize(("unit", "scale"), [
    (None, GiB), ("GB", GiB), ("gb", GiB), ("MiB", 1 << 20), ("B", 1), ("TB", 1 << 40),
    ("kB", 1 << 10),
])
def test_memory_units(unit: str | None, scale: int) -> None:
    memory = res("memory", 3) if unit is None else res("memory", 3, unit=unit)
    req = Request.from_jobspec(jobspec([slot(1, res("core", 1), memory)]))
    assert req.memory_per_slot == 3 * scale


def test_memory_range_uses_its_minimum() -> None:
    req = Request.from_jobspec(jobspec([slot(1, res("core", 1),
                                             res("memory", {"min": 2}, unit="GB"))]))
    assert req.memory_per_slot == 2 * GiB


def test_duration_and_constraints() -> None:
    req = Request.from_jobspec(jobspec(
        [slot(1, res("core", 1))],
        {"duration": 60, "constraints": {"properties": ["ssd"]}}))
    assert req.duration == 60.0
    assert req.constraint == parse({"properties": ["ssd"]})


def test_queue_requires_join_the_constraint() -> None:
    spec = jobspec([slot(1, res("core", 1))], {"constraints": {"properties": ["ssd"]}})
    req = Request.from_jobspec(spec, requires=["batch"])
    assert req.constraint == parse({"properties": ["ssd", "batch"]})
    req = Request.from_jobspec(jobspec([slot(1, res("core", 1))]), requires=["batch"])
    assert req.constraint == parse({"properties": ["batch"]})
    js = Jobspec.from_dict(jobspec([slot(1, res("core", 1))],
                                   {"constraints": {"hostlist": ["n[0-3]"]}}))
    req = Request.from_jobspec(js, requires=["debug"])
    assert req.constraint == parse({"and": [{"hostlist": ["n[0-3]"]},
                                            {"properties": ["debug"]}]})


def test_empty_constraint_is_none() -> None:
    req = Request.from_jobspec(jobspec([slot(1, res("core", 1))], {"constraints": {}}))
    assert req.constraint is None


UNSUPPORTED_SHAPES: list[tuple[list[dict[str, Any]], str]] = [
    ([slot(1, res("core", 1)), slot(1, res("core", 1))],
     "resources: 2 top-level resources are unsupported (give one node or slot)"),
    ([slot(1, res("core", 1), res("switch", 1))],
     "unsupported resource type 'switch' in resources[0].with[1]"),
    ([res("node", 1, res("switch", 1, slot(1, res("core", 1))))],
     "unsupported resource type 'switch' in resources[0].with[0]"),
    ([res("core", 4)], "unsupported resource type 'core' in resources[0]"),
    ([res("node", 1, res("core", 4))],
     "resources[0].with[0]: a core directly under a node (outside a slot) is unsupported"),
    ([res("node", 1)], "resources[0]: a node without a slot is unsupported"),
    ([slot(1, res("node", 1), res("core", 1))],
     "resources[0]: a slot holding a node and other resources is unsupported"),
    ([slot(1, res("core", 1), res("core", 2))],
     "resources[0].with[1]: a second 'core' vertex in one slot is unsupported "
     "(first at resources[0].with[0])"),
    ([slot(1, res("core", 1, res("gpu", 1)))],
     "resources[0].with[0].with: resources inside a core are unsupported"),
    ([slot(1, res("memory", 4))], "resources[0]: a slot without cores or gpus is unsupported"),
    ([slot(1, res("node", 1, exclusive=False))],
     "resources[0].with[0]: a non-exclusive node needs cores or gpus"),
    ([slot(1, res("socket", 2, res("core", 2)), res("core", 1))],
     "resources[0].with[1]: cores both inside and outside sockets are unsupported"),
    ([slot(1, res("socket", 2, res("gpu", 1)))],
     "resources[0].with[0].with[0]: a gpu inside a socket is unsupported"),
    ([slot(1, res("socket", 2))],
     "resources[0].with[0].with: a socket must hold exactly one core vertex"),
    ([slot(1, res("core", 1), res("memory", 1, unit="parsecs"))],
     "resources[0].with[1].unit: unsupported memory unit 'parsecs' (use B, KB, MB, GB or TB)"),
    ([slot("1-4", res("node", "1-2"))],
     "resources[0].with[0]: count ranges on both a slot and its nodes are unsupported"),
    ([res("node", 1, slot(2, res("core", {"min": 1})), slot(1, res("core", 2)))],
     "resources[0].with[0]: several slots under one node need fixed counts and no sockets"),
    ([slot(1, res("core", 1, id="3"))],
     "resources[0].with[0]: requesting specific resource ids is unsupported"),
]


@pytest.mark.parametrize(("resources", "message"), UNSUPPORTED_SHAPES)
def test_unsupported_shapes(resources: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InfeasibleRequest, match="^" + re.escape(message) + "$"):
        Request.from_jobspec(jobspec(resources))


def test_infeasible_is_a_sched_error() -> None:
    with pytest.raises(SchedError):
        Request.from_jobspec(jobspec([res("rack", 1)]))


@pytest.mark.parametrize(("spec", "message"), [
    ({"resources": []}, "resources: expected a non-empty list"),
    (jobspec([slot(0, res("core", 1))]), "resources[0].count: count (0) must be >= 1"),
    (jobspec([slot(1, res("core", 1))], {"duration": -1}),
     "attributes.system.duration: expected a number of seconds >= 0"),
    (jobspec([slot(1, res("core", 1))], {"constraints": {"bogus": []}}),
     "attributes.system.constraints: constraint: unknown operator 'bogus'"),
    (jobspec([{"type": "slot", "label": "s", "with": [res("core", 1)]}]),
     "resources[0]: count is required"),
    (jobspec([slot(1, res("core", 1), exclusive="yes")]), None),
])
def test_malformed(spec: dict[str, Any], message: str | None) -> None:
    if message is None:  # flags on slots are not read
        Request.from_jobspec(spec)
        return
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        Request.from_jobspec(spec)


def test_from_jobspec_rejects_other_types() -> None:
    with pytest.raises(ValueError, match="expected a Jobspec or a mapping"):
        Request.from_jobspec("resources: []")  # type: ignore[arg-type]


# -- the Request dataclass ----------------------------------------------------------------


def test_defaults() -> None:
    req = Request()
    assert (req.nnodes, req.nslots, req.slot_size, req.gpu_per_slot) == (0, 1, 1, 0)
    assert not req.exclusive and req.constraint is None and req.duration == 0.0
    assert req.min_cores == 1
    assert str(req) == "1 slot of 1 core"


def test_fixed_counts_become_ints() -> None:
    req = Request(nnodes=Count(2, 2), nslots=Count.decode("3"))
    assert req.nnodes == 2 and req.nslots == 3
    assert req == Request(nnodes=2, nslots=3)


def test_hash_and_placement_key() -> None:
    a = Request(nslots=4, duration=60)
    b = Request(nslots=4, duration=120)
    assert hash(a) == hash(Request(nslots=4, duration=60.0))
    assert a != b
    assert a.placement_key == b.placement_key
    assert {a: 1}[Request(nslots=4, duration=60)] == 1


def test_sockets_set_slot_size() -> None:
    req = Request(nnodes=1, sockets_per_slot=2, cores_per_socket=8)
    assert req.slot_size == 16
    assert Request(nnodes=1, slot_size=16, sockets_per_slot=2, cores_per_socket=8) == req


def test_str() -> None:
    assert str(Request(nnodes=4, exclusive=True, slot_size=0)) == "4 whole nodes"
    assert str(Request(nnodes=2, nslots=2, slot_size=4, gpu_per_slot=1,
                       constraint=parse({"properties": ["gpu"]}))) == \
        "2 nodes × 2 slots of 4 cores, 1 gpu [gpu]"
    assert str(Request(nslots=10, memory_per_slot=2 * GiB)) == "10 slots of 1 core, 2G memory"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"nnodes": -1}, "Request.nnodes: -1 is less than 0"),
    ({"nslots": 0}, "Request.nslots: 0 is less than 1"),
    ({"slot_size": "4"}, "Request.slot_size: expected an int or a Count, got str"),
    ({"gpu_per_slot": True}, "Request.gpu_per_slot: expected an int or a Count, got bool"),
    ({"exclusive": 1, "nnodes": 1}, "Request.exclusive: expected a bool, got int"),
    ({"constraint": {"properties": []}}, "Request.constraint: expected a Constraint"),
    ({"memory_per_slot": -1}, "Request.memory_per_slot: expected a non-negative"),
    ({"duration": math.inf}, "Request.duration: expected a finite number"),
    ({"duration": -1.0}, "Request.duration: expected a finite number"),
    ({"sockets_per_slot": 2}, "Request: sockets_per_slot and cores_per_socket must be given"),
    ({"sockets_per_slot": 2, "cores_per_socket": 2, "slot_size": 3},
     "Request.slot_size: 3 is not sockets_per_slot × cores_per_socket (4)"),
    ({"exclusive": True}, "Request.exclusive: exclusive allocation needs nnodes > 0"),
    ({"slot_size": 0}, "Request: a slot needs at least one core or gpu"),
])
def test_invalid_request(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        Request(**kwargs)


def test_frozen() -> None:
    req = Request()
    with pytest.raises(AttributeError):
        req.nslots = 3  # type: ignore[misc]


# -- the wire form ---------------------------------------------------------------------------

_CONSTRAINTS: list[dict[str, Any]]
_CONSTRAINTS = [{"properties": ["gpu"]}, {"properties": ["^login", "amd"]},
                {"hostlist": ["node[0-3]"]}, {"ranks": ["0-7,9"]},
                {"and": [{"properties": ["gpu"]}, {"not": [{"hostlist": ["node1"]}]}]},
                {"or": [{"ranks": ["1"]}, {"properties": ["fast"]}]}]


@st.composite
def counts(draw: st.DrawFn) -> Count:
    """Count ranges of every operator, and idset counts that are no progression."""
    low = draw(st.integers(min_value=2, max_value=64))
    kind = draw(st.sampled_from(["+", "*", "^", "open", "set"]))
    if kind == "set":
        values = draw(st.lists(st.integers(1, 200), min_size=2, max_size=6, unique=True))
        return Count.decode(",".join(str(v) for v in sorted(values)))
    if kind == "open":
        return Count(low, None, "+", draw(st.integers(1, 4)))
    operand = draw(st.integers(2 if kind != "+" else 1, 4))
    return Count(low, low + draw(st.integers(0, 10_000)), kind, operand)


def amounts(lowest: int) -> st.SearchStrategy[int | Count]:
    """A request amount: an int (past 64 bits too) or a count."""
    return st.one_of(st.integers(min_value=lowest, max_value=2**70), counts())


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """Any valid Request."""
    kwargs: dict[str, Any] = {
        "nnodes": draw(st.one_of(st.just(0), amounts(0))),
        "nslots": draw(amounts(1)),
        "gpu_per_slot": draw(st.one_of(st.just(0), amounts(0))),
        "exclusive": draw(st.booleans()),
        "duration": draw(st.floats(min_value=0, max_value=1e12)),
        "memory_per_slot": draw(st.one_of(st.just(0), st.integers(0, 2**80))),
    }
    if draw(st.booleans()):
        kwargs["constraint"] = parse(draw(st.sampled_from(_CONSTRAINTS)))
    if draw(st.booleans()):
        kwargs["sockets_per_slot"] = draw(amounts(1))
        kwargs["cores_per_socket"] = draw(amounts(1))
    else:
        kwargs["slot_size"] = draw(amounts(0))
    try:
        return Request(**kwargs)
    except ValueError:
        reject()


@settings(max_examples=300, suppress_health_check=[HealthCheck.filter_too_much])
@given(requests())
def test_wire_round_trip(req: Request) -> None:
    wire = req.to_wire()
    back = Request.from_wire(wire)
    assert back == req and hash(back) == hash(req)
    assert back.to_wire() == wire
    assert Request.from_wire(wire.encode()) == req


def test_wire_leaves_defaults_out() -> None:
    assert Request().to_wire() == "{}"
    assert Request(nslots=2, duration=60).to_wire() == '{"s":2,"d":60.0}'
    assert Request.from_wire('{"n":"2-4","x":true,"c":0}') == \
        Request(nnodes=Count(2, 4), exclusive=True, slot_size=0)


@pytest.mark.parametrize(("wire", "message"), [
    ("", "request: not JSON"),
    ("[1]", "request: expected an object, got list"),
    ('{"z":1}', "request: unknown key 'z'"),
    ('{"n":"2-1"}', "request.nnodes: "),
    ('{"s":true}', "Request.nslots: expected an int or a Count, got bool"),
    ('{"x":1,"n":1}', "Request.exclusive: expected a bool"),
    ('{"k":{"frob":[]}}', "request.constraint: "),
    ('{"k":' + "[" * 5000 + "]" * 5000 + "}", "request: not JSON"),
    ('{"k":' + '{"not":[' * 300 + "{}" + "]}" * 300 + "}", "request.constraint: "),
    ('{"d":NaN}', "Request.duration: expected a finite number"),
    ('{"m":"1"}', "Request.memory_per_slot: expected a non-negative"),
    ("[" * 100_000 + "]" * 100_000, "request: 200000 bytes, at most 65536"),
    ("[" * 30_000 + "]" * 30_000, "request: not JSON"),
])
def test_wire_refuses_what_it_never_writes(wire: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        Request.from_wire(wire)


def test_wire_of_every_use_case() -> None:
    for req in EXPECTED.values():
        assert Request.from_wire(req.to_wire()) == req


# -- a simulated job's run time (staged starts read it) ------------------------------------


@pytest.mark.parametrize(("value", "run"), [
    ("1ms", 0.001), (2, 2.0), (0.5, 0.5), ("1h", 3600.0),
    # unreadable or unbounded: no known end (the exec worker reports a bad value)
    ("soon", 0.0), ("inf", 0.0), (-1, 0.0), (True, 0.0), ([1], 0.0), (None, 0.0),
])
def test_run_duration_read_from_the_jobspec(value: Any, run: float) -> None:
    spec = jobspec([slot(1, res("core", 1))], {"exec": {"test": {"run_duration": value}}})
    request = Request.from_jobspec(spec)
    assert request.run == run
    assert Request.from_wire(request.to_wire()) == request
    assert ('"t"' in request.to_wire()) == bool(run)


def test_run_is_not_placement_but_tells_requests_apart() -> None:
    plain = Request(nslots=2)
    simulated = Request(nslots=2, run=0.001)
    assert plain.placement_key == simulated.placement_key
    assert plain != simulated
    assert Request.from_wire('{"s":2,"t":0.001}') == simulated
    for bad in ('{"t":-1}', '{"t":"1s"}', '{"t":true}'):
        with pytest.raises(ValueError, match=r"Request\.run"):
            Request.from_wire(bad)
    with pytest.raises(ValueError, match=r"Request\.run"):
        Request(run=math.inf)
