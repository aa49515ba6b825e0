"""``fluxes bench``: benchmarks that print figures (``--json``: one object), never assert."""

from __future__ import annotations

import argparse
from typing import Any

from fluxes.cli.util import add_subcommands, help_with_example


def register(subparsers: Any) -> None:
    """Add ``bench`` and its benchmarks."""
    parser = subparsers.add_parser("bench", **help_with_example(
        "Measure fluxes on this machine (each benchmark starts its own redis-server).",
        ["fluxes bench eventlog", "fluxes bench eventlog --jobs 1000000 --json"]))
    sub = add_subcommands(parser, "benchmarks")
    ep = sub.add_parser("eventlog", **help_with_example(
        "Event store: append (single, batched), full replay, checkpoint restore,\n"
        "read-model fold speed and memory per job.",
        ["fluxes bench eventlog", "fluxes bench eventlog --jobs 1000000 --json"]))
    ep.add_argument("--jobs", type=int, default=100_000,
                    help="jobs in the history, 10 events each (default 100000)")
    ep.add_argument("--single", type=int, default=10_000,
                    help="events appended one per round trip (default 10000)")
    ep.add_argument("--json", action="store_true")
    ep.set_defaults(func=_eventlog)

    tp = sub.add_parser("throughput", **help_with_example(
        "flux's throughput test: N one-core jobs through a private instance; prints the\n"
        "submit rate and the end-to-end rate (first submit to last clean).",
        ["fluxes bench throughput --jobs 10000",
         "fluxes bench throughput --jobs 1000 --nodes 16 --cores-per-node 32 --json",
         "fluxes bench throughput --jobs 1000 --exec  # real 'true' processes"]))
    tp.add_argument("--jobs", type=int, default=1000)
    tp.add_argument("--nodes", type=int, default=1)
    tp.add_argument("--cores-per-node", type=int, default=2)
    tp.add_argument("--runtime", default="1ms", metavar="FSD",
                    help="simulated run time (exec.test.run_duration), default 1ms")
    tp.add_argument("--exec", action="store_true", help="run real 'true' processes")
    tp.add_argument("--timeout", type=float, default=600.0)
    tp.add_argument("--json", action="store_true")
    tp.set_defaults(func=_throughput)

    xp = sub.add_parser("executor", **help_with_example(
        "N real 'true' jobs through the Python FluxExecutor (submit, a start-event\n"
        "callback, the result) on a private 1 node x 2 cores instance; prints jobs/s\n"
        "from the first submit to the last result.",
        ["fluxes bench executor --jobs 1000", "fluxes bench executor --jobs 102 --json"]))
    xp.add_argument("--jobs", type=int, default=1000)
    xp.add_argument("--nodes", type=int, default=1)
    xp.add_argument("--cores-per-node", type=int, default=2)
    xp.add_argument("--timeout", type=float, default=600.0)
    xp.add_argument("--json", action="store_true")
    xp.set_defaults(func=_executor)

    rp = sub.add_parser("recovery", **help_with_example(
        "Scheduler recovery on a real instance: N simulated jobs running on 16 nodes,\n"
        "kill -9 of the scheduler; the new one's hello->ready time and kill to the next\n"
        "allocation.",
        ["fluxes bench recovery", "fluxes bench recovery --jobs 1000 --json"]))
    rp.add_argument("--jobs", type=int, default=10_000, help="running jobs (default 10000)")
    rp.add_argument("--standby", action="store_true",
                    help="run a hot standby scheduler too and kill -9 the leading one")
    rp.add_argument("--timeout", type=float, default=600.0)
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=_recovery)

    mp = sub.add_parser("memory", **help_with_example(
        "Redis memory per pending job: held jobs submitted with 'fluxes submit --cc=1-N\n"
        "--urgency=hold true' (this environment in every jobspec) on a private 16 x 32\n"
        "instance; used_memory before and after, and the bytes per job by key kind.",
        ["fluxes bench memory", "fluxes bench memory --jobs 10000 --json"]))
    mp.add_argument("--jobs", type=int, default=None,
                    help="held jobs (default 50000; pending jobs with --workers: 100000)")
    mp.add_argument("--workers", action="store_true",
                    help="pending jobs the job manager and the scheduler carry (queued behind\n"
                         "one job holding every node): Redis and every worker's bytes per job")
    mp.add_argument("--nodes", type=int, default=16)
    mp.add_argument("--cores-per-node", type=int, default=32)
    mp.add_argument("--timeout", type=float, default=900.0)
    mp.add_argument("--cc", type=int, default=None, metavar="N",
                    help="instead: the ingest's peak memory for one 'fluxes submit --cc=1-N'")
    mp.add_argument("--json", action="store_true")
    mp.set_defaults(func=_memory)

    sp = sub.add_parser("sched", **help_with_example(
        "Scheduler: allocs/s (1-core on 1024x64, 4-node exclusive on 8192 nodes), EASY\n"
        "and conservative pass times with 10,000 pending, memory with 1,000,000 pending,\n"
        "recovery (adopting 10,000 stored allocations).",
        ["fluxes bench sched", "fluxes bench sched --json"]))
    sp.add_argument("--graph", action="store_true",
                    help="the graph pool instead: allocs/s on 1,024 nodes, recovery of 10,000")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=_sched)

    np_ = sub.add_parser("nested", **help_with_example(
        "Child instances: time from submitting a 'fluxes batch -N2' script to its first\n"
        "line, and the rate of N short jobs inside a 2-node child vs in the parent.",
        ["fluxes bench nested", "fluxes bench nested --jobs 200 --json"]))
    np_.add_argument("--jobs", type=int, default=1000, help="short jobs (default 1000)")
    np_.add_argument("--starts", type=int, default=3, help="child starts timed (default 3)")
    np_.add_argument("--exec", action="store_true", help="real 'true' processes")
    np_.add_argument("--json", action="store_true")
    np_.set_defaults(func=_nested)

    mpp = sub.add_parser("mpi", **help_with_example(
        "MPI through the PMI server: launch to exit of 'fluxes run -N2 -n4' of a trivial\n"
        "MPICH program vs of 'true' (medians of --runs), and a PMI barrier across --ranks\n"
        "tasks on --nodes nodes. Needs mpicc.mpich.",
        ["fluxes bench mpi", "fluxes bench mpi --runs 5 --nodes 4 --ranks 16 --json"]))
    mpp.add_argument("--runs", type=int, default=20, help="runs of each (default 20)")
    mpp.add_argument("--nodes", type=int, default=16, help="nodes of the barrier (default 16)")
    mpp.add_argument("--ranks", type=int, default=64, help="tasks of the barrier (default 64)")
    mpp.add_argument("--rounds", type=int, default=50, help="barriers timed (default 50)")
    mpp.add_argument("--json", action="store_true")
    mpp.set_defaults(func=_mpi)

    rt = sub.add_parser("retention", **help_with_example(
        "Retention: Redis memory per finished job with inactive jobs purged after\n"
        "--age-limit (the journal archived, message streams trimmed), read at 10%, 50%\n"
        "and 100% of --jobs; --age-limit=off for the figure without retention.",
        ["fluxes bench retention", "fluxes bench retention --jobs 10000 --json",
         "fluxes bench retention --jobs 10000 --age-limit=off"]))
    rt.add_argument("--jobs", type=int, default=100_000, help="jobs (default 100000)")
    rt.add_argument("--age-limit", default="2s", metavar="FSD|off",
                    help="[job-manager] inactive-age-limit (default 2s)")
    rt.add_argument("--nodes", type=int, default=16)
    rt.add_argument("--cores-per-node", type=int, default=32)
    rt.add_argument("--timeout", type=float, default=1800.0)
    rt.add_argument("--json", action="store_true")
    rt.set_defaults(func=_retention)

    ap = sub.add_parser("accounting", **help_with_example(
        "Accounting: CPU per job of folding the journal into usage (in memory, and into\n"
        "Redis as the accounting worker does), the fair-share computation time, and the\n"
        "ingest's max-active-jobs check per block of submissions with N active jobs.",
        ["fluxes bench accounting", "fluxes bench accounting --jobs 10000 --json",
         "fluxes bench accounting --jobs 1000 --active 10000,100000"]))
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs in the history "
                    "(default 100000)")
    ap.add_argument("--active", default="10000,100000", metavar="N[,N...]",
                    help="active jobs stored for the submission check (default "
                    "10000,100000; 0: skip it)")
    ap.add_argument("--json", action="store_true")
    ap.set_defaults(func=_accounting)

    sm = sub.add_parser("simulate", **help_with_example(
        "fluxes simulate on a seeded synthetic trace (default 50,000 jobs, 2,048 cores,\n"
        "easy) or an SWF trace: simulation time, jobs/s, scheduling passes, peak memory;\n"
        "with --compare, each policy in turn and its time against the first's.",
        ["fluxes bench simulate", "fluxes bench simulate --jobs 10000 --policy conservative",
         "fluxes bench simulate --trace big.swf --compare fcfs,easy"]))
    sm.add_argument("--jobs", type=int, default=50_000, help="jobs (default 50000)")
    sm.add_argument("--cores", type=int, default=2048, help="processors (default 2048)")
    sm.add_argument("--nodes", type=int, default=None,
                    help="nodes they are split into (default: one node)")
    sm.add_argument("--policy", choices=("fcfs", "easy", "conservative"), default="easy")
    sm.add_argument("--seed", type=int, default=1)
    sm.add_argument("--load", type=float, default=0.85,
                    help="the synthetic trace's offered load (default 0.85)")
    sm.add_argument("--trace", metavar="FILE", help="an SWF trace instead of the synthetic one")
    sm.add_argument("--compare", metavar="P,P", type=_policies,
                    help="simulate under each of these policies in turn")
    sm.add_argument("--json", action="store_true")
    sm.set_defaults(func=_simulate)

    fc = sub.add_parser("forecast", **help_with_example(
        "One forecast (fluxes jobs --forecast) of a seeded synthetic instance: N nodes of\n"
        "32 cores all held by running jobs, P jobs waiting; wall and CPU time (best of R\n"
        "runs), scheduling passes, jobs given a start.",
        ["fluxes bench forecast", "fluxes bench forecast --pending 2000 --runtime history"]))
    fc.add_argument("--nodes", type=int, default=1024, help="nodes (default 1024)")
    fc.add_argument("--pending", type=int, default=10_000,
                    help="waiting jobs (default 10000)")
    fc.add_argument("--runs", type=int, default=3, help="runs, best kept (default 3)")
    fc.add_argument("--policy", choices=("fcfs", "easy", "conservative"), default="easy")
    fc.add_argument("--runtime", choices=("limit", "history"), default="limit")
    fc.add_argument("--seed", type=int, default=1)
    fc.add_argument("--job", type=int, default=None, metavar="K",
                    help="forecast only the K-th waiting job, as 'fluxes job forecast' does")
    fc.add_argument("--json", action="store_true")
    fc.set_defaults(func=_forecast)

    cp = sub.add_parser("cli", **help_with_example(
        "Command start-up: median wall and CPU time of 'fluxes --version', 'fluxes submit'\n"
        "(a held job), 'fluxes jobs' and 'fluxes run -n1 true' against a private\n"
        "instance, N runs each after a warm-up, with the targets.",
        ["fluxes bench cli", "fluxes bench cli --runs 50 --json"]))
    cp.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    cp.add_argument("--json", action="store_true")
    cp.set_defaults(func=_cli)

    wp = sub.add_parser("web", **help_with_example(
        "fluxes web: p50/p99 latency of every page and JSON endpoint over HTTP, with a\n"
        "synthesized history of N jobs, time-travel views an hour back among them.",
        ["fluxes bench web", "fluxes bench web --jobs 10000 --json"]))
    wp.add_argument("--jobs", type=int, default=100_000, help="jobs in the history "
                    "(default 100000)")
    wp.add_argument("--hours", type=float, default=6.0, help="the history's span (default 6)")
    wp.add_argument("--requests", type=int, default=50, help="requests per endpoint")
    wp.add_argument("--json", action="store_true")
    wp.set_defaults(func=_web)


