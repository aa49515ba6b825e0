"""``fluxes bulksubmit``: one job per input (or combination of inputs), as flux's.

Inputs come from stdin (one per line) or from the command line after
``:::`` (a list), ``::::`` (files, one input a line; ``-`` is stdin), each
combined with the others (every combination), or linked to the list before
it with ``:::+``/``::::+`` (taken in step, cycled when shorter). The command
and every option value are templates for Python's ``str.format``: ``{}`` or
``{N}`` the inputs, ``{seq}``/``{seq1}`` the job's number from 0/1, and
``{.%}`` (no extension), ``{./}`` (basename), ``{./%}``, ``{.//}`` (dirname)
also with an index (``{1./}``). Mustache templates of output paths
(``{{id}}``...) are left for the exec workers.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from fluxes.cli.util import UsageError, help_with_example, instance

#: Delimiters of input lists on the command line: (reads files, linked).
DELIMITERS = {":::": (False, False), ":::+": (False, True), "::::": (True, False),
              "::::+": (True, True)}
#: Most jobs one bulksubmit creates (a typo in a list must not flood the instance).
MAX_JOBS = 1_000_000
#: Mustache templates the exec workers expand, kept as they are.
_MUSTACHE = re.compile(r"\{\{(?:id|jobid|name|taskid|rank|node|cc)(?:\.[A-Za-z0-9]+)?\}\}")


class Input(str):
    """One input, with flux's path attributes for ``str.format``."""

    def __getattr__(self, name: str) -> str:
        if name == "%":
            return os.path.splitext(self)[0]
        if name == "/":
            return os.path.basename(self)
        if name == "/%":
            return os.path.splitext(os.path.basename(self))[0]
        if name == "//":
            return os.path.dirname(self)
        raise AttributeError(f"input has no attribute {name!r} (use %, /, /%, //)")


def register(subparsers: Any) -> None:
    """Add ``bulksubmit``."""
    from fluxes.cli.cmd_submit import add_job_options
    from fluxes.cli.submitwait import add_cc_options, add_wait_options

    bp = subparsers.add_parser("bulksubmit", **help_with_example(
        "Submit one job per input, like 'flux bulksubmit' (and GNU parallel): inputs from\n"
        "stdin, one a line, or after ':::' (a list), '::::' (files); ':::+' links a list\n"
        "to the previous one instead of combining them. {} or {N} in the command and\n"
        "the options is the input, {seq}/{seq1} the job's number, {.%} {./} {./%} {.//}\n"
        "the input without extension, its basename, both, its dirname.",
        ["seq 1 4 | fluxes bulksubmit echo {}",
         "fluxes bulksubmit -n {} hostname ::: 1 2 4",
         "fluxes bulksubmit --dry-run echo {0} {1} ::: a b ::: x y",
         "fluxes bulksubmit --output=out-{./%}.txt ./process {} :::: files.txt"]))
    add_job_options(bp)
    # the option values are templates: checked once substituted
    types = {}
    for action in bp._actions:
        if action.type is not None:
            types[action.dest] = action.type
            action.type = None
    bp.set_defaults(_types=types)
    bp.add_argument("--dry-run", action="store_true",
                    help="print what would be submitted, submit nothing")
    bp.add_argument("--progress", action="store_true", help="show a progress bar")
    add_cc_options(bp)
    add_wait_options(bp)
    bp.add_argument("--define", metavar="NAME=CODE",
                    help="not supported (flux evaluates Python code here)")
    bp.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND... [::: INPUTS...]")
    bp.set_defaults(func=_bulksubmit)


def split_inputs(words: Sequence[str], stdin: TextIO | None,
                 read_file: Callable[[str], list[str]]) -> tuple[list[str], list[list[str]],
                                                                 list[bool]]:
    """The command template, the input lists and which of them are linked to the one
    before; without any delimiter, one list read from ``stdin``."""
    template: list[str] = []
    lists: list[list[str]] = []
    linked: list[bool] = []
    files = False
    for word in words:
        if word in DELIMITERS:
            files, link = DELIMITERS[word]
            if link and not lists:
                raise UsageError(f"fluxes bulksubmit: {word} links to a list before it: "
                                 "there is none")
            lists.append([])
            linked.append(link)
        elif not lists:
            template.append(word)
        elif files:
            lists[-1].extend(read_file(word))
        else:
            lists[-1].append(word)
    if not lists:
        if stdin is None:
            raise UsageError("fluxes bulksubmit: no inputs (give ::: lists, or pipe them in)")
        lists, linked = [_lines(stdin)], [False]
    for got in lists:
        if not got:
            raise UsageError("fluxes bulksubmit: an input list is empty")
    return template, lists, linked


def _lines(stream: TextIO) -> list[str]:
    return [line for line in stream.read().splitlines() if line]


