"""--requires expressions (an RFC 35 subset) become RFC 31 constraints."""

from __future__ import annotations

import pytest

from fluxes.formats.requires import parse_requires


@pytest.mark.parametrize(("expr", "want"), [
    ("gpu", {"properties": ["gpu"]}),
    ("gpu ssd", {"properties": ["gpu", "ssd"]}),
    ("gpu and ssd", {"properties": ["gpu", "ssd"]}),
    ("gpu & ^login", {"properties": ["gpu", "^login"]}),
    ("not login", {"properties": ["^login"]}),
    ("gpu|ssd", {"or": [{"properties": ["gpu"]}, {"properties": ["ssd"]}]}),
    ("gpu or ssd", {"or": [{"properties": ["gpu"]}, {"properties": ["ssd"]}]}),
    ("host:node[0-3]", {"hostlist": ["node[0-3]"]}),
    ("-rank:0-1", {"not": [{"ranks": ["0-1"]}]}),
    ("(gpu or ssd) and not host:n1", {"and": [
        {"or": [{"properties": ["gpu"]}, {"properties": ["ssd"]}]},
        {"not": [{"hostlist": ["n1"]}]}]}),
])
def test_expressions(expr: str, want: dict[str, object]) -> None:
    assert parse_requires([expr]) == want


def test_several_options_are_anded() -> None:
    assert parse_requires(["gpu", "host:n[0-1]"]) == {
        "and": [{"properties": ["gpu"]}, {"hostlist": ["n[0-1]"]}]}


@pytest.mark.parametrize("bad", ["", "gpu and", "(gpu", "gpu )", "or gpu", "zone:x",
                                 "host:n[", "bad name!"])
def test_bad_expressions_are_value_errors(bad: str) -> None:
    with pytest.raises(ValueError, match=r"--requires|property|hostlist|invalid"):
        parse_requires([bad])
