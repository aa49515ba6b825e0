"""Bounds checked on raw bytes before any JSON parser runs.

A JSON parser recurses once per nesting level, and so does whatever walks
the result (``repr``, ``orjson.dumps``, which refuses more than 254 levels).
One entry nested a few hundred levels deep is enough to make a worker raise
on every attempt, so each decoder first checks the entry's size and then its
nesting depth with :func:`nesting_depth`, a scan of the bytes that never
recurses: strings are taken out, brackets are kept, and one level of empty
pairs is removed per pass (each pass is one C-level ``bytes.replace``).
"""

from __future__ import annotations

from typing import Any

import orjson


class MessageError(ValueError):
    """A stream entry or message does not follow the protocol (one line)."""


#: Longest reason a MessageError carries: a reason quotes input shortened, never whole.
MAX_REASON = 300

_BRACKETS = bytes.maketrans(b"[{]}", b"(())")
#: everything but brackets and quotes: what the depth scan deletes
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'[]{}"')


def nesting_depth(raw: bytes, bound: int) -> int:
    """How deeply the containers of the JSON text ``raw`` nest, counted up to ``bound + 1``.

    Returns the depth when it is at most ``bound``, else ``bound + 1``; raises
    MessageError when the brackets or quotes do not pair up (not JSON).
    A text holding at most ``bound`` bytes, or brackets, cannot nest deeper
    and is not scanned further: 0 is then returned. Bracket kinds are not
    told apart: a parser recurses at most as deep as the brackets nest,
    whatever their kinds.
    """
    if len(raw) <= bound or raw.count(b"[") + raw.count(b"{") <= bound:
        # no more opening brackets than the bound (those in strings counted too):
        # it cannot nest deeper, and the parser finds any other fault
        return 0
    if b"\\" in raw:
        # an escaped backslash first, then an escaped quote: left to right, as
        # a parser pairs a run of backslashes
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = raw.translate(_BRACKETS, _NOT_STRUCTURE)
    if len(shape) <= bound:
        return 0
    # Strings without brackets are now '""'; removing a closing quote with the
    # next opening one only merges two strings, so either way the remaining
    # quotes still alternate.
    shape = shape.replace(b'""', b"")
    if b'"' in shape:
        shape = _strip_strings(shape)
    for depth in range(bound + 1):
        if not shape:
            return depth
        inner = shape.replace(b"()", b"")
        if len(inner) == len(shape):
            raise MessageError("not JSON: unbalanced brackets")
        shape = inner
    return bound + 1


def _strip_strings(shape: bytes) -> bytes:
    """``shape`` without its quoted parts (strings holding brackets)."""
    parts = shape.split(b'"')
    if len(parts) % 2 == 0:
        raise MessageError("not JSON: unterminated string")
    return b"".join(parts[::2])


def check_bounds(raw: bytes, max_bytes: int, max_depth: int, what: str) -> None:
    """MessageError unless ``raw`` has at most ``max_bytes`` bytes and ``max_depth`` levels."""
    if len(raw) > max_bytes:
        raise MessageError(f"{what}: entry is {len(raw)} bytes, the limit is {max_bytes}")
    try:
        depth = nesting_depth(raw, max_depth)
    except MessageError as exc:
        raise MessageError(f"{what}: {exc}") from None
    if depth > max_depth:
        raise MessageError(f"{what}: entry is nested more than {max_depth} levels deep")


def loads_bounded(raw: bytes, max_bytes: int, max_depth: int, what: str) -> Any:
    """Free-form JSON after :func:`check_bounds`; MessageError when it is not JSON."""
    check_bounds(raw, max_bytes, max_depth, what)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MessageError(f"{what}: not JSON: {one_line(str(exc))}") from None


def one_line(text: str, limit: int = MAX_REASON) -> str:
    """``text`` as one line of at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."
