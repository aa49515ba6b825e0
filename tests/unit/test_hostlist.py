"""Tests for fluxes.formats.hostlist (RFC 29 hostlist strings and the Hostlist class)."""

from __future__ import annotations

import copy
import pickle
import re
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.formats.hostlist import MAX_DIGITS, MAX_RANGE, Hostlist

# --------------------------------------------------------------------------
# A reference decoder, written as plainly as possible, to check against
# --------------------------------------------------------------------------


def expand(prefix: str, ids: list[tuple[str, str | None]], suffix: str) -> list[str]:
    """Hosts of ``prefix[ids]suffix``; ids are (lo, hi or None) digit strings.

    The first id's leading zeros set the width of the list; an id with its
    own leading zeros keeps its own width.
    """
    first = ids[0][0]
    list_width = len(first) if first.startswith("0") and len(first) > 1 else 1
    hosts = []
    for lo, hi in ids:
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else list_width
        for n in range(int(lo), int(hi if hi is not None else lo) + 1):
            hosts.append(f"{prefix}{n:0{width}d}{suffix}")
    return hosts


def natural_key(host: str) -> list[tuple[int, int] | tuple[int, str]]:
    """The documented sort order: text as text, numbers by printed length, then value."""
    key: list[tuple[int, int] | tuple[int, str]] = []
    for i, part in enumerate(re.split(r"([0-9]+)", host)):
        key.append((len(part), int(part)) if i % 2 else (-1, part))
    return key


# --------------------------------------------------------------------------
# Decoding: what RFC 29 allows
# --------------------------------------------------------------------------

# (input, hosts) -- the RFC 29 test vectors first.
RFC_VECTORS = [
    ("", []),
    ("foox,fooy,fooz", ["foox", "fooy", "fooz"]),
    ("[1-3,5-6]", ["1", "2", "3", "5", "6"]),
    ("foo[1-5]", ["foo1", "foo2", "foo3", "foo4", "foo5"]),
    ("foo[0-4]-eth2", ["foo0-eth2", "foo1-eth2", "foo2-eth2", "foo3-eth2", "foo4-eth2"]),
    ("foo1,foo1,foo1", ["foo1", "foo1", "foo1"]),
    ("[00-02]", ["00", "01", "02"]),
    ("[00-2]", ["00", "01", "02"]),
    ("foo[1,1,2,1]", ["foo1", "foo1", "foo2", "foo1"]),
]

