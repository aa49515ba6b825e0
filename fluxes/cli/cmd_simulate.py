"""``fluxes simulate``: replay a workload (an SWF trace, or a history) under another policy."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import PROG, help_with_example, print_json, whole_number

if TYPE_CHECKING:
    from fluxes.config import InstanceConfig
    from fluxes.sim.engine import Outcome
    from fluxes.sim.run import Workload
    from fluxes.sim.workload import Machine

#: Exit status when a run breaks an invariant (a bug in the code it drives).
EXIT_INVARIANT = 3
#: Processors of the machine a synthetic trace is drawn for, when none is given.
SYNTHETIC_CORES = 2048
_POLICIES = ("fcfs", "easy", "conservative")
_PLACEMENTS = ("first-fit", "best-fit", "worst-fit", "lonode", "hinode")


def register(subparsers: Any) -> None:
    """Add ``simulate``."""
    p = subparsers.add_parser("simulate", **help_with_example(
        "Replay a workload through the scheduler's and job manager's own code in virtual\n"
        "time: an SWF trace (Parallel Workloads Archive), an instance's history, or a\n"
        "seeded synthetic trace. Prints the report (jobs, makespan, utilization, waits,\n"
        "bounded slowdown, per queue and user), checks the invariants (exit 3 if one\n"
        "breaks), and writes the schedule (SWF, journal) and plots on request.",
        ["fluxes simulate --swf trace.swf --policy easy",
         "fluxes simulate --swf trace.swf --nodes 128 --cores-per-node 16 "
         "--compare fcfs,easy,conservative --plot plots/",
         "fluxes simulate --swf trace.swf --config site.toml --queue-map 1=batch,2=debug "
         "--out schedule.swf --json",
         "fluxes eventlog export --since=-30d month.jsonl && fluxes simulate --journal "
         "month.jsonl --config site.toml --policy conservative",
         "fluxes simulate --synthetic 2000 --nodes 16 --cores-per-node 32 --policy easy",
         "fluxes simulate --forecast-eval trace.swf --policy easy",
         "fluxes simulate --forecast-eval --synthetic 2000 --nodes 8 --cores-per-node 32"]))
    # required, but --forecast-eval TRACE names a source too (checked in _simulate)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--swf", metavar="FILE", help="an SWF trace ('-' for stdin)")
    src.add_argument("--journal", metavar="FILE", nargs="?", const="",
                     help="a history in the export format (fluxes eventlog export); without "
                          "FILE, the instance's own journal and archive (--uri)")
    src.add_argument("--synthetic", metavar="JOBS", type=whole_number(1),
                     help="a seeded synthetic trace of JOBS jobs (--seed, --load)")
    p.add_argument("--nodes", type=whole_number(1), metavar="N", help="nodes of the machine")
    p.add_argument("--cores-per-node", type=whole_number(1), metavar="C", help="cores of each node")
    p.add_argument("--whole-nodes", action="store_true",
                   help="SWF processor counts are whole nodes (exclusive)")
    p.add_argument("--config", metavar="FILE.toml",
                   help="an instance configuration (fluxes start --config): queues, limits, "
                        "policies, [sched], [accounting], and the machine ([resource])")
    p.add_argument("--banks", metavar="FILE",
                   help="banks and users, one 'fluxes account' change per line (add-bank, "
                        "add-user --userid=UID ...) or accounting event (JSON): fair share "
                        "and running limits, with the configuration's [accounting]")
    p.add_argument("--queue-map", metavar="N=QUEUE,...",
                   help="SWF queue numbers to the configuration's queues")
    p.add_argument("--policy", choices=_POLICIES,
                   help="scheduler policy of every queue (default: the configuration's, "
                        "else fcfs)")
    p.add_argument("--queue-depth", type=whole_number(1), metavar="N")
    p.add_argument("--reservation-depth", type=_natural, metavar="N")
    p.add_argument("--placement", choices=_PLACEMENTS)
    p.add_argument("--compare", metavar="P1,P2,...",
                   help="run each policy and compare them (one column, one plot line each)")
    p.add_argument("--since", metavar="TIME",
                   help="with --journal: only jobs submitted from TIME (UNIX, ISO, -FSD)")
    p.add_argument("--until", metavar="TIME", help="with --journal: ... up to TIME")
    p.add_argument("--seed", type=int, default=1, help="--synthetic's seed (default 1)")
    p.add_argument("--load", type=float, default=0.85,
                   help="--synthetic's offered load (default 0.85)")
    p.add_argument("--out", metavar="SCHEDULE.swf", help="write the simulated schedule as SWF")
    p.add_argument("--journal-out", metavar="FILE",
                   help="write the simulated journal (export format: fluxes eventlog replay "
                        "--file FILE lists its jobs)")
    p.add_argument("--plot", metavar="DIR", help="write utilization, queue, wait CDF and "
                                                 "Gantt plots (PNG) into DIR")
    p.add_argument("--gantt-window", metavar="FROM:TO",
                   help="the Gantt chart's window, FSD durations from the first submission "
                        "(default 0:1d)")
    p.add_argument("--annotations", action="store_true",
                   help="record the scheduler's annotations in the journal, running the "
                        "worker's full passes and replans on the virtual clock (slower)")
    p.add_argument("--forecast-eval", metavar="TRACE", nargs="?", const="",
                   help="measure forecasts (docs/forecast.md): at submissions, forecast the "
                        "job's start from the state then and compare with the start it got; "
                        "TRACE: an SWF file (or the --swf, --journal, --synthetic input)")
    p.add_argument("--forecast-every", type=whole_number(1), metavar="N",
                   help="with --forecast-eval, forecast every N-th submission (default: "
                        "about 200 forecasts)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.set_defaults(func=_simulate)



def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _policies(args: argparse.Namespace) -> list[str | None]:
    if not args.compare:
        return [args.policy]
    names = [n.strip() for n in args.compare.split(",") if n.strip()]
    bad = [n for n in names if n not in _POLICIES]
    if bad or not names:
        raise ValueError(f"--compare: unknown policy {bad[0] if bad else args.compare!r} "
                         f"(expected some of {', '.join(_POLICIES)})")
    if args.policy:
        raise ValueError("--compare replaces --policy: give one or the other")
    return list(dict.fromkeys(names))


def _window(text: str | None) -> tuple[float, float] | None:
    from fluxes.formats.fsd import parse_duration

    if not text:
        return None
    lo, sep, hi = text.partition(":")
    if not sep:
        raise ValueError(f"--gantt-window: expected FROM:TO, got {text!r}")
    return parse_duration(lo or "0"), parse_duration(hi)


def _load(args: argparse.Namespace, config: InstanceConfig
          ) -> tuple[Workload, Machine | None, InstanceConfig]:
    """The workload, the machine the input implies (None: ask the flags), the config."""
    from fluxes.sim import run
    from fluxes.sim.workload import Machine, machine_for_trace

    queue_map = run.parse_queue_map(args.queue_map)
    if args.swf is not None or args.synthetic is not None:
        if args.since or args.until:
            raise ValueError("--since/--until apply to --journal only")
        if args.synthetic is not None:
            from fluxes.sim.synth import synthetic_swf

            # the trace is drawn for the machine: flags, else [resource], else 2,048 cores
            if args.nodes is not None:
                made = Machine.uniform(args.nodes, args.cores_per_node or 1)
            elif config.resource:
                made = _configured(config)
            else:
                made = Machine.uniform(1, args.cores_per_node or SYNTHETIC_CORES)
            size = made.nodes if args.whole_nodes else made.cores
            text = synthetic_swf(args.synthetic, size, seed=args.seed, load=args.load)
            workload = run.load_swf(text.splitlines(), queue_map, args.whole_nodes)
            return workload, made, config
        if args.swf == "-":
            workload = run.load_swf(sys.stdin, queue_map, args.whole_nodes)
        else:
            with open(args.swf, encoding="utf-8", errors="replace") as f:
                workload = run.load_swf(f, queue_map, args.whole_nodes)
        machine = None
        if args.nodes is None and config.resource:
            machine = _configured(config)
        if machine is None:
            assert workload.trace is not None
            machine = machine_for_trace(workload.trace, args.nodes, args.cores_per_node,
                                        args.whole_nodes)
        return workload, machine, config
    from fluxes.cli.display import parse_time

    since = parse_time(args.since) if args.since else None
    until = parse_time(args.until) if args.until else None
    if args.journal:
        with open(args.journal, "rb") as f:
            workload = run.load_journal(f, since=since, until=until)
        machine = None
    else:
        from fluxes.cli.cmd_eventlog import instance_records
        from fluxes.cli.util import instance
        from fluxes.store.resources import load_inventory

        inst = instance(args)
        if not args.config:
            config = inst.config()  # the instance's own queues and policies
        workload = run.load_journal(records=instance_records(args, since, until),
                                    since=since, until=until)
        machine = None if args.nodes is not None or (args.config and config.resource) \
            else Machine.from_inventory(load_inventory(inst))
    if args.nodes is not None:
        machine = Machine.uniform(args.nodes, args.cores_per_node or 1)
    elif config.resource and (machine is None or args.config):
        machine = _configured(config)
    return workload, machine, config


def _source(args: argparse.Namespace) -> None:
    """Exactly one input: --swf, --journal, --synthetic, or --forecast-eval TRACE."""
    from fluxes.cli.util import UsageError

    given = [args.swf is not None, args.journal is not None, args.synthetic is not None]
    if args.forecast_eval:
        if any(given):
            raise UsageError("fluxes simulate: --forecast-eval TRACE and --swf, --journal "
                             "or --synthetic: give one input")
        args.swf = args.forecast_eval
    elif not any(given):
        raise UsageError("fluxes simulate: one of --swf, --journal, --synthetic or "
                         "--forecast-eval TRACE is required")
    if args.forecast_every is not None and args.forecast_eval is None:
        raise UsageError("fluxes simulate: --forecast-every needs --forecast-eval")


def _forecast_eval(args: argparse.Namespace, workload: Workload, machine: Machine,
                   config: InstanceConfig, policies: list[str | None]) -> int:
    """``--forecast-eval``: forecast errors against the simulated starts, per predictor."""
    from fluxes.cli.progress import Progress
    from fluxes.forecast.evaluate import evaluate

    if len(policies) > 1:
        raise ValueError("--forecast-eval takes one policy, not --compare")
    every = args.forecast_every or max(1, len(workload.jobs) // 200)
    overrides = {"policy": policies[0], "queue_depth": args.queue_depth,
                 "reservation_depth": args.reservation_depth, "placement": args.placement}
    bar = Progress("forecast-eval", len(workload.jobs), enabled=not args.no_progress)
    result = evaluate(workload.jobs, machine, config, overrides, every=every,
                      progress=_updater(bar))
    bar.done()
    if args.json:
        print_json({**result.to_dict(), "every": every, "machine": machine.description,
                    "policy": policies[0] or "configured"})
    else:
        print(f"machine: {machine.description}; policy: {policies[0] or 'configured'}")
        for line in result.text():
            print(line)
    return 0


def _configured(config: InstanceConfig) -> Machine:
    from fluxes.sim.workload import Machine

    # a graph ([resource] graph, graph-recipe) gives the hosts and the scheduler's pool
    return Machine.from_table(config.resource)


def _updater(bar: Any) -> Callable[[int, int], None]:
    def update(done: int, _total: int) -> None:
        """Move the bar."""
        bar.update(done)

    return update


def _suffixed(path: str, label: str, several: bool) -> str:
    """``out.swf`` -> ``out-easy.swf`` when several runs write one file each."""
    if not several:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{label}{p.suffix}"))


def _simulate(args: argparse.Namespace) -> int:
    from fluxes.cli.progress import Progress
    from fluxes.config import InstanceConfig
    from fluxes.sim import metrics, report, run

    _source(args)
    config = InstanceConfig()
    if args.config:
        with open(args.config, "rb") as f:
            config = InstanceConfig.from_toml(f.read())
    policies = _policies(args)
    window = _window(args.gantt_window)
    if args.plot:
        from fluxes.sim.plots import require_matplotlib

        require_matplotlib()  # fail before simulating, not after
    accounts = None
    if args.banks:
        from fluxes.sim.accounting import read_banks

        with open(args.banks, encoding="utf-8") as f:
            accounts = read_banks(f, f"--banks {args.banks}")
    workload, machine, config = _load(args, config)
    if not workload.jobs:
        raise ValueError("the workload has no job to simulate"
                         + (f" ({sum(workload.skipped.values())} skipped when read: "
                            f"{workload.skipped.most_common(1)[0][0]}, ...)"
                            if workload.skipped else ""))
    if machine is None:
        raise ValueError("no machine: give --nodes/--cores-per-node, or --config with a "
                         "[resource] table")
    if args.forecast_eval is not None:
        return _forecast_eval(args, workload, machine, config, policies)
    several = len(policies) > 1
    outcomes: list[Outcome] = []
    for policy in policies:
        overrides = {"policy": policy, "queue_depth": args.queue_depth,
                     "reservation_depth": args.reservation_depth,
                     "placement": args.placement}
        label = policy or "configured"
        bar = Progress(f"simulate {label}", len(workload.jobs),
                       enabled=not args.no_progress)
        journal_out = _suffixed(args.journal_out, label, several) if args.journal_out else None
        outcome = run.simulate(workload, machine, config, overrides, label=label,
                               annotations=args.annotations, journal_out=journal_out,
                               accounts=accounts, progress=_updater(bar))
        bar.done()
        outcomes.append(outcome)
        if args.out:
            with open(_suffixed(args.out, label, several), "w", encoding="utf-8") as out:
                run.write_schedule(out, workload, outcome)
    summaries = [metrics.summarize(o) for o in outcomes]
    inputs = workload.inputs()
    if args.plot:
        from fluxes.sim.plots import plot_runs

        plot_runs(outcomes, args.plot, window)
    if args.json:
        doc: dict[str, Any] = {"input": inputs}
        if several:
            doc["runs"] = summaries
        else:
            doc.update(summaries[0])
        print_json(doc)
    else:
        lines = report.compare_text(summaries, inputs) if several \
            else report.report_text(summaries[0], inputs)
        for line in lines:
            print(line)
    broken = [s["label"] for s in summaries if not s["invariants"]["ok"]]
    if broken:
        print(f"{PROG} simulate: invariants violated ({', '.join(broken)}): a bug in the code "
              "the simulation drives; the report lists them", file=sys.stderr)
        return EXIT_INVARIANT
    return 0
