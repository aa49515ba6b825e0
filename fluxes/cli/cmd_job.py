"""``fluxes job``: per-job commands (ids for now; eventlogs and more follow)."""

from __future__ import annotations

import argparse
from typing import Any

from fluxes import jobid
from fluxes.cli.util import add_subcommands, help_with_example


def register(subparsers: Any) -> None:
    """Add the ``job`` command group."""
    parser = subparsers.add_parser(
        "job", **help_with_example("Per-job commands.", ["fluxes job id --to=f58 123456789"]),
    )
    sub = add_subcommands(parser, "job commands")
    idp = sub.add_parser(
        "id", **help_with_example(
            "Convert job ids between encodings, like 'flux job id'.\n"
            "Any encoding is accepted as input.",
            ["fluxes job id --to=f58 1234567890", "fluxes job id --to=dec ƒ2t6V2H"],
        ),
    )
    idp.add_argument("--to", choices=jobid.FORMS, default="dec",
                     help="output encoding (default dec)")
    idp.add_argument("ids", nargs="+", metavar="ID")
    idp.set_defaults(func=_job_id)


def _job_id(args: argparse.Namespace) -> int:
    """Print each id in the requested encoding; stop at the first bad one."""
    for text in args.ids:
        print(jobid.encode(jobid.parse(text), args.to))
    return 0
