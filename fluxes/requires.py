"""``--requires`` expressions, turned into RFC 31 constraint objects.

A small subset of flux's RFC 35 syntax: space-separated terms that must all
hold; a term is a property name (``gpu``), a negated property (``^login`` or
``-login``), ``host:HOSTLIST``, ``rank:IDSET``, optionally negated with
``-``/``^``/``not:``; ``|`` between terms means or. Several ``--requires``
options are ANDed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fluxes.constraints import parse as parse_constraint


def _term(text: str) -> dict[str, Any]:
    negate = False
    for prefix in ("not:", "-", "^"):
        if text.startswith(prefix):
            negate, text = True, text[len(prefix):]
            break
    if not text:
        raise ValueError("--requires: empty term")
    kind, sep, value = text.partition(":")
    if sep and kind in ("host", "hosts", "hostlist"):
        obj: dict[str, Any] = {"hostlist": [value]}
    elif sep and kind in ("rank", "ranks"):
        obj = {"ranks": [value]}
    elif sep:
        raise ValueError(f"--requires: unknown operator {kind!r} in {text!r}")
    else:
        return {"properties": [("^" if negate else "") + text]}
    return {"not": [obj]} if negate else obj


def parse_requires(exprs: Iterable[str]) -> dict[str, Any]:
    """The RFC 31 constraint all ``exprs`` describe together; ValueError if malformed."""
    clauses: list[dict[str, Any]] = []
    for expr in exprs:
        for group in expr.split():
            alternatives = [a for a in group.split("|") if a]
            if not alternatives:
                continue
            terms = [_term(a) for a in alternatives]
            clauses.append(terms[0] if len(terms) == 1 else {"or": terms})
    if not clauses:
        raise ValueError("--requires: empty expression")
    props = [p for c in clauses if list(c) == ["properties"] for p in c["properties"]]
    others = [c for c in clauses if list(c) != ["properties"]]
    merged: list[dict[str, Any]] = ([{"properties": props}] if props else []) + others
    result = merged[0] if len(merged) == 1 else {"and": merged}
    parse_constraint(result)  # check names and values now, with RFC 31's rules
    return result