VALID = [
    *RFC_VECTORS,
    # the idlist examples in the RFC text
    ("h[5,4,10,11,12,13]", ["h5", "h4", "h10", "h11", "h12", "h13"]),
    ("h[5,4,11-13]", ["h5", "h4", "h11", "h12", "h13"]),
    ("h[005,4,11-13]", ["h005", "h004", "h011", "h012", "h013"]),
    ("[2,2,2]", ["2", "2", "2"]),
    # prefix, idlist and suffix are each optional
    ("node[1-3,5],login0", ["node1", "node2", "node3", "node5", "login0"]),
    ("[1]", ["1"]),
    ("x[7]", ["x7"]),
    ("[7]y", ["7y"]),
    ("a[1-2]b", ["a1b", "a2b"]),
    ("n[01-10]", [f"n{i:02d}" for i in range(1, 11)]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("n[1-010]", [f"n{i}" for i in range(1, 11)]),  # only the first id's zeros count
    ("p[00-3]p", ["p00p", "p01p", "p02p", "p03p"]),
    ("foo[1,3]-bar", ["foo1-bar", "foo3-bar"]),
    ("n[0-2,015]", ["n0", "n1", "n2", "n015"]),  # as flux-core prints sorted lists
    ("n[01,002]", ["n01", "n002"]),
    ("n[3-3]", ["n3"]),
    ("n[0]", ["n0"]),
    ("n[000]", ["n000"]),
    # empty expressions are empty lists
    (",", []),
    (",,a,,b,", ["a", "b"]),
    # prefix and suffix may hold any printable ASCII but space, '[', ']', ','
    ("a.b_c-d:e/f@g[1-2]!#$%&'()*+-./:;<=>?@\\^_`{|}~",
     ["a.b_c-d:e/f@g1!#$%&'()*+-./:;<=>?@\\^_`{|}~",
      "a.b_c-d:e/f@g2!#$%&'()*+-./:;<=>?@\\^_`{|}~"]),
    ("-[1-2]-", ["-1-", "-2-"]),
    ("a1[2-3]", ["a12", "a13"]),
    ("[1-2]3", ["13", "23"]),
    # numbers longer than any machine integer are fine
    ("n[99999999999999999999998-99999999999999999999999]",
     ["n99999999999999999999998", "n99999999999999999999999"]),
    ("big" + "7" * 300, ["big" + "7" * 300]),
    # the largest range
    (f"n[1-{MAX_RANGE}]", [f"n{i}" for i in range(1, MAX_RANGE + 1)]),
    # flux-core's own codec examples
    ("foo-1a-2,foo-1a-3", ["foo-1a-2", "foo-1a-3"]),
    ("fooi,foo1,foo2,foo3,foo5,foo7,foo8",
     ["fooi", "foo1", "foo2", "foo3", "foo5", "foo7", "foo8"]),
]


@pytest.mark.parametrize(("text", "hosts"), VALID)
def test_decode_valid(text: str, hosts: list[str]) -> None:
    x = Hostlist(text)
    assert list(x) == hosts
    assert len(x) == len(hosts)
    assert Hostlist(str(x)) == x


# (input, a fragment the error message must contain)
INVALID = [
    ("[]", "empty '[]'"),
    ("foo[]", "empty '[]'"),
    ("foo[", "unbalanced '['"),
    ("foo[1,3", "unbalanced '['"),
    ("foo[1-3],bar[", "unbalanced '['"),
    ("foo[[1,3]", "nested '['"),
    ("foo[1[2]]", "nested '['"),
    ("foo]", "unbalanced ']'"),
    ("foo[1]]", "unbalanced ']'"),
    ("]", "unbalanced ']'"),
    ("a[1]b[2]", "more than one '[...]'"),
    ("a[1][2]", "more than one '[...]'"),
    ("foo[1,2,3", "unbalanced '['"),
    ("foo[x-y]", "'x-y' is not a range"),
    ("foo[0-1,2--5]", "'2--5' is not a range"),
    ("foo[-1]", "'-1' is not a range"),
    ("foo[1-]", "'1-' is not a range"),
    ("foo[1-2-3]", "'1-2-3' is not a range"),
    ("foo[a]", "'a' is not a non-negative decimal id"),
    ("foo[+1]", "'+1' is not a non-negative decimal id"),
    ("foo[1,,2]", "empty id"),
    ("foo[1,]", "empty id"),
    ("foo[,1]", "empty id"),
    ("n[5-3]", "'5-3' is descending"),
    ("n[10-09]", "'10-09' is descending"),
    (f"n[0-{MAX_RANGE}]", "more than the maximum"),
    ("n[" + "1" * (MAX_DIGITS + 1) + "]", f"more than {MAX_DIGITS} digits"),
    ("foo bar", "whitespace"),
    (" foo", "whitespace"),
    ("foo\t1", "whitespace"),
    ("foo\n", "whitespace"),
    ("foo[1, 2]", "whitespace"),
    ("n\x00", "non-printable"),
    ("n\x7f", "non-printable"),
    ("nodé1", "non-ASCII"),
    ("n[１]", "non-ASCII"),  # a full-width digit is not a decimal digit here
]


@pytest.mark.parametrize(("text", "fragment"), INVALID)
def test_decode_invalid(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        Hostlist(text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("invalid hostlist ")


def test_trailing_comma_is_an_empty_expression() -> None:
    assert list(Hostlist("foo,")) == ["foo"]


def test_error_message_shortens_long_input() -> None:
    with pytest.raises(ValueError) as info:
        Hostlist("n" * 1000 + "[")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "value",
    [None, 5, 1.5, b"n[1-2]", bytearray(b"n1"), object()],
)
def test_constructor_rejects_other_types(value: object) -> None:
    with pytest.raises(ValueError, match="expected a hostlist string"):
        Hostlist(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("names", "fragment"),
    [
        (["n1", ""], "empty hostname"),
        (["n[1-2]"], "contains one of '[', ']' or ','"),
        (["a,b"], "contains one of '[', ']' or ','"),
        (["a b"], "whitespace"),
        (["é"], "non-ASCII"),
        (["n1", 7], "expected a hostname string, got int"),
        ([None], "expected a hostname string, got NoneType"),
    ],
)
def test_constructor_rejects_bad_hostnames(names: list[object], fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        Hostlist(names)  # type: ignore[arg-type]


def test_constructor_forms() -> None:
    assert list(Hostlist()) == []
    assert list(Hostlist(["b", "a", "a"])) == ["b", "a", "a"]
    assert list(Hostlist(iter(["n1", "n2"]))) == ["n1", "n2"]
    assert list(Hostlist(("n1", "n2"))) == ["n1", "n2"]
    original = Hostlist("n[1-3]")
    copied = Hostlist(original)
    assert copied == original
    copied.append("n4")
    assert str(original) == "n[1-3]"


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------

ENCODE = [
    ([], ""),
    (["foo"], "foo"),
    (["n1"], "n1"),
    (["n1", "n2", "n3"], "n[1-3]"),
    (["n3", "n2", "n1"], "n[3,2,1]"),
    (["n1", "n2", "n3", "n5"], "n[1-3,5]"),
    ([f"n{i:02d}" for i in range(1, 11)], "n[01-10]"),
    (["n8", "n9", "n10"], "n[8-10]"),
    (["n08", "n09", "n10"], "n[08-10]"),
    (["n1", "n01"], "n[1,01]"),
    (["n01", "n1"], "n01,n1"),  # "n[01,1]" would read back as n01,n01
    (["n01", "n10", "n5"], "n[01,10],n5"),
    (["n001", "n01", "n1"], "n[001,01],n1"),
    (["foo1", "foo1", "foo1"], "foo[1,1,1]"),
    (["foo1", "fooi", "foo2", "foo3"], "foo1,fooi,foo[2-3]"),
    (["foo1", "foo2", "foo3", "fooi"], "foo[1-3],fooi"),
    # as flux-core: only a trailing number goes in brackets
    (["foo0-eth2", "foo1-eth2", "foo2-eth2"], "foo0-eth2,foo1-eth2,foo2-eth2"),
    (["foo0-eth2", "foo0-eth3"], "foo0-eth[2-3]"),
    (["a1b2", "a2b2", "a2b3"], "a1b2,a2b[2-3]"),
    (["foo1-bar", "foo3-bar"], "foo1-bar,foo3-bar"),
    (["13", "23"], "[13,23]"),
    (["n1", "m1", "n2"], "n1,m1,n2"),
    (["login0", "node1", "node2", "node3", "node5"], "login0,node[1-3,5]"),
]


@pytest.mark.parametrize(("hosts", "encoded"), ENCODE)
def test_encode(hosts: list[str], encoded: str) -> None:
    x = Hostlist(hosts)
    assert str(x) == encoded
    assert list(Hostlist(encoded)) == hosts


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("foo[1-2],foo[3-4]", "foo[1-4]"),
        ("foo[1-2],foo3", "foo[1-3]"),
        ("foo[12,4,1-2]", "foo[12,4,1-2]"),
        ("[00-2]", "[00-02]"),
        # flux-core's codec vectors: text after ']' means no brackets on output
        ("p[00-3]p", "p00p,p01p,p02p,p03p"),
        ("[00-03]p", "00p,01p,02p,03p"),
        ("foo[1,3]-bar", "foo1-bar,foo3-bar"),
        ("foo[0-2]-eth2,foo3-eth2", "foo0-eth2,foo1-eth2,foo2-eth2,foo3-eth2"),
        ("[1-2]3", "[13,23]"),
        ("[01-02]3,x[1-2]y5,x2y[6-7]", "[013,023],x1y5,x2y[5-7]"),
        ("h[005,4,11-13]", "h[005,004,011-013]"),
        ("n[1-010]", "n[1-10]"),
        (",1,2,3,4,5,9,", "[1-5,9]"),
        ("[0-12,12-20,45,015]", "[0-12,12-20,45,015]"),
    ],
)
def test_reencode(text: str, encoded: str) -> None:
    assert str(Hostlist(text)) == encoded


def test_repr() -> None:
    assert repr(Hostlist("n[1-3],x")) == "Hostlist('n[1-3],x')"
    assert repr(Hostlist()) == "Hostlist('')"


def test_large_range_stays_small() -> None:
    x = Hostlist("node[0-99999]")
    assert len(x) == 100_000
    assert str(x) == "node[0-99999]"
    assert x[0] == "node0" and x[-1] == "node99999" and x[54321] == "node54321"
    assert Hostlist([f"node{i}" for i in range(100_000)]) == x
    assert Hostlist(",".join(f"node{i}" for i in range(100_000))) == x


def test_long_runs_are_cut_so_they_read_back() -> None:
    x = Hostlist(f"n[0-{MAX_RANGE - 1}]")
    x.append(f"n[{MAX_RANGE}-{2 * MAX_RANGE - 1}],n{2 * MAX_RANGE}")
    assert len(x) == 2 * MAX_RANGE + 1
    assert str(x) == f"n[0-{MAX_RANGE - 1},{MAX_RANGE}-{2 * MAX_RANGE - 1},{2 * MAX_RANGE}]"
    assert Hostlist(str(x)) == x


def test_big_groups_are_split_for_flux_core() -> None:
    # flux-core reads at most 10240 ids between one pair of brackets.
    names = [f"n{2 * i}" for i in range(10245)]
    x = Hostlist(names)
    encoded = str(x)
    assert encoded.count("[") == 2
    assert encoded.split("],", maxsplit=1)[0].count(",") == 10239
    assert list(Hostlist(encoded)) == names


# --------------------------------------------------------------------------
# Sequence protocol
# --------------------------------------------------------------------------


def test_indexing() -> None:
    x = Hostlist("a,n[1-3],b")
    assert [x[i] for i in range(5)] == ["a", "n1", "n2", "n3", "b"]
    assert x[-1] == "b" and x[-5] == "a"
    for bad in (5, -6, 100):
        with pytest.raises(IndexError):
            x[bad]
    with pytest.raises(IndexError):
        Hostlist()[0]
    with pytest.raises(ValueError, match="index must be an integer"):
        x["a"]  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="index must be an integer"):
        x[1.0]  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="slice indices"):
        x["a":]
    with pytest.raises(ValueError, match="zero"):
        x[::0]


