"""``fluxes drill``: a recovery drill as a first-class command."""

from __future__ import annotations

import argparse
from typing import Any

from fluxes.cli.util import help_with_example, print_json


def register(subparsers: Any) -> None:
    """Add ``drill``."""
    p = subparsers.add_parser("drill", **help_with_example(
        "Run a workload on a private instance (or, with --uri, on a running one: its\n"
        "workers on this host are killed and its own supervisor restarts them), SIGKILL\n"
        "workers at random moments, then check the invariants: every job inactive exactly\n"
        "once with the right result, no core held by two jobs, eventlogs replay, the job\n"
        "list equals a rebuild, the scheduler's pool recovered after a restart equals the\n"
        "stored R, nothing left allocated. Prints recovery times. Every wait ends at the\n"
        "--timeout deadline. Exit status 1 when an invariant fails or time runs out.",
        ["fluxes drill --kill scheduler --rounds 5", "fluxes drill --kill any --rounds 100 --json",
         "fluxes drill --kill redis --appendfsync everysec",
         "fluxes drill --kill redis --appendfsync everysec --lose-writes 0.5 --rounds 2",
         "fluxes drill --uri \"$FLUXES_URI\" --kill job-manager --rounds 3",
         "fluxes drill --stall 12 --jobs 200", "fluxes drill --stall 5 --fault oom"]))
    p.add_argument("--uri", default=argparse.SUPPRESS, metavar="URI",
                   help="drill the running instance at URI instead of a private one "
                        "(never Redis; --nodes, --cores-per-node, --appendfsync do not apply)")
    p.add_argument("--jobs", type=int, default=500, help="jobs in the workload (default 500)")
    p.add_argument("--kill", default="any",
                   choices=("any", "scheduler", "job-manager", "exec", "ingest", "job-list",
                            "redis"))
    p.add_argument("--rounds", type=int, default=5, help="kills (default 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--cores-per-node", type=int, default=4)
    p.add_argument("--appendfsync", choices=("always", "everysec"), default="always",
                   help="the private Redis' AOF policy (default always)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds the whole drill may take; when they are up it stops waiting "
                        "and reports what is down (default 300)")
    p.add_argument("--lose-writes", type=float, default=None, metavar="SECONDS",
                   help="with --kill redis --appendfsync everysec: restart Redis on a copy of "
                        "its AOF taken SECONDS before the kill, so that the writes (and "
                        "submissions) acknowledged since are lost, as in a machine crash "
                        "inside the fsync window")
    p.add_argument("--hostile", action="store_true",
                   help="also write poison and forged entries on every stream each round "
                        "(docs/hostile-input.md) and check that each was refused")
    p.add_argument("--stall", type=float, default=None, metavar="SECONDS",
                   help="instead of kills: stall the private Redis for SECONDS with a busy "
                        "function while jobs (real tasks among them) run and are submitted, "
                        "then check that no job was lost or killed and no worker died")
    p.add_argument("--fault", choices=("stall", "oom", "misconf", "password"),
                   default="stall",
                   help="with --stall: what Redis does for SECONDS: stall (busy), oom "
                        "(maxmemory reached), misconf (a snapshot it cannot write), "
                        "password (another password, every connection dropped)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_drill)


def _stall(args: argparse.Namespace) -> int:
    from fluxes.drill.stall import StallDrill

    if getattr(args, "uri", None) is not None:
        raise ValueError("--stall needs the drill's own instance (drop --uri)")
    result = StallDrill(args.stall, jobs=args.jobs, nodes=args.nodes,
                        cores_per_node=args.cores_per_node, timeout=args.timeout,
                        appendfsync=args.appendfsync, fault=args.fault).run()
    figures = result.figures()
    if args.json:
        print_json(figures)
        return 0 if result.ok else 1
    what = {"stall": "stalled", "oom": "full (OOM)", "misconf": "refusing writes (MISCONF)",
            "password": "with another password"}[figures["fault"]]
    print(f"redis {what} {figures['stall_s']:g} s: jobs {figures['jobs']} "
          f"({figures['real_jobs']} real tasks across the stall), lost {figures['lost']}, "
          f"killed {figures['killed']}, {figures['elapsed_s']} s")
    if figures["refused_while_stalled"]:
        print(f"submissions refused meanwhile and sent again: "
              f"{figures['refused_while_stalled']} ({figures['refusal']})")
    for what in ("lost_ids", "killed_ids"):
        if figures[what]:
            print(f"{what.replace('_', ' ')}: {' '.join(map(str, figures[what]))}")
    for line in figures["violations"]:
        print(f"VIOLATION {line}")
    print("no job lost or killed" if result.ok else "JOBS LOST OR KILLED")
    return 0 if result.ok else 1


def _drill(args: argparse.Namespace) -> int:
    from fluxes.drill.runner import Drill

    if args.stall is not None:
        return _stall(args)

    drill = Drill(jobs=args.jobs, kill=args.kill, rounds=args.rounds, seed=args.seed,
                  nodes=args.nodes, cores_per_node=args.cores_per_node,
                  appendfsync=args.appendfsync, timeout=args.timeout,
                  uri=getattr(args, "uri", None), lose_writes=args.lose_writes,
                  hostile=args.hostile)
    result = drill.run()
    figures = result.figures()
    if args.json:
        print_json(figures)
    else:
        print(f"jobs {figures['jobs']}, kills {figures['kills']} {figures['kills_by_kind']}, "
              f"{figures['elapsed_s']} s")
        if figures["recovery_median_s"] is not None:
            print(f"recovery (kill to next allocation): median "
                  f"{figures['recovery_median_s']:.3f} s, max {figures['recovery_max_s']:.3f} s")
        print(f"scheduler pool vs stored R: {figures['pool_check']}")
        if figures["lost_submissions"]:
            print(f"lost acknowledged submissions: {figures['lost_submissions']} "
                  "(appendfsync everysec loss window)")
        if figures["rejected_submissions"]:
            print(f"refused submissions: {figures['rejected_submissions']}")
        for line in figures["notes"]:
            print(f"note: {line}")
        for line in figures["violations"]:
            print(f"VIOLATION {line}")
        print("all invariants hold" if result.ok else "INVARIANTS BROKEN")
    return 0 if result.ok else 1
