"""What the simulator runs: the machine and the jobs, from an SWF trace or a journal.

A :class:`SimJob` is the input-neutral description of one job: when it is
submitted, what it asks for (processors anywhere, whole nodes, or an exact
scheduler request read from a journal), its time limit, how long it really
runs and how it ends. :func:`jobs_from_swf` maps an SWF trace (issue 17,
"Mapping"): a job of P processors is P one-core tasks placed anywhere, or P
whole nodes with ``whole_nodes``. :func:`jobs_from_journal` rebuilds the jobs
of an instance's history (the export format, :mod:`fluxes.sim.journal`).

:class:`Machine` is the inventory, built from flags, the SWF header or an
instance configuration's ``[resource]`` table.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.domain.graph.table import inventory_of_graph_table
from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.domain.sched.request import Request
from fluxes.formats.idset import IDSet
from fluxes.sim.swf import NOBODY, Trace

__all__ = ["CANCELED", "COMPLETED", "FAILED", "Machine", "SimJob", "jobs_from_journal",
           "jobs_from_swf", "machine_for_trace"]

# How a job ends when the scheduler lets it run its course.
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELED: Final = "canceled"
#: Wait status of a job that exits 1 (a failed SWF job).
FAILED_STATUS: Final = 256
#: Default urgency (flux's).
URGENCY: Final = 16


@dataclass(slots=True)
class SimJob:
    """One job of the workload (times are virtual UNIX seconds)."""

    id: int
    submit: float
    #: processors (one-core tasks anywhere) or, with ``whole_nodes``, nodes
    size: int
    #: the time limit in seconds (0: unlimited)
    requested: float
    #: how long it runs if nothing stops it (inf: until its time limit)
    runtime: float
    userid: int
    #: how the report names its user and queue
    user: str
    queue_label: str
    #: the queue it is submitted to (None: the default queue)
    queue: str | None = None
    whole_nodes: bool = False
    #: COMPLETED, FAILED (exit status 1, or ``exit_status``) or CANCELED (by its
    #: user once it ran ``runtime`` seconds)
    outcome: str = COMPLETED
    exit_status: int = 0
    urgency: int = URGENCY
    #: an exact scheduler request (journal input), instead of ``size``
    request: Request | None = None
    #: RFC 26 dependencies (journal input)
    dependencies: list[Any] | None = None
    name: str | None = None
    #: the index of its SWF line in the trace (for the output SWF)
    line: int = -1
    #: the bank it asked to be charged to (journal input; None: the user's default)
    bank: str | None = None


@dataclass(frozen=True)
class Machine:
    """The inventory jobs run on, and how the report describes it."""

    inventory: Inventory
    description: str
    #: the ``[resource]`` table it was read from (None: given by counts): the
    #: scheduler's pool is built from it as the worker builds it (a graph pool when it
    #: describes a graph)
    table: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def cores(self) -> int:
        """Cores in all."""
        return self.inventory.ncores

    @property
    def nodes(self) -> int:
        """Nodes (execution targets) in all."""
        return len(self.inventory)

    @property
    def cores_per_node(self) -> int:
        """Cores of the largest node (the Gantt chart's row height)."""
        return max((len(t.cores) for t in self.inventory), default=0)

    @classmethod
    def uniform(cls, nodes: int, cores_per_node: int) -> Machine:
        """``nodes`` nodes of ``cores_per_node`` cores, no hostnames (R is built faster
        without them). ValueError for counts < 1."""
        for name, value in (("nodes", nodes), ("cores per node", cores_per_node)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"machine: {name} must be an integer >= 1, got {value!r}")
        cores = IDSet.from_ranges([(0, cores_per_node - 1)])
        targets = [Target(rank, None, cores, IDSet()) for rank in range(nodes)]
        plural = "s" if nodes != 1 else ""
        return cls(Inventory(targets), f"{nodes} node{plural} x {cores_per_node} cores")

    @classmethod
    def from_inventory(cls, inventory: Inventory, table: Mapping[str, Any] | None = None,
                       kind: str = "") -> Machine:
        """A configured inventory (``[resource]``, the ``table`` when given)."""
        if not len(inventory):
            raise ValueError("machine: the inventory has no nodes")
        return cls(inventory, f"{len(inventory)} nodes, {inventory.ncores} cores"
                              f"{f', {inventory.ngpus} gpus' if inventory.ngpus else ''}{kind}",
                   table)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Machine:
        """The machine of an instance configuration's ``[resource]`` table: its nodes,
        or the hosts of its graph (``graph``, ``graph-recipe``). ConfigError naming
        the key."""
        inventory = inventory_of_graph_table(table)
        if inventory is not None:
            return cls.from_inventory(inventory, table, " (a resource graph)")
        return cls.from_inventory(Inventory.from_table(table), table)


def machine_for_trace(trace: Trace, nodes: int | None, cores_per_node: int | None,
                      whole_nodes: bool) -> Machine:
    """The machine of an SWF run: flags first, then the header's MaxNodes/MaxProcs.

    Processors only (``MaxProcs`` without ``MaxNodes``, or neither given and
    the trace's largest job) make one node holding them all: a job of P
    processors is P one-core tasks placed anywhere, which no node boundary
    changes, and one node is the cheapest way to plan them. ValueError when the
    machine cannot be told (whole nodes need a node count).
    """
    max_nodes, max_procs = trace.max_nodes, trace.max_procs
    if nodes is not None and cores_per_node is not None:
        return Machine.uniform(nodes, cores_per_node)
    if nodes is not None:
        if max_procs is not None and max_procs % nodes == 0:
            return Machine.uniform(nodes, max_procs // nodes)
        return Machine.uniform(nodes, 1)
    if whole_nodes:
        count = max_nodes or max_procs
        if count is None:
            raise ValueError("whole nodes: give --nodes (the trace's header has no MaxNodes)")
        per = cores_per_node or (max_procs // max_nodes if max_procs and max_nodes
                                 and max_procs % max_nodes == 0 else 1)
        return Machine.uniform(count, per)
    if cores_per_node is not None:
        total = max_procs or max((j.procs for j in trace.jobs), default=0)
        if total < 1:
            raise ValueError("no machine: give --nodes and --cores-per-node")
        return Machine.uniform(max(1, math.ceil(total / cores_per_node)), cores_per_node)
    if max_nodes is not None and max_procs is not None and max_procs % max_nodes == 0 \
            and max_nodes != max_procs:
        return Machine.uniform(max_nodes, max_procs // max_nodes)
    total = max_procs or max((j.procs for j in trace.jobs), default=0)
    if total < 1:
        raise ValueError("no machine: the trace has no MaxProcs header and no job; give "
                         "--nodes and --cores-per-node")
    return Machine.uniform(1, total)


def jobs_from_swf(trace: Trace, queue_map: Mapping[int, str] | None = None,
                  whole_nodes: bool = False, base: float | None = None) -> list[SimJob]:
    """The jobs of a parsed trace, in submit order (ids are the SWF job numbers).

    ``queue_map`` names the fluxes queue of each SWF queue number; numbers it
    does not name go to the default queue. ``base`` is the virtual time of
    the log's time 0 (default: the header's UnixStartTime, else 0).
    """
    start = trace.start_time if base is None else base
    out: list[SimJob] = []
    qmap = queue_map or {}
    for index, sj in enumerate(trace.jobs):
        if sj.status == 0:
            outcome = FAILED
        elif sj.status == 5:
            outcome = CANCELED
        else:
            outcome = COMPLETED
        queue = qmap.get(sj.queue)
        out.append(SimJob(
            id=sj.number, submit=start + sj.submit, size=sj.procs, requested=sj.requested,
            runtime=sj.runtime, userid=sj.user if sj.user >= 0 else NOBODY,
            user=str(sj.user), queue_label=queue or (str(sj.queue) if sj.queue >= 0 else "-"),
            queue=queue, whole_nodes=whole_nodes, outcome=outcome,
            exit_status=FAILED_STATUS if outcome == FAILED else 0, line=index))
    out.sort(key=lambda j: (j.submit, j.id))
    return out


# -- journal input ----------------------------------------------------------------------

#: Why a job of a history is not simulated (the keys of the skipped counter).
NEVER_RAN: Final = "never ran in the history (no run time to replay)"
NO_SUBMIT: Final = "history incomplete (no submit event: trimmed or purged)"
BAD_ENTRY: Final = "journal line not understood"


@dataclass
class _Seen:
    """What the journal says about one job, folded entry by entry."""

    submit: float | None = None
    userid: int = 0
    urgency: int = URGENCY
    info: dict[str, Any] = field(default_factory=dict)
    t_alloc: float | None = None
    t_start: float | None = None
    t_finish: float | None = None
    status: int | None = None
    exception: tuple[str, float] | None = None


def jobs_from_journal(records: Iterable[Mapping[str, Any]], skipped: Counter[str]
                      ) -> list[SimJob]:
    """The jobs of a history in the export format (one mapping per journal entry).

    A job that ran is replayed with the run time it had (start to finish); one
    killed at its time limit runs until its limit again; one canceled while
    running is canceled after the same run time. Jobs that never ran (canceled
    or denied while pending, or still pending) and jobs whose history starts
    after their submit are skipped and counted in ``skipped``.
    """
    seen: dict[int, _Seen] = {}
    for rec in records:
        try:
            jobid = int(rec["j"])
            name = str(rec["n"])
            stamp = float(rec["t"])
        except (KeyError, TypeError, ValueError):
            skipped[BAD_ENTRY] += 1
            continue
        job = seen.get(jobid)
        if name == "submit":
            ctx = rec.get("c") or {}
            extra = rec.get("x") or {}
            job = seen[jobid] = _Seen(submit=stamp)
            if isinstance(ctx, Mapping):
                job.userid = _int(ctx.get("userid"), 0)
                job.urgency = _int(ctx.get("urgency"), URGENCY)
            if isinstance(extra, Mapping):
                job.info = dict(extra)
            continue
        if job is None:
            if name != "purge":
                seen[jobid] = _Seen()
            continue
        _note_event(job, name, rec.get("c") or {}, stamp)
    out: list[SimJob] = []
    for jobid, job in seen.items():
        made = _journal_job(jobid, job, skipped)
        if made is not None:
            out.append(made)
    out.sort(key=lambda j: (j.submit, j.id))
    return out


def _note_event(job: _Seen, name: str, ctx: object, stamp: float) -> None:
    """Note in ``job`` what its event ``name`` (after submit, with context ``ctx``) tells."""
    if name == "alloc" and job.t_alloc is None:
        job.t_alloc = stamp
    elif name == "start" and job.t_start is None:
        job.t_start = stamp
    elif name == "finish" and job.t_finish is None:
        job.t_finish = stamp
        if isinstance(ctx, Mapping):
            job.status = _int(ctx.get("status"), 0)
    elif name == "exception" and job.exception is None and isinstance(ctx, Mapping) \
            and _int(ctx.get("severity"), 0) == 0:
        job.exception = (str(ctx.get("type", "")), stamp)
    elif name == "urgency" and job.t_alloc is None and isinstance(ctx, Mapping):
        # the urgency it had when it was scheduled (a held job released later ran)
        job.urgency = _int(ctx.get("urgency"), job.urgency)
    elif name == "jobspec-update" and isinstance(ctx, Mapping):
        for key, attr in (("attributes.system.duration", "duration"),
                          ("attributes.system.queue", "queue")):
            if key in ctx:
                job.info[attr] = ctx[key]


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _journal_job(jobid: int, seen: _Seen, skipped: Counter[str]) -> SimJob | None:
    """The SimJob of one folded history, or None (counted)."""
    if seen.submit is None:
        skipped[NO_SUBMIT] += 1
        return None
    started = seen.t_start if seen.t_start is not None else seen.t_alloc
    if started is None:
        skipped[NEVER_RAN] += 1
        return None
    info = seen.info
    duration = info.get("duration")
    requested = float(duration) if isinstance(duration, int | float) \
        and not isinstance(duration, bool) and duration > 0 else 0.0
    outcome, exit_status = COMPLETED, 0
    end = seen.t_finish
    exc = seen.exception
    if exc is not None and exc[0] == "timelimit":
        runtime = math.inf  # it wanted more than its limit: it meets it again
    elif exc is not None and exc[0] == "cancel" and exc[1] >= started:
        outcome, runtime = CANCELED, max(exc[1] - started, 0.0)
    elif end is not None:
        runtime = max(end - started, 0.0)
        if seen.status:
            outcome, exit_status = FAILED, seen.status
    elif exc is not None:
        outcome, runtime, exit_status = FAILED, max(exc[1] - started, 0.0), 256
    else:
        skipped[NEVER_RAN] += 1  # still running when the history ends: no end to replay
        return None
    request: Request | None = None
    wire = info.get("request")
    if isinstance(wire, str):
        try:
            request = Request.from_wire(wire)
        except ValueError:
            request = None
    ncores = _int(info.get("ncores"), 1)
    nnodes = _int(info.get("nnodes"), 0)
    queue = info.get("queue")
    deps = info.get("dependencies")
    name = info.get("name")
    bank = info.get("bank")
    return SimJob(
        id=jobid, submit=seen.submit, size=max(nnodes, 1) if nnodes else max(ncores, 1),
        requested=requested, runtime=runtime, userid=seen.userid, user=str(seen.userid),
        queue_label=queue if isinstance(queue, str) and queue else "-",
        queue=queue if isinstance(queue, str) and queue else None, whole_nodes=bool(nnodes),
        outcome=outcome, exit_status=exit_status, urgency=seen.urgency, request=request,
        dependencies=list(deps) if isinstance(deps, list) and deps else None,
        name=name if isinstance(name, str) else None,
        bank=bank if isinstance(bank, str) and bank else None)
