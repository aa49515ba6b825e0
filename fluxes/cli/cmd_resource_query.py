"""``fluxes resource-query``: Fluxion's resource-query on a resource graph, offline.

Load a graph (a GRUG recipe or JGF), then read commands on stdin (``match
allocate JOBSPEC``, ``match allocate_orelse_reserve JOBSPEC``, ``match
allocate_with_satisfiability JOBSPEC``, ``match satisfiability JOBSPEC``,
``cancel JOBID``, ``quit``) and print what Fluxion's tool prints, so a site
can check its graph and its jobspecs without an instance.  See
``docs/resource-graph.md``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fluxes.cli.util import help_with_example

_MAX_GRAPH_BYTES = 1 << 30


def register(subparsers: Any) -> None:
    """Add the ``resource-query`` command."""
    parser = subparsers.add_parser("resource-query", **help_with_example(
        "Match jobspecs against a resource graph as Fluxion's resource-query does:\n"
        "commands on stdin (match allocate|allocate_orelse_reserve|\n"
        "allocate_with_satisfiability|satisfiability JOBSPEC, cancel JOBID, quit).",
        ["fluxes resource-query -L tiny.graphml -P high < cmds",
         "fluxes resource-query -L cluster.json -f jgf -P low -F pretty_simple"]))
    parser.add_argument("-L", "--load-file", required=True, metavar="GRAPH",
                        help="the resource graph: a GRUG recipe (GraphML) or JGF")
    parser.add_argument("-f", "--load-format", choices=("grug", "jgf"), default="grug",
                        help="format of GRAPH (default grug)")
    parser.add_argument("-P", "--match-policy", default="high",
                        choices=("high", "low", "first", "best", "worst"),
                        help="prefer higher or lower ids, graph order, or pack / spread "
                             "(default high)")
    parser.add_argument("-S", "--match-subsystems", default="CA", metavar="CA",
                        help="subsystems to match on: only CA (containment) (default CA)")
    parser.add_argument("-F", "--match-format", choices=("simple", "pretty_simple"),
                        default="simple", help="how matches are printed (default simple)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    """Load the graph, then execute stdin's commands; 1 if any command failed."""
    from fluxes.domain.graph.grug import load_grug
    from fluxes.domain.graph.jgf import load_jgf
    from fluxes.domain.graph.query import QuerySession
    from fluxes.formats.jobspec import Jobspec

    if args.match_subsystems != "CA":
        raise ValueError(f"-S {args.match_subsystems}: only CA (the containment subsystem) "
                         "is supported")
    try:
        with open(args.load_file, "rb") as handle:
            data = handle.read(_MAX_GRAPH_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{args.load_file}: {exc.strerror or exc}") from None
    if len(data) > _MAX_GRAPH_BYTES:
        raise ValueError(f"{args.load_file}: larger than {_MAX_GRAPH_BYTES} bytes")
    try:
        graph = load_grug(data) if args.load_format == "grug" else load_jgf(data)
    except ValueError as exc:
        raise ValueError(f"{args.load_file}: {exc}") from None
    session = QuerySession(graph, Jobspec.from_file, args.match_policy, args.match_format)
    failed = False
    for line in sys.stdin:
        reply = session.execute(line)
        if reply.out:
            sys.stdout.write("".join(f"{text}\n" for text in reply.out))
            sys.stdout.flush()
        if reply.err:
            failed = True
            sys.stderr.write("".join(f"{text}\n" for text in reply.err))
            sys.stderr.flush()
        if reply.quit:
            break
    return 1 if failed else 0
