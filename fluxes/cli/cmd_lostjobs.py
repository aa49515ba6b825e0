"""``fluxes admin lost-jobs``: the acknowledged jobs a Redis crash lost, by id.

The ingest records every job id it answers with before it answers, and
compares the record with Redis when it (re)connects
(:mod:`fluxes.store.acklog`); the jobs Redis no longer holds are listed here
(and counted by ``fluxes status``) until the instance owner clears them.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from fluxes.cli.util import help_with_example, instance, job_id_arg, print_json


def register(sub: Any, owner_only: Any) -> None:
    """Add ``lost-jobs`` to the ``fluxes admin`` command group ``sub``."""
    lp = sub.add_parser("lost-jobs", **help_with_example(
        "List the acknowledged jobs Redis lost in a crash (an AOF cut back to its last\n"
        "fsync under 'appendfsync everysec'): each one's id, owner, request, when it was\n"
        "found and by which ingest worker. They stay listed (and make 'fluxes status'\n"
        "fail) until cleared with --clear (every one, or the ids given).",
        ["fluxes admin lost-jobs", "fluxes admin lost-jobs --json",
         "fluxes admin lost-jobs --clear", "fluxes admin lost-jobs --clear ƒ2t6V2H"]))
    lp.add_argument("--json", action="store_true")
    lp.add_argument("--clear", action="store_true",
                    help="forget the lost jobs listed (all, or the IDs given)")
    lp.add_argument("ids", nargs="*", metavar="ID", type=job_id_arg,
                    help="with --clear: only these jobs")
    lp.set_defaults(func=owner_only(_lost_jobs))


def _lost_jobs(args: argparse.Namespace) -> int:
    """List (or clear) the lost jobs."""
    from fluxes.cli.util import die
    from fluxes.formats.jobid import encode
    from fluxes.store.acklog import clear_lost_jobs, lost_jobs

    inst = instance(args)
    if args.ids and not args.clear:
        die("job ids go with --clear")
    if args.clear:
        n = clear_lost_jobs(inst.redis, inst.keys, [int(j) for j in args.ids] or None)
        if args.json:
            print_json({"cleared": n})
        else:
            print(f"forgot {n} lost jobs")
        return 0
    lost = lost_jobs(inst.redis, inst.keys)
    if args.json:
        print_json({"lost": [{"id": jobid, "f58": encode(jobid, "f58"), **_known(info)}
                             for jobid, info in lost.items()]})
        return 0
    if not lost:
        print("no acknowledged job was lost")
        return 0
    from fluxes.cli.display import table

    rows = [[encode(jobid, "f58"), str(info.get("user", "-")), str(info.get("req", "-")),
             str(info.get("partition", "-")), _when(info.get("found")),
             str(info.get("by", "-"))] for jobid, info in lost.items()]
    print("\n".join(table(["JOBID", "USER", "REQUEST", "PARTITION", "FOUND", "BY"], rows)))
    return 0


def _known(info: dict[str, Any]) -> dict[str, Any]:
    """The recorded facts a JSON reader gets (what the ingest wrote, by name)."""
    return {k: info.get(k) for k in ("user", "req", "partition", "journal", "found", "by")}


def _when(stamp: Any) -> str:
    """A recorded UNIX time as local date and time ('-' when absent)."""
    if not isinstance(stamp, int | float):
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(stamp))
