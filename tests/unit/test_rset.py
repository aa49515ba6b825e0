"""Tests for fluxes.formats.rset (RFC 20 resource sets)."""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import MAX_RANKS, ResourceSet, check_property_name

SPEC_DATA = Path(__file__).resolve().parents[1] / "spec-data" / "rfc20"


def R(rlite: list[dict[str, Any]], **execution: Any) -> dict[str, Any]:
    """A version 1 R document with the given R_lite and execution keys."""
    return {"version": 1, "execution": {"R_lite": rlite, **execution}}


def entry(rank: str, core: str, gpu: str | None = None) -> dict[str, Any]:
    """One R_lite entry."""
    children = {"core": core}
    if gpu is not None:
        children["gpu"] = gpu
    return {"rank": rank, "children": children}


FOUR = R([entry("0-3", "0-3", "0")], nodelist=["fluke[0-3]"])


# --------------------------------------------------------------------------
# The RFC 20 example
# --------------------------------------------------------------------------


def load_example() -> dict[str, Any]:
    with open(SPEC_DATA / "example1.json") as f:
        data: dict[str, Any] = json.load(f)
    return data


def test_rfc20_example_decodes() -> None:
    rs = ResourceSet(load_example())
    assert rs.ranks == IDSet("19-22")
    assert rs.nnodes == 4
    assert rs.ncores == 4 * 48
    assert rs.ngpus == 4 * 8
    assert rs.cores(19) == IDSet("0-47")
    assert rs.gpus(22) == IDSet("0-7")
    assert [rs.hostname(r) for r in rs.ranks] == ["node186", "node187", "node188", "node189"]
    assert str(rs.hostlist) == "node[186-189]"
    assert rs.starttime == 1676560542
    assert rs.expiration == 1676562342
    assert str(rs) == "rank[19-22]/core[0-47],gpu[0-7]"


def test_rfc20_example_round_trips() -> None:
    example = load_example()
    rs = ResourceSet(example)
    encoded = rs.encode()
    # Everything but keys we do not model (nslots) comes back unchanged.
    expected = copy.deepcopy(example)
    del expected["execution"]["nslots"]
    assert encoded == expected
    assert ResourceSet(encoded) == rs
    assert ResourceSet(rs.dumps()) == rs
    assert ResourceSet(rs.dumps().encode()) == rs
    assert orjson.loads(rs.dumps()) == encoded


def test_json_text_and_bytes() -> None:
    text = json.dumps(FOUR)
    assert ResourceSet(text) == ResourceSet(FOUR) == ResourceSet(text.encode())


def test_unknown_keys_are_ignored() -> None:
    doc = R([{"rank": "0", "children": {"core": "0"}, "node": "x"}], nslots=1)
    doc["scheduling"] = {"graph": {}}
    doc["attributes"] = {"system": {}}
    assert ResourceSet(doc).encode() == R([entry("0", "0")])


def test_empty() -> None:
    for rs in (ResourceSet(), ResourceSet(None), ResourceSet(R([]))):
        assert rs.is_empty()
        assert rs.nnodes == rs.ncores == rs.ngpus == 0
        assert str(rs) == ""
        assert rs.encode() == R([])
        assert len(rs.ranks) == 0
        assert len(rs.hostlist) == 0
        assert rs == ResourceSet()
    assert ResourceSet(R([], nodelist=[])) == ResourceSet()


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------

