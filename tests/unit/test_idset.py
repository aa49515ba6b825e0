"""Tests for fluxes.formats.idset (RFC 22 idset strings and the IDSet class)."""

from __future__ import annotations

import copy
import itertools
import pickle
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fluxes.formats.idset as idset_module
from fluxes.formats.idset import MAX_ID, IDSet

# --------------------------------------------------------------------------
# Decoding: what RFC 22 allows
# --------------------------------------------------------------------------

# (input, expected members as ranges) -- includes every example in RFC 22.
VALID = [
    # RFC 22 examples
    ("1,2,3,5,6,42", [(1, 3), (5, 6), (42, 42)]),
    ("1-3,5-6,42", [(1, 3), (5, 6), (42, 42)]),
    ("[1-3,5-6,42]", [(1, 3), (5, 6), (42, 42)]),
    # the forms named in our brief
    ("0-3,7", [(0, 3), (7, 7)]),
    ("[0-3,7]", [(0, 3), (7, 7)]),
    ("2", [(2, 2)]),
    ("", []),
    # brackets around anything that is itself an idset string
    ("[2]", [(2, 2)]),
    ("[]", []),
    ("[0,1]", [(0, 1)]),
    # zero is an id, and "0" has no leading zero
    ("0", [(0, 0)]),
    ("0-0", [(0, 0)]),
    ("0,10,100", [(0, 0), (10, 10), (100, 100)]),
    # compression is optional: any mix of singles and ranges, adjacent or not
    ("1-3,4-5", [(1, 5)]),
    ("1,2-3,4", [(1, 4)]),
    ("3-3", [(3, 3)]),
    ("7-9", [(7, 9)]),
    ("1,7-9,14,16", [(1, 1), (7, 9), (14, 14), (16, 16)]),
    # the largest id we accept
    (str(MAX_ID), [(MAX_ID, MAX_ID)]),
    (f"0-{MAX_ID}", [(0, MAX_ID)]),
    ("1048576", [(1048576, 1048576)]),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_decode_valid(text: str, expected: list[tuple[int, int]]) -> None:
    x = IDSet(text)
    assert list(x.ranges()) == expected
    assert len(x) == sum(hi - lo + 1 for lo, hi in expected)


# (input, a fragment the error message must contain)
INVALID = [
    # brackets: only as one pair around the whole string
    ("[1", "unmatched '['"),
    ("[", "unmatched '['"),
    ("1]", "unmatched ']'"),
    ("]", "unmatched ']'"),
    ("[[1]]", "bracket"),
    ("[1]]", "bracket"),
    ("1,[2]", "bracket"),
    ("[1],2", "bracket"),
    ("][", "bracket"),
    # whitespace and other characters are not in the RFC 22 alphabet
    (" 1", "whitespace"),
    ("1 ", "whitespace"),
    ("1, 2", "whitespace"),
    ("1\n", "whitespace"),
    ("\t", "whitespace"),
    ("a", "invalid character"),
    ("1;2", "invalid character"),
    ("+1", "invalid character"),
    ("1.5", "invalid character"),
    ("0x10", "invalid character"),
    ("1e3", "invalid character"),
    ("١", "invalid character"),  # an Arabic-Indic digit: decimal means ASCII 0-9
    ("１", "invalid character"),  # a full-width digit
    # empty elements
    (",", "empty element"),
    (",1", "empty element"),
    ("1,", "empty element"),
    ("1,,2", "empty element"),
    ("[1,]", "empty element"),
    # negative ids and malformed ranges
    ("-1", "no start"),
    ("-", "no start"),
    ("1,-3", "no start"),
    ("1-", "no end"),
    ("1-2-3", "more than one '-'"),
    ("1--2", "more than one '-'"),
    # leading zeros
    ("01", "leading zero"),
    ("00", "leading zero"),
    ("1-05", "leading zero"),
    ("[007]", "leading zero"),
    # ordering and uniqueness
    ("3,2", "ascending order"),
    ("3,2,4,5", "ascending order"),
    ("5-7,1", "ascending order"),
    ("9-7", "descending"),
    ("[9-7]", "descending"),
    ("2,2", "repeats"),
    ("1-5,3", "repeats"),
    ("1-5,5-7", "repeats"),
    ("1-3,2-4", "repeats"),
    # too large
    (str(MAX_ID + 1), "out of range"),
    (f"0-{MAX_ID + 1}", "out of range"),
    ("99999999999999999999", "out of range"),
    ("1" * 5000, "out of range"),
    # flux-core's idsets hold no id at or past 2**31
    ("2147483648", "id 2147483648 is out of range 0-2147483647"),
    ("0-2147483648", "id 2147483648 is out of range"),
    ("1,2147483648", "id 2147483648 is out of range"),
    ("[5,4294967294]", "id 4294967294 is out of range"),
]


@pytest.mark.parametrize(("text", "fragment"), INVALID)
def test_decode_invalid(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        IDSet(text)
    assert "\n" not in str(info.value)


def test_error_message_is_short_for_huge_input() -> None:
    with pytest.raises(ValueError) as info:
        IDSet("0-9," * 100000 + "x")
    assert len(str(info.value)) < 200


# --------------------------------------------------------------------------
# A reference decoder, written as plainly as possible, for property tests
# --------------------------------------------------------------------------


def reference_decode(text: str) -> list[tuple[int, int]] | None:
    """RFC 22 decoded naively: sorted maximal runs, or None when invalid."""
    if len(text) >= 2 and text[0] == "[" and text[-1] == "]":
        text = text[1:-1]
    if text == "":
        return []
    runs: list[tuple[int, int]] = []
    last = -1
    for element in text.split(","):
        parts = element.split("-")
        if len(parts) > 2:
            return None
        numbers = []
        for part in parts:
            if part == "" or any(c not in "0123456789" for c in part):
                return None
            if len(part) > 1 and part[0] == "0":
                return None
            numbers.append(int(part))
        lo, hi = numbers[0], numbers[-1]
        if lo > hi or hi > MAX_ID or lo <= last:
            return None
        if runs and lo == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))
        last = hi
    return runs


