"""A resource-query session: Fluxion's ``resource-query`` commands on one graph (pure).

:class:`QuerySession` executes one command line at a time and returns what
to print (:class:`Reply`); the CLI (``fluxes resource-query``) reads the
lines and the jobspec files.  Commands:

* ``match allocate JOBSPEC``: allocate now, for the jobspec's duration;
* ``match allocate_orelse_reserve JOBSPEC``: allocate now, else reserve the
  earliest window the planner finds;
* ``match allocate_with_satisfiability JOBSPEC``: allocate now, and say
  whether a failed request could ever fit;
* ``match satisfiability JOBSPEC``: could it fit the empty graph?
* ``cancel JOBID [stats]``: release an allocation or drop a reservation;
* ``update allocate|reserve jgf|jgf_shorthand|rv1exec FILE JOBID AT DURATION``:
  record the R in FILE as JOBID's, held for ``[AT, AT + DURATION)`` (an
  allocation when AT is 0, else a reservation) if nothing else holds any of
  it; printed as a match would be, and the next job id is JOBID + 1;
* ``partial-cancel JOBID jgf|rv1exec FILE [stats]``: release what the
  allocation holds on the ranks the R in FILE names (the job is gone once
  its last rank is);
* ``help``, ``quit``.  Blank lines and ``#`` comments are skipped.

The clock starts at 0 and stays there: a job holds its resources for its
jobspec's duration (rounded up to whole seconds; none means unlimited), so
reservations start when earlier jobs end.  Every ``match`` but
``satisfiability`` uses up the next job id (1, 2, ...), even when nothing
matches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from fluxes.domain.graph.inspect import find, set_status
from fluxes.domain.graph.jgf import subgraph
from fluxes.domain.graph.match import make_hold, parse_prune
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.output import pretty_lines, rset_of, simple_lines
from fluxes.domain.graph.recovery import (
    picks_of_graph,
    picks_of_rv1exec,
    r_document,
    ranks_of_r,
)
from fluxes.domain.graph.state import Hold
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import parse_resources
from fluxes.domain.sched.errors import SchedError
from fluxes.formats.jobspec import Jobspec

__all__ = ["FORMATS", "POLICIES", "QuerySession", "Reply"]

#: ``-P`` policies -> the matcher's policy.  Fluxion's ``first`` is ``hinode`` that stops
#: at the first match; ``lonode`` / ``hinode`` rank nodes by the ids of what each would
#: give (node-centric); ``locality`` takes the longest run of consecutive ids first;
#: ``variation`` the lowest ``perf_class`` first (see :mod:`~fluxes.domain.graph.match`).
POLICY_MAP: Final = {"high": "high", "low": "low", "first": "hinode", "lonode": "lonode",
                     "hinode": "hinode", "lonodex": "lonodex", "hinodex": "hinodex",
                     "firstnodex": "hinodex", "locality": "locality",
                     "variation": "variation", "best": "best", "worst": "worst"}
POLICIES: Final = tuple(POLICY_MAP)
#: ``-F`` formats.
FORMATS: Final = ("simple", "pretty_simple", "jgf", "rlite", "rv1", "rv1_nosched")

_BAR: Final = "INFO: ============================="
_SUBCOMMANDS: Final = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
                       "satisfiability")
_HELP: Final = (
    "multi-match SUBCOMMAND JOBSPEC...            match each jobspec in turn",
    "info JOBID, list, stat                       jobs matched, match times",
    "find EXPR                                    vertices by status=, sched-now=, "
    "sched-future=, type=, name=, rank=, property= (and, or)",
    "set-status PATH up|down, get-status PATH     a vertex down is never matched",
    "set-property PATH KEY=VALUE, get-property PATH",
    "match allocate JOBSPEC                       allocate now",
    "match allocate_orelse_reserve JOBSPEC        allocate now, else reserve the earliest "
    "window",
    "match allocate_with_satisfiability JOBSPEC   allocate now; say if it could ever fit",
    "match satisfiability JOBSPEC                 could it fit the empty graph?",
    "cancel JOBID [stats]                         release an allocation or a reservation",
    "update allocate|reserve jgf|rv1exec FILE JOBID AT DURATION   hold the R in FILE",
    "partial-cancel JOBID jgf|rv1exec FILE [stats]  release the R's ranks of a job",
    "quit                                         end the session",
)


@dataclass
class Reply:
    """What one command prints, and whether to stop: ``out`` goes where matches go (``-t
    FILE``, else stdout), ``console`` always to stdout (``info``, ``list``, ``stat``,
    ``help``, elapsed times, as Fluxion's tool prints them), ``err`` to stderr."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)
    quit: bool = False


class QuerySession:
    """Commands on one graph (see the module docstring).

    *load* turns a jobspec file name into a Jobspec (or its dict); *read*
    gives the bytes of an R file (``update``, ``partial-cancel``); both may
    raise ValueError (or OSError) with a one-line message.
    """

    def __init__(self, graph: ResourceGraph, load: Callable[[str], Jobspec | Mapping[str, Any]],
                 policy: str = "high", fmt: str = "simple",
                 clock: Callable[[], float] | None = None,
                 read: Callable[[str], bytes] | None = None, prune: str | None = None) -> None:
        """A session with nothing allocated; ValueError for an unknown policy or format.

        With a *clock* (seconds), each match also prints ``INFO: ELAPSE=`` its time.
        *prune* is ``-p``'s ``HL:LL,...`` (``none``: no pruning; default: every type
        everywhere): only how much is visited changes, never a result.
        """
        if policy not in POLICIES:
            raise ValueError(f"unknown match policy {policy!r} (expected one of "
                             f"{', '.join(POLICIES)})")
        if fmt not in FORMATS:
            raise ValueError(f"unknown match format {fmt!r} (expected one of "
                             f"{', '.join(FORMATS)})")
        self.graph = graph
        self.trav = Traverser(graph, None if prune is None else parse_prune(prune))
        self.policy = POLICY_MAP[policy]
        self.fmt = fmt
        self.load = load
        self.read = read
        self.next_jobid = 1
        self.now = 0.0
        self.clock = clock
        #: jobid -> (state, scheduled at, jobspec file, match time) of jobs holding something
        self.jobs: dict[int, tuple[str, int, str, float]] = {}
        #: how long each match took (zero without a clock)
        self.times: list[float] = []

    def execute(self, line: str) -> Reply:
        """Run one command line."""
        words = line.split()
        if not words or words[0].startswith("#"):
            return Reply()
        cmd, args = words[0], words[1:]
        if cmd in ("quit", "q"):
            return Reply(quit=True)
        if cmd in ("help", "h"):
            return Reply(console=list(_HELP))
        if cmd in ("match", "m", "update", "u"):
            run = self._match if cmd in ("match", "m") else self._update
            if self.clock is None:
                return run(args)
            began = self.clock()
            reply = run(args)
            took = self.clock() - began
            if not reply.err:
                reply.console.append(f"INFO: ELAPSE={took:.6f}")
                self._timed(took)
            return reply
        if cmd in ("multi-match", "M"):
            return self._multi(args)
        if cmd in ("cancel", "c"):
            return self._cancel(args)
        handler = self._commands().get(cmd)
        if handler is None:
            return Reply(err=[f"ERROR: unknown command {cmd!r} (try 'help')"])
        try:
            return handler(args)
        except ValueError as exc:
            return Reply(err=[f"ERROR: {exc}"])

    def _commands(self) -> dict[str, Callable[[list[str]], Reply]]:
        """The inspection commands by name and abbreviation."""
        table: dict[str, Callable[[list[str]], Reply]] = {
            "info": self._info, "i": self._info, "list": self._list, "l": self._list,
            "stat": self._stat, "s": self._stat, "find": self._find, "f": self._find,
            "set-property": self._set_property, "p": self._set_property,
            "get-property": self._get_property, "g": self._get_property,
            "set-status": self._set_status, "t": self._set_status,
            "get-status": self._get_status, "e": self._get_status,
            "partial-cancel": self._partial_cancel, "pc": self._partial_cancel,
        }
        return table

    def _job_line(self, jobid: int) -> str:
        """``INFO: JOBID, STATE, AT, JOBSPEC, OVERHEAD`` of a matched job."""
        mode, at, path, took = self.jobs[jobid]
        return f"INFO: {jobid}, {mode}, {at}, {path}, {took:.6f}"

    def _info(self, args: list[str]) -> Reply:
        """``info JOBID``."""
        if len(args) != 1:
            raise ValueError("malformed command: info JOBID")
        jobid = _jobid(args[0])
        if jobid not in self.jobs:
            raise ValueError(f"nonexistent job {jobid}")
        return Reply(console=[self._job_line(jobid)])

    def _list(self, args: list[str]) -> Reply:
        """``list``: every job matched and still held."""
        return Reply(console=[self._job_line(j) for j in sorted(self.jobs)])

    def _stat(self, args: list[str]) -> Reply:
        """``stat``: how many jobs matched, and the match times."""
        times = self.times
        return Reply(console=[f"INFO: Num. of Jobs Matched: {len(self.jobs)}",
                          f"INFO: Min. Match Time: {min(times, default=0.0):.6f}",
                          f"INFO: Max. Match Time: {max(times, default=0.0):.6f}",
                          "INFO: Avg. Match Time: "
                          f"{(sum(times) / len(times)) if times else 0.0:.6f}"])

    def _vertex(self, path: str) -> int:
        """The vertex at containment *path*; ValueError if none."""
        v = self.graph.by_path(path)
        if v is None:
            raise ValueError(f"could not find path {path} in resource graph")
        return v

    def _find(self, args: list[str]) -> Reply:
        """``find EXPR``: vertices by status, schedule, type, name, rank or property."""
        expr = " ".join(args)
        trav = self.trav
        shown = find(self.graph, trav.state, expr, [*trav.allocs.values(), *trav.resvs.values()])
        hold = Hold(0, 0.0, 0.0, shown, {v: size for v, (size, _) in shown.items()})
        lines = self._lines(hold) if shown else []
        return Reply(out=[*lines, _BAR, f'INFO: EXPRESSION="{expr}"', _BAR])

    def _set_property(self, args: list[str]) -> Reply:
        """``set-property PATH KEY=VALUE``."""
        if len(args) != 2:
            raise ValueError("malformed command: set-property PATH KEY=VALUE")
        key, sep, value = args[1].partition("=")
        if not key or not sep or not value:
            raise ValueError("set-property: use set-property PATH KEY=VALUE")
        v = self._vertex(args[0])
        props = self.graph.props[v]
        if props is None:
            props = self.graph.props[v] = {}
        props[key] = value
        return Reply()

    def _get_property(self, args: list[str]) -> Reply:
        """``get-property PATH``."""
        if len(args) != 1:
            raise ValueError("malformed command: get-property PATH")
        props = self.graph.props[self._vertex(args[0])]
        if not props:
            return Reply(out=[f"No properties were found for {args[0]}."])
        return Reply(out=[f"{k}={v}" for k, v in sorted(props.items())])

    def _set_status(self, args: list[str]) -> Reply:
        """``set-status PATH up|down``: a vertex down (and its subtree) is never matched."""
        if len(args) != 2:
            raise ValueError("malformed command: set-status PATH up|down")
        set_status(self.trav.state, self._vertex(args[0]), args[1])
        return Reply()

    def _get_status(self, args: list[str]) -> Reply:
        """``get-status PATH``."""
        if len(args) != 1:
            raise ValueError("malformed command: get-status PATH")
        down = self.trav.state.down[self._vertex(args[0])]
        return Reply(out=[f"{args[0]} is {'down' if down else 'up'}"])

    def _multi(self, args: list[str]) -> Reply:
        """``multi-match SUBCOMMAND JOBSPEC...``: match each jobspec in turn."""
        if len(args) < 2:
            return Reply(err=["ERROR: malformed command: multi-match SUBCOMMAND JOBSPEC..."])
        out = Reply()
        for path in args[1:]:
            one = self.execute(f"match {args[0]} {path}")
            out.out += one.out
            out.console += one.console
            out.err += one.err
        return out

    def _cancel(self, args: list[str]) -> Reply:
        """``cancel JOBID [stats]`` (stats: how many vertices the cancel visited)."""
        if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "stats"):
            return Reply(err=["ERROR: malformed command: cancel JOBID [stats]"])
        try:
            jobid = int(args[0])
        except ValueError:
            return Reply(err=[f"ERROR: invalid job id {args[0]!r}"])
        hold = self.trav.cancel(jobid)
        if hold is None:
            return Reply(err=[f"ERROR: nonexistent job {jobid}"])
        self.jobs.pop(jobid, None)
        if len(args) == 1:
            return Reply()
        visited = len(hold.touched)
        return Reply(out=[_BAR, f'INFO: CANCEL PREORDER COUNT="{visited}"',
                          f'INFO: CANCEL POSTORDER COUNT="{visited}"', _BAR])

    def _r_file(self, path: str) -> Mapping[str, Any]:
        """The R (or JGF) document in file *path*."""
        if self.read is None:
            raise ValueError("this session reads no R files")
        try:
            return r_document(self.read(path))
        except OSError as exc:
            raise ValueError(f"{path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def _update(self, args: list[str]) -> Reply:
        """``update allocate|reserve READER FILE JOBID AT DURATION``.

        A malformed command is an error only; an R that cannot be held (a
        vertex not in the graph, or held by another job) also answers "no
        match" for the job id, which is then used up, as in Fluxion.
        """
        try:
            reader, path, jobid, at, length = self._update_args(args)
        except ValueError as exc:
            return Reply(err=[f"ERROR: {exc}"])
        self.next_jobid = jobid + 1
        no_match = [_BAR, "INFO: No matching resources found", f"INFO: JOBID={jobid}", _BAR]
        try:
            doc = self._r_file(path)
            where = f"update: {path}"
            if reader == "rv1exec":
                picks = picks_of_rv1exec(self.graph, doc, where)
            else:
                picks = picks_of_graph(self.graph, doc, where)
            if not picks:
                raise ValueError(f"{where}: the R holds nothing")
        except ValueError as exc:
            return Reply(out=no_match, err=[f"ERROR: {exc}"])
        hold = make_hold(self.graph, picks, jobid, float(at), float(at + length), False)
        bad = self.trav.update(hold, self.now)
        if bad is not None:
            return Reply(out=no_match, err=[f"ERROR: update: {self.graph.path(bad)} is not "
                                            f"free for job {jobid}"])
        at = int(hold.start) if hold.reserved else 0
        self.jobs[jobid] = ("RESERVED" if hold.reserved else "ALLOCATED", at, path, 0.0)
        self.times.append(0.0)
        return Reply(out=[*self._lines(hold), *self._scheduled(hold)])

    def _update_args(self, args: list[str]) -> tuple[str, str, int, int, int]:
        """An ``update`` command's reader, file, job id, start and duration; ValueError if
        malformed."""
        if len(args) != 6:
            raise ValueError("malformed command: update allocate|reserve "
                             "jgf|jgf_shorthand|rv1exec FILE JOBID AT DURATION")
        sub, reader, path = args[:3]
        if sub not in ("allocate", "reserve"):
            raise ValueError(f"unknown subcommand {sub!r} (expected allocate or reserve)")
        if reader not in ("jgf", "jgf_shorthand", "rv1exec"):
            raise ValueError(f"unsupported reader {reader!r} (expected jgf, jgf_shorthand "
                             "or rv1exec)")
        jobid, at, length = (_jobid(a) for a in args[3:])
        if jobid in self.trav.allocs or jobid in self.trav.resvs:
            raise ValueError(f"existing job {jobid}")
        if jobid < 0 or at < 0 or length <= 0:
            raise ValueError(f"invalid job or time ({jobid}, {at}, {length})")
        return reader, path, jobid, at, length

    def _partial_cancel(self, args: list[str]) -> Reply:
        """``partial-cancel JOBID jgf|rv1exec FILE [stats]``: release the R's ranks."""
        if len(args) not in (3, 4) or (len(args) == 4 and args[3] != "stats"):
            raise ValueError("malformed command: partial-cancel JOBID jgf|rv1exec FILE [stats]")
        jobid = _jobid(args[0])
        reader, path = args[1], args[2]
        if reader not in ("jgf", "rv1exec"):
            raise ValueError(f"unsupported reader {reader!r} (expected jgf or rv1exec)")
        if jobid in self.trav.resvs:
            raise ValueError("reservations not currently supported by partial cancel")
        if jobid not in self.trav.allocs:
            raise ValueError(f"nonexistent job {jobid}")
        before = len(self.trav.allocs[jobid].touched)
        ranks = ranks_of_r(self.graph, self._r_file(path), reader, f"partial-cancel: {path}")
        found = self.trav.release_ranks(jobid, ranks)
        assert found is not None  # the job holds an allocation
        left, gone = found
        if gone:
            self.jobs.pop(jobid, None)
        if len(args) == 3:
            return Reply()
        visited = before if gone else before - len(left.touched)
        return Reply(out=[_BAR, f'INFO: PARTIAL CANCEL PREORDER COUNT="{visited}"',
                          f'INFO: PARTIAL CANCEL POSTORDER COUNT="{visited}"', _BAR])

    def _timed(self, took: float) -> None:
        """Record the time of the match just made (if it matched)."""
        last = self.next_jobid - 1
        if last in self.jobs and self.jobs[last][3] == 0.0:
            mode, at, path, _ = self.jobs[last]
            self.jobs[last] = (mode, at, path, took)
            if self.times:
                self.times[-1] = took

    def _match(self, args: list[str]) -> Reply:
        """``match SUBCOMMAND JOBSPEC``."""
        if len(args) != 2:
            return Reply(err=["ERROR: malformed command: match SUBCOMMAND JOBSPEC"])
        sub, path = args
        if sub not in _SUBCOMMANDS:
            return Reply(err=[f"ERROR: unknown subcommand {sub!r} (expected one of "
                              f"{', '.join(_SUBCOMMANDS)})"])
        try:
            jobspec = self.load(path)
            resources, duration = _read(jobspec)
            needs = self.trav.compile(parse_resources(resources))
        except (OSError, ValueError, SchedError) as exc:
            # an unreadable file's message names it already
            named = isinstance(exc, OSError) or isinstance(exc.__cause__, OSError)
            return Reply(err=[f"ERROR: {exc}" if named else f"ERROR: {path}: {exc}"])
        trav = self.trav
        if sub == "satisfiability":
            verdict = "Satisfiable" if trav.satisfiable(needs) else "Unsatisfiable"
            return Reply(out=[_BAR, f"INFO: {verdict} request", _BAR])
        jobid = self.next_jobid
        self.next_jobid += 1
        hold = trav.allocate(needs, jobid, self.now, duration, self.policy)
        if hold is None and sub == "allocate_orelse_reserve":
            found = trav.earliest(needs, jobid, self.now, duration, self.policy)
            if found is not None:
                hold = trav.reserve_at(needs, jobid, found[0], duration, self.policy)
        if hold is not None:
            at = 0 if hold.start <= self.now else int(hold.start)
            self.jobs[jobid] = ("RESERVED" if hold.reserved else "ALLOCATED", at, path, 0.0)
            self.times.append(0.0)
            return Reply(out=[*self._lines(hold), *self._scheduled(hold)])
        out = [_BAR, "INFO: No matching resources found"]
        if sub != "allocate" and not trav.satisfiable(needs):
            out.append("INFO: Unsatisfiable request")
        out += [f"INFO: JOBID={jobid}", _BAR]
        return Reply(out=out)

    def _lines(self, hold: Hold) -> list[str]:
        """The vertices of *hold* in the session's format."""
        if self.fmt == "pretty_simple":
            return pretty_lines(self.graph, hold)
        if self.fmt == "simple":
            return simple_lines(self.graph, hold)
        if self.fmt == "jgf":
            return [_dumps(subgraph(self.graph, hold.shown))]
        doc = rset_of(self.graph, hold, self.fmt == "rv1").encode()
        if self.fmt == "rlite":
            return [_dumps(doc["execution"]["R_lite"])]
        return [_dumps(doc)]

    def _scheduled(self, hold: Hold) -> list[str]:
        """The INFO block of a match."""
        now = hold.start <= self.now
        return [_BAR, f"INFO: JOBID={hold.jobid}",
                f"INFO: RESOURCES={'ALLOCATED' if now else 'RESERVED'}",
                f"INFO: SCHEDULED AT={'Now' if now else int(hold.start)}", _BAR]


def _jobid(text: str) -> int:
    """A job id argument; ValueError if it is none."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"invalid job id {text!r}") from None


def _dumps(doc: object) -> str:
    """One line of JSON."""
    return orjson.dumps(doc).decode()


def _read(jobspec: Jobspec | Mapping[str, Any]) -> tuple[object, float]:
    """The resources list and the duration (whole seconds; unlimited: inf) of a jobspec."""
    if isinstance(jobspec, Jobspec):
        resources: object = jobspec.resources
        attributes: object = jobspec.attributes
    else:
        resources = jobspec.get("resources")
        attributes = jobspec.get("attributes", {})
    system = attributes.get("system", {}) if isinstance(attributes, Mapping) else {}
    duration = system.get("duration", 0) if isinstance(system, Mapping) else 0
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not (
            math.isfinite(duration) and duration >= 0):
        raise ValueError(f"attributes.system.duration: expected seconds >= 0, got "
                         f"{duration!r}")
    return resources, float(math.ceil(duration)) if duration else math.inf
