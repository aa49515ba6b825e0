"""``--requires`` expressions, turned into RFC 31 constraint objects.

A subset of flux's RFC 35 syntax: terms joined by ``and``/``&`` (or just
spaces), ``or``/``|``, ``not``, and parentheses; a term is a property name
(``gpu``), a negated property (``^login`` or ``-login``), ``host:HOSTLIST`` or
``rank:IDSET`` (negated with ``-``/``^``/``not:``). Several ``--requires``
options are ANDed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fluxes.formats.constraints import parse as parse_constraint


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


def _tokens(text: str) -> list[str]:
    """Words, with ``(``, ``)``, ``&`` and ``|`` as tokens of their own."""
    return re.findall(r"[()&|]|[^\s()&|]+", text)


class _Parser:
    """Recursive descent over: or := and ('or'|'|' and)*; and := unary (['and'|'&'] unary)*;
    unary := 'not' unary | '(' or ')' | term."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("--requires: expression ends too early")
        self.i += 1
        return token

    def parse_or(self) -> dict[str, Any]:
        terms = [self.parse_and()]
        while self.peek() in ("or", "|"):
            self.take()
            terms.append(self.parse_and())
        return terms[0] if len(terms) == 1 else {"or": terms}

    def parse_and(self) -> dict[str, Any]:
        terms = [self.parse_unary()]
        while self.peek() not in (None, ")", "or", "|"):
            if self.peek() in ("and", "&"):
                self.take()
            terms.append(self.parse_unary())
        return _merge_and(terms)

    def parse_unary(self) -> dict[str, Any]:
        token = self.take()
        if token == "not":
            inner = self.parse_unary()
            if list(inner) == ["properties"] and len(inner["properties"]) == 1 \
                    and not inner["properties"][0].startswith("^"):
                return {"properties": ["^" + inner["properties"][0]]}
            return {"not": [inner]}
        if token == "(":
            inner = self.parse_or()
            if self.take() != ")":
                raise ValueError("--requires: missing ')'")
            return inner
        if token in (")", "and", "&", "or", "|"):
            raise ValueError(f"--requires: unexpected {token!r}")
        return _term(token)


def _merge_and(terms: list[dict[str, Any]]) -> dict[str, Any]:
    """AND of terms, with plain property lists folded into one (RFC 31 ANDs them)."""
    props = [p for c in terms if list(c) == ["properties"] for p in c["properties"]]
    others = [c for c in terms if list(c) != ["properties"]]
    merged: list[dict[str, Any]] = ([{"properties": props}] if props else []) + others
    return merged[0] if len(merged) == 1 else {"and": merged}


def parse_requires(exprs: Iterable[str]) -> dict[str, Any]:
    """The RFC 31 constraint all ``exprs`` describe together; ValueError if malformed."""
    clauses: list[dict[str, Any]] = []
    for expr in exprs:
        tokens = _tokens(expr)
        if not tokens:
            continue
        parser = _Parser(tokens)
        clauses.append(parser.parse_or())
        if parser.peek() is not None:
            raise ValueError(f"--requires: unexpected {parser.peek()!r}")
    if not clauses:
        raise ValueError("--requires: empty expression")
    result = _merge_and(clauses)
    parse_constraint(result)  # check names and values now, with RFC 31's rules
    return result