INVALID: list[tuple[Any, str]] = [
    ([], "expected a JSON object"),
    ("{", "invalid JSON"),
    ("[1]", "expected a JSON object"),
    (b"\xff", "invalid JSON"),
    ({}, "missing 'version'"),
    ({"execution": {"R_lite": []}}, "missing 'version'"),
    ({"version": 2, "execution": {"R_lite": []}}, "unsupported version 2"),
    ({"version": True, "execution": {"R_lite": []}}, "unsupported version True"),
    ({"version": "1", "execution": {"R_lite": []}}, "unsupported version '1'"),
    ({"version": 1.0, "execution": {"R_lite": []}}, "unsupported version"),
    ({"version": 1}, "missing 'execution'"),
    ({"version": 1, "scheduling": {}}, "missing 'execution'"),
    ({"version": 1, "execution": []}, "execution must be an object"),
    ({"version": 1, "execution": {}}, "missing 'execution.R_lite'"),
    (R({}), "R_lite must be a list"),  # type: ignore[arg-type]
    (R(["0"]), "R_lite[0]: expected an object"),  # type: ignore[list-item]
    (R([{"children": {"core": "0"}}]), "R_lite[0]: missing 'rank'"),
    (R([{"rank": "0"}]), "R_lite[0]: missing 'children'"),
    (R([{"rank": 0, "children": {"core": "0"}}]), "R_lite[0].rank: expected an idset string"),
    (R([entry("x", "0")]), "R_lite[0].rank"),
    (R([entry("0-", "0")]), "R_lite[0].rank"),
    (R([entry("", "0")]), "R_lite[0].rank: is empty"),
    (R([entry("0-3", "0"), entry("3-4", "1")]), "R_lite[1]: rank(s) 3 listed more than once"),
    (R([entry("0", "0"), entry("0", "1")]), "listed more than once"),
    (R([{"rank": "0", "children": ["core"]}]), "R_lite[0].children: expected an object"),
    (R([{"rank": "0", "children": {"core": "0", "memory": "0"}}]),
     "unsupported resource type 'memory'"),
    (R([{"rank": "0", "children": {"gpu": "0"}}]), "R_lite[0].children: missing 'core'"),
    (R([entry("0", "a")]), "R_lite[0].children.core"),
    (R([{"rank": "0", "children": {"core": 0}}]), "children.core: expected an idset string"),
    (R([entry("0", "0", "1-")]), "R_lite[0].children.gpu"),
    (R([entry("0-1", "", "")]), "R_lite[0]: rank(s) 0-1 have no cores or gpus"),
    (R([entry(f"0-{MAX_RANKS}", "0")]), f"more than {MAX_RANKS} ranks"),
    (R([entry("0-2147483647", "0")]), "more than"),
    (R([entry("0-1", "0")], nodelist="n[0-1]"), "nodelist must be a list"),
    (R([entry("0-3", "0")], nodelist=["n[0-2]"]),
     "nodelist names 3 host(s) but R_lite has 4 rank(s)"),
    (R([entry("0-1", "0")], nodelist=["n[0-1]", "x"]), "names 3 host(s)"),
    (R([entry("0", "0")], nodelist=[]), "names 0 host(s)"),
    (R([entry("0", "0")], nodelist=[1]), "nodelist[0]: expected a hostlist string"),
    (R([entry("0", "0")], nodelist=["n[0"]), "nodelist[0]"),
    (R([entry("0", "0")], nodelist=["n[0-4000000000]"]), "nodelist"),
    (R([entry("0", "0")], properties=["ssd"]), "properties must be an object"),
    (R([entry("0", "0")], properties={"a^b": "0"}), "invalid character '^'"),
    (R([entry("0", "0")], properties={"a&b": "0"}), "invalid character '&'"),
    (R([entry("0", "0")], properties={"(x)": "0"}), "invalid character '('"),
    (R([entry("0", "0")], properties={"x|y": "0"}), "invalid character '|'"),
    (R([entry("0", "0")], properties={"x!": "0"}), "invalid character '!'"),
    (R([entry("0", "0")], properties={"it's": "0"}), "invalid character"),
    (R([entry("0", "0")], properties={'"q"': "0"}), "invalid character"),
    (R([entry("0", "0")], properties={"`": "0"}), "invalid character"),
    (R([entry("0", "0")], properties={"": "0"}), "property name is empty"),
    (R([entry("0", "0")], properties={"ssd": 0}), "expected an idset string"),
    (R([entry("0", "0")], properties={"ssd": "0-"}), "properties['ssd']"),
    (R([entry("0-1", "0")], properties={"ssd": "1-3"}),
     "properties['ssd']: rank(s) 2-3 not in the resource set"),
    (R([entry("0", "0")], starttime="now"), "starttime: expected a number"),
    (R([entry("0", "0")], starttime=None), "starttime: expected a number"),
    (R([entry("0", "0")], expiration=True), "expiration: expected a number"),
    (R([entry("0", "0")], expiration=float("inf")), "not a finite number"),
    (R([entry("0", "0")], starttime=float("nan")), "not a finite number"),
    (R([entry("0", "0")], starttime=100, expiration=99.5), "expiration 99.5 is before starttime"),
    (7, "expected a JSON object"),
]