def combinations(lists: Sequence[list[str]], linked: Sequence[bool]) -> Iterator[list[str]]:
    """Every combination of the input lists, in order (the last list varies fastest); a
    linked list goes in step with the one before it, cycled when shorter."""
    groups: list[list[list[str]]] = []
    for items, link in zip(lists, linked, strict=True):
        if link:
            base = groups[-1]
            for row, value in zip(base, itertools.cycle(items)):
                row.append(value)
        else:
            groups.append([[value] for value in items])
    for combo in itertools.product(*groups):
        yield [value for row in combo for value in row]


def substitute(template: str, inputs: Sequence[str], seq: int) -> str:
    """``template`` with the inputs, ``{seq}``/``{seq1}`` and the path attributes
    filled in; UsageError for a template they cannot fill."""
    text = _MUSTACHE.sub(lambda m: m.group(0).replace("{", "{{").replace("}", "}}"),
                         template)
    try:
        # {cc} is left for --cc, which fills it in per copy
        return text.format(*[Input(v) for v in inputs], seq=seq, seq1=seq + 1, cc="{cc}")
    except IndexError:
        raise UsageError(f"fluxes bulksubmit: {template!r} names an input beyond the "
                         f"{len(inputs)} given") from None
    except KeyError as exc:
        raise UsageError(f"fluxes bulksubmit: {template!r}: unknown name {exc}") from None
    except (ValueError, AttributeError) as exc:
        raise UsageError(f"fluxes bulksubmit: {template!r}: {exc}") from None


def expand(args: argparse.Namespace, template: list[str], inputs: Sequence[str],
           seq: int) -> tuple[argparse.Namespace, list[str], list[str]]:
    """The submit options and command of one job: every text substituted, then
    converted as ``submit`` converts it; also the options that were templates, as
    ``--name=value`` words (what ``--dry-run`` shows of them)."""
    ns = copy.copy(args)
    shown: list[str] = []
    types: dict[str, Callable[[str], Any]] = args._types
    for dest, value in vars(args).items():
        if dest.startswith("_") or dest in ("command", "func", "dry_run", "progress", "wait",
                                            "watch", "quiet", "log", "log_stderr"):
            continue
        new: Any = value
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, str):
            new = substitute(value, inputs, seq)
            if new != value:
                shown.append(f"{flag}={new}")
            convert = types.get(dest)
            if convert is not None:
                try:
                    new = convert(new)
                except (argparse.ArgumentTypeError, ValueError) as exc:
                    raise UsageError(f"fluxes bulksubmit: {flag} {new!r}: {exc}") from None
        elif isinstance(value, list):
            new = [substitute(v, inputs, seq) if isinstance(v, str) else v for v in value]
            shown += [f"{flag}={n}" for n, v in zip(new, value, strict=True) if n != v]
        setattr(ns, dest, new)
    return ns, [substitute(word, inputs, seq) for word in template], shown


def _read_file(path: str) -> list[str]:
    if path == "-":
        return _lines(sys.stdin)
    try:
        with open(path, encoding="utf-8") as handle:
            return _lines(handle)
    except OSError as exc:
        raise UsageError(f"fluxes bulksubmit: {path}: {exc.strerror}") from None


def _bulksubmit(args: argparse.Namespace) -> int:
    from fluxes.cli.cmd_submit import _cc_copies, build_jobspec
    from fluxes.cli.progress import Progress
    from fluxes.domain.jm.priority import parse_urgency

    if args.define is not None:
        raise UsageError("fluxes bulksubmit: --define is not supported (it runs Python code); "
                         "compute the values and pass them as inputs")
    words = list(args.command)
    if words[:1] == ["--"]:
        words = words[1:]
    stdin = None if sys.stdin is None or sys.stdin.isatty() else sys.stdin
    template, lists, linked = split_inputs(words, stdin, _read_file)
    if not template:
        raise UsageError("fluxes bulksubmit: no command given")
    total = 1
    for values, link in zip(lists, linked, strict=True):
        total *= 1 if link else len(values)
    if total > MAX_JOBS:
        raise UsageError(f"fluxes bulksubmit: {total} jobs, at most {MAX_JOBS} at once")
    items: list[dict[str, Any]] = []
    for seq, inputs in enumerate(combinations(lists, linked)):
        ns, command, shown = expand(args, template, inputs, seq)
        if args.dry_run:
            print(f"bulksubmit: submit {shlex.join(shown + command)}")
            continue
        urgency = None if ns.urgency is None else parse_urgency(ns.urgency)
        spec = build_jobspec(ns, command)
        cc = ns.cc if ns.cc is not None else ns.bcc
        if cc is None:
            items.append({"jobspec": spec, "urgency": urgency})
        else:
            fallback = urgency if urgency is not None else spec.urgency
            items += [{"jobspec": c, "urgency": fallback}
                      for c in _cc_copies(spec, cc, ns.bcc is None)]
    if args.dry_run:
        return 0
    from fluxes.cli.submitwait import finish
    from fluxes.store.client import Client

    inst = instance(args)
    bar = Progress("submit", len(items), enabled=args.progress)
    results = Client(inst).submit(items, progress=bar.update)
    bar.done()
    return finish(args, inst, results)
