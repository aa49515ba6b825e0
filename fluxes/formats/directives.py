"""Submission directives in batch scripts: RFC 36 ``#FLUX:`` lines and Slurm's ``#SBATCH``.

:func:`flux_directives` reads RFC 36 directives: a line whose start is a
prefix of non-word characters and the tag ``FLUX:`` or ``flux:`` (the
*sentinel*; every directive of a file uses the same one), POSIX shell
quoting, ``#`` comments, triple-quoted strings on one line or over several
directive lines (indentation common to the lines stripped, the newline after
the opening quotes dropped). Processing stops at the first non-blank line
not starting with the sentinel's prefix; a directive after that is an error.

:func:`sbatch_directives` reads the common subset of ``#SBATCH`` lines (an
extension: flux does not) until the first line that is neither blank nor a
comment, as Slurm does, and translates them to fluxes options; an option
outside the subset is an error naming it.

Both return option words for the submitting command (``["-N2",
"--job-name=x"]``); bad input raises ValueError with a one-line message
naming the line.
"""

from __future__ import annotations

import re
import shlex
import textwrap

_SENTINEL = re.compile(r"^(\W*)(flux|FLUX):")
_TRIPLE = re.compile(r"(\"\"\"|''')")


def _split(text: str, lineno: int) -> list[str]:
    """Shell words of a directive (``#`` starts a comment); ValueError naming the line."""
    try:
        return shlex.split(text, comments=True, posix=True)
    except ValueError as exc:
        raise ValueError(f"line {lineno}: directive {text.strip()!r}: {exc}") from None


def _inline_triples(text: str, lineno: int) -> str:
    """``text`` with every one-line triple-quoted string turned into a shell-quoted word."""
    out: list[str] = []
    rest = text
    while True:
        match = _TRIPLE.search(rest)
        if match is None:
            out.append(rest)
            return "".join(out)
        quote = match.group(1)
        end = rest.find(quote, match.end())
        if end < 0:
            raise ValueError(f"line {lineno}: unterminated {quote} in directive")
        out.append(rest[:match.start()])
        out.append(shlex.quote(rest[match.end():end]))
        rest = rest[end + len(quote):]


def flux_directives(script: str) -> list[str]:
    """The option words of ``script``'s RFC 36 directives, in order (see the module doc)."""
    words: list[str] = []
    prefix: str | None = None
    tag = ""
    stopped_at = 0
    lines = script.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        lineno = i + 1
        i += 1
        match = _SENTINEL.match(line)
        if prefix is None:
            if match is None:
                continue
            prefix, tag = match.group(1), match.group(2)
        if stopped_at:
            if match is not None:
                raise ValueError(f"line {lineno}: directive after directives ended at line "
                                 f"{stopped_at} (RFC 36: keep directives together)")
            continue
        if match is None:
            if line.strip() and not line.startswith(prefix):
                stopped_at = lineno
            continue
        if match.group(1) != prefix or match.group(2) != tag:
            raise ValueError(f"line {lineno}: sentinel {match.group(0)!r} differs from the "
                             f"first directive's {prefix + tag + ':'!r}")
        body = line[match.end():]
        opener = _TRIPLE.search(body)
        if opener is not None and body.rstrip().endswith(opener.group(1)) \
                and body.count(opener.group(1)) % 2 == 1:
            # a multi-line literal: every line up to the closing quotes is a directive
            quote = opener.group(1)
            head = body.rstrip()[:-len(quote)]
            literal: list[str] = []
            while True:
                if i >= len(lines):
                    raise ValueError(f"line {lineno}: unterminated {quote} in directive")
                inner = lines[i]
                i += 1
                if not inner.startswith(prefix + tag + ":"):
                    raise ValueError(f"line {i}: a multi-line directive's lines must all "
                                     f"start with {prefix + tag + ':'!r}")
                content = inner[len(prefix) + len(tag) + 1:]
                if content.strip() == quote:
                    break
                literal.append(content)
            text = textwrap.dedent("\n".join(literal) + "\n") if literal else ""
            words += _split(_inline_triples(head, lineno) + shlex.quote(text), lineno)
            continue
        words += _split(_inline_triples(body, lineno), lineno)
    return words


#: ``#SBATCH`` options fluxes understands: Slurm spelling -> (fluxes option, takes a value).
_SBATCH: dict[str, str] = {
    "-N": "--nodes", "--nodes": "--nodes",
    "-n": "--ntasks", "--ntasks": "--ntasks",
    "-c": "--cores-per-task", "--cpus-per-task": "--cores-per-task",
    "-t": "--time-limit", "--time": "--time-limit",
    "-J": "--job-name", "--job-name": "--job-name",
    "-o": "--output", "--output": "--output",
    "-e": "--error", "--error": "--error",
    "-p": "--queue", "--partition": "--queue",
    "--gpus-per-task": "--gpus-per-task",
}
#: Slurm's filename patterns with a fluxes equivalent.
_PATTERNS = {"%j": "{{id}}", "%x": "{{name}}", "%%": "%"}


def _output_template(value: str, lineno: int) -> str:
    """A Slurm output filename pattern as a fluxes template (%j, %x, %%)."""
    out = []
    i = 0
    while i < len(value):
        pair = value[i:i + 2]
        if value[i] == "%":
            if pair not in _PATTERNS:
                raise ValueError(f"line {lineno}: #SBATCH filename pattern {pair!r} is not "
                                 "supported (use %j, %x or %%)")
            out.append(_PATTERNS[pair])
            i += 2
            continue
        out.append(value[i])
        i += 1
    return "".join(out)


def sbatch_directives(script: str) -> list[str]:
    """The fluxes option words of ``script``'s ``#SBATCH`` lines (see the module doc)."""
    words: list[str] = []
    for lineno, line in enumerate(script.splitlines(), 1):
        stripped = line.strip()
        if lineno == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # Slurm stops at the first command
        if not stripped.startswith("#SBATCH"):
            continue
        rest = stripped[len("#SBATCH"):]
        if rest and not rest[0].isspace():
            continue  # e.g. #SBATCHX: not a directive
        tokens = _split(rest, lineno)
        j = 0
        while j < len(tokens):
            token = tokens[j]
            j += 1
            name, eq, value = token.partition("=") if token.startswith("--") else \
                (token[:2], "", token[2:])
            if name not in _SBATCH:
                raise ValueError(f"line {lineno}: #SBATCH {name} is not supported (fluxes "
                                 "reads -N -n -c -t -J -o -e -p --gpus-per-task)")
            if not (eq or value):
                if j >= len(tokens):
                    raise ValueError(f"line {lineno}: #SBATCH {name} needs a value")
                value = tokens[j]
                j += 1
            option = _SBATCH[name]
            if option == "--nodes" and not value.isdigit():
                raise ValueError(f"line {lineno}: #SBATCH {name} {value}: want a node count "
                                 "(ranges such as 2-4 are not supported)")
            if option in ("--output", "--error"):
                value = _output_template(value, lineno)
            words.append(f"{option}={value}")
    return words


def script_directives(script: str) -> list[str]:
    """Every directive of ``script`` as option words: ``#SBATCH`` first, then ``#FLUX:``,
    so an RFC 36 directive wins over a Slurm one for the same option."""
    return [*sbatch_directives(script), *flux_directives(script)]
