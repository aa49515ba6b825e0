"""``fluxes resource``: the inventory, what is free or allocated, drain and undrain."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.cli.util import add_subcommands, die, help_with_example, instance, print_json

if TYPE_CHECKING:
    from fluxes.formats.idset import IDSet
    from fluxes.store.instance import Instance


def register(subparsers: Any) -> None:
    """Add ``resource`` and its subcommands."""
    parser = subparsers.add_parser("resource", **help_with_example(
        "Show resources and drain or undrain execution targets.",
        ["fluxes resource list", "fluxes resource status",
         "fluxes resource drain node[3-4] 'bad DIMM'", "fluxes resource undrain 3-4"]))
    sub = add_subcommands(parser, "resource commands")
    lp = sub.add_parser("list", **help_with_example(
        "Free, allocated and down resources (as the scheduler last published them).",
        ["fluxes resource list", "fluxes resource list --json"]))
    lp.add_argument("--json", action="store_true")
    lp.set_defaults(func=_list)
    sp = sub.add_parser("status", **help_with_example(
        "Each execution target's state: online, offline (no exec heartbeat), drained.",
        ["fluxes resource status", "fluxes resource status --json"]))
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_status)
    for kind, what in (("drain", "Give TARGETS (hostlist or rank idset) no new work; "
                                 "what runs there finishes."),
                       ("undrain", "Return drained TARGETS to service.")):
        p = sub.add_parser(kind, **help_with_example(
            what, [f"fluxes resource {kind} node[0-1]" + (" maintenance" if kind == "drain"
                                                          else ""),
                   f"fluxes resource {kind} 0-3"]))
        p.add_argument("targets", metavar="TARGETS")
        if kind == "drain":
            p.add_argument("reason", nargs="*", metavar="REASON")
        p.set_defaults(func=_drain, kind=kind)


def _summary(inst: Instance) -> dict[str, Any]:
    raw = inst.redis.get(inst.keys.sched_status)
    if not raw:
        die("no resource status yet (is the scheduler running?)")
    summary: dict[str, Any] = orjson.loads(raw)
    return summary


def _list(args: argparse.Namespace) -> int:
    summary = _summary(instance(args))
    if args.json:
        print_json(summary)
        return 0
    print(f"{'STATE':>10} {'NNODES':>6} {'NCORES':>8} {'NGPUS':>8} NODELIST")
    for state in ("free", "allocated", "down"):
        part = summary[state]
        print(f"{state:>10} {part['nnodes']:>6} {part['ncores']:>8} {part['ngpus']:>8} "
              f"{part['nodelist']}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from fluxes.domain.exec.perilog import HOUSEKEEPING_REASON
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import LOST_AFTER_S, load_inventory

    inst = instance(args)
    inventory = load_inventory(inst)
    summary = _summary(inst)
    drained = {int(r): d for r, d in summary.get("drained", {}).items()}
    now = time.time()
    beats: dict[int, float] = {}
    for rank_b, raw in inst.redis.hgetall(inst.keys.exec_registry).items():
        try:
            beats[int(rank_b)] = float(orjson.loads(raw)["heartbeat"])
        except (ValueError, KeyError, TypeError):
            continue
    groups: dict[tuple[str, str], IDSet] = {}
    for target in inventory:
        rank = target.rank
        online = rank in beats and now - beats[rank] <= LOST_AFTER_S
        state = "drained" if rank in drained else "online" if online else "offline"
        reason = drained[rank]["reason"] if rank in drained else ""
        if state == "drained" and reason.startswith(HOUSEKEEPING_REASON):
            state = "housekeeping"  # held by its exec worker until the command ends
        groups.setdefault((state, reason), IDSet()).add(rank)
    rows = []
    rset = inventory.rset()
    for (state, reason), ranks in sorted(groups.items()):
        rows.append({"state": state, "nnodes": len(ranks), "ranks": str(ranks),
                     "nodelist": str(rset.copy_ranks(ranks).hostlist), "reason": reason})
    if args.json:
        print_json({"targets": rows})
        return 0
    print(f"{'STATE':>8} {'NNODES':>6} {'RANKS':<12} {'NODELIST':<20} REASON")
    for row in rows:
        print(f"{row['state']:>8} {row['nnodes']:>6} {row['ranks']:<12} "
              f"{row['nodelist']:<20} {row['reason']}".rstrip())
    return 0


def _drain(args: argparse.Namespace) -> int:
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory, resource_event

    inst = instance(args)
    inventory = load_inventory(inst)
    rset = inventory.rset()
    try:
        ranks = IDSet(args.targets)
    except ValueError:
        ranks = rset.ranks_for_hosts(args.targets)  # ValueError names unknown hosts
    unknown = ranks - rset.ranks
    if unknown:
        die(f"unknown rank(s) {unknown}")
    reason = " ".join(getattr(args, "reason", []) or [])
    inst.redis.xadd(inst.keys.resource_events,
                    {"d": resource_event(args.kind, str(ranks), reason)})
    return 0