def _eventlog(args: argparse.Namespace) -> int:
    from fluxes.bench import eventlog
    from fluxes.bench.common import report

    report(eventlog.run(jobs=args.jobs, single=args.single), args.json)
    return 0


def _throughput(args: argparse.Namespace) -> int:
    from fluxes.bench import throughput
    from fluxes.bench.common import report

    report(throughput.run(jobs=args.jobs, nodes=args.nodes, cores_per_node=args.cores_per_node,
                          runtime=args.runtime, real=args.exec, timeout=args.timeout), args.json)
    return 0


def _executor(args: argparse.Namespace) -> int:
    from fluxes.bench import executor
    from fluxes.bench.common import report

    report(executor.run(jobs=args.jobs, nodes=args.nodes, cores_per_node=args.cores_per_node,
                        timeout=args.timeout), args.json)
    return 0


def _recovery(args: argparse.Namespace) -> int:
    from fluxes.bench import recovery
    from fluxes.bench.common import report

    if args.jobs < 1:
        raise ValueError("--jobs must be >= 1")
    report(recovery.run(jobs=args.jobs, timeout=args.timeout, standby=args.standby), args.json)
    return 0


def _memory(args: argparse.Namespace) -> int:
    from fluxes.bench import memory
    from fluxes.bench.common import report

    if args.cc is not None:
        from fluxes.bench import request_memory

        report(request_memory.run(jobs=args.cc, nodes=args.nodes,
                                  cores_per_node=args.cores_per_node,
                                  timeout=max(args.timeout, 1800.0)), args.json)
        return 0
    if args.workers:
        return _memory_workers(args)
    figures = memory.run(jobs=50_000 if args.jobs is None else args.jobs, nodes=args.nodes,
                         cores_per_node=args.cores_per_node, timeout=args.timeout)
    if args.json:
        report(figures, True)
        return 0
    table = figures.pop("bytes_per_job_by_kind")
    report(figures, False)
    print("bytes per pending job by key kind (MEMORY USAGE, after minus before):")
    for kind, size in table.items():
        print(f"  {kind:<14} {size:>9,.1f}")
    return 0


