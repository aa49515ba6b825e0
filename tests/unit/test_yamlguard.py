"""The YAML pre-scan: exact nesting depth on what emitters write, never more than the truth."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fluxes.formats import yamlguard


def true_depth(value: Any) -> int:
    """How many collections deep ``value`` nests (a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max((true_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((true_depth(v) for v in value), default=0)
    return 0


# Text that looks like YAML structure: brackets, quotes, comments, dashes, colons, newlines.
TRICKY = st.lists(
    st.sampled_from([*list("ab -:#[]{},'\"|>&*!?%@`\\\t\n"), "[[ -f x ]]", ": ", " #", "ƒ"]),
    max_size=8,
).map("".join)
SCALARS = st.one_of(TRICKY, st.integers(-5, 5), st.booleans(), st.none())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(TRICKY, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(
    value=st.dictionaries(TRICKY, VALUES, min_size=1, max_size=3),
    flow=st.sampled_from([False, True, None]),
    width=st.sampled_from([12, 80]),
    pure=st.booleans(),
)
def test_depth_is_exact_on_emitted_yaml(value: dict[str, Any], flow: bool | None, width: int,
                                        pure: bool) -> None:
    dumper = yaml.SafeDumper if pure else getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(value, Dumper=dumper, default_flow_style=flow, width=width,
                     allow_unicode=True)
    # PyYAML's emitter does not round-trip every string (backslashes before
    # tabs, folded at a narrow width): those are not the scanner's business
    assume(yaml.safe_load(text) == value)
    found = yamlguard.scan(text)
    assert found.depth == true_depth(value), text
    assert found.alias is None


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("command: [sh, -c, '[[ -f x ]]']\n", 1 + 1),
        ("command: sh -c '[[ -f x ]] && { echo; }'\n", 1),
        ('a: "[[[ \\" [[["\n', 1),
        ("a: 'it''s [[['\n", 1),
        ("a: |\n  [[[[ {{{{\n  - - - -\n  key: value\nb: 1\n", 1),
        ("a: >-\n    [[[\n\n    ]]]\nb: [1]\n", 2),
        ("# [[[[[[[\na: 1 # {{{{{{\n", 1),
        ("a: x [[[[ y\n", 1),
        ("a: text\n  - more text [[[\n", 1),
        ("- - - x\n", 3),
        ("a:\n- b: [c, {d: e}]\n", 5),
        ("a:\n  b:\n    c: [1, [2]]\n", 5),
        ("? a\n: b\n", 1),
        ("a: 'multi\n  line [[[ '\nb: [x]\n", 2),
        ("--- {a: [1]}\n", 2),
        ('{"a": "b:[[c"}\n', 1),
        ("a: http://x/[y]\n", 1),
        # a plain scalar of a flow collection folded over two lines, a quote on the second
        ("{'': [{' ': a\n      '}, '[']}\n", 3),
        ("[a\n  b ' c, [d]]\n", 2),
    ],
)
def test_depth_of_hand_written_yaml(text: str, depth: int) -> None:
    value = yaml.safe_load(text)
    assert true_depth(value) == depth  # the case itself is right
    assert yamlguard.scan(text).depth == depth


def test_deep_flow_stops_at_the_limit_without_reading_on() -> None:
    found = yamlguard.scan("[" * 1_000_000, limit=64)
    assert found.depth == 65


def test_first_alias_is_found_with_its_place() -> None:
    assert yamlguard.scan("a: &x 1\nb: [1, *x]\n").alias == (2, 8, "x")
    assert yamlguard.scan("a: '*x'\nb: \"*y\"\nc: a*b\n").alias is None
