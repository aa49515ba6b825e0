"""A bounded pre-scan of YAML text: nesting depth and aliases, before any YAML library runs.

Jobspecs come from users, so our own limits must hold whatever YAML library
is installed: libyaml 0.2.5 (PyYAML >= 6.0.2 wheels) stops deep flow nesting
with its own message, and a simple key may make a parser read up to 1,024
characters ahead before it hands out the first event, so a check on events
alone is too late. :func:`scan` walks the text once, without recursion, and
tracks only what YAML's indicators decide: block collections by the column
of their ``-``, ``?`` or ``key:``, flow collections by their brackets, and
the scalars (quoted, plain, ``|``/``>`` block scalars, comments) that hide
brackets, quotes and dashes as plain text. Ill-formed text is left to the
YAML parser; the scan only has to be right on what a parser would accept.

It is exact on what YAML emitters write (tested against PyYAML's dumps in
every style) and otherwise errs low: a depth it reports is a depth the
document has, so a document it refuses is one the event check would refuse
too, only with a message that no library version can pre-empt.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = ["Scan", "scan"]

# Where a plain scalar in block context ends or turns out to be a mapping key.
_BLOCK_PLAIN_END: Final = re.compile(r":(?:[ \t]|$)|[ \t]#")
# Where a plain scalar in flow context ends (flow indicators end it too).
_FLOW_PLAIN_END: Final = re.compile(r":(?:[ \t,\[\]{}]|$)|[ \t]#|[,\[\]{}]")
# The rest of a single-quoted scalar up to its closing quote ('' is a quote).
_SINGLE_END: Final = re.compile(r"(?:[^']|'')*+'")
# The rest of a double-quoted scalar up to its closing quote (\" is a quote).
_DOUBLE_END: Final = re.compile(r'(?:[^"\\]|\\.)*+"')
_SPACES: Final = re.compile(r"[ \t]*")
_TOKEN: Final = re.compile(r"[^ \t,\[\]{}]*")


class Scan(NamedTuple):
    """What :func:`scan` found: ``depth`` is the deepest nesting of collections
    (a lower bound, exact on ordinary YAML); ``alias`` is ``(line, column,
    name)`` of the first alias (1-based, as YAML errors say), or None."""

    depth: int
    alias: tuple[int, int, str] | None


class _State:
    """The scanner's position in the document's structure."""

    __slots__ = ("alias", "block", "block_scalar", "depth", "flow", "flow_plain", "limit", "plain",
                 "quote")

    def __init__(self, limit: int) -> None:
        self.block: list[tuple[int, bool]] = []  # (column, is_sequence) of open block collections
        self.flow = 0  # open flow collections
        self.depth = 0
        self.limit = limit
        self.quote = ""  # the quote of a quoted scalar that goes on past the line's end
        self.block_scalar = -2  # content of a | or > scalar: lines indented past this column
        self.plain = -2  # a plain scalar goes on: lines indented past this column
        self.flow_plain = False  # a plain scalar in a flow collection goes on past the line
        self.alias: tuple[int, int, str] | None = None

    def note_depth(self) -> None:
        depth = len(self.block) + self.flow
        self.depth = max(self.depth, depth)

    def block_collection(self, column: int, sequence: bool) -> None:
        """A ``-`` (sequence) or key (mapping) at ``column``: open one, or go on in it."""
        block = self.block
        while block and block[-1][0] > column:
            block.pop()
        if block and block[-1][0] == column:
            if block[-1][1] == sequence:
                return
            if not sequence:
                # a sequence at the column of its mapping's key has ended
                block.pop()
                if block and block[-1][0] == column and not block[-1][1]:
                    return
            elif block[-1][1] is False:
                # "key:\n- item": the sequence is the key's value, at the key's column
                pass
        block.append((column, sequence))
        self.note_depth()


def scan(text: str, limit: int = 1 << 30) -> Scan:
    """Scan YAML ``text`` for its nesting depth and first alias, stopping early.

    The scan stops as soon as the depth passes ``limit`` or an alias is seen
    (the caller refuses the document either way). Runs in time linear in
    the text and never recurses.
    """
    state = _State(limit)
    for number, line in enumerate(text.split("\n"), 1):
        _line(state, number, line.rstrip("\r"))
        if state.depth > limit or state.alias is not None:
            break
    return Scan(state.depth, state.alias)


def _line(state: _State, number: int, line: str) -> None:
    """Scan one line, carrying multi-line scalars and flow collections over."""
    stripped = line.lstrip(" ")
    indent = len(line) - len(stripped)
    if state.block_scalar > -2:
        if not stripped.strip() or indent > state.block_scalar:
            return
        state.block_scalar = -2
    pos = 0
    if state.quote:
        pos = _close_quote(state, line, 0)
        if pos < 0:
            return
        pos = _after_scalar(state, line, pos, indent, number)
        if pos < 0:
            return
    elif state.flow:
        pos = indent
        if state.flow_plain and stripped:
            if stripped.startswith("#"):
                state.flow_plain = False
                return  # a comment ends the scalar
            # the next line of a multi-line plain scalar: quotes and dashes in it are
            # text; only a flow indicator, ": " or " #" ends it
            found = _FLOW_PLAIN_END.search(line, pos)
            if found is None:
                return
            state.flow_plain = False
            pos = found.start() if found.group()[0] != ":" else found.start() + 1
    else:
        if not stripped or stripped.startswith("#"):
            return
        if state.plain > -2 and indent > state.plain:
            # the continuation of a multi-line plain scalar: only text
            return
        state.plain = -2
        if indent == 0 and (line.startswith(("---", "...")) and line[3:4] in ("", " ", "\t")):
            state.block.clear()
            pos = 3
            pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
            if pos >= len(line) or line[pos] == "#":
                return
        elif line.startswith("%"):
            return  # a directive
        else:
            pos = indent
    _tokens(state, number, line, pos)


def _tokens(state: _State, number: int, line: str, pos: int) -> None:
    """Scan the nodes of ``line`` from ``pos`` on."""
    end = len(line)
    while pos < end and state.depth <= state.limit and state.alias is None:
        pos = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
        if pos >= end:
            return
        char = line[pos]
        if char == "#":
            return
        if state.flow:
            pos = _flow_token(state, number, line, pos)
        else:
            pos = _block_token(state, number, line, pos)
        if pos < 0:
            return


def _block_token(state: _State, number: int, line: str, pos: int) -> int:
    """One node start in block context; the position after it, or -1 at the line's end."""
    char = line[pos]
    nxt = line[pos + 1 : pos + 2]
    if char in "-?" and nxt in ("", " ", "\t"):
        state.block_collection(pos, sequence=char == "-")
        return pos + 1
    if char == ":" and nxt in ("", " ", "\t"):
        return pos + 1  # the value of an explicit ("? ") key
    if char in "[{":
        state.flow += 1
        state.note_depth()
        return pos + 1
    if char in "'\"":
        state.quote = char
        after = _close_quote(state, line, pos + 1)
        if after < 0:
            return -1
        return _after_scalar(state, line, after, pos, number)
    if char in "|>":
        state.block_scalar = state.block[-1][0] if state.block else -1
        return -1
    if char == "*":
        state.alias = (number, pos + 1, _TOKEN.match(line, pos + 1).group())  # type: ignore[union-attr]
        return -1
    if char in "&!":
        return _TOKEN.match(line, pos + 1).end()  # type: ignore[union-attr]
    # a plain scalar, or the key of a mapping entry
    found = _BLOCK_PLAIN_END.search(line, pos)
    if found is None or found.group()[0] != ":":
        # a value: it may go on over more-indented lines
        state.plain = state.block[-1][0] if state.block else -1
        return -1
    state.block_collection(pos, sequence=False)
    return found.start() + 1