def _memory_workers(args: argparse.Namespace) -> int:
    from fluxes.bench import memory_workers
    from fluxes.bench.common import report

    figures = memory_workers.run(jobs=100_000 if args.jobs is None else args.jobs,
                                 nodes=args.nodes, cores_per_node=args.cores_per_node,
                                 timeout=max(args.timeout, 1800.0))
    if args.json:
        report(figures, True)
        return 0
    table = figures.pop("bytes_per_pending_job")
    report(figures, False)
    print("bytes per pending job (Redis used_memory, workers' resident sets: after minus before):")
    for kind, size in table.items():
        print(f"  {kind:<14} {size:>9,.1f}")
    return 0


def _sched(args: argparse.Namespace) -> int:
    from fluxes.bench import sched
    from fluxes.bench.common import report

    report(sched.run_graph() if args.graph else sched.run(), args.json)
    return 0


def _nested(args: argparse.Namespace) -> int:
    from fluxes.bench import nested
    from fluxes.bench.common import report

    if args.jobs < 1 or args.starts < 1:
        raise ValueError("--jobs and --starts must be >= 1")
    report(nested.run(jobs=args.jobs, starts=args.starts, real=args.exec), args.json)
    return 0


def _accounting(args: argparse.Namespace) -> int:
    from fluxes.bench import accounting
    from fluxes.bench.common import report

    try:
        active = tuple(int(n) for n in args.active.split(",") if n.strip())
    except ValueError:
        raise ValueError(f"--active: expected counts like 10000,100000, got "
                         f"{args.active!r:.40}") from None
    if args.jobs < 1 or any(n < 0 for n in active):
        raise ValueError("--jobs must be >= 1 and --active counts >= 0")
    report(accounting.run(jobs=args.jobs, active=tuple(n for n in active if n)), args.json)
    return 0


