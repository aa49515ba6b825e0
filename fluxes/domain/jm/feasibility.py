"""Checks at submission that need the instance's resources or jobs, kept pure.

Flux refuses at submission a job its scheduler could never satisfy (the
feasibility validator asks the scheduler). fluxes asks the very code the
scheduler worker uses (:mod:`fluxes.domain.sched`) against the same inventory, in
the ingest's own process: no round trip, and the verdict is the one the
scheduler would give, with its note (``job requests 5 nodes, only 2 exist``).

When the resources come with a graph (``[resource] graph``), the check is
the graph pool's satisfiability (:mod:`fluxes.domain.graph`): a job asking
for nodes under one rack is accepted when the graph could ever hold it and
refused when not, whatever shapes today's pool can express.

Only the inventory counts, never its state: a drained or down node may come
back, so a job that needs it is accepted and waits.

A dependency on a job id (RFC 26 ``after``, ``afterany``, ``afterok``,
``afternotok``, ``afterexcept``) whose target was never submitted is refused
at submission too; the ingest looks the targets up in Redis and
:func:`unknown_target` words the refusal.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any, Final

import orjson

from fluxes.config import InstanceConfig
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recovery import inventory_of
from fluxes.domain.graph.table import graph_of_table
from fluxes.domain.graph.wants import graph_request
from fluxes.domain.jm.depend import JOBID_SCHEMES, Dependency, check_dependency, evaluate
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.request import Request
from fluxes.errors import ConfigError
from fluxes.formats.jobspec import Jobspec

__all__ = ["Feasibility", "dependency_targets", "inventory_table", "load_feasibility",
           "load_inventory", "unknown_target"]

#: Verdicts kept at most: a stream of distinct shapes must not grow the cache
#: without bound (clearing it costs only re-planning).
_CACHE_SIZE: Final = 4096


def inventory_table(recorded: bytes | str | None, config: InstanceConfig) -> Mapping[str, Any]:
    """The ``[resource]`` table the scheduler allocates from.

    ``recorded`` is the instance hash's ``resources`` field (JSON, written by
    ``fluxes start`` / ``fluxes admin init``); without one, the
    configuration's ``[resource]`` table. ConfigError if the record is not a
    JSON object.
    """
    if not recorded:
        return config.resource
    try:
        table = orjson.loads(recorded)
    except orjson.JSONDecodeError:
        raise ConfigError("the recorded resources are not JSON") from None
    if not isinstance(table, Mapping):
        raise ConfigError("the recorded resources are not a table")
    return table


def load_inventory(recorded: bytes | str | None, config: InstanceConfig) -> Inventory:
    """The instance inventory from its recorded resources, else its configuration.

    ConfigError (naming the key) when there are none or they are malformed.
    """
    table = inventory_table(recorded, config)
    if not table:
        raise ConfigError("the instance has no resources configured ([resource] table)")
    return Inventory.from_table(table)


def load_feasibility(recorded: bytes | str | None, config: InstanceConfig) -> Feasibility:
    """The check of the instance's resources (recorded, else configured), on their graph
    when they come with one; ConfigError as :func:`load_inventory` raises it."""
    table = inventory_table(recorded, config)
    graph = graph_of_table(table)
    if graph is None:
        return Feasibility(load_inventory(recorded, config))
    return Feasibility(inventory_of(graph), graph)


class Feasibility:
    """Whether a job could ever run on one inventory, as the scheduler would judge it.

    Verdicts are cached by what placement depends on (the resources and
    the constraints of the jobspec with its queue's ``requires`` applied), so
    a bulk submission of identical shapes plans once.
    """

    def __init__(self, inventory: Inventory, graph: ResourceGraph | None = None) -> None:
        """Plan against every target of ``inventory``, all of them up; with a ``graph``
        (whose hosts are the inventory), against the graph as the scheduler does."""
        self._pool: SchedulerPool = ResourcePool(inventory) if graph is None \
            else GraphPool(graph, lambda: 0.0)
        self._graph = graph is not None
        self._verdicts: dict[bytes, str | None] = {}

    @property
    def inventory(self) -> Inventory:
        """The inventory jobs are checked against."""
        return self._pool.inventory

    def note(self, spec: Jobspec) -> str | None:
        """Why ``spec`` (defaults and queue ``requires`` applied) can never run; None if it can.

        The note is the scheduler's own, e.g. ``job requests 100 cores per
        slot, nodes have at most 4`` or ``no node matches [gpu]``.
        """
        key = orjson.dumps([spec.resources, spec.constraints])
        if key in self._verdicts:
            return self._verdicts[key]
        try:
            # with a graph, any resources tree; else the shapes today's pool reads
            request = graph_request(spec) if self._graph else Request.from_jobspec(spec)
            self._pool.check(request)
            verdict = None
        except (InfeasibleRequest, ValueError) as exc:
            # the scheduler denies a shape it cannot represent with this same note
            verdict = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if len(self._verdicts) >= _CACHE_SIZE:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        return verdict

    def check(self, spec: Jobspec) -> None:
        """Raise InfeasibleRequest with the scheduler's note if ``spec`` can never run."""
        verdict = self.note(spec)
        if verdict is not None:
            raise InfeasibleRequest(verdict)


def dependency_targets(spec: Jobspec) -> tuple[Dependency, ...]:
    """The dependencies of ``spec`` that name a job (``after*`` schemes), checked.

    Other schemes (``begin-time``, or ones this instance does not know) are
    left to the job manager. PolicyError for a malformed job-id dependency.
    """
    return tuple(check_dependency(dep) for dep in spec.dependencies
                 if dep.get("scheme") in JOBID_SCHEMES)


def unknown_target(targets: Iterable[Dependency], existing: Container[int]) -> str | None:
    """The refusal for the first dependency whose target is not in ``existing``, or None.

    Worded as the job manager words a missing target, with the id as the
    user typed it: ``dependency: afterok: job ƒ2oLkTLb not found``.
    """
    for dep in targets:
        if dep.target is not None and dep.target not in existing:
            return evaluate(dep, None).fail
    return None
