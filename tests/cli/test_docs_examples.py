"""Every ``fluxes ...`` command line in docs/cli.md parses with the real CLI parser.

The command lines are taken from the fenced code blocks of the page (lines
starting with ``$ fluxes `` or ``fluxes ``, with ``\\`` continuations
joined; in a block that uses ``$ `` prompts only prompted lines count, so
output such as ``fluxes worker: ...`` is not taken for a command), cut at
the first shell operator (``|``, ``>``, ``;``, ``&&``...),
and given to ``build_parser().parse_args`` without running anything. A
``fluxes`` command after ``--`` (``fluxes start -- fluxes run ...``) is
checked on its own as well. A second test makes sure every command and
subcommand of the CLI appears in the page, so new commands get documented.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from fluxes.cli.main import build_parser
from fluxes.cli.util import UsageError

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
FENCE = re.compile(r"^\s*(```|~~~)")
#: Shell operators that end the fluxes command on a line.
OPERATORS = frozenset({"|", "||", "&", "&&", ";", ">", ">>", "<", "(", ")"})


def doc_command_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, command line)`` for every fluxes command in a fenced block."""
    out: list[tuple[int, str]] = []
    in_block = False
    prompted = False
    pending: tuple[int, str] | None = None
    lines = text.splitlines()
    for index, raw in enumerate(lines):
        number = index + 1
        if FENCE.match(raw):
            in_block = not in_block
            pending = None
            if in_block:
                prompted = _uses_prompts(lines[index + 1:])
            continue
        if not in_block:
            continue
        line = raw.strip()
        if pending is not None:
            start, head = pending
            joined = head + " " + line
            if joined.endswith("\\"):
                pending = (start, joined[:-1].rstrip())
            else:
                out.append((start, joined))
                pending = None
            continue
        if line.startswith("$ "):
            line = line[2:].lstrip()
        elif prompted:
            continue  # output of a prompted command
        if not line.startswith("fluxes "):
            continue
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
        else:
            out.append((number, line))
    return out


def _uses_prompts(rest: list[str]) -> bool:
    """Whether the code block starting ``rest`` (up to its closing fence) has ``$ `` lines."""
    for raw in rest:
        if FENCE.match(raw):
            return False
        if raw.lstrip().startswith("$ "):
            return True
    return False


def split_command(line: str) -> list[str]:
    """Shell words of ``line`` up to the first operator; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for word in lexer:
        if word in OPERATORS or (word and set(word) <= set("|&;<>()")):
            break
        words.append(word)
    return words


def argv_lists(words: list[str]) -> list[list[str]]:
    """The argument lists to parse: the command, and a nested ``fluxes`` after ``--``."""
    assert words[:1] == ["fluxes"], words
    argvs = [words[1:]]
    if "--" in words:
        rest = words[words.index("--") + 1:]
        if rest[:1] == ["fluxes"]:
            argvs.extend(argv_lists(rest))
    return argvs


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` like ``fluxes`` does, turning any refusal into a test failure."""
    try:
        return build_parser().parse_args(argv)
    except (UsageError, SystemExit) as exc:
        pytest.fail(f"'fluxes {shlex.join(argv)}' does not parse: {exc}")


COMMANDS = doc_command_lines(DOC.read_text(encoding="utf-8"))


def test_the_page_has_commands() -> None:
    assert len(COMMANDS) >= 100, "docs/cli.md lost its examples, or the extraction broke"


@pytest.mark.parametrize(("number", "line"), COMMANDS,
                         ids=[f"cli.md:{n}" for n, _ in COMMANDS])
def test_documented_command_parses(number: int, line: str) -> None:
    words = split_command(line)
    for argv in argv_lists(words):
        args = parse(argv)
        assert callable(getattr(args, "func", None)), f"line {number}: no command selected"


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
                   ) -> list[tuple[str, ...]]:
    """Every command path of the parser tree: ('start',), ('job', 'id'), ..."""
    paths: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = (*prefix, name)
                children = _command_paths(sub, path)
                paths.extend(children if children else [path])
    return paths


def test_every_command_is_documented() -> None:
    documented: set[tuple[str, ...]] = set()
    for _number, line in COMMANDS:
        for argv in argv_lists(split_command(line)):
            words = [w for w in argv if not w.startswith("-")]
            documented.update(tuple(words[:i]) for i in range(1, 3))
    for path in _command_paths(build_parser()):
        assert path in documented, f"'fluxes {' '.join(path)}' has no example in docs/cli.md"
