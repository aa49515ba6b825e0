"""Tests for fluxes.formats.constraints (RFC 31 job constraints)."""

from __future__ import annotations

import contextlib
import copy
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.formats.constraints import MAX_DEPTH, Constraint, and_properties, parse
from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

CASES = Path(__file__).resolve().parents[1] / "cases" / "constraints"


def load(path: Path) -> dict[str, Any]:
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


VALID = sorted((CASES / "valid").glob("*.json"))
INVALID = sorted((CASES / "invalid").glob("*.json"))


# --------------------------------------------------------------------------
# Brute-force reference: evaluate a constraint object on one rank
# --------------------------------------------------------------------------


def holds(c: dict[str, Any], rank: int, rs: ResourceSet) -> bool:
    """Does *rank* of *rs* satisfy constraint object *c* (read straight from the RFC)?

    As in flux-core, a rank's hostname counts as one of its properties.
    """
    if not c:
        return True
    ((op, values),) = c.items()
    if op == "properties":
        have = {name for name, ids in rs.properties.items() if rank in ids}
        if rs.hostname(rank) is not None:
            have.add(str(rs.hostname(rank)))
        return all((v[1:] not in have) if v.startswith("^") else (v in have) for v in values)
    if op == "hostlist":
        host = rs.hostname(rank)
        return host is not None and any(host in list(Hostlist(v)) for v in values)
    if op == "ranks":
        return any(rank in IDSet(str(v)) for v in values)
    results = [holds(child, rank, rs) for child in values]
    if op == "and":
        return all(results)
    if op == "or":
        return any(results) or not values
    assert op == "not"
    return not all(results)


def brute(c: dict[str, Any], rs: ResourceSet) -> IDSet:
    return IDSet(r for r in rs.ranks if holds(c, r, rs))


# --------------------------------------------------------------------------
# Spec case files
# --------------------------------------------------------------------------


def test_case_directories_are_populated() -> None:
    assert len(VALID) >= 20
    assert len(INVALID) >= 20


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_case(path: Path) -> None:
    case = load(path)
    rs = ResourceSet(case["R"])
    c = parse(case["constraint"])
    expected = IDSet(case["match"])
    assert c.match_ranks(rs) == expected
    assert brute(case["constraint"], rs) == expected
    # The same from JSON text, and after a trip through the normal form.
    assert parse(json.dumps(case["constraint"])) == c
    assert parse(c.to_dict()) == c
    assert parse(c.to_dict()).match_ranks(rs) == expected


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_case(path: Path) -> None:
    case = load(path)
    with pytest.raises(ValueError) as info:
        parse(json.dumps(case["constraint"]))
    message = str(info.value)
    assert case["error"] in message
    assert "\n" not in message
    if not isinstance(case["constraint"], str):  # a str would be read as JSON text
        with pytest.raises(ValueError) as info:
            parse(case["constraint"])
        assert case["error"] in str(info.value)


# --------------------------------------------------------------------------
# Every example in the RFC 31 text
# --------------------------------------------------------------------------

RSET = ResourceSet({
    "version": 1,
    "execution": {
        "R_lite": [{"rank": "0-3", "children": {"core": "0-1"}}],
        "nodelist": ["host[0-3]"],
        "properties": {"ssd": "0-1", "huge": "1-2", "slowgpu": "3", "foo": "0,2",
                       "bar": "2-3"},
    },
})

