"""``fluxes resource-query``: Fluxion's resource-query on a resource graph, offline.

Load a graph (a GRUG recipe or JGF), then read commands on stdin (``match
allocate|allocate_orelse_reserve|allocate_with_satisfiability|satisfiability
JOBSPEC``, ``multi-match``, ``cancel``, ``update``, ``partial-cancel``,
``info``, ``list``, ``stat``, ``find``, ``set-status``/``get-status``,
``set-property``/``get-property``, ``quit``) and print what Fluxion's
tool prints, so a site can check its graph and its jobspecs without an
instance.  See
``docs/resource-graph.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from fluxes.cli.util import help_with_example
from fluxes.domain.graph.query import FORMATS, POLICIES

_MAX_GRAPH_BYTES = 1 << 30


def register(subparsers: Any) -> None:
    """Add the ``resource-query`` command."""
    parser = subparsers.add_parser("resource-query", **help_with_example(
        "Match jobspecs against a resource graph as Fluxion's resource-query does:\n"
        "commands on stdin (match allocate|allocate_orelse_reserve|\n"
        "allocate_with_satisfiability|satisfiability JOBSPEC, multi-match, cancel JOBID,\n"
        "update allocate|reserve jgf|rv1exec R JOBID AT DURATION, partial-cancel JOBID\n"
        "jgf|rv1exec R, info, list, stat, find, set-status, get-status, set-property,\n"
        "get-property, quit).",
        ["fluxes resource-query -L tiny.graphml -P high < cmds",
         "fluxes resource-query -L cluster.json -f jgf -P low -F pretty_simple"]))
    parser.add_argument("-L", "--load-file", required=True, metavar="GRAPH",
                        help="the resource graph: a GRUG recipe (GraphML) or JGF")
    parser.add_argument("-f", "--load-format", choices=("grug", "jgf", "rv1exec"),
                        default="grug",
                        help="format of GRAPH (default grug; rv1exec: an R's R_lite, each "
                             "rank a node holding its cores and gpus)")
    parser.add_argument("-P", "--match-policy", default="high", choices=POLICIES,
                        help="Fluxion's policies (high, low, lonode, hinode, lonodex, hinodex, "
                             "first, firstnodex, locality, variation) or best / worst "
                             "(default high)")
    parser.add_argument("-S", "--match-subsystems", default="CA", metavar="CA",
                        help="subsystems to match on: only CA (containment) (default CA)")
    parser.add_argument("-F", "--match-format", choices=FORMATS,
                        default="simple", help="how matches are printed (default simple)")
    parser.add_argument("-t", "--test-output", metavar="FILE",
                        help="write what the commands print to FILE instead of stdout")
    parser.add_argument("-e", "--elapse-time", action="store_true",
                        help="print how long each match took")
    parser.add_argument("-d", "--disable-prompt", action="store_true",
                        help="no prompt (as Fluxion's --disable-prompt): there never is one")
    parser.add_argument("-p", "--prune-filters", metavar="HL:LL,...",
                        help="skip subtrees by the free units of type LL at vertices of type "
                             "HL (ALL: every type), e.g. ALL:core,rack:node; '' or 'none': never "
                             "(default: every type at every vertex); results never change, "
                             "only the work")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    """Load the graph, then execute stdin's commands; 1 if any command failed."""
    from fluxes.domain.graph.grug import load_grug
    from fluxes.domain.graph.jgf import load_jgf
    from fluxes.domain.graph.query import QuerySession
    from fluxes.domain.graph.rv1exec import load_rv1exec

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
        loader = {"grug": load_grug, "jgf": load_jgf, "rv1exec": load_rv1exec}
        graph = loader[args.load_format](data)
    except ValueError as exc:
        raise ValueError(f"{args.load_file}: {exc}") from None
    session = QuerySession(graph, _load_jobspec, args.match_policy, args.match_format,
                           clock=time.perf_counter if args.elapse_time else None,
                           read=_read_r, prune=args.prune_filters)
    if args.test_output is None:
        return _session(session, sys.stdout)
    try:
        with open(args.test_output, "w", encoding="utf-8") as out:
            return _session(session, out)
    except OSError as exc:
        raise ValueError(f"{args.test_output}: {exc.strerror or exc}") from None


def _load_jobspec(path: str) -> Mapping[str, Any]:
    """A jobspec file as a mapping, its tasks unchecked.

    resource-query matches the ``resources`` tree (checked when matched), as
    Fluxion's does: tasks naming a slot label the resources lack are not
    refused here (submission validates RFC 14 strictly).
    """
    import yaml

    from fluxes.formats.jobspec import MAX_JOBSPEC_BYTES

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_JOBSPEC_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_JOBSPEC_BYTES:
        raise ValueError(f"jobspec is larger than {MAX_JOBSPEC_BYTES} bytes")
    try:
        doc = yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ValueError(f"invalid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(doc, Mapping):
        raise ValueError("a jobspec must be a mapping")
    return doc


def _read_r(path: str) -> bytes:
    """The bytes of an R or JGF file (``update``, ``partial-cancel``), bounded."""
    with open(path, "rb") as handle:
        data = handle.read(_MAX_GRAPH_BYTES + 1)
    if len(data) > _MAX_GRAPH_BYTES:
        raise ValueError(f"larger than {_MAX_GRAPH_BYTES} bytes")
    return data


def _session(session: Any, out: TextIO) -> int:
    """Run stdin's commands, printing to *out*; 1 if any failed."""
    failed = False
    for line in sys.stdin:
        reply = session.execute(line)
        if reply.out:
            out.write("".join(f"{text}\n" for text in reply.out))
            out.flush()
        if reply.console:
            sys.stdout.write("".join(f"{text}\n" for text in reply.console))
            sys.stdout.flush()
        if reply.err:
            failed = True
            sys.stderr.write("".join(f"{text}\n" for text in reply.err))
            sys.stderr.flush()
        if reply.quit:
            break
    return 1 if failed else 0
