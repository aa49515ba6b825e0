"""``fluxes job purge``: remove inactive jobs, by age, by number or by id, like
``flux job purge`` (instance owner only).

Without ``--force`` nothing is removed: the command says how many jobs would
go. A purged job is gone from every key, the job list and every replay
(fluxes/store/retention.py); the job-list worker purges by the configured
``[job-manager] inactive-age-limit`` and ``inactive-num-limit`` on its own.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli.display import shown_id
from fluxes.cli.util import PROG, die, help_with_example, instance, job_id_arg, whole_number

if TYPE_CHECKING:
    from fluxes.store.instance import Instance
    from fluxes.store.retention import PurgeResult

#: Jobs read from the inactive index and purged per step.
BATCH = 500


def register(sub: Any) -> None:
    """Add ``purge`` to the ``fluxes job`` command group ``sub``."""
    p = sub.add_parser("purge", **help_with_example(
        "Purge inactive jobs: every key, the job list entry and the journal history of\n"
        "each (the journal is archived first, see docs/operations.md). Without IDs, the\n"
        "jobs inactive for longer than --age-limit and the oldest beyond --num-limit.\n"
        "Without --force, only say how many would go. Instance owner only.",
        ["fluxes job purge --age-limit=7d", "fluxes job purge --num-limit=1000 --force",
         "fluxes job purge --force ƒ2t6V2H ƒ2t6V2J"]))
    p.add_argument("--age-limit", type=_duration, default=None, metavar="FSD",
                   help="jobs that became inactive longer ago than this")
    p.add_argument("--num-limit", type=whole_number(0), default=None, metavar="COUNT",
                   help="the oldest inactive jobs until COUNT are left")
    p.add_argument("-f", "--force", action="store_true", help="purge (cannot be undone)")
    p.add_argument("ids", nargs="*", type=job_id_arg, metavar="ID")
    p.set_defaults(func=_purge)


def _duration(text: str) -> float:
    """argparse type: an RFC 23 duration."""
    from fluxes.formats.fsd import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None



def _check_owner(inst: Instance) -> None:
    """Only the instance owner purges (Redis refuses a user's ACL anyway)."""
    import os

    owner, owner_uid = inst.owner()
    allowed = inst.user == owner if inst.user is not None else os.getuid() == owner_uid
    if not allowed:
        die("only the instance owner can purge jobs")


def _purge(args: argparse.Namespace) -> int:
    from fluxes.store.errors import NoPermissionError

    inst = instance(args)
    _check_owner(inst)
    try:
        if args.ids:
            if args.age_limit is not None or args.num_limit is not None:
                die("give job ids or limits, not both")
            return _purge_ids(inst, list(args.ids), args.force)
        return _purge_limits(inst, args.age_limit, args.num_limit, args.force)
    except NoPermissionError:
        die("only the instance owner (full Redis access) can purge jobs")


def _inactive_total(inst: Instance) -> int:
    from fluxes.store.joblist import JobListStore
    from fluxes.store.retention import inactive_index

    JobListStore(inst.redis, inst.keys).catch_up(timeout=2.0)
    return inactive_index(inst.redis, inst.keys, 0)[0]


def _finish(inst: Instance, force: bool, count: int) -> None:
    from fluxes.store.children import ChildSweeper

    if force and count:
        # the purged batch jobs' child instances (and theirs) go before we return
        ChildSweeper(inst.redis, inst.keys).run()
    left = _inactive_total(inst)
    if force:
        print(f"purged {count} inactive jobs; {left} inactive jobs remain")
    else:
        print(f"{count} of {left} inactive jobs would be purged (--force purges them)")


def _purge_ids(inst: Instance, ids: list[int], force: bool) -> int:
    from fluxes.store.retention import PurgeResult, purge

    if force:
        result = purge(inst.redis, inst.keys, ids)
    else:
        result = PurgeResult()
        _classify(inst, ids, result)
    for jobid, event in result.active.items():
        print(f"{PROG} job purge: {shown_id(jobid)}: job is active (last event {event}), "
              "not purged", file=sys.stderr)
    for jobid in result.unknown:
        print(f"{PROG} job purge: {shown_id(jobid)}: no such job", file=sys.stderr)
    _finish(inst, force, len(result.purged) if force else
            len(ids) - len(result.active) - len(result.unknown))
    return 1 if result.active or result.unknown else 0


def _classify(inst: Instance, ids: list[int], result: PurgeResult) -> None:
    """Sort ``ids`` into active and unknown ones (what a purge would refuse)."""
    from fluxes.domain.retention import TERMINAL_EVENTS
    from fluxes.store.jobfacts import last_events

    for jobid, last in zip(ids, last_events(inst.redis, inst.keys, ids), strict=True):
        if last is None:
            result.unknown.append(jobid)
            continue
        name = last[1].get(b"n", b"?").decode("utf-8", "replace")
        if name not in TERMINAL_EVENTS:
            result.active[jobid] = name


def _purge_limits(inst: Instance, age: float | None, num: int | None, force: bool) -> int:
    from fluxes.domain.retention import Limits, count_purge, merge_oldest, select_purge
    from fluxes.store.joblist import JobListStore
    from fluxes.store.retention import inactive_index, purge

    limits = Limits(age, num)
    now = time.time()
    JobListStore(inst.redis, inst.keys).catch_up(timeout=2.0)
    total, _parts = inactive_index(inst.redis, inst.keys, 0)
    older = 0
    if age is not None:
        cutoff = now - age
        older = sum(int(inst.redis.zcount(inst.keys.joblist_inactive(p), "-inf", f"({cutoff!r}"))
                    for p in range(inst.keys.partitions))
    count = count_purge(total, older, limits) if limits.active else 0
    if not force or count == 0:
        _finish(inst, force, 0 if force else count)
        return 0
    # the jobs are chosen once, up front: the job list folds each purge a moment later
    _total, parts = inactive_index(inst.redis, inst.keys, count)
    chosen = select_purge(merge_oldest(parts, count), total, now, limits)
    purged = 0
    for i in range(0, len(chosen), BATCH):
        purged += len(purge(inst.redis, inst.keys, chosen[i:i + BATCH]).purged)
    _finish(inst, force, purged)
    return 0