RFC31_EXAMPLES = [
    ({"not": [{"properties": ["foo", "bar"]}]}, "0-1,3", "![bar&foo]"),
    ({"or": [{"properties": ["foo"]}, {"properties": ["bar"]}]}, "0,2-3", "[foo]|[bar]"),
    ({"or": []}, "0-3", "all"),
    ({"and": []}, "0-3", "all"),
    ({"not": []}, "", "none"),
    ({"properties": ["ssd"]}, "0-1", "[ssd]"),
    ({"properties": ["^slowgpu"]}, "0-2", "[^slowgpu]"),
    ({"not": [{"properties": ["slowgpu"]}]}, "0-2", "![slowgpu]"),
    ({"or": [{"properties": ["ssd"]}, {"properties": ["huge"]}]}, "0-2", "[ssd]|[huge]"),
    ({"hostlist": ["host[0-1]"]}, "0-1", "hostlist=host[0-1]"),
    ({"not": [{"hostlist": ["host[0-1]"]}]}, "2-3", "!hostlist=host[0-1]"),
    ({"and": [{"hostlist": ["host[0-1]"]}, {"properties": ["ssd"]}]}, "0-1",
     "hostlist=host[0-1]&[ssd]"),
    ({"ranks": ["0"]}, "0", "ranks=0"),
]


# flux-core: a host's name is an implicit property of its rank.
HOSTNAME_PROPERTIES = [
    ({"properties": ["host2"]}, "2"),
    ({"properties": ["^host2"]}, "0-1,3"),
    ({"properties": ["host1", "ssd"]}, "1"),
    ({"properties": ["host2", "ssd"]}, ""),
    ({"properties": ["^host0", "ssd"]}, "1"),
    ({"or": [{"properties": ["host0"]}, {"properties": ["host3"]}]}, "0,3"),
    ({"not": [{"properties": ["host3"]}]}, "0-2"),
    ({"properties": ["host9"]}, ""),  # no such host
    ({"properties": ["host[0-1]"]}, ""),  # a property name, not a hostlist
    ({"properties": ["host02"]}, ""),  # names must match exactly
]


@pytest.mark.parametrize(("obj", "match"), HOSTNAME_PROPERTIES)
def test_hostnames_are_properties(obj: dict[str, Any], match: str) -> None:
    c = parse(obj)
    assert c.match_ranks(RSET) == IDSet(match)
    assert brute(obj, RSET) == IDSet(match)


def test_hostname_property_without_nodelist() -> None:
    rs = ResourceSet({"version": 1, "execution": {
        "R_lite": [{"rank": "0-1", "children": {"core": "0"}}]}})
    assert parse({"properties": ["host0"]}).match_ranks(rs) == IDSet()
    assert parse({"properties": ["^host0"]}).match_ranks(rs) == IDSet("0-1")


@pytest.mark.parametrize(("obj", "match", "text"), RFC31_EXAMPLES)
def test_rfc31_examples(obj: dict[str, Any], match: str, text: str) -> None:
    c = parse(obj)
    assert c.match_ranks(RSET) == IDSet(match)
    assert brute(obj, RSET) == IDSet(match)
    assert str(c) == text
    assert c.to_dict() == parse(c.to_dict()).to_dict()


# --------------------------------------------------------------------------
# Normal form, str, equality, hashing
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "text"), [
    ({"properties": ["gpu"]}, "[gpu]"),
    ({"properties": ["^login", "gpu"]}, "[gpu&^login]"),
    ({"properties": []}, "all"),
    ({"hostlist": ["node[0-3]"]}, "hostlist=node[0-3]"),
    ({"hostlist": ["node0", "node[1-3]"]}, "hostlist=node[0-3]"),
    ({"hostlist": []}, "hostlist="),
    ({"ranks": ["0-3", "5"]}, "ranks=0-3,5"),
    ({}, "all"),
    ({"and": [{"properties": ["gpu"]}]}, "[gpu]"),
    ({"and": [{"properties": ["gpu"]}, {"or": [{"ranks": ["0"]}, {"ranks": ["1"]}]}]},
     "[gpu]&(ranks=0|ranks=1)"),
    ({"or": [{"and": [{"ranks": ["0"]}, {"ranks": ["1"]}]}, {"properties": ["a"]}]},
     "(ranks=0&ranks=1)|[a]"),
    ({"not": [{"and": [{"properties": ["a"]}, {"properties": ["b"]}]}]}, "!([a]&[b])"),
    ({"not": [{"properties": ["a"]}, {"properties": ["b"]}]}, "!([a]&[b])"),
    ({"not": [{"not": [{"properties": ["a"]}]}]}, "!![a]"),
])
def test_str(obj: dict[str, Any], text: str) -> None:
    assert str(parse(obj)) == text