def _web(args: argparse.Namespace) -> int:
    from fluxes.bench import web
    from fluxes.bench.common import report

    if args.jobs < 1 or args.requests < 1 or args.hours <= 0:
        raise ValueError("--jobs and --requests must be >= 1, --hours > 0")
    report(web.run(jobs=args.jobs, hours=args.hours, requests=args.requests), args.json)
    return 0


def _cli(args: argparse.Namespace) -> int:
    from fluxes.bench import cli
    from fluxes.bench.common import report

    report(cli.run(runs=args.runs), args.json)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from fluxes.bench import simulate
    from fluxes.bench.common import report

    report(simulate.run(jobs=args.jobs, cores=args.cores, nodes=args.nodes,
                        policy=args.policy, seed=args.seed, load=args.load,
                        trace_file=args.trace, compare=args.compare or ()), args.json)
    return 0


def _forecast(args: argparse.Namespace) -> int:
    from fluxes.bench import forecast
    from fluxes.bench.common import report

    report(forecast.run(nodes=args.nodes, pending=args.pending, runs=args.runs,
                        policy=args.policy, runtime=args.runtime, seed=args.seed,
                        job=args.job), args.json)
    return 0


def _policies(text: str) -> list[str]:
    """argparse type of ``--compare``: known policy names, comma-separated."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in ("fcfs", "easy", "conservative")]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"unknown policy {bad[0]!r} (expected fcfs, easy, conservative)" if bad
            else "expected policies, e.g. fcfs,easy")
    return names


def _retention(args: argparse.Namespace) -> int:
    from fluxes.bench import retention
    from fluxes.bench.common import report

    figures = retention.run(jobs=args.jobs, age_limit=args.age_limit, nodes=args.nodes,
                            cores_per_node=args.cores_per_node, timeout=args.timeout)
    if args.json:
        report(figures, True)
        return 0
    table = figures.pop("checkpoints")
    report(figures, False)
    print("at each checkpoint, once retention caught up:")
    print(f"  {'jobs':>8} {'used_memory':>12} {'bytes/job':>10} {'dataset':>10} "
          f"{'journal':>8} {'keys':>7}")
    for jobs, row in table.items():
        print(f"  {int(jobs):>8,} {row['used_memory']:>12,} "
              f"{row['bytes_per_finished_job']:>10,.1f} {row['dataset_bytes']:>10,} "
              f"{row['journal_entries']:>8,} {row['keys']:>7,}")
    return 0


def _mpi(args: argparse.Namespace) -> int:
    from fluxes.bench import mpi
    from fluxes.bench.common import report

    report(mpi.run(runs=args.runs, nodes=args.nodes, ranks=args.ranks, rounds=args.rounds),
           args.json)
    return 0