def try_decode(text: str) -> list[tuple[int, int]] | None:
    try:
        return list(IDSet(text).ranges())
    except ValueError:
        return None


@given(st.text())
def test_garbage_text_only_raises_value_error(text: str) -> None:
    assert try_decode(text) == reference_decode(text)


@given(st.text(alphabet="0123456789,-[] ", max_size=30))
def test_near_miss_text_matches_reference(text: str) -> None:
    assert try_decode(text) == reference_decode(text)


@given(st.lists(st.sampled_from(["0", "1", "2", "10", "01", "-", ",", "[", "]", "5-9",
                                 "12", "4294967294", "4294967295", "3-1"]), max_size=8))
def test_token_soup_matches_reference(tokens: list[str]) -> None:
    text = "".join(tokens)
    assert try_decode(text) == reference_decode(text)


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------

ENCODE = [
    # (input, ranges=True, ranges=True+brackets, ranges=False, ranges=False+brackets)
    ("", "", "", "", ""),
    ("2", "2", "2", "2", "2"),
    ("[2]", "2", "2", "2", "2"),
    ("1,2", "1-2", "[1-2]", "1,2", "[1,2]"),
    ("0-3,7", "0-3,7", "[0-3,7]", "0,1,2,3,7", "[0,1,2,3,7]"),
    ("7-9", "7-9", "[7-9]", "7,8,9", "[7,8,9]"),
    ("1,7-9,16", "1,7-9,16", "[1,7-9,16]", "1,7,8,9,16", "[1,7,8,9,16]"),
    ("1,2,3,5,6,42", "1-3,5-6,42", "[1-3,5-6,42]", "1,2,3,5,6,42", "[1,2,3,5,6,42]"),
    ("1-3,4-5", "1-5", "[1-5]", "1,2,3,4,5", "[1,2,3,4,5]"),
]


@pytest.mark.parametrize(("text", "rng", "rng_br", "flat", "flat_br"), ENCODE)
def test_encode(text: str, rng: str, rng_br: str, flat: str, flat_br: str) -> None:
    x = IDSet(text)
    assert x.encode() == rng
    assert x.encode(ranges=True, brackets=True) == rng_br
    assert x.encode(ranges=False) == flat
    assert x.encode(ranges=False, brackets=True) == flat_br
    assert str(x) == x.encode()
    assert repr(x) == f"IDSet({rng!r})"