def test_slices_are_hostlists() -> None:
    x = Hostlist("n[1-10],m")
    assert isinstance(x[2:5], Hostlist)
    assert str(x[2:5]) == "n[3-5]"
    assert str(x[::2]) == "n[1,3,5,7,9],m"
    assert str(x[::-1]) == "m,n[10,9,8,7,6,5,4,3,2,1]"
    assert str(x[9:]) == "n10,m"
    assert str(x[5:2]) == ""


def test_iteration_and_bool() -> None:
    assert list(Hostlist("x[1-2],y")) == ["x1", "x2", "y"]
    assert not Hostlist("")
    assert Hostlist("x")


def test_equality() -> None:
    assert Hostlist("n[1-3]") == Hostlist("n1,n2,n3")
    assert Hostlist("n[1-3]") == Hostlist(["n1", "n2", "n3"])
    assert Hostlist("[1-2]3") == Hostlist("13,23")
    assert Hostlist("n[1-3]") != Hostlist("n[1-4]")
    assert Hostlist("n[1-3]") != Hostlist("n[3,2,1]")
    assert Hostlist("n1") != "n1"
    with pytest.raises(TypeError):
        hash(Hostlist("n1"))


def test_copies_are_independent() -> None:
    x = Hostlist("n[1-3]")
    for y in (x.copy(), copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y == x
        y.append("n4")
        y.delete("n1")
        assert str(x) == "n[1-3]"


# --------------------------------------------------------------------------
# append, delete, find, index, in
# --------------------------------------------------------------------------


def test_append() -> None:
    x = Hostlist()
    assert x.append("") == 0
    assert x.append("foo12") == 1
    assert x.append("foo[4,1-2]") == 3
    assert str(x) == "foo[12,4,1-2]"
    assert x.append(Hostlist("bar[26-30]")) == 5
    assert str(x) == "foo[12,4,1-2],bar[26-30]"
    assert x.append(["bar31", "baz"]) == 2
    assert str(x) == "foo[12,4,1-2],bar[26-31],baz"
    assert len(x) == 11


def test_append_self() -> None:
    x = Hostlist("n[1-2]")
    assert x.append(x) == 2
    assert str(x) == "n[1-2,1-2]"


def test_append_is_all_or_nothing() -> None:
    x = Hostlist("n[1-2]")
    for bad in ("n3,n[", ["n3", ""], 7):
        with pytest.raises(ValueError):
            x.append(bad)  # type: ignore[arg-type]
    assert str(x) == "n[1-2]"


@pytest.mark.parametrize(
    ("text", "arg", "expected"),
    [
        ("tst0", "tst", -1),
        ("tst0,tst", "tst", 1),
        ("tst,tst0", "tst", 0),
        ("tst", "tst0", -1),
        ("foo[1-5]-eth0", "foo3-eth0", 2),
        ("foo[1-5]", "foo3-eth0", -1),
        ("[0-5]", "3", 3),
        ("[0-5]i", "0", -1),
        ("i[0-5]", "i00", -1),
        ("i[00-05]", "i00", 0),
        ("i[00-05]", "i04", 4),
        ("i[00-05]", "i4", -1),
        ("f00[7-8]", "f007", 0),
        ("f00[7-8,10]", "f0010", 2),
        ("f0010001[07-08]", "f001000108", 1),
        ("cornp2", "corn", -1),
        ("cornp2", "corn2", -1),
        ("corn-p2", "corn2", -1),
        ("corn1-p2", "corn2", -1),
        ("n[1-3],n2", "n2", 1),
        ("a1[2-3]", "a13", 1),
        ("[1-2]3", "23", 1),
    ],
)
def test_find(text: str, arg: str, expected: int) -> None:
    x = Hostlist(text)
    assert x.find(arg) == expected
    assert (arg in x) == (expected >= 0)
    # the same through the many-runs lookup table
    big = Hostlist(",".join(f"pad{i}x" for i in range(20)))
    big.append(x)
    assert big.find(arg) == (expected + 20 if expected >= 0 else -1)


def test_find_rejects_bad_hostnames() -> None:
    x = Hostlist("n[1-3]")
    for bad in ("", "n[1]", "a,b", "a b"):
        with pytest.raises(ValueError):
            x.find(bad)
        assert bad not in x
    with pytest.raises(ValueError, match="expected a hostname string"):
        x.find(1)  # type: ignore[arg-type]
    assert 1 not in x
    assert None not in x


def test_find_sees_appended_hosts() -> None:
    x = Hostlist(",".join(f"h{i}x" for i in range(50)))
    assert x.find("new") == -1  # builds the lookup table
    x.append("new,h3x")
    assert x.find("new") == 50
    assert x.find("h3x") == 3
    x.delete("h3x")
    assert x.find("h3x") == -1
    assert x.find("new") == 49


def test_index() -> None:
    x = Hostlist("n[1-5],m,n3")
    assert x.index("n3") == [2]
    assert x.index("n[5,1],m") == [4, 0, 5]
    assert x.index(["m", "n3", "n3"]) == [5, 2, 2]
    assert x.index(Hostlist("n2")) == [1]
    assert x.index("") == []
    with pytest.raises(ValueError, match=re.escape("not in the hostlist: 'n[6-7],q'")):
        x.index("n1,q,n7,n6,n7")
    with pytest.raises(ValueError, match="invalid hostlist"):
        x.index("n[")


@pytest.mark.parametrize(
    ("text", "delete", "removed", "result"),
    [
        ("foo[2-5]", "foo6", 0, "foo[2-5]"),
        ("foo[2-5]", "foo3", 1, "foo[2,4-5]"),
        ("foo[2-5],fooi", "fooi", 1, "foo[2-5]"),
        ("foo[2-5],fooi", "foo3", 1, "foo[2,4-5],fooi"),
        ("foo[2-5],fooi", "foo[1-2]", 1, "foo[3-5],fooi"),
        ("foo[0-7]", "foo[1,0,2-7]", 8, ""),
        ("foo[2-4]-eth2", "foo3-eth2", 1, "foo2-eth2,foo4-eth2"),
        ("p[00-3]p", "p01p", 1, "p00p,p02p,p03p"),
        ("[00-03]p,n[1-2]", "02p,n1", 2, "00p,01p,03p,n2"),
        # every occurrence goes
        ("n[1-3],n2,n[2-3]", "n2", 3, "n[1,3,3]"),
        ("a,b,a,c,a", "a", 3, "b,c"),
        ("n[1-3]", "n2,n2", 1, "n[1,3]"),
        ("n[01-10]", "n1,n10", 1, "n[01-09]"),
        ("n[1-10]", "", 0, "n[1-10]"),
        ("", "n1", 0, ""),
        ("node[0-99999]", "node[5,500-600,99999]", 103, "node[0-4,6-499,601-99998]"),
    ],
)
def test_delete(text: str, delete: str, removed: int, result: str) -> None:
    x = Hostlist(text)
    assert x.delete(delete) == removed
    assert str(x) == result


def test_delete_accepts_lists_and_hostlists() -> None:
    x = Hostlist("n[1-6]")
    assert x.delete(["n1", "n2"]) == 2
    assert x.delete(Hostlist("n[5-6]")) == 2
    assert str(x) == "n[3-4]"
    with pytest.raises(ValueError):
        x.delete("n[")
    assert str(x) == "n[3-4]"


# --------------------------------------------------------------------------
# sort and uniq
# --------------------------------------------------------------------------

SORT_UNIQ = [
    # flux-core's examples
    ("foo,f,bar,baz", "bar,baz,f,foo", "bar,baz,f,foo"),
    ("[5-6],[3-4],[1-2,0]", "[0-6]", "[0-6]"),
    ("[0-20],12,15", "[0-12,12-15,15-20]", "[0-20]"),
    ("0,1,2,3,4,5,1,5", "[0-1,1-5,5]", "[0-5]"),
    ("[0-20],45,12,015", "[0-12,12-20,45,015]", "[0-20,45,015]"),
    ("bar1,bar2,foo1,foo,foo", "bar[1-2],foo,foo,foo1", "bar[1-2],foo,foo1"),
    ("foo[5-6],foo3,foo4", "foo[3-6]", "foo[3-6]"),
    ("foo[5-6],foo[4-7]", "foo[4-5,5-6,6-7]", "foo[4-7]"),
    ("foo[0-3],foo[0-3]", "foo[0,0-1,1-2,2-3,3]", "foo[0-3]"),
    ("foo[0-2],foo[0-2],foo[0-2]", "foo[0,0,0-1,1,1-2,2,2]", "foo[0-2]"),
    # natural order
    ("n10,n9,n1", "n[1,9-10]", "n[1,9-10]"),
    ("n[10-12],n[01-09]", "n[01-12]", "n[01-12]"),
    # zero-padded numbers sort by width first, as in flux-core
    ("n2,n01,n1", "n[1-2,01]", "n[1-2,01]"),
    ("n[001-002],n010,n[01-02],n100,n3", "n[3,01-02,001-002,010,100]",
     "n[3,01-02,001-002,010,100]"),
    ("b,a10,a9,a", "a,a[9-10],b", "a,a[9-10],b"),
    ("rack2-n1,rack10-n1,rack2-n0", "rack2-n[0-1],rack10-n1", "rack2-n[0-1],rack10-n1"),
    ("x[3-4]-eth0,x[1-2]-eth0", "x1-eth0,x2-eth0,x3-eth0,x4-eth0",
     "x1-eth0,x2-eth0,x3-eth0,x4-eth0"),
    ("p[00-3]p,p[00-1]p", "p00p,p00p,p01p,p01p,p02p,p03p", "p00p,p01p,p02p,p03p"),
    ("", "", ""),
]


@pytest.mark.parametrize(("text", "sorted_", "uniq"), SORT_UNIQ)
def test_sort_and_uniq(text: str, sorted_: str, uniq: str) -> None:
    x = Hostlist(text)
    x.sort()
    assert str(x) == sorted_
    y = Hostlist(text)
    y.uniq()
    assert str(y) == uniq


def test_sort_large() -> None:
    names = [f"node{(i * 7919) % 100_000}" for i in range(100_000)]
    x = Hostlist(names)
    x.sort()
    assert str(x) == "node[0-99999]"


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

HOSTNAME_CHARS = "".join(c for c in string.printable if c not in "[], \t\n\r\x0b\x0c")

numbers = st.builds(
    lambda n, pad: str(n).zfill(pad),
    st.integers(min_value=0, max_value=120),
    st.integers(min_value=0, max_value=4),
)
structured_hostnames = st.builds(
    lambda prefix, number, suffix: (prefix + number + suffix) or "x",
    st.sampled_from(["n", "node", "a1b", "", "x-", "r0n", "rack1-n", "0"]),
    numbers,
    st.sampled_from(["", "", "-eth0", "b", "7", "-1a", "p2"]),
)
random_hostnames = st.text(alphabet=HOSTNAME_CHARS, min_size=1, max_size=8)
hostnames = st.one_of(structured_hostnames, random_hostnames)
hostname_lists = st.lists(hostnames, max_size=40)
# Lists with many repeats and neighbours, so runs merge and duplicate.
small_hostname_lists = st.lists(
    st.builds(lambda p, n: f"{p}{n}", st.sampled_from(["n", "n0", "m"]),
              st.integers(min_value=0, max_value=12)),
    max_size=40,
)
any_lists = st.one_of(hostname_lists, small_hostname_lists)


@given(any_lists)
def test_roundtrip(names: list[str]) -> None:
    x = Hostlist(names)
    assert list(x) == names
    assert len(x) == len(names)
    encoded = str(x)
    assert Hostlist(encoded) == x
    assert list(Hostlist(encoded)) == names
    assert str(Hostlist(encoded)) == encoded
    assert Hostlist(",".join(names)) == x
    # As flux-core writes: nothing follows a ']' but a ',' or the end.
    assert re.search(r"\][^,]", encoded) is None


@given(any_lists, st.integers(min_value=-45, max_value=45))
def test_indexing_agrees_with_list(names: list[str], i: int) -> None:
    x = Hostlist(names)
    if -len(names) <= i < len(names):
        assert x[i] == names[i]
    else:
        with pytest.raises(IndexError):
            x[i]


@given(
    any_lists,
    st.one_of(st.none(), st.integers(min_value=-45, max_value=45)),
    st.one_of(st.none(), st.integers(min_value=-45, max_value=45)),
    st.one_of(st.none(), st.integers(min_value=-5, max_value=5).filter(bool)),
)
def test_slicing_agrees_with_list(
    names: list[str], start: int | None, stop: int | None, step: int | None
) -> None:
    part = Hostlist(names)[start:stop:step]
    assert isinstance(part, Hostlist)
    assert list(part) == names[start:stop:step]
    assert Hostlist(str(part)) == part


@given(any_lists, st.lists(hostnames, max_size=5))
def test_find_index_contains_agree_with_list(names: list[str], probes: list[str]) -> None:
    x = Hostlist(names)
    for host in names[:5] + probes:
        expected = names.index(host) if host in names else -1
        assert x.find(host) == expected
        assert (host in x) == (expected >= 0)
    assert x.index(names) == [names.index(h) for h in names]


@given(any_lists, st.lists(hostnames, max_size=5), st.data())
def test_delete_agrees_with_list(names: list[str], extra: list[str], data: st.DataObject) -> None:
    targets = data.draw(st.lists(st.sampled_from(names), max_size=5)) if names else []
    targets += extra
    x = Hostlist(names)
    kept = [h for h in names if h not in set(targets)]
    assert x.delete(targets) == len(names) - len(kept)
    assert list(x) == kept
    assert Hostlist(str(x)) == x


@given(any_lists, any_lists)
def test_append_agrees_with_list(first: list[str], second: list[str]) -> None:
    x = Hostlist(first)
    x.find("probe")  # may build the lookup table, which append must then update
    assert x.append(second) == len(second)
    assert list(x) == first + second
    for host in second[:5]:
        assert x.find(host) == (first + second).index(host)
    y = Hostlist(first)
    assert y.append(",".join(second)) == len(second)
    assert y == x
    assert Hostlist(str(x)) == x


@given(any_lists)
def test_sort_and_uniq_properties(names: list[str]) -> None:
    x = Hostlist(names)
    x.sort()
    assert list(x) == sorted(names, key=natural_key)
    assert Hostlist(str(x)) == x
    y = Hostlist(names)
    y.uniq()
    assert list(y) == sorted(set(names), key=natural_key)
    assert Hostlist(str(y)) == y


@given(st.text(max_size=40))
def test_garbage_text_raises_only_value_error(text: str) -> None:
    try:
        x = Hostlist(text)
    except ValueError:
        return
    assert Hostlist(str(x)) == x


@given(st.text(alphabet="n0123-,[]x \t", max_size=30))
def test_hostlist_like_garbage_raises_only_value_error(text: str) -> None:
    try:
        x = Hostlist(text)
    except ValueError:
        return
    assert Hostlist(str(x)) == x
    assert list(Hostlist(list(x))) == list(x)


@given(st.lists(st.sampled_from(["n", "0", "1", "01", "9", "10", "-", ",", "[", "]",
                                 "2-5", "5-2", "x"]), max_size=12))
def test_token_garbage_raises_only_value_error(tokens: list[str]) -> None:
    text = "".join(tokens)
    try:
        x = Hostlist(text)
    except ValueError:
        return
    assert Hostlist(str(x)) == x


@given(
    st.sampled_from(["", "n", "a1", "x-"]),
    st.lists(
        st.tuples(numbers, st.one_of(st.none(), st.integers(min_value=0, max_value=15))),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["", "-eth0", "2", "b"]),
)
def test_decode_agrees_with_reference(
    prefix: str, elements: list[tuple[str, int | None]], suffix: str
) -> None:
    ids = [(lo, None if span is None else str(int(lo) + span)) for lo, span in elements]
    body = ",".join(lo if hi is None else f"{lo}-{hi}" for lo, hi in ids)
    x = Hostlist(f"{prefix}[{body}]{suffix}")
    assert list(x) == expand(prefix, ids, suffix)
    assert Hostlist(str(x)) == x


@given(st.lists(st.one_of(hostnames, st.just(""), st.integers(), st.none()), max_size=5))
def test_garbage_lists_raise_only_value_error(items: list[object]) -> None:
    try:
        x = Hostlist(items)  # type: ignore[arg-type]
    except ValueError:
        return
    assert list(x) == items
