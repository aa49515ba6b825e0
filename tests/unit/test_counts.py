"""Tests for fluxes.formats.counts (RFC 14 count values, RFC 45 range strings)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

from fluxes.formats.counts import MAX_COUNT, OPERATORS, Count
from fluxes.formats.idset import MAX_ID

SPEC_DATA = Path(__file__).resolve().parents[1] / "spec-data"


# -- brute-force reference -----------------------------------------------------


def reference_values(
    low: int, high: int | None, operator: str, operand: int, limit: int
) -> list[int]:
    """Accepted values <= limit, by applying the operator one step at a time."""
    top = limit if high is None else min(limit, high)
    out = []
    value = low
    while value <= top:
        out.append(value)
        if operator == "+":
            value += operand
        elif operator == "*":
            value *= operand
        else:
            value = value**operand
    return out


@st.composite
def range_params(draw: st.DrawFn) -> tuple[int, int | None, str, int]:
    """Valid (min, max, operator, operand) with small numbers."""
    operator = draw(st.sampled_from(OPERATORS))
    low = draw(st.integers(2 if operator == "^" else 1, 60))
    # Only '+' ranges may be unbounded.
    bounded = st.integers(low, low + 400)
    high = draw(st.none() | bounded if operator == "+" else bounded)
    operand = draw(st.integers(1 if operator == "+" else 2, 7))
    return low, high, operator, operand


small_sets = st.sets(st.integers(1, 300), min_size=1, max_size=40)


def idset_text(values: set[int]) -> str:
    """The plain comma list of values (a valid, unranged RFC 22 idset)."""
    return ",".join(str(v) for v in sorted(values))


# -- decoding each form --------------------------------------------------------


def test_integer() -> None:
    count = Count.decode(4)
    assert (count.min, count.max, count.operator, count.operand) == (4, 4, "+", 1)
    assert count.is_fixed
    assert list(count) == [4]
    assert count.encode() == "4"
    assert count.to_json() == 4


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("4", [4]),
        ("[4]", [4]),
        ("1-4", [1, 2, 3, 4]),
        ("[1-4]", [1, 2, 3, 4]),
        ("1,3,5-7", [1, 3, 5, 6, 7]),
        ("[1,3,5-7]", [1, 3, 5, 6, 7]),
        ("2,4,6", [2, 4, 6]),
        ("1-3,4-5", [1, 2, 3, 4, 5]),
    ],
)
def test_idset_strings(text: str, values: list[int]) -> None:
    count = Count.decode(text)
    assert list(count) == values
    assert count.min == values[0]
    assert count.max == values[-1]


def test_idset_that_is_not_a_progression_keeps_its_values() -> None:
    count = Count.decode("1,3,5-7")
    assert count.operator is None
    assert count.operand is None
    assert count.runs == ((1, 1), (3, 3), (5, 7))
    assert count.encode() == "1,3,5-7"
    assert count.to_json() == "1,3,5-7"
    assert count.largest_at_most(4) == 3
    assert 4 not in count
    assert 6 in count


def test_idset_progressions_become_ranges() -> None:
    assert Count.decode("2,4,6") == Count(2, 6, "+", 2)
    assert Count.decode("1-4") == Count(1, 4)
    assert Count.decode("[7]") == Count.decode(7)
    assert Count.decode("2,4,6").encode() == "2-6:2"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The examples given in RFC 45 itself.
        ("1-5:2:+", Count(1, 5, "+", 2)),
        ("1-5:2", Count(1, 5, "+", 2)),
        ("1-4:1:+", Count(1, 4)),
        ("1-4", Count(1, 4)),
        ("[1-4:2:*]", Count(1, 4, "*", 2)),
        ("[100+]", Count(100, None)),
        # Further forms of the grammar.
        ("100+", Count(100, None)),
        ("2+:2", Count(2, None, "+", 2)),
        ("2-8:2:*", Count(2, 8, "*", 2)),
        ("2-256:2:^", Count(2, 256, "^", 2)),
        ("1+:1:+", Count(1, None)),
    ],
)
def test_rfc45_ranges(text: str, expected: Count) -> None:
    assert Count.decode(text) == expected


def test_rfc45_values() -> None:
    assert list(Count.decode("1-5:2")) == [1, 3, 5]
    assert list(Count.decode("[1-4:2:*]")) == [1, 2, 4]
    assert list(Count.decode("2-8:2:*")) == [2, 4, 8]
    assert list(Count.decode("2-300:2:^")) == [2, 4, 16, 256]
    assert list(Count.decode("3-100:3:^")) == [3, 27]


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        ({"min": 3, "max": 30, "operator": "+", "operand": 1}, Count(3, 30)),
        ({"min": 2}, Count(2, None)),
        ({"min": 4, "max": 6}, Count(4, 6)),
        ({"min": 2, "max": 64, "operator": "*", "operand": 2}, Count(2, 64, "*", 2)),
        ({"min": 5, "max": 5}, Count(5, 5)),
        # flux-core's count_create(): operator and operand default one by one
        ({"min": 2, "max": 5, "operand": 3}, Count(2, 5, "+", 3)),
        ({"min": 1, "max": 3, "operand": 2}, Count(1, 3, "+", 2)),
        ({"min": 1, "max": 4, "operator": "+"}, Count(1, 4)),
        ({"min": 2, "operand": 3}, Count(2, None, "+", 3)),
    ],
)
def test_mapping(mapping: dict[str, Any], expected: Count) -> None:
    assert Count.decode(mapping) == expected


def test_count_passes_through() -> None:
    count = Count(1, 8, "*", 2)
    assert Count.decode(count) is count


def test_fixed_counts_are_normalised() -> None:
    count = Count.decode({"min": 3, "max": 3, "operator": "*", "operand": 2})
    assert (count.operator, count.operand) == ("+", 1)
    assert count == Count.decode(3) == Count.decode("3-3:2:*")


def test_equal_forms_are_equal_and_hash_alike() -> None:
    forms = [Count.decode("1-4"), Count.decode("[1-4]"), Count.decode({"min": 1, "max": 4})]
    forms.append(Count.decode("1,2,3,4"))
    forms.append(Count.decode("1-4:1:+"))
    assert all(c == forms[0] for c in forms)
    assert len(set(forms)) == 1


def test_immutable() -> None:
    count = Count.decode(4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        count.min = 5  # type: ignore[misc]


def test_repr_is_evaluable() -> None:
    count = Count.decode("1,3,5-7")
    assert repr(count) == "Count.decode('1,3,5-7')"
    assert eval(repr(count)) == count
    assert str(Count(2, None, "+", 2)) == "2+:2"


# -- the RFC rules ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, r"count \(0\) must be >= 1"),
        (-3, r"count \(-3\) must be >= 1"),
        (MAX_COUNT + 1, "exceeds the maximum count"),
        ({"min": 0}, r"min \(0\) must be >= 1"),
        ({"min": 4, "max": 2, "operator": "+", "operand": 1}, r"max \(2\) is less than min \(4\)"),
        ({"min": 4, "max": 0}, r"max \(0\) must be >= 1"),
        ({"min": 1, "max": 4, "operator": "/", "operand": 2}, "operator '/' is not one of"),
        ({"min": 1, "max": 4, "operator": "**", "operand": 2}, "operator '\\*\\*' is not one"),
        ({"min": 1, "max": 4, "operator": "", "operand": 2}, "operator '' is not one of"),
        ({"min": 1, "max": 4, "operator": "+", "operand": 0}, r"operand \(0\) must be >= 1"),
        ({"min": 1, "max": 4, "operator": "*", "operand": 1}, r"operand \(1\) must be >= 2 for"),
        ({"min": 2, "max": 4, "operator": "^", "operand": 1}, r"operand \(1\) must be >= 2 for"),
        (
            {"min": 1, "max": 4, "operator": "^", "operand": 2},
            r"min \(1\) must be >= 2 for operator '\^'",
        ),
        ({"min": 2, "max": 4, "operator": "*"}, r"operand \(1\) must be >= 2 for operator '\*'"),
        ({"min": 2, "operator": "^"}, r"operand \(1\) must be >= 2 for operator '\^'"),
        ({"max": 4}, "missing required key 'min'"),
        ({}, "missing required key 'min'"),
        ({"min": 1, "step": 2}, "unknown key 'step'"),
        ({"min": 1, 5: 2}, "unknown key of type int"),
        ({"min": "1"}, "min must be an integer, not str"),
        ({"min": 1.0}, "min must be an integer, not float"),
        ({"min": True}, "min must be an integer, not bool"),
        ({"min": 1, "max": None}, "max must be an integer, not NoneType"),
        ({"min": 1, "max": 4, "operator": 1, "operand": 2}, "operator must be a string"),
        ({"min": 1, "max": 4, "operator": "+", "operand": 2.0}, "operand must be an integer"),
        ("2-1", "descending"),
        ("4-2:1:+", r"max \(2\) is less than min \(4\)"),
        ("1-8:1:*", r"operand \(1\) must be >= 2 for operator '\*'"),
        ("1-8:2:^", r"min \(1\) must be >= 2 for operator '\^'"),
        ("2+:2:*", "an unbounded range with operator '\\*' has no end"),
        ("[2+:3:^]", "an unbounded range with operator '\\^' has no end"),
        ({"min": 3, "operator": "*", "operand": 4}, "unbounded range with operator '\\*'"),
        ({"min": 2, "operator": "^", "operand": 2}, "unbounded range with operator '\\^'"),
        ("2-8:2:/", "operator '/' is not one of"),
        ("2-8:2:**", "operator '\\*\\*' is not one of"),
        ("0-4:2", r"min \(0\) must be >= 1"),
        ("0+", r"min \(0\) must be >= 1"),
        ("2-8:0", r"operand \(0\) must be >= 1"),
        ("02-8:2", "leading zero"),
        ("2-08:2", "leading zero"),
        ("2+:02", "leading zero"),
        ("1-99999999999:2", r"max \(99999999999\) exceeds the maximum count"),
        ("1-" + "9" * 5000 + ":2", "exceeds the maximum count"),
        ("0", "counts start at 1"),
        ("0-3", "counts start at 1"),
        ("[]", "the idset is empty"),
        ("", "count string is empty"),
        ("[1-4", "unmatched bracket"),
        ("1-4]", "unmatched bracket"),
        ("[", "unmatched bracket"),
        ("[[1-4]]", "brackets may only surround"),
        ("1-[4]", "unmatched bracket"),
        ("[1-[4]", "brackets may only surround"),
        ("4:2", "expected min-max"),
        ("1-4:", "expected min-max"),
        ("1-4::*", "expected min-max"),
        ("+", "expected min-max"),
        ("1++", "expected min-max"),
        ("1+-4", "expected min-max"),
        ("1-4+", "expected min-max"),
        ("1-4:2:*:3", "operator '\\*:3' is not one of"),
        ("1,3+", "expected min-max"),
        (" 4", "whitespace"),
        ("4 ", "whitespace"),
        ("a", "invalid character"),
        ("1-", "has no end"),
        ("3,1", "ascending order"),
        (True, "not bool"),
        (False, "not bool"),
        (4.0, "not float"),
        (None, "not NoneType"),
        ([1, 2], "not list"),
        (b"4", "not bytes"),
    ],
)
def test_invalid(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Count.decode(value)


def test_constructor_checks_rules() -> None:
    with pytest.raises(ValueError, match=r"max \(2\) is less than min \(4\)"):
        Count(4, 2)
    with pytest.raises(ValueError, match="operator must be a string, not NoneType"):
        Count(1, 4, None, None)
    with pytest.raises(ValueError, match=r"min \(1\) must be >= 2 for operator '\^'"):
        Count(1, None, "^", 2)


def test_messages_are_one_line_and_short() -> None:
    for bad in ["1-" + "9\n" * 500, "[" * 300, "2-8:2:" + "x\n" * 300, {"min": 10**5000}]:
        with pytest.raises(ValueError) as info:
            Count.decode(bad)
        assert "\n" not in str(info.value)
        assert len(str(info.value)) < 200


# -- queries --------------------------------------------------------------------


def test_unbounded_iteration_stops_at_max_count() -> None:
    # As flux-core's count_first/count_next: an unbounded count runs up to
    # the largest count, lazily.
    count = Count.decode("2+")
    values = iter(count)
    assert [next(values) for _ in range(4)] == [2, 3, 4, 5]
    assert list(count.values(5)) == [2, 3, 4, 5]
    assert not count.is_bounded
    assert count.largest_at_most(10**30) == 10**30
    assert list(Count.decode("2+:2").values(6)) == [2, 4, 6]
    assert list(Count.decode(f"{MAX_COUNT - 4}+:2")) == [MAX_COUNT - 4, MAX_COUNT - 2, MAX_COUNT]
    assert list(Count.decode(f"{MAX_COUNT - 2}+:2")) == [MAX_COUNT - 2, MAX_COUNT]


@pytest.mark.parametrize(
    ("value", "values"),
    [
        # flux-core's count iteration vectors
        (1, [1]),
        ("13", [13]),
        ("5,7,13", [5, 7, 13]),
        ({"min": 4, "max": 6}, [4, 5, 6]),
        ({"min": 4, "max": 6, "operand": 1, "operator": "+"}, [4, 5, 6]),
        ({"min": 1, "max": 3, "operand": 2}, [1, 3]),
        ({"min": 1, "max": 3, "operand": 2, "operator": "+"}, [1, 3]),
        ({"min": 2, "max": 16, "operand": 2, "operator": "*"}, [2, 4, 8, 16]),
        ({"min": 2, "max": 16, "operand": 2, "operator": "^"}, [2, 4, 16]),
        # values stop at the last one not above max
        ("1-10:4", [1, 5, 9]),
        ("3-47:2:*", [3, 6, 12, 24]),
        ("2-255:2:^", [2, 4, 16]),
    ],
)
def test_iteration(value: object, values: list[int]) -> None:
    assert list(Count.decode(value)) == values


def test_values_limit() -> None:
    assert list(Count.decode("1-10").values(4)) == [1, 2, 3, 4]
    assert list(Count.decode("1-10").values(0)) == []
    assert list(Count.decode("1-3").values(100)) == [1, 2, 3]
    assert list(Count.decode("1,3,5-7").values(5)) == [1, 3, 5]
    with pytest.raises(ValueError, match="limit must be an integer"):
        Count.decode(4).values(4.5)  # type: ignore[arg-type]


def test_largest_at_most_basics() -> None:
    count = Count.decode("2-8:2:*")
    assert count.largest_at_most(1) is None
    assert count.largest_at_most(-5) is None
    assert count.largest_at_most(2) == 2
    assert count.largest_at_most(7) == 4
    assert count.largest_at_most(100) == 8
    with pytest.raises(ValueError, match="needs an integer"):
        count.largest_at_most(3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs an integer"):
        count.largest_at_most(True)


def test_contains_non_integers() -> None:
    count = Count.decode("1-4")
    assert 2 in count
    assert True not in count
    assert 2.0 not in count
    assert "2" not in count
    assert None not in count


def test_huge_power_operand_does_not_hang() -> None:
    count = Count.decode(f"2-{MAX_COUNT}:{MAX_COUNT}:^")
    assert list(count) == [2]
    assert count.largest_at_most(10**100) == 2
    assert 4 not in count
    assert Count.decode(f"2-{MAX_COUNT}:{MAX_COUNT}:^").largest_at_most(10**1000) == 2


def test_huge_ranges_stay_cheap() -> None:
    count = Count.decode(f"1-{MAX_COUNT}")
    assert count.largest_at_most(10**12) == MAX_COUNT
    assert MAX_COUNT - 1 in count
    assert next(iter(count)) == 1
    sparse = Count.decode(f"1-{MAX_ID - 5},{MAX_ID}")
    assert sparse.runs is not None
    assert sparse.largest_at_most(MAX_ID - 1) == MAX_ID - 5
    assert MAX_ID in sparse


def test_counts_beyond_the_idset_limit() -> None:
    # Idsets stop at MAX_ID (2**31 - 1), counts at MAX_COUNT (2**32 - 2): a
    # lone number or run above MAX_ID is read as a range, as flux-core does.
    assert MAX_ID == 2**31 - 1 and MAX_COUNT == 2**32 - 2
    assert Count.decode(f"{MAX_ID + 1}") == Count(MAX_ID + 1, MAX_ID + 1)
    assert Count.decode(f"1-{MAX_COUNT}") == Count(1, MAX_COUNT)
    assert Count.decode(f"[2-{MAX_ID + 1}]") == Count(2, MAX_ID + 1)
    assert Count.decode(MAX_COUNT) == Count(MAX_COUNT, MAX_COUNT)
    with pytest.raises(ValueError, match="out of range"):
        Count.decode(f"1,{MAX_ID + 1}")
    with pytest.raises(ValueError, match=r"max \(4294967295\) exceeds the maximum count"):
        Count.decode("1-4294967295")


@given(range_params(), st.integers(0, 2000))
def test_range_values_match_reference(params: tuple[int, int | None, str, int], limit: int) -> None:
    low, high, operator, operand = params
    count = Count(low, high, operator, operand)
    expected = reference_values(low, high, operator, operand, limit)
    assert list(count.values(limit)) == expected
    if high is not None:
        assert list(count) == reference_values(low, high, operator, operand, high)


@given(range_params(), st.integers(-5, 3000))
def test_range_largest_at_most_matches_reference(
    params: tuple[int, int | None, str, int], n: int
) -> None:
    count = Count(*params)
    accepted = reference_values(*params, limit=n)
    assert count.largest_at_most(n) == (accepted[-1] if accepted else None)


@given(range_params(), st.integers(-5, 3000))
def test_range_contains_matches_reference(params: tuple[int, int | None, str, int], n: int) -> None:
    count = Count(*params)
    assert (n in count) == (n in reference_values(*params, limit=max(n, 0)))


@given(small_sets, st.integers(-5, 400))
def test_set_queries_match_reference(values: set[int], n: int) -> None:
    count = Count.decode(idset_text(values))
    ordered = sorted(values)
    assert list(count) == ordered
    assert (n in count) == (n in values)
    below = [v for v in ordered if v <= n]
    assert count.largest_at_most(n) == (below[-1] if below else None)
    assert list(count.values(n)) == below
    assert count.min == ordered[0]
    assert count.max == ordered[-1]
    assert count.is_fixed == (len(values) == 1)


@given(range_params())
def test_range_encode_round_trip(params: tuple[int, int | None, str, int]) -> None:
    count = Count(*params)
    text = count.encode()
    assert Count.decode(text) == count
    assert Count.decode(f"[{text}]") == count
    assert Count.decode(count.to_json()) == count
    assert eval(repr(count)) == count


@given(small_sets)
def test_set_encode_round_trip(values: set[int]) -> None:
    count = Count.decode(idset_text(values))
    assert Count.decode(count.encode()) == count
    assert list(Count.decode(count.encode())) == sorted(values)


@given(range_params())
def test_mapping_matches_string(params: tuple[int, int | None, str, int]) -> None:
    low, high, operator, operand = params
    mapping: dict[str, object] = {"min": low, "operator": operator, "operand": operand}
    if high is not None:
        mapping["max"] = high
    assert Count.decode(mapping) == Count(low, high, operator, operand)


# -- garbage ----------------------------------------------------------------------


@given(st.text(max_size=30))
def test_garbage_text_only_raises_value_error(text: str) -> None:
    try:
        count = Count.decode(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert count.min >= 1


@given(st.text(alphabet="0123456789-+:*^[],", max_size=25))
def test_range_like_garbage_only_raises_value_error(text: str) -> None:
    try:
        count = Count.decode(text)
    except ValueError:
        return
    assert Count.decode(count.encode()) == count


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["min", "max", "operator", "operand", "x"]), inner, max_size=4
        )
    ),
    max_leaves=8,
)


@given(json_values)
def test_garbage_values_only_raise_value_error(value: object) -> None:
    with contextlib.suppress(ValueError):
        Count.decode(value)


@given(
    st.fixed_dictionaries(
        {"min": st.integers(-2, 6)},
        optional={
            "max": st.integers(-2, 12),
            "operator": st.sampled_from(["+", "*", "^", "-", ""]),
            "operand": st.integers(-1, 4),
        },
    )
)
def test_mapping_rules(mapping: dict[str, Any]) -> None:
    low = mapping["min"]
    high = mapping.get("max")
    operator = mapping.get("operator", "+")
    operand = mapping.get("operand", 1)
    valid = (
        low >= 1
        and (high is None or high >= low)
        and (high is not None or operator not in ("*", "^"))
        and operator in OPERATORS
        and operand >= 1
        and (operator == "+" or operand >= 2)
        and (operator != "^" or low >= 2)
    )
    try:
        count = Count.decode(mapping)
    except ValueError:
        assert not valid
    else:
        assert valid
        assert count.min == low
        assert count.max == high


# -- the RFC 14 data files --------------------------------------------------------


def _resource_counts(vertices: list[dict[str, Any]]) -> Iterator[object]:
    """Every ``count`` in a resources tree."""
    for vertex in vertices:
        yield vertex["count"]
        yield from _resource_counts(vertex.get("with", []))


SPEC_FILES = sorted((SPEC_DATA / "rfc14").glob("*.yaml")) + sorted(
    (SPEC_DATA / "rfc25").glob("*.yaml")
)


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_spec_data_counts_decode(path: Path) -> None:
    jobspec = yaml.safe_load(path.read_text())
    counts = list(_resource_counts(jobspec["resources"]))
    assert counts
    for value in counts:
        count = Count.decode(value)
        assert count.min >= 1


def test_use_case_1_2_range() -> None:
    jobspec = yaml.safe_load((SPEC_DATA / "rfc14" / "use_case_1.2.yaml").read_text())
    count = Count.decode(jobspec["resources"][0]["count"])
    assert count == Count(3, 30)
    assert count.largest_at_most(100) == 30
    assert count.largest_at_most(17) == 17
    assert count.largest_at_most(2) is None


@given(st.integers(1, 50), st.integers(0, 50))
def test_min_only_takes_everything_available(low: int, extra: int) -> None:
    assume(low + extra <= MAX_COUNT)
    count = Count.decode({"min": low})
    assert count.largest_at_most(low + extra) == low + extra