def test_normal_form_equality_and_hash() -> None:
    a = parse({"properties": ["b", "a", "^c", "a"]})
    b = parse({"properties": ["^c", "a", "b"]})
    assert a == b and hash(a) == hash(b)
    assert a.to_dict() == {"properties": ["a", "b", "^c"]}
    assert parse({"hostlist": ["n0,n1", "n2"]}) == parse({"hostlist": ["n[0-2]"]})
    assert parse({"ranks": ["0,1", "[2]"]}) == parse({"ranks": ["0-2"]})
    assert parse({"ranks": ["0,1", "[2]"]}).to_dict() == {"ranks": ["0-2"]}
    assert parse({"ranks": [""]}).to_dict() == {"ranks": []}
    assert parse({}) == parse({"and": []})
    assert parse({"and": []}) != parse({"or": []})
    assert parse({"ranks": ["0"]}) != parse({"hostlist": ["0"]})
    assert parse({"properties": ["a"]}) != parse({"properties": ["^a"]})
    cache = {parse({"properties": ["gpu"]}): 1}
    assert cache[parse('{"properties": ["gpu"]}')] == 1
    assert parse(a) is a
    assert a != {"properties": ["a", "b", "^c"]}
    assert repr(parse({"ranks": ["0"]})) == "Constraint({'ranks': ['0']})"


def test_immutable_and_copyable() -> None:
    c = parse({"and": [{"properties": ["gpu"]}, {"hostlist": ["n[0-3]"]}, {"ranks": ["1"]}]})
    with pytest.raises(AttributeError):
        c.op = "ranks"
    for clone in (copy.copy(c), copy.deepcopy(c), pickle.loads(pickle.dumps(c))):
        assert clone == c
        assert clone.match_ranks(RSET) == c.match_ranks(RSET)


def test_match_ranks_needs_resource_set() -> None:
    with pytest.raises(ValueError, match="expected a ResourceSet"):
        parse({}).match_ranks({"version": 1})  # type: ignore[arg-type]


def test_match_on_empty_set() -> None:
    objs: list[dict[str, Any]] = [{}, {"not": []}, {"properties": ["^x"]}, {"hostlist": ["a"]}]
    for obj in objs:
        assert parse(obj).match_ranks(ResourceSet()) == IDSet()


def test_large_hostlist_constraint_is_cheap() -> None:
    rs = ResourceSet({"version": 1, "execution": {
        "R_lite": [{"rank": "0-8191", "children": {"core": "0-63"}}],
        "nodelist": ["node[0-8191]"]}})
    c = parse({"hostlist": ["node[100-199,4000-1000000]"]})
    assert c.match_ranks(rs) == IDSet("100-199,4000-8191")
    c = parse({"not": [{"hostlist": ["node[0-9]"]}]})
    assert c.match_ranks(rs) == IDSet("10-8191")


# --------------------------------------------------------------------------
# Depth limit and hostile input
# --------------------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    obj: dict[str, Any] = {"properties": ["ssd"]}
    for _ in range(depth - 1):
        obj = {"or": [obj]}
    return obj