# --------------------------------------------------------------------------
# Construction from Python values
# --------------------------------------------------------------------------


def test_construct_from_iterables() -> None:
    assert IDSet() == IDSet("")
    assert IDSet([1, 2, 3]) == IDSet("1-3")
    assert IDSet([3, 1, 2, 2, 7]) == IDSet("1-3,7")
    assert IDSet({0, 5}) == IDSet("0,5")
    assert IDSet(range(10, 20)) == IDSet("10-19")
    assert IDSet(n for n in (4, 4, 4)) == IDSet("4")
    assert IDSet([]) == IDSet()
    assert IDSet([MAX_ID]).last() == MAX_ID


def test_construct_from_idset_copies() -> None:
    a = IDSet("1-3")
    b = IDSet(a)
    assert a == b
    b.add(9)
    assert a == IDSet("1-3")
    c = a.copy()
    c.discard(2)
    assert a == IDSet("1-3")
    assert c == IDSet("1,3")


@pytest.mark.parametrize(
    "value",
    [[-1], [MAX_ID + 1], [1.0], ["1"], [True], [None], 5, 1.5, None, b"12", bytearray(b"1"),
     object()],
)
def test_construct_rejects_bad_values(value: object) -> None:
    with pytest.raises(ValueError):
        IDSet(value)  # type: ignore[arg-type]


def test_from_range() -> None:
    assert IDSet.from_range(0, 3) == IDSet("0-3")
    assert IDSet.from_range(5, 5) == IDSet("5")
    assert len(IDSet.from_range(0, MAX_ID)) == MAX_ID + 1
    with pytest.raises(ValueError, match="greater than"):
        IDSet.from_range(5, 3)
    with pytest.raises(ValueError, match="negative"):
        IDSet.from_range(-1, 3)
    with pytest.raises(ValueError, match="out of range"):
        IDSet.from_range(0, MAX_ID + 1)
    with pytest.raises(ValueError):
        IDSet.from_range("0", 3)  # type: ignore[arg-type]


def test_ids_at_or_past_2_31_are_refused_everywhere() -> None:
    # flux-core's IDSET limit: its universe size is a C unsigned int.
    assert MAX_ID == 2**31 - 1
    assert IDSet(str(2**31 - 1)).last() == 2**31 - 1
    assert IDSet([2**31 - 1]) == IDSet.from_range(2**31 - 1, 2**31 - 1)
    too_big = 2**31
    calls = [
        lambda: IDSet(str(too_big)),
        lambda: IDSet(f"[0-{too_big}]"),
        lambda: IDSet([0, too_big]),
        lambda: IDSet(iter([too_big])),
        lambda: IDSet.from_range(0, too_big),
        lambda: IDSet.from_range(too_big, too_big),
        lambda: IDSet.from_ranges([(0, 1), (5, too_big)]),
        lambda: IDSet("1").add(too_big),
        lambda: IDSet("1").discard(too_big),
        lambda: IDSet("1").update([too_big]),
        lambda: IDSet("1") | [too_big],
        lambda: IDSet("1").union(str(too_big)),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"{too_big} is out of range 0-{MAX_ID}"):
            call()
    assert too_big not in IDSet(f"0-{MAX_ID}")


