"""``fluxes resource``: the inventory, what is free or allocated, drain and undrain,
reload."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

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
        "Each execution target's state: online, offline (no exec heartbeat), drained,\n"
        "draining (drained, its work not finished yet), housekeeping.",
        ["fluxes resource status", "fluxes resource status --json"]))
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_status)
    for name, what, func in (
            ("info", "One line: nodes, cores and GPUs (of the resources in STATES).", _info),
            ("R", "The R (RFC 20) of the resources (in STATES).", _rset)):
        q = sub.add_parser(name, **help_with_example(
            what + "\nSTATES: all (default), up, down, free, allocated, comma-separated.",
            [f"fluxes resource {name}", f"fluxes resource {name} -s free -i node[0-1]"]))
        q.add_argument("-s", "--states", type=_states, default=["all"], metavar="STATE,...")
        q.add_argument("-i", "--include", metavar="TARGETS",
                       help="only these targets (idset or hostlist)")
        q.set_defaults(func=func)
    for kind, what in (("drain", "Give TARGETS (hostlist or rank idset) no new work; "
                                 "what runs there finishes."),
                       ("undrain", "Return drained TARGETS to service.")):
        p = sub.add_parser(kind, **help_with_example(
            what, [f"fluxes resource {kind} node[0-1]" + (" maintenance" if kind == "drain"
                                                          else ""),
                   f"fluxes resource {kind} 0-3"]))
        if kind == "drain":
            p.add_argument("targets", metavar="TARGETS", nargs="?",
                           help="none: list the drained targets")
            p.add_argument("reason", nargs="*", metavar="REASON")
            p.add_argument("-f", "--force", action="store_true",
                           help="replace the reason of targets already drained")
            p.add_argument("-u", "--update", action="store_true",
                           help="drain only the targets not drained yet; keep the others' "
                           "reasons")
            p.add_argument("-n", "--no-header", action="store_true",
                           help="no header when listing")
            p.add_argument("--json", action="store_true", help="the listing as JSON")
        else:
            p.add_argument("targets", metavar="TARGETS")
        p.set_defaults(func=_drain, kind=kind)
    rp = sub.add_parser("reload", **help_with_example(
        "Replace the instance's resources, as flux's: FILE is an RFC 20 R (JSON) or a\n"
        "TOML file with a [resource] table (config entries, as 'fluxes start --config').\n"
        "The scheduler and the submission checks follow at once; added ranks need their\n"
        "exec worker ('fluxes worker exec --ranks R'; without one they are drained after\n"
        "10 s). Instance owner only.",
        ["fluxes resource reload bigger.toml", "fluxes resource reload -f R.json"]))
    rp.add_argument("file", metavar="FILE")
    rp.add_argument("-f", "--force", action="store_true",
                    help="reload even when ranks that run jobs go or change (those jobs lose "
                         "what they hold there)")
    rp.set_defaults(func=_reload)


def _summary(inst: Instance) -> dict[str, Any]:
    """The scheduler's resource summary, with every drain/undrain sent before applied
    (read your writes; said on stderr when the scheduler does not catch up)."""
    from fluxes.store.resources import resource_summary

    summary, caught_up = resource_summary(inst)
    if summary is None:
        die("no resource status yet (is the scheduler running?)")
    if not caught_up:
        print("fluxes resource: the scheduler has not applied the latest drain/undrain "
              "yet (is it running?); showing what it last published", file=sys.stderr)
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
    from fluxes.store.resources import LOST_AFTER_S, exec_heartbeats, load_inventory

    inst = instance(args)
    inventory = load_inventory(inst)
    summary = _summary(inst)
    drained = {int(r): d for r, d in summary.get("drained", {}).items()}
    now = time.time()
    beats = exec_heartbeats(inst.redis, inst.keys)
    busy = IDSet(summary.get("allocated", {}).get("ranks", ""))
    groups: dict[tuple[str, str], IDSet] = {}
    for target in inventory:
        rank = target.rank
        online = rank in beats and now - beats[rank] <= LOST_AFTER_S
        # flux's word for a drained node whose work has not finished yet
        state = ("draining" if rank in busy else "drained") if rank in drained \
            else "online" if online else "offline"
        reason = drained[rank]["reason"] if rank in drained else ""
        if rank in drained and reason.startswith(HOUSEKEEPING_REASON):
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
    from fluxes.service.drain import request_drain, target_ranks
    from fluxes.store.resources import load_inventory

    inst = instance(args)
    if args.targets is None:
        return _list_drained(inst, args)
    try:
        ranks = target_ranks(load_inventory(inst).rset(), args.targets)
    except ValueError as exc:
        die(str(exc))
    reason = " ".join(getattr(args, "reason", []) or [])
    if args.kind == "drain":
        ranks = _not_drained_yet(inst, args, ranks)
        if not ranks:
            return 0
    request_drain(inst, args.kind, ranks, reason)
    # the next command sees it: wait (briefly) until the scheduler has applied it
    _summary(inst)
    return 0


def _not_drained_yet(inst: Instance, args: argparse.Namespace, ranks: IDSet) -> IDSet:
    """The ranks to drain: all of them with ``--force``, those not drained yet with
    ``--update``; without either, a target already drained is an error, as in flux."""
    if args.force:
        return ranks
    from fluxes.formats.idset import IDSet

    drained = IDSet(int(r) for r in _summary(inst).get("drained", {}))
    already = ranks & drained
    if not already:
        return ranks
    if args.update:
        return ranks - already
    die(f"rank(s) {already} already drained (--force replaces the reason, --update "
        "leaves it)")


def _list_drained(inst: Instance, args: argparse.Namespace) -> int:
    """``fluxes resource drain`` alone: the drained targets, grouped by when, state and why."""
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory

    summary = _summary(inst)
    busy = IDSet(summary.get("allocated", {}).get("ranks", ""))
    groups: dict[tuple[float, str, str], IDSet] = {}
    for rank_s, info in summary.get("drained", {}).items():
        rank = int(rank_s)
        state = "draining" if rank in busy else "drained"
        key = (float(info.get("timestamp") or 0.0), state, str(info.get("reason", "")))
        groups.setdefault(key, IDSet()).add(rank)
    rset = load_inventory(inst).rset()
    rows = sorted(groups.items())
    if args.json:
        print_json({"drained": [{"timestamp": when, "state": state, "reason": reason,
                                 "ranks": str(ranks),
                                 "nodelist": str(rset.copy_ranks(ranks).hostlist)}
                                for (when, state, reason), ranks in rows]})
        return 0
    if not args.no_header:
        print(f"{'TIME':<12} {'STATE':<8} {'REASON':<30} NODELIST")
    for (when, state, reason), ranks in rows:
        shown = time.strftime("%b%d %H:%M", time.localtime(when)) if when else "-"
        print(f"{shown:<12} {state:<8} {reason:<30} {rset.copy_ranks(ranks).hostlist}")
    return 0


_STATES = ("all", "up", "down", "free", "allocated")


def _states(text: str) -> list[str]:
    """argparse type of ``-s``: states, comma-separated."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in _STATES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown state {bad[0]!r} (expected {', '.join(_STATES)})" if bad
            else "expected states, e.g. free,allocated")
    return names


