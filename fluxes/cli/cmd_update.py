"""``fluxes update``: change a pending job's duration, queue or name, as ``flux update``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from fluxes.cli.util import UsageError, die, help_with_example, instance, job_id_arg


def register(subparsers: Any) -> None:
    """Add the ``update`` command."""
    up = subparsers.add_parser("update", **help_with_example(
        "Update an active job: the duration (FSD, or +FSD/-FSD relative to the current\n"
        "one), queue or name of a pending job, all or nothing, with the checks of a\n"
        "submission; the instance owner may also change a running job's duration.",
        ["fluxes update ƒ2t6V2H duration=2h", "fluxes update ƒ2t6V2H duration=+30m name=big",
         "fluxes update -n ƒ2t6V2H queue=debug  # check and print, change nothing"]))
    up.add_argument("-n", "--dry-run", action="store_true",
                    help="check the updates and print them as JSON, change nothing")
    up.add_argument("-v", "--verbose", action="store_true", help="print the updated keys")
    up.add_argument("id", type=job_id_arg, metavar="ID")
    up.add_argument("updates", nargs="+", metavar="KEY=VALUE")
    up.set_defaults(func=_update)


def _update(args: argparse.Namespace) -> int:
    from fluxes.cli.cmd_submit import as_typed
    from fluxes.domain.jm.update import parse_pairs
    from fluxes.store.client import Client

    try:
        updates = parse_pairs(args.updates)
    except ValueError as exc:
        raise UsageError(f"fluxes update: {exc}") from None
    answer = Client(instance(args)).update(int(args.id), updates, dry_run=args.dry_run)
    if answer["errors"]:
        die(as_typed(str(answer["errors"][0]), [args.id]))
    applied = answer.get("updates") or {}
    if args.dry_run:
        sys.stdout.write(orjson.dumps(applied).decode() + "\n")
    elif args.verbose:
        from fluxes.cli.display import fmt_id

        for key, value in applied.items():
            print(f"{fmt_id(int(args.id))}: updated {key} to {orjson.dumps(value).decode()}")
    return 0