@pytest.mark.parametrize(("doc", "fragment"), INVALID)
def test_invalid(doc: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ResourceSet(doc)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_valid_edge_cases() -> None:
    # gpu-only rank, empty gpu key, expiration equal to starttime, float times
    rs = ResourceSet(R([entry("0", "", "0-1"), entry("1", "0", "")],
                       starttime=1.5, expiration=1.5))
    assert rs.cores(0) == IDSet() and rs.gpus(0) == IDSet("0-1")
    assert rs.gpus(1) == IDSet()
    assert str(rs) == "rank0/gpu[0-1] rank1/core0"
    assert rs.encode() == R([entry("0", "", "0-1"), entry("1", "0")],
                            starttime=1.5, expiration=1.5)
    # bracketed idsets, empty property dropped, '@' allowed in property names
    rs = ResourceSet(R([entry("[0-1]", "[0-3]")], properties={"a@gpu": "[1]", "none": ""}))
    assert rs.properties == {"a@gpu": IDSet("1")}


def test_check_property_name() -> None:
    assert check_property_name("amd-mi50@gpu") == "amd-mi50@gpu"
    assert check_property_name("日本") == "日本"
    with pytest.raises(ValueError, match="not valid UTF-8"):
        check_property_name("\ud800")
    with pytest.raises(ValueError, match="must be a string"):
        check_property_name(3)


# --------------------------------------------------------------------------
# Accessors
# --------------------------------------------------------------------------


def test_accessors() -> None:
    rs = ResourceSet(R([entry("0-1", "0-3", "0"), entry("2-3", "0-1")],
                       nodelist=["fluke[0-3]"], properties={"xx": "0-1", "zz": "3"}))
    assert rs.ranks == IDSet("0-3")
    assert (rs.nnodes, rs.ncores, rs.ngpus) == (4, 12, 2)
    assert rs.cores(2) == IDSet("0-1")
    assert rs.gpus(2) == IDSet()
    assert rs.hostname(3) == "fluke3"
    assert rs.has_hostnames
    assert rs.rank_of("fluke2") == 2
    assert rs.ranks_for_hosts("fluke[1,3]") == IDSet("1,3")
    assert rs.ranks_for_hosts(Hostlist("fluke0")) == IDSet("0")
    assert rs.properties == {"xx": IDSet("0-1"), "zz": IDSet("3")}
    assert rs.ranks_with_property("xx") == IDSet("0-1")
    assert rs.ranks_with_property("nope") == IDSet()
    for bad in (4, -1, "0", None):
        with pytest.raises(ValueError, match="not in the resource set"):
            rs.cores(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not in the resource set"):
            rs.hostname(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown host 'fluke9'"):
        rs.rank_of("fluke9")
    with pytest.raises(ValueError, match=r"unknown host\(s\) fluke\[7-8\]"):
        rs.ranks_for_hosts("fluke[0,7-8]")
    assert rs.ranks_for_hosts("fluke[0,7-8]", ignore_unknown=True) == IDSet("0")
    with pytest.raises(ValueError, match="unknown hosts"):
        rs.ranks_for_hosts("fluke[0-1000000]")
    big = rs.ranks_for_hosts("fluke[0-1000000],x[0-1000]", ignore_unknown=True)
    assert big == IDSet("0-3")
    with pytest.raises(ValueError, match="hostlist"):
        rs.ranks_for_hosts("fluke[")
    with pytest.raises(ValueError, match="hostlist"):
        rs.ranks_for_hosts("fluke[0-100000000]")


def test_returned_sets_are_copies() -> None:
    rs = ResourceSet(FOUR)
    rs.ranks.add(99)
    rs.cores(0).add(99)
    rs.gpus(0).add(99)
    rs.set_property("p", "0")
    rs.properties["p"].add(1)
    rs.ranks_with_property("p").add(2)
    assert rs.ranks == IDSet("0-3")
    assert rs.cores(0) == IDSet("0-3") and rs.cores(1) == IDSet("0-3")
    assert rs.gpus(0) == IDSet("0")
    assert rs.properties == {"p": IDSet("0")}


def test_shared_hostnames() -> None:
    # Several brokers on one node: ranks share a hostname.
    rs = ResourceSet(R([entry("0-3", "0")], nodelist=["a,a,b,b"]))
    assert rs.rank_of("a") == 0
    assert rs.rank_of("b") == 2
    assert rs.ranks_for_hosts("b") == IDSet("2-3")
    assert rs.ranks_for_hosts("a,b") == IDSet("0-3")


def test_nodelist_split_over_entries() -> None:
    rs = ResourceSet(R([entry("5", "0"), entry("2", "0-1")], nodelist=["x", "y"]))
    # Hostnames follow ascending rank order, not R_lite order.
    assert rs.hostname(2) == "x"
    assert rs.hostname(5) == "y"
    assert rs.encode()["execution"]["nodelist"] == ["x,y"]


def test_times() -> None:
    rs = ResourceSet(FOUR)
    assert rs.starttime is None and rs.expiration is None
    rs.starttime = 100
    rs.expiration = 200.5
    assert ResourceSet(rs.encode()) == rs
    assert rs.encode()["execution"]["starttime"] == 100
    with pytest.raises(ValueError, match="expiration 50 is before starttime 100"):
        rs.expiration = 50
    with pytest.raises(ValueError, match="starttime 300 is after expiration"):
        rs.starttime = 300
    with pytest.raises(ValueError, match="expected a number"):
        rs.starttime = "1"  # type: ignore[assignment]
    rs.expiration = None
    rs.starttime = 300
    assert "expiration" not in rs.encode()["execution"]
    c = rs.copy()
    c.starttime = None
    assert rs.starttime == 300


# --------------------------------------------------------------------------
# Building programmatically
# --------------------------------------------------------------------------


def test_from_ranks() -> None:
    cores, gpus = IDSet("0-3"), IDSet("0")
    rs = ResourceSet.from_ranks({r: (cores, gpus) for r in range(4)},
                                hostnames=["fluke0", "fluke1", "fluke2", "fluke3"],
                                properties={"xx": "0-1", "zz": IDSet("3")},
                                starttime=1, expiration=2)
    assert rs == ResourceSet(R([entry("0-3", "0-3", "0")], nodelist=["fluke[0-3]"],
                               properties={"xx": "0-1", "zz": "3"},
                               starttime=1, expiration=2))
    # Inputs are copied.
    cores.add(10)
    assert rs.cores(0) == IDSet("0-3")
    # Other ways to give hostnames.
    by_dict = ResourceSet.from_ranks({1: ("0", None), 0: ("0", "")},
                                     hostnames={0: "a", 1: "b"})
    by_hl = ResourceSet.from_ranks({0: ("0", None), 1: ("0", None)}, hostnames=Hostlist("a,b"))
    assert by_dict == by_hl
    assert str(by_hl) == "rank[0-1]/core0"


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"ranks": [(0, ("0", None))]}, "ranks must be a mapping"),
    ({"ranks": {-1: ("0", None)}}, "rank -1 is out of range"),
    ({"ranks": {"0": ("0", None)}}, "rank must be an integer"),
    ({"ranks": {True: ("0", None)}}, "rank must be an integer"),
    ({"ranks": {0: "0"}}, "expected a (cores, gpus) pair"),
    ({"ranks": {0: ("0",)}}, "expected a (cores, gpus) pair"),
    ({"ranks": {0: ("x", None)}}, "rank 0 cores"),
    ({"ranks": {0: (0, None)}}, "rank 0 cores: expected an idset string"),
    ({"ranks": {0: ("0", "-")}}, "rank 0 gpus"),
    ({"ranks": {0: ("", None)}}, "rank 0: has no cores or gpus"),
    ({"ranks": {0: ("0", None)}, "hostnames": ["a", "b"]}, "more hostnames than"),
    ({"ranks": {0: ("0", None), 1: ("0", None)}, "hostnames": ["a"]},
     "no hostname for rank(s) 1"),
    ({"ranks": {0: ("0", None)}, "hostnames": {1: "a"}}, "rank 1 is not in the set"),
    ({"ranks": {0: ("0", None)}, "hostnames": {0: "a,b"}}, "hostnames: Hostlist: hostname"),
    ({"ranks": {0: ("0", None)}, "hostnames": {0: ""}}, "hostnames: Hostlist: empty hostname"),
    ({"ranks": {0: ("0", None)}, "hostnames": ["a b"]}, "hostnames: Hostlist: hostname"),
    ({"ranks": {0: ("0", None)}, "hostnames": [None]}, "hostnames[0]: hostname must be a str"),
    ({"ranks": {0: ("0", None)}, "hostnames": {0: 3}}, "hostname must be a string"),
    ({"ranks": {0: ("0", None)}, "hostnames": "a"}, "expected a list of hostnames"),
    ({"ranks": {0: ("0", None)}, "hostnames": 3}, "expected a list of hostnames"),
    ({"ranks": {0: ("0", None)}, "properties": ["x"]}, "properties must be a mapping"),
    ({"ranks": {0: ("0", None)}, "properties": {"x": "1"}}, "rank(s) 1 not in the"),
    ({"ranks": {0: ("0", None)}, "properties": {"^x": "0"}}, "invalid character '^'"),
    ({"ranks": {0: ("0", None)}, "starttime": 2, "expiration": 1}, "before starttime"),
])
def test_from_ranks_invalid(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        ResourceSet.from_ranks(**kwargs)
    assert fragment in str(info.value)


def test_add_rank() -> None:
    rs = ResourceSet()
    rs.add_rank(3, "0-3", hostname="c")
    rs.add_rank(1, IDSet("0-3"), "0", hostname="a", properties=["ssd"])
    rs.add_rank(2, "0-3", gpus=None, hostname="b", properties=["ssd", "big"])
    assert str(rs) == "rank1/core[0-3],gpu0 rank[2-3]/core[0-3]"
    assert str(rs.hostlist) == "[a-c]" or list(rs.hostlist) == ["a", "b", "c"]
    assert rs.properties == {"big": IDSet("2"), "ssd": IDSet("1-2")}
    assert rs.ncores == 12
    assert rs.ranks == IDSet("1-3")
    with pytest.raises(ValueError, match="rank 3 is already in the set"):
        rs.add_rank(3, "0", hostname="d")
    with pytest.raises(ValueError, match="needs a hostname"):
        rs.add_rank(4, "0")
    with pytest.raises(ValueError, match="no cores or gpus"):
        rs.add_rank(4, "", "", hostname="d")
    with pytest.raises(ValueError, match="invalid character"):
        rs.add_rank(4, "0", hostname="d", properties=["a|b"])
    with pytest.raises(ValueError, match="list of names"):
        rs.add_rank(4, "0", hostname="d", properties="ssd")
    with pytest.raises(ValueError, match="list of names"):
        rs.add_rank(4, "0", hostname="d", properties=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank must be an integer"):
        rs.add_rank("4", "0", hostname="d")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected an idset string"):
        rs.add_rank(4, [0], hostname="d")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hostname must be a string"):
        rs.add_rank(4, "0", hostname=4)  # type: ignore[arg-type]
    assert rs.ranks == IDSet("1-3")  # failed calls changed nothing
    bare = ResourceSet()
    bare.add_rank(0, "0")
    with pytest.raises(ValueError, match="has a hostname but the others do not"):
        bare.add_rank(1, "0", hostname="x")
    assert ResourceSet(rs.encode()) == rs


def test_set_property() -> None:
    rs = ResourceSet(FOUR)
    rs.set_property("all")
    rs.set_property("some", "1")
    rs.set_property("some", IDSet("3"))
    assert rs.properties == {"all": IDSet("0-3"), "some": IDSet("1,3")}
    with pytest.raises(ValueError, match="not in the resource set"):
        rs.set_property("x", "0-6")
    with pytest.raises(ValueError, match="invalid character"):
        rs.set_property("x^y")
    with pytest.raises(ValueError, match="set_property"):
        rs.set_property("y", "foo")


# --------------------------------------------------------------------------
# Encoding and summary
# --------------------------------------------------------------------------


def test_encode_groups_identical_children() -> None:
    rs = ResourceSet(R([entry("0", "0-3"), entry("2", "0-3"), entry("1", "0-1", "0"),
                        entry("3", "0-1", "0")]))
    assert rs.encode() == R([entry("0,2", "0-3"), entry("1,3", "0-1", "0")])
    assert str(rs) == "rank[0,2]/core[0-3] rank[1,3]/core[0-1],gpu0"


@pytest.mark.parametrize(("doc", "summary"), [
    (R([entry("0-1", "0-3")]), "rank[0-1]/core[0-3]"),
    (R([entry("0", "0-1", "0")]), "rank0/core[0-1],gpu0"),
    (R([entry("0-3", "0-3", "0")]), "rank[0-3]/core[0-3],gpu0"),
    (R([entry("10-13", "0-3", "0")]), "rank[10-13]/core[0-3],gpu0"),
    (R([entry("0", "0")]), "rank0/core0"),
    (R([entry("0", "0,2")]), "rank0/core[0,2]"),
    (R([entry("0", "0-3"), entry("1", "0-1")]), "rank0/core[0-3] rank1/core[0-1]"),
])
def test_summary(doc: dict[str, Any], summary: str) -> None:
    rs = ResourceSet(doc)
    assert rs.summary() == summary
    assert str(rs) == summary
    assert repr(rs) == f"ResourceSet({summary!r})"


def test_large_inventory_shares_children() -> None:
    rs = ResourceSet(R([entry("0-8191", "0-63", "0-3")], nodelist=["node[0-8191]"]))
    assert rs.ncores == 8192 * 64
    enc = rs.encode()
    assert enc["execution"]["R_lite"] == [entry("0-8191", "0-63", "0-3")]
    assert enc["execution"]["nodelist"] == ["node[0-8191]"]
    alloc = rs.copy_ranks("100-103")
    assert str(alloc) == "rank[100-103]/core[0-63],gpu[0-3]"
    assert str(alloc.hostlist) == "node[100-103]"
    rest = rs - alloc
    assert rest.nnodes == 8188
    assert (rest | alloc) == rs


# --------------------------------------------------------------------------
# Set operations, by example
# --------------------------------------------------------------------------


def test_difference_is_by_core() -> None:
    rs = ResourceSet(R([entry("0-1", "0-3")], nodelist=["n[0-1]"], properties={"bar": "1"}))
    one_core = ResourceSet(R([entry("0", "0")]))
    result = rs - one_core
    assert str(result) == "rank0/core[1-3] rank1/core[0-3]"
    assert result.ncores == 7
    assert result.hostname(0) == "n0"
    rank1 = ResourceSet(R([entry("1", "0-3")]))
    result = rs.difference(rank1)
    assert str(result) == "rank0/core[0-3]"
    assert result.properties == {}
    assert str(result.hostlist) == "n0"
    assert (rs - rs).is_empty()
    assert rs - ResourceSet() == rs


def test_union_and_intersection() -> None:
    a = ResourceSet(R([entry("0-1", "0-3")], nodelist=["n[0-1]"], properties={"foo": "0-1"},
                      starttime=5))
    b = ResourceSet(R([entry("1-2", "2-5", "0")], nodelist=["n[1-2]"], properties={"baz": "2"}))
    u = a | b
    assert str(u) == "rank0/core[0-3] rank1/core[0-5],gpu0 rank2/core[2-5],gpu0"
    assert str(u.hostlist) == "n[0-2]"
    assert u.properties == {"baz": IDSet("2"), "foo": IDSet("0-1")}
    assert u.starttime == 5
    assert (b | a).starttime is None
    i = a & b
    assert str(i) == "rank1/core[2-3]"
    assert i.properties == {"foo": IDSet("1")}
    assert i.hostname(1) == "n1"
    assert (b & a).properties == {}
    assert a.intersection(ResourceSet(R([entry("0", "0-3")]))) == a.copy_ranks("0")
    assert (a & ResourceSet(R([entry("0", "4-7")]))).is_empty()
    # Union with a set without hostnames is fine when it adds no new ranks.
    assert (a | ResourceSet(R([entry("0", "5")]))).cores(0) == IDSet("0-3,5")


def test_union_hostname_conflicts() -> None:
    a = ResourceSet(R([entry("0", "0")], nodelist=["x"]))
    with pytest.raises(ValueError, match="rank 0 is 'x' in one set and 'y' in the other"):
        a | ResourceSet(R([entry("0", "1")], nodelist=["y"]))
    with pytest.raises(ValueError, match=r"rank\(s\) 1 have no hostname"):
        a | ResourceSet(R([entry("1", "1")]))
    with pytest.raises(ValueError, match=r"rank\(s\) 1 have no hostname"):
        ResourceSet(R([entry("1", "1")])) | a


def test_copy_ranks_and_subset() -> None:
    rs = ResourceSet(FOUR)
    rs.set_property("xx", "0-1")
    cp = rs.copy_ranks("1-2,9")
    assert str(cp) == "rank[1-2]/core[0-3],gpu0"
    assert cp.properties == {"xx": IDSet("1")}
    assert str(cp.hostlist) == "fluke[1-2]"
    assert rs.copy_ranks(IDSet("0,3")).ranks == IDSet("0,3")
    assert rs.copy_ranks([3]).ranks == IDSet("3")
    assert rs.copy_ranks("0-2147483647") == rs
    assert rs.copy_ranks("").is_empty()
    with pytest.raises(ValueError, match="copy_ranks"):
        rs.copy_ranks("x")
    with pytest.raises(ValueError, match="copy_ranks"):
        rs.copy_ranks([-1])
    assert cp.issubset(rs) and cp <= rs
    assert not rs.issubset(cp)
    assert ResourceSet().issubset(cp)
    partial = ResourceSet(R([entry("1", "0-4")]))
    assert not partial.issubset(rs)
    assert ResourceSet(R([entry("1", "1-2")])).issubset(rs)


def test_operands_must_be_resource_sets() -> None:
    rs = ResourceSet(FOUR)
    for op in ("union", "difference", "intersection", "issubset"):
        with pytest.raises(ValueError, match="expected a ResourceSet"):
            getattr(rs, op)("rank0/core0")
    with pytest.raises(TypeError):
        rs | 3  # type: ignore[operator]
    assert rs != FOUR


def test_copy_is_independent() -> None:
    rs = ResourceSet(FOUR)
    cp = rs.copy()
    assert cp == rs
    cp.add_rank(9, "0", hostname="z")
    cp.set_property("p", "0")
    assert rs.ranks == IDSet("0-3")
    assert rs.properties == {}
    assert rs != cp


def test_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(ResourceSet())


# --------------------------------------------------------------------------
# Properties (hypothesis)
# --------------------------------------------------------------------------

Model = dict[int, tuple[frozenset[int], frozenset[int]]]

small_ids = st.frozensets(st.integers(0, 9), max_size=6)


@st.composite
def models(draw: st.DrawFn, max_rank: int = 12) -> Model:
    ranks = draw(st.frozensets(st.integers(0, max_rank), max_size=8))
    out: Model = {}
    for r in sorted(ranks):
        cores = draw(small_ids)
        gpus = draw(small_ids)
        if cores or gpus:
            out[r] = (cores, gpus)
    return out


def build(model: Model, hosts: bool, props: dict[str, frozenset[int]] | None = None,
          times: tuple[int | None, int | None] = (None, None)) -> ResourceSet:
    """A ResourceSet with hostnames ``h<rank>`` (if *hosts*) and *props*."""
    return ResourceSet.from_ranks(
        {r: (IDSet(c), IDSet(g)) for r, (c, g) in model.items()},
        hostnames={r: f"h{r}" for r in model} if hosts else None,
        properties={k: IDSet(v & model.keys()) for k, v in (props or {}).items()},
        starttime=times[0], expiration=times[1])


def to_model(rs: ResourceSet) -> Model:
    return {r: (frozenset(rs.cores(r)), frozenset(rs.gpus(r))) for r in rs.ranks}


def model_op(a: Model, b: Model, op: str) -> Model:
    out: Model = {}
    for r in set(a) | set(b):
        ca, ga = a.get(r, (frozenset(), frozenset()))
        cb, gb = b.get(r, (frozenset(), frozenset()))
        if op == "|":
            c, g = ca | cb, ga | gb
        elif op == "-":
            c, g = ca - cb, ga - gb
        else:
            c, g = ca & cb, ga & gb
        if c or g:
            out[r] = (c, g)
    return out


prop_maps = st.dictionaries(st.sampled_from(["ssd", "gpu", "big@x", "日本"]),
                            st.frozensets(st.integers(0, 12)), max_size=3)
times = st.one_of(st.just((None, None)),
                  st.tuples(st.integers(0, 100), st.integers(100, 200)),
                  st.tuples(st.none(), st.floats(0, 1e9)))


@given(models(), st.booleans(), prop_maps, times)
def test_encode_decode_round_trip(model: Model, hosts: bool,
                                  props: dict[str, frozenset[int]],
                                  t: tuple[int | None, int | None]) -> None:
    rs = build(model, hosts, props, t)
    assert to_model(rs) == model
    assert ResourceSet(rs.encode()) == rs
    assert ResourceSet(rs.dumps()) == rs
    assert rs.ncores == sum(len(c) for c, _ in model.values())
    assert rs.ngpus == sum(len(g) for _, g in model.values())
    assert rs.nnodes == len(model)
    # The summary lists every rank exactly once.
    assert str(rs) == ResourceSet(rs.encode()).summary()


@given(models(), models(), st.booleans())
def test_set_operations_agree_with_python_sets(a: Model, b: Model, hosts: bool) -> None:
    ra, rb = build(a, hosts), build(b, hosts)
    assert to_model(ra | rb) == model_op(a, b, "|")
    assert to_model(ra - rb) == model_op(a, b, "-")
    assert to_model(ra & rb) == model_op(a, b, "&")
    assert to_model(ra.union(rb)) == to_model(rb.union(ra))
    assert ra.issubset(rb) == all(
        r in b and a[r][0] <= b[r][0] and a[r][1] <= b[r][1] for r in a)
    assert (ra & rb).issubset(ra) and ra.issubset(ra | rb)
    assert (ra - rb).is_empty() == ra.issubset(rb)
    for rs in (ra | rb, ra - rb, ra & rb):
        assert ResourceSet(rs.encode()) == rs
        if hosts:
            assert all(rs.hostname(r) == f"h{r}" for r in rs.ranks)


@given(models(), models(), st.booleans(), prop_maps, times)
def test_difference_and_intersection_rebuild_original(
        a: Model, b: Model, hosts: bool, props: dict[str, frozenset[int]],
        t: tuple[int | None, int | None]) -> None:
    ra = build(a, hosts, props, t)
    rb = build(b, hosts, {"ssd": frozenset(b)})
    assert (ra - rb) | (ra & rb) == ra
    assert (ra & rb) | (ra - rb) == ra


@given(models(), st.booleans(), st.frozensets(st.integers(0, 14)))
def test_copy_ranks_matches_model(model: Model, hosts: bool, ranks: frozenset[int]) -> None:
    rs = build(model, hosts, {"p": frozenset(range(0, 14, 2))})
    cp = rs.copy_ranks(IDSet(ranks))
    assert to_model(cp) == {r: v for r, v in model.items() if r in ranks}
    assert cp.properties.get("p", IDSet()) == IDSet(r for r in cp.ranks if r % 2 == 0)
    assert cp | rs.copy_ranks(IDSet(set(model) - ranks)) == rs


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.text(max_size=6) | st.sampled_from(["0", "0-3", "n[0-1]", "", "core", "gpu"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["version", "execution", "R_lite", "rank", "children",
                                       "core", "gpu", "nodelist", "properties", "starttime",
                                       "expiration", "x"]), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300)
@given(json_values)
def test_garbage_only_raises_value_error(doc: Any) -> None:
    for candidate in (doc, {"version": 1, "execution": doc},
                      {"version": 1, "execution": {"R_lite": doc}},
                      {"version": 1, "execution": {"R_lite": [doc]}},
                      {"version": 1, "execution": {"R_lite": [entry("0", "0")], "nodelist": doc,
                                                   "properties": doc}}):
        try:
            rs = ResourceSet(candidate)
        except ValueError:
            continue
        assert ResourceSet(rs.encode()) == rs


@given(st.binary(max_size=30) | st.text(max_size=30))
def test_garbage_text_only_raises_value_error(raw: bytes | str) -> None:
    with contextlib.suppress(ValueError):
        ResourceSet(raw)


def test_per_rank_gives_each_ranks_cores_and_gpus() -> None:
    rset = ResourceSet.from_ranks({0: ("0-1", None), 3: ("2", "0-1")})
    assert [(r, str(c), str(g)) for r, c, g in rset.per_rank()] == [
        (0, "0-1", ""), (3, "2", "0-1")]