def _selected(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The inventory's R cut to ``--states`` and ``--include``, and the scheduler's
    summary when a state needed it.

    ``free`` and ``allocated`` come from the scheduler's summary, whole nodes at a
    time (a node partly used is in both); ``up`` and ``down`` from its drained set.
    """
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory

    inst = instance(args)
    rset = load_inventory(inst).rset()
    ranks = IDSet(rset.ranks)
    summary = None
    if args.states != ["all"]:
        summary = _summary(inst)
        down = IDSet(summary["down"]["ranks"])
        for r in summary.get("drained", {}):
            down.add(int(r))
        chosen = IDSet()
        for state in args.states:
            chosen |= {"all": ranks, "up": ranks - down, "down": down,
                       "free": IDSet(summary["free"]["ranks"]),
                       "allocated": IDSet(summary["allocated"]["ranks"])}[state]
        ranks = ranks & chosen
    if args.include:
        try:
            wanted = IDSet(args.include)
        except ValueError:
            wanted = rset.ranks_for_hosts(args.include)
        ranks = ranks & wanted
    return rset.copy_ranks(ranks), summary


def _info(args: argparse.Namespace) -> int:
    """``flux resource info``: "N Nodes, C Cores, G GPUs"."""
    rset, summary = _selected(args)
    nnodes, ncores, ngpus = rset.nnodes, rset.ncores, rset.ngpus
    if summary is not None and not args.include and args.states in (["free"], ["allocated"]):
        # the summary counts the cores themselves, not whole nodes
        part = summary[args.states[0]]
        ncores, ngpus = part["ncores"], part["ngpus"]
    print(f"{nnodes} Node{'s' if nnodes != 1 else ''}, {ncores} Core{'s' if ncores != 1 else ''}, "
          f"{ngpus} GPU{'s' if ngpus != 1 else ''}")
    return 0


def _rset(args: argparse.Namespace) -> int:
    """``flux resource R``: the R of the selected resources."""
    rset = _selected(args)[0]
    print(rset.dumps())
    return 0


def _reload_table(path: str) -> dict[str, Any]:
    """The ``[resource]`` table of FILE: ``{"path": FILE}`` for an R, the ``resource``
    table of a TOML file (or the file itself when it is that table)."""
    import os
    import tomllib

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        die(f"resource reload: cannot read {path}: {exc.strerror or exc}")
    if path.endswith(".toml"):
        try:
            doc = tomllib.loads(data.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError as exc:
            die(f"resource reload: {path}: {exc}")
        table = doc.get("resource", doc)
        if not isinstance(table, dict):
            die(f"resource reload: {path}: [resource] is not a table")
        return dict(table)
    # an R file is recorded by path, as a configuration's resource.path
    return {"path": os.path.abspath(path)}


def _reload(args: argparse.Namespace) -> int:
    """``flux resource reload``: record the new resources once checked; the scheduler
    applies them before this returns (or says it has not)."""
    from fluxes.domain.graph.table import graph_of_table
    from fluxes.domain.jm.feasibility import inventory_table
    from fluxes.domain.sched.inventory import Inventory
    from fluxes.domain.sched.reload import plan_reload, reload_refusal
    from fluxes.errors import FluxesError
    from fluxes.store.resources import (
        load_inventory,
        record_resources,
        recorded_resources,
    )

    inst = instance(args)
    table = _reload_table(args.file)
    try:
        old = load_inventory(inst)
        new = Inventory.from_table(table)
        current = inventory_table(recorded_resources(inst.redis, inst.keys), inst.config())
        if graph_of_table(table) is not None or graph_of_table(current) is not None:
            die("resource reload: resources with a graph are not reloaded (restart the "
                "instance with them)")
    except FluxesError as exc:
        die(f"resource reload: {exc}")
    plan = plan_reload(old, new)
    if plan.empty:
        print("fluxes resource reload: no change")
        return 0
    refusal = reload_refusal(plan, _busy_ranks(inst))
    if refusal is not None and not args.force:
        die(f"resource reload: {refusal} (-f reloads anyway)")
    record_resources(inst, table)
    _summary(inst)  # the scheduler applied it: the next command sees the new resources
    hosts = {t.rank: t.hostname or str(t.rank) for t in (*old, *new)}
    words = [f"{len(new)} nodes"]
    for sign, ranks in (("+", plan.added), ("-", plan.removed), ("~", plan.changed)):
        if ranks:
            words.append(sign + ",".join(hosts[r] for r in ranks))
    print("fluxes resource reload: " + " ".join(words))
    return 0


def _busy_ranks(inst: Instance) -> IDSet:
    """The ranks running jobs hold, from the job list caught up with the journals (the
    published summary may be a second old)."""
    from fluxes.formats.idset import IDSet
    from fluxes.service.jobs import select_jobs

    busy = IDSet()
    for rec in select_jobs(inst, states="running", everyone=True):
        busy = busy | IDSet(str(rec.info.get("ranks") or ""))
    return busy