def test_from_ranges() -> None:
    assert IDSet.from_ranges([(0, 3), (7, 7)]) == IDSet("0-3,7")
    assert IDSet.from_ranges([(7, 7), (0, 3), (2, 5), (6, 6)]) == IDSet("0-7")
    assert IDSet.from_ranges([]) == IDSet()
    assert IDSet.from_ranges(iter([[1, 2]])) == IDSet("1-2")  # type: ignore[arg-type]
    for bad in ([(3, 1)], [(1,)], [(1, 2, 3)], [5], [(-1, 2)], [(0, MAX_ID + 1)], 7,
                [("a", "b")]):
        with pytest.raises(ValueError):
            IDSet.from_ranges(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Container protocol and ordered access
# --------------------------------------------------------------------------


def test_container_protocol() -> None:
    x = IDSet("0-3,7")
    assert len(x) == 5
    assert bool(x)
    assert not IDSet()
    assert list(x) == [0, 1, 2, 3, 7]
    assert 0 in x and 3 in x and 7 in x
    assert 4 not in x and 8 not in x and -1 not in x
    assert "1" not in x and 1.0 not in x and True not in x
    assert x == IDSet("[0,1,2,3,7]")
    assert x != IDSet("0-3")
    assert x != "0-3,7"
    assert x != [0, 1, 2, 3, 7]


def test_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(IDSet("1"))
    assert IDSet.__hash__ is None


def test_first_last_next_prev() -> None:
    x = IDSet("2-4,9")
    assert x.first() == 2 and x.last() == 9
    assert x.next(-5) == 2
    assert x.next(2) == 3
    assert x.next(4) == 9
    assert x.next(5) == 9
    assert x.next(9) is None
    assert x.prev(100) == 9
    assert x.prev(9) == 4
    assert x.prev(3) == 2
    assert x.prev(2) is None
    assert x.prev(0) is None
    e = IDSet()
    assert e.first() is None and e.last() is None
    assert e.next(0) is None and e.prev(10) is None
    with pytest.raises(ValueError):
        x.next("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        x.prev(1.5)  # type: ignore[arg-type]


def test_nth_and_first_n() -> None:
    x = IDSet("2-4,9,20-21")
    assert [x.nth(i) for i in range(len(x))] == [2, 3, 4, 9, 20, 21]
    assert x.nth(-1) == 21
    assert x.nth(-6) == 2
    with pytest.raises(IndexError):
        x.nth(6)
    with pytest.raises(IndexError):
        x.nth(-7)
    with pytest.raises(IndexError):
        IDSet().nth(0)
    with pytest.raises(ValueError):
        x.nth("0")  # type: ignore[arg-type]
    assert x.first_n(0) == IDSet()
    assert x.first_n(2) == IDSet("2-3")
    assert x.first_n(4) == IDSet("2-4,9")
    assert x.first_n(6) == x
    with pytest.raises(ValueError, match="only 6"):
        x.first_n(7)
    with pytest.raises(ValueError, match="negative"):
        x.first_n(-1)


def test_nth_cache_follows_mutation() -> None:
    x = IDSet("10-19")
    assert x.nth(0) == 10
    x.add(0)
    assert x.nth(0) == 0
    x |= IDSet("5")
    assert x.nth(1) == 5
    x.discard(0)
    assert x.nth(0) == 5
    assert x.first_n(2) == IDSet("5,10")


# --------------------------------------------------------------------------
# Mutation and algebra
# --------------------------------------------------------------------------


def test_add_discard() -> None:
    x = IDSet()
    for n in (5, 3, 4, 9, 7, 8, 0):
        x.add(n)
    assert x == IDSet("0,3-5,7-9")
    x.add(6)
    assert x == IDSet("0,3-9") and len(x) == 8
    x.add(6)
    assert len(x) == 8
    x.discard(6)
    assert x == IDSet("0,3-5,7-9")
    x.discard(3)
    x.discard(9)
    x.discard(0)
    x.discard(100)
    assert x == IDSet("4-5,7-8") and len(x) == 4
    for bad in (-1, MAX_ID + 1, "1", 1.0, True):
        with pytest.raises(ValueError):
            x.add(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            x.discard(bad)  # type: ignore[arg-type]


def test_algebra_examples() -> None:
    a = IDSet("0-9")
    b = IDSet("5-14")
    assert a | b == IDSet("0-14")
    assert a & b == IDSet("5-9")
    assert a - b == IDSet("0-4")
    assert b - a == IDSet("10-14")
    assert a ^ b == IDSet("0-4,10-14")
    assert a | "20" == IDSet("0-9,20")
    assert a & [1, 2, 99] == IDSet("1-2")
    assert "0-20" - a == IDSet("10-20")
    assert {3, 40} | a == IDSet("0-9,40")
    assert [3, 40] & a == IDSet("3")
    assert {3, 40} ^ a == IDSet("0-2,4-9,40")
    same = a.copy()
    assert IDSet("1-3") <= a and IDSet("1-3") < a and same <= a and not same < a
    assert a >= IDSet("1-3") and a > IDSet("1-3") and not same > a and same >= a
    assert not b <= a
    assert a.issubset("0-100") and a.issuperset([1, 2])
    assert a.isdisjoint("10-20") and not a.intersects("10-20")
    assert a.intersects(b) and not a.isdisjoint(b)
    with pytest.raises(ValueError):
        a | 5  # type: ignore[operator]
    with pytest.raises(ValueError):
        a & "1,,2"


def test_in_place_operators_keep_identity() -> None:
    x = IDSet("0-9")
    original = x
    x |= IDSet("20-29")
    x -= "5-24"
    x &= IDSet("0-3,25-100")
    assert x is original
    assert x == IDSet("0-3,25-29")
    x ^= IDSet("0-1,30")
    assert x is original
    assert x == IDSet("2-3,25-30")
    assert len(x) == 8


def test_copy_and_pickle() -> None:
    x = IDSet("1-3,10")
    for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y == x and y is not x
        y.add(5)
        assert 5 not in x


# --------------------------------------------------------------------------
# Property tests
# --------------------------------------------------------------------------

small_ids = st.sets(st.integers(min_value=0, max_value=60), max_size=40)
any_ids = st.sets(
    st.one_of(st.integers(min_value=0, max_value=100),
              st.integers(min_value=MAX_ID - 5, max_value=MAX_ID)),
    max_size=30,
)


@given(any_ids, st.booleans(), st.booleans())
def test_encode_decode_round_trip(ids: set[int], ranges: bool, brackets: bool) -> None:
    x = IDSet(ids)
    text = x.encode(ranges=ranges, brackets=brackets)
    assert IDSet(text) == x
    assert reference_decode(text) == list(x.ranges())
    if len(x) < 2:
        assert not text.startswith("[")


@given(any_ids)
def test_matches_sorted_list(ids: set[int]) -> None:
    x = IDSet(ids)
    ordered = sorted(ids)
    assert list(x) == ordered
    assert len(x) == len(ordered)
    assert bool(x) == bool(ordered)
    assert x.first() == (ordered[0] if ordered else None)
    assert x.last() == (ordered[-1] if ordered else None)
    for i, n in enumerate(ordered):
        assert x.nth(i) == n
        assert x.nth(i - len(ordered)) == n
        assert n in x
    with pytest.raises(IndexError):
        x.nth(len(ordered))
    for k in range(len(ordered) + 1):
        assert list(x.first_n(k)) == ordered[:k]
    # ranges are maximal, ascending, disjoint and non-adjacent
    runs = list(x.ranges())
    assert [n for lo, hi in runs for n in range(lo, hi + 1)] == ordered
    for (_, hi1), (lo2, _) in itertools.pairwise(runs):
        assert lo2 > hi1 + 1


@given(small_ids, st.integers(min_value=-3, max_value=65))
def test_next_prev_match_sorted_list(ids: set[int], probe: int) -> None:
    x = IDSet(ids)
    above = [n for n in sorted(ids) if n > probe]
    below = [n for n in sorted(ids) if n < probe]
    assert x.next(probe) == (above[0] if above else None)
    assert x.prev(probe) == (below[-1] if below else None)
    assert (probe in x) == (probe in ids)


@contextmanager
def splice_ratio(ratio: int) -> Iterator[None]:
    """Force the set operations onto one strategy (0: always bisect, huge: always merge)."""
    saved = idset_module._SPLICE_RATIO
    idset_module._SPLICE_RATIO = ratio
    try:
        yield
    finally:
        idset_module._SPLICE_RATIO = saved


STRATEGIES = st.sampled_from([0, 1, 2, idset_module._SPLICE_RATIO, 10**9])


@given(small_ids, small_ids, STRATEGIES)
def test_algebra_matches_python_sets(a: set[int], b: set[int], ratio: int) -> None:
    with splice_ratio(ratio):
        check_algebra(a, b)


@given(st.sets(st.integers(min_value=0, max_value=400), max_size=300),
       st.sets(st.integers(min_value=0, max_value=400), max_size=6), STRATEGIES)
def test_algebra_lopsided_matches_python_sets(a: set[int], b: set[int], ratio: int) -> None:
    with splice_ratio(ratio):
        check_algebra(a, b)
        check_algebra(b, a)


def check_algebra(a: set[int], b: set[int]) -> None:
    x, y = IDSet(a), IDSet(b)
    assert set(x | y) == a | b
    assert set(x & y) == a & b
    assert set(x - y) == a - b
    assert set(x ^ y) == a ^ b
    assert (x | y) == IDSet(a | b)
    assert (x & y) == IDSet(a & b)
    assert (x - y) == IDSet(a - b)
    assert (x ^ y) == IDSet(a ^ b)
    assert len(x | y) == len(a | b)
    assert len(x & y) == len(a & b)
    assert len(x - y) == len(a - b)
    assert len(x ^ y) == len(a ^ b)
    assert (x <= y) == (a <= b)
    assert (x < y) == (a < b)
    assert (x >= y) == (a >= b)
    assert (x > y) == (a > b)
    assert x.issubset(y) == a.issubset(b)
    assert x.isdisjoint(y) == a.isdisjoint(b)
    assert x.intersects(y) == (not a.isdisjoint(b))
    assert (x == y) == (a == b)
    # operands are never changed by the pure operators
    assert set(x) == a and set(y) == b


@given(small_ids, small_ids, st.sampled_from(["|=", "&=", "-=", "^="]), STRATEGIES)
def test_in_place_matches_python_sets(a: set[int], b: set[int], op: str, ratio: int) -> None:
    with splice_ratio(ratio):
        check_in_place(a, b, op)


def check_in_place(a: set[int], b: set[int], op: str) -> None:
    x = IDSet(a)
    y = IDSet(b)
    expected = set(a)
    if op == "|=":
        x |= y
        expected |= b
    elif op == "&=":
        x &= y
        expected &= b
    elif op == "-=":
        x -= y
        expected -= b
    else:
        x ^= y
        expected ^= b
    assert x == IDSet(expected)
    assert len(x) == len(expected)
    assert set(y) == b


@contextmanager
def splice_in_place_max(limit: int) -> Iterator[None]:
    """Move the run count up to which in-place union/difference splice instead of rebuild."""
    saved = idset_module._SPLICE_IN_PLACE_MAX
    idset_module._SPLICE_IN_PLACE_MAX = limit
    try:
        yield
    finally:
        idset_module._SPLICE_IN_PLACE_MAX = saved


# Runs of a few ids scattered over a wide range: a fragmented "pool" and a
# handful of runs to add or take away, as an allocator does.
fragmented_ids = st.sets(st.integers(min_value=0, max_value=400), max_size=300)
few_runs = st.lists(st.tuples(st.integers(min_value=0, max_value=402),
                              st.integers(min_value=0, max_value=4)), max_size=8)


@given(fragmented_ids, few_runs, STRATEGIES, st.sampled_from([0, 1, 4, 32, 10**9]))
def test_in_place_union_and_difference_equal_out_of_place(
    a: set[int], runs: list[tuple[int, int]], ratio: int, limit: int
) -> None:
    y = IDSet.from_ranges((lo, lo + width) for lo, width in runs)
    with splice_ratio(ratio), splice_in_place_max(limit):
        for op in ("|=", "-="):
            x = IDSet(a)
            lists = (x._lo, x._hi)
            expected = x | y if op == "|=" else x - y
            if op == "|=":
                x |= y
            else:
                x -= y
            assert x == expected
            assert len(x) == len(expected)
            assert list(x) == list(expected)
            # the canonical form is kept: sorted, disjoint, non-adjacent runs
            assert all(b_lo > a_hi + 1 for (_, a_hi), (b_lo, _) in
                       itertools.pairwise(x.ranges()))
            if ratio == 0 and len(list(y.ranges())) <= limit and a:
                # spliced, not rebuilt: the same range lists were edited
                assert x._lo is lists[0] and x._hi is lists[1]
            assert set(y) == {n for lo, w in runs for n in range(lo, lo + w + 1)}


@given(fragmented_ids, few_runs)
def test_in_place_ops_chain_like_out_of_place(a: set[int], runs: list[tuple[int, int]]) -> None:
    # One id or run at a time, alternating, as a pool that grows and shrinks.
    x = IDSet(a)
    y = IDSet(a)
    for k, (lo, width) in enumerate(runs):
        piece = IDSet.from_range(lo, lo + width)
        if k % 2:
            x -= piece
            y = y - piece
        else:
            x |= piece
            y = y | piece
        assert x == y and len(x) == len(y)
        # nth() reads a cache that every change must drop
        assert (x.nth(-1) == y.nth(-1)) if y else not x


@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=40)),
                max_size=60))