def test_depth_limit() -> None:
    assert parse(nested(MAX_DEPTH)).match_ranks(RSET) == IDSet("0-1")
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        parse(nested(MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="nested more than"):
        parse(json.dumps(nested(MAX_DEPTH + 1)))


def test_deep_error_paths_are_shortened() -> None:
    # Sixty levels written out would be a ~500-character path; the message
    # keeps the first and last levels, which still name the exact place.
    obj: dict[str, Any] = {"properties": ["ssd", 1]}
    for _ in range(60):
        obj = {"not": [obj]}
    with pytest.raises(ValueError) as info:
        parse(obj)
    assert str(info.value) == (
        "constraint.not[0].not[0]...not[0].not[0].not[0].properties[1]: "
        "property name must be a string, got int"
    )
    with pytest.raises(ValueError) as info:
        parse(nested(MAX_DEPTH + 1))
    message = str(info.value)
    assert message.startswith("constraint.or[0].or[0]...or[0].or[0].or[0].or[0]: ")
    assert message.endswith("constraints nested more than 64 levels deep")
    assert len(message) < 120
    # The omitted levels are the middle ones: the last index is kept exactly.
    mixed: dict[str, Any] = {"hostlist": ["n[1-"]}
    for i in range(20):
        mixed = {"and": [{}] * (i % 3) + [mixed]}
    with pytest.raises(ValueError) as info:
        parse(mixed)
    assert str(info.value).startswith("constraint.and[1].and[0]...and[2].and[1].and[0].hostlist[0]: ")


def test_shallow_error_paths_are_written_out() -> None:
    obj: dict[str, Any] = {"properties": [1]}
    for op in ("not", "or", "and", "or", "not", "and"):
        obj = {op: [{}, obj]}
    with pytest.raises(ValueError) as info:
        parse(obj)
    assert str(info.value).startswith(
        "constraint.and[1].not[1].or[1].and[1].or[1].not[1].properties[0]: "
    )


def test_very_deep_json_text() -> None:
    text = '{"and":[' * 5000 + "{}" + "]}" * 5000
    with pytest.raises(ValueError, match="constraint"):
        parse(text)


def test_cyclic_dict() -> None:
    obj: dict[str, Any] = {"and": []}
    obj["and"].append(obj)
    with pytest.raises(ValueError, match="nested more than"):
        parse(obj)


def test_invalid_json_text() -> None:
    for text in ("{", "", "nope", b"\xff"):
        with pytest.raises(ValueError, match="constraint: invalid JSON"):
            parse(text)
    with pytest.raises(ValueError, match="expected an object"):
        parse("[]")


def test_non_string_keys() -> None:
    with pytest.raises(ValueError, match="unknown operator 1"):
        parse({1: []})  # type: ignore[dict-item]


# --------------------------------------------------------------------------
# and_properties (RFC 33 queue "requires")
# --------------------------------------------------------------------------


def test_and_properties() -> None:
    assert and_properties(None, ["batch"]) == {"properties": ["batch"]}
    assert and_properties({}, ["batch"]) == {"properties": ["batch"]}
    assert and_properties(None, []) == {}
    assert and_properties({"ranks": ["0"]}, []) == {"ranks": ["0"]}
    # RFC 33: appended to an existing properties list.
    assert and_properties({"properties": ["ssd", "batch"]}, ["batch", "^debug"]) == {
        "properties": ["ssd", "batch", "^debug"]}
    assert and_properties({"and": [{"ranks": ["0"]}]}, ["batch"]) == {
        "and": [{"ranks": ["0"]}, {"properties": ["batch"]}]}
    orig = {"or": [{"properties": ["a"]}, {"properties": ["b"]}]}
    snapshot = copy.deepcopy(orig)
    combined = and_properties(orig, ["batch"])
    assert combined == {"and": [snapshot, {"properties": ["batch"]}]}
    assert orig == snapshot
    combined["and"][0]["or"].clear()
    assert orig == snapshot  # the result shares nothing with the input
    assert and_properties('{"ranks": ["0"]}', ["x"]) == {
        "and": [{"ranks": ["0"]}, {"properties": ["x"]}]}


@given(st.sampled_from([None, {}, {"properties": ["ssd"]}, {"not": [{"ranks": ["1"]}]},
                        {"and": [{"hostlist": ["host[2-3]"]}]},
                        {"or": [{"properties": ["huge"]}, {"ranks": ["3"]}]}]),
       st.lists(st.sampled_from(["ssd", "^huge", "foo", "^nosuch"]), max_size=3))
def test_and_properties_is_a_logical_and(base: dict[str, Any] | None, props: list[str]) -> None:
    combined = parse(and_properties(base, props)).match_ranks(RSET)
    expected = (parse(base or {}).match_ranks(RSET)
                & parse({"properties": props}).match_ranks(RSET))
    assert combined == expected


@pytest.mark.parametrize(("base", "props", "fragment"), [
    (None, "ssd", "props must be a list"),
    (None, [3], "and_properties: props[0]: property name must be a string"),
    (None, ["a&b"], "invalid character '&'"),
    ({"foo": []}, ["ssd"], "unknown operator 'foo'"),
    ([], ["ssd"], "expected an object"),
    ("{", ["ssd"], "invalid JSON"),
])
def test_and_properties_invalid(base: Any, props: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        and_properties(base, props)
    assert fragment in str(info.value)


# --------------------------------------------------------------------------
# Hypothesis: random trees against the brute-force evaluator
# --------------------------------------------------------------------------

PROPS = ["a", "b", "c"]

leaves: st.SearchStrategy[dict[str, Any]] = (
    st.builds(lambda v: {"properties": v},
              st.lists(st.sampled_from(["a", "b", "c", "^a", "^b", "^d", "h3", "^h2", "h[0-3]"]),
                       max_size=3))
    | st.builds(lambda v: {"hostlist": v},
                st.lists(st.sampled_from(["h[0-3]", "h5", "h[6-9]", "x", "", "h[2,11]"]),
                         max_size=2))
    | st.builds(lambda v: {"ranks": v},
                st.lists(st.sampled_from(["0-2", "4", "6-20", "", "[1,9]"]), max_size=2))
    | st.just({})
)

trees = st.recursive(
    leaves,
    lambda inner: st.builds(lambda op, v: {op: v}, st.sampled_from(["and", "or", "not"]),
                            st.lists(inner, max_size=3)),
    max_leaves=12,
)


@st.composite
def resource_sets(draw: st.DrawFn) -> ResourceSet:
    ranks = sorted(draw(st.frozensets(st.integers(0, 11), max_size=10)))
    hosts = draw(st.booleans())
    props = {p: IDSet(draw(st.frozensets(st.sampled_from(ranks)))) if ranks else IDSet()
             for p in PROPS}
    return ResourceSet.from_ranks({r: ("0", None) for r in ranks},
                                  hostnames={r: f"h{r}" for r in ranks} if hosts else None,
                                  properties=props)


@settings(max_examples=300)
@given(trees, resource_sets())
def test_match_agrees_with_brute_force(obj: dict[str, Any], rs: ResourceSet) -> None:
    c = parse(obj)
    assert c.match_ranks(rs) == brute(obj, rs)
    normal = parse(c.to_dict())
    assert normal == c and hash(normal) == hash(c)
    assert normal.match_ranks(rs) == brute(obj, rs)
    assert isinstance(str(c), str)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.text(max_size=5) | st.sampled_from(["ssd", "^ssd", "a&b", "h[0-3]", "0-3", "[", ""]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["properties", "hostlist", "ranks", "and", "or", "not",
                                       "x"]), inner, max_size=2),
    max_leaves=25,
)


@settings(max_examples=500)
@given(json_values)
def test_garbage_only_raises_value_error(obj: Any) -> None:
    try:
        c = parse(obj)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(c, Constraint)
    assert c.match_ranks(RSET) == brute(obj, RSET)
    assert parse(c.to_dict()) == c


@given(st.text(max_size=40) | st.binary(max_size=40))
def test_garbage_text_only_raises_value_error(text: str | bytes) -> None:
    with contextlib.suppress(ValueError):
        parse(text)
