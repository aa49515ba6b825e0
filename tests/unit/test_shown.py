"""One way to quote a user's value in a one-line message (fluxes.formats.shown)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fluxes.formats.shown import LIMIT, shown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "text"), [
    ("node[0-3]", "'node[0-3]'"),
    (True, "True"), (None, "None"), (5, "5"), (1.5, "1.5"),
    ({"a": [1, 2]}, "{'a': [1, 2]}"),
    ("two\n  lines", "'two\\n lines'"),  # one line: whitespace runs are one space
    (b"raw", "b'raw'"),
    (2**200, "a 201-bit integer"),
])
def test_values_are_quoted_on_one_line(value: object, text: str) -> None:
    assert shown(value) == text


@pytest.mark.parametrize(("value", "text"), [
    ("node[0-3]", "'node[0-3]'"), (True, "true"), (None, "null"),
    ({"a": [1, 2]}, '{"a": [1, 2]}'), ({"k": "x\n\n y"}, '{"k": "x\\n\\n y"}'),
    ({1, 2}, "{1, 2}"),  # no JSON for it: repr()
])
def test_jobspec_values_are_quoted_as_json(value: object, text: str) -> None:
    assert shown(value, as_json=True) == text


def test_long_values_are_cut_on_one_line() -> None:
    text = shown("x" * 100)
    assert len(text) == LIMIT and text.endswith("...") and text.startswith("'x")
    assert shown({"a": " \n ".join(["y"] * 50)}, limit=20, as_json=True) == \
        '{"a": "y \\n y \\n ...'
    assert "\n" not in shown([" a\n b"] * 30)


def test_no_module_keeps_a_quoting_helper_of_its_own() -> None:
    """Issue 25: thirteen copies of ``_show`` in nine variants became this one."""
    copies = [f"{path.relative_to(ROOT)}:{node.lineno}"
              for path in sorted((ROOT / "fluxes").rglob("*.py"))
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.FunctionDef) and node.name == "_show"]
    assert copies == []