def test_add_discard_match_python_set(ops: list[tuple[bool, int]]) -> None:
    x = IDSet()
    reference: set[int] = set()
    for adding, n in ops:
        if adding:
            x.add(n)
            reference.add(n)
        else:
            x.discard(n)
            reference.discard(n)
        assert len(x) == len(reference)
    assert x == IDSet(reference)


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=50),
                          st.integers(min_value=0, max_value=10)), max_size=10))
def test_from_ranges_matches_python_set(pairs: list[tuple[int, int]]) -> None:
    ranges = [(lo, lo + width) for lo, width in pairs]
    expected = {n for lo, hi in ranges for n in range(lo, hi + 1)}
    assert IDSet.from_ranges(ranges) == IDSet(expected)


# --------------------------------------------------------------------------
# Large sets (correctness only; speed is measured by `fluxes bench`)
# --------------------------------------------------------------------------


def _total(x: Iterable[int]) -> int:
    return sum(x)


def test_million_ids() -> None:
    n = 1_000_000
    big = IDSet(f"0-{n - 1}")
    assert len(big) == n
    assert 0 in big and n - 1 in big and n not in big
    assert big.nth(123_456) == 123_456
    assert big.first_n(10) == IDSet("0-9")
    assert len(big.first_n(n // 2)) == n // 2

    big.discard(500_000)
    assert len(big) == n - 1
    assert big.encode() == f"0-499999,500001-{n - 1}"
    assert big.next(499_999) == 500_001
    assert big.prev(500_001) == 499_999
    big.add(500_000)
    assert big == IDSet.from_range(0, n - 1)

    more = IDSet(f"{n}-{2 * n - 1}")
    both = big | more
    assert len(both) == 2 * n
    assert (both - more) == big
    assert (both & more) == more
    assert big.isdisjoint(more)
    assert _total(big) == n * (n - 1) // 2

    # a million separate runs: every even id below two million
    evens = IDSet(range(0, 2 * n, 2))
    odds = IDSet(range(2 * n - 1, 0, -2))  # descending input
    assert len(evens) == n and len(list(evens.ranges())) == n
    assert evens | odds == IDSet(f"0-{2 * n - 1}")
    assert not evens.intersects(odds)
    assert len(evens & big) == n // 2
    assert len(evens - big) == n // 2
    assert evens.nth(n - 1) == 2 * n - 2
    assert IDSet(evens.encode()) == evens
    flat = big.encode(ranges=False)
    assert flat.count(",") == n - 1
    assert IDSet(flat) == big


def test_fragmented_million_grows_and_shrinks_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    # A million separate runs; 2,000 single-id |= and -= must each be spliced
    # into the range lists, never rebuilt (a rebuild copies and re-counts every
    # run, which made growing such a set one id at a time quadratic).
    n = 1_000_000
    pool = IDSet(range(0, 2 * n, 2))
    lo, hi = pool._lo, pool._hi

    def no_rebuild(*args: object) -> None:
        raise AssertionError("in-place operation rebuilt the range lists")

    for name in ("_union", "_union_splice", "_difference", "_difference_few_b"):
        monkeypatch.setattr(idset_module, name, no_rebuild)
    for k in range(1, 2001, 2):  # 1,000 odd ids: each joins two runs into one
        pool |= IDSet([k])
    for k in range(10_000, 12_000, 2):  # 1,000 even ids: each removes a run
        pool -= IDSet([k])
    pool |= IDSet([2 * n + 5])  # a new run at the end
    pool -= IDSet([0])  # cuts the head of the first run
    monkeypatch.undo()

    assert pool._lo is lo and pool._hi is hi
    expected = (IDSet.from_range(1, 2000) | IDSet(range(2002, 2 * n, 2))
                | IDSet([2 * n + 5])) - IDSet(range(10_000, 12_000, 2))
    assert pool == expected
    assert len(pool) == len(expected) == n + 1000 - 1000 + 1 - 1
    assert len(lo) == n - 1000 - 1000 + 1