def _flow_token(state: _State, number: int, line: str, pos: int) -> int:
    """One token in flow context; the position after it, or -1 at the line's end."""
    char = line[pos]
    if char in "[{":
        state.flow += 1
        state.note_depth()
        return pos + 1
    if char in "]}":
        state.flow -= 1
        return pos + 1
    if char in ",?:":
        return pos + 1
    if char in "'\"":
        state.quote = char
        return _close_quote(state, line, pos + 1)
    if char == "*":
        state.alias = (number, pos + 1, _TOKEN.match(line, pos + 1).group())  # type: ignore[union-attr]
        return -1
    if char in "&!":
        return _TOKEN.match(line, pos + 1).end()  # type: ignore[union-attr]
    found = _FLOW_PLAIN_END.search(line, pos)
    if found is None:
        state.flow_plain = True  # it may go on over the next line
        return -1
    return found.start() if found.group()[0] != ":" else found.start() + 1


def _close_quote(state: _State, line: str, pos: int) -> int:
    """The position after the closing quote of the open quoted scalar, or -1 if it goes on."""
    # anchored: a search would restart inside the scalar and misread an escape
    found = (_SINGLE_END if state.quote == "'" else _DOUBLE_END).match(line, pos)
    if found is None:
        return -1
    state.quote = ""
    return found.end()


def _after_scalar(state: _State, line: str, pos: int, column: int, number: int) -> int:
    """After a quoted scalar in block context: a mapping key if ``:`` follows."""
    if state.flow:
        return pos
    rest = _SPACES.match(line, pos).end()  # type: ignore[union-attr]
    if line[rest : rest + 1] == ":" and line[rest + 1 : rest + 2] in ("", " ", "\t"):
        state.block_collection(column, sequence=False)
        return rest + 1
    return -1
