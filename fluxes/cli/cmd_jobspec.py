"""``fluxes jobspec``: work with RFC 14 jobspec files."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fluxes.cli.util import add_subcommands, help_with_example


def register(subparsers: Any) -> None:
    """Add the ``jobspec`` command group."""
    parser = subparsers.add_parser(
        "jobspec", **help_with_example(
            "Validate and inspect RFC 14 jobspecs.",
            ["fluxes jobspec validate job.yaml", "fluxes jobspec validate --v1 *.yaml"],
        ),
    )
    sub = add_subcommands(parser, "jobspec commands")
    validate = sub.add_parser(
        "validate", **help_with_example(
            "Validate jobspec files; print one 'FILE: reason' line per invalid file.\n"
            "Exit status is 0 when every file is valid, 1 otherwise.",
            ["fluxes jobspec validate job.yaml", "fluxes jobspec validate --v1 a.yaml b.yaml"],
        ),
    )
    validate.add_argument("--v1", action="store_true", help="also check RFC 25 jobspec V1")
    validate.add_argument("-q", "--quiet", action="store_true",
                          help="print nothing for valid files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    """Validate each file and report one line per file."""
    from fluxes.formats.jobspec import Jobspec

    failed = 0
    for path in args.files:
        try:
            spec = Jobspec.from_file(path, v1=args.v1)
        except ValueError as exc:
            failed += 1
            # An unreadable file's message already starts with the path.
            line = str(exc) if isinstance(exc.__cause__, OSError) else f"{path}: {exc}"
            print(line, file=sys.stderr)
            continue
        for warning in spec.warnings:
            print(f"{path}: warning: {warning}", file=sys.stderr)
        if not args.quiet:
            print(f"{path}: valid")
    return 1 if failed else 0
