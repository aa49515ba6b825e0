"""What a job asks a resource graph for: the RFC 14 resources tree as :class:`Want` vertices.

:func:`parse_resources` reads any canonical resources list (``version: 1``
and the ``version: 9999`` shapes Fluxion's tests use): any resource types,
``slot`` anywhere, ``exclusive`` flags, counts as integers, idsets, ranges or
``{min, max, operator, operand}`` mappings, and size ``unit``\\ s.  Inside a
slot every resource is exclusive unless it says ``exclusive: false``;
outside, shared unless it says ``exclusive: true`` (RFC 14).

:class:`GraphRequest` is a :class:`~fluxes.domain.sched.request.Request` that
carries such a tree, so the scheduler's policies (which hold Requests) can
schedule any shape on a graph pool.  :func:`graph_request` builds one from a
jobspec: a shape today's pool knows becomes a plain Request (both pools then
read it the same way), any other shape a GraphRequest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fluxes.domain.graph.model import unit_bytes
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.request import Request
from fluxes.formats.counts import Count
from fluxes.formats.jobspec import Jobspec

__all__ = ["GraphRequest", "Want", "describe", "graph_request", "parse_resources",
           "wants_of_request"]

_MAX_DEPTH: Final = 64
_SLOT: Final = "slot"


@dataclass(frozen=True, slots=True)
class Want:
    """One vertex of a resources tree: ``count`` of ``type`` holding ``children`` each.

    ``exclusive`` is resolved (slot rules applied); ``unit`` is the bytes of
    one counted unit when the jobspec gave a size unit (None: count in the
    graph's units).  A ``slot`` is a group of its children repeated
    ``count`` times.
    """

    type: str
    count: Count
    exclusive: bool = False
    children: tuple[Want, ...] = ()
    unit: int | None = None
    #: read as today's pool reads a plain Request, not as Fluxion reads a jobspec: counts
    #: gathered anywhere below the parent (levels between may be omitted), a slot copy
    #: anywhere on one host, and an exclusive vertex naming nothing below it holds (and
    #: lists) its whole subtree, as a whole-node request does
    loose: bool = False

    @property
    def is_slot(self) -> bool:
        """True for a slot (not a graph vertex, a repeated group)."""
        return self.type == _SLOT


def _count(vertex: Mapping[str, Any], where: str) -> Count | None:
    """The count of a vertex (None for a count of 0, which asks for nothing)."""
    if "count" not in vertex:
        raise ValueError(f"{where}: count is required")
    raw = vertex["count"]
    if type(raw) is int and raw == 0:
        return None
    try:
        return Count.decode(raw)
    except ValueError as exc:
        raise ValueError(f"{where}.count: {exc}") from None


def _parse(vertices: object, where: str, in_slot: bool, depth: int) -> tuple[Want, ...]:
    """The Wants of one ``resources`` / ``with`` list."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"{where}: resources nested too deeply")
    if not isinstance(vertices, list):
        raise ValueError(f"{where}: expected a list")
    out: list[Want] = []
    for i, vertex in enumerate(vertices):
        path = f"{where}[{i}]"
        if not isinstance(vertex, Mapping):
            raise ValueError(f"{path}: expected a resource vertex (mapping)")
        kind = vertex.get("type")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"{path}.type: expected a non-empty string")
        if "id" in vertex:
            raise InfeasibleRequest(f"{path}: requesting specific resource ids is unsupported")
        count = _count(vertex, path)
        flag = vertex.get("exclusive")
        if flag is not None and not isinstance(flag, bool):
            raise ValueError(f"{path}.exclusive: expected a bool")
        unit_text = vertex.get("unit")
        unit = None
        if unit_text is not None:
            if not isinstance(unit_text, str):
                raise ValueError(f"{path}.unit: expected a string")
            unit = unit_bytes(unit_text)
            if unit is None:
                raise InfeasibleRequest(f"{path}.unit: unsupported unit {unit_text!r} "
                                        "(use B, KB, MB, GB or TB)")
        slot = kind == _SLOT
        exclusive = False if slot else (in_slot if flag is None else flag)
        # below a slot or an exclusive vertex, everything is exclusive unless it says not
        children = _parse(vertex.get("with", []), f"{path}.with", in_slot or slot or exclusive,
                          depth + 1)
        if slot and not children:
            raise InfeasibleRequest(f"{path}: an empty slot is unsupported")
        if count is None:
            continue
        out.append(Want(kind, count, exclusive, children, unit))
    return tuple(out)


def parse_resources(resources: object) -> tuple[Want, ...]:
    """The Wants of an RFC 14 ``resources`` list (see the module docstring).

    ValueError for malformed input, InfeasibleRequest for what no graph can
    hold (specific ids, unknown units, empty slots), each naming the place.
    """
    if not isinstance(resources, list) or not resources:
        raise ValueError("resources: expected a non-empty list")
    wants = _parse(resources, "resources", False, 0)
    if not wants:
        raise InfeasibleRequest("resources: the request asks for nothing")
    return wants


def describe(wants: Sequence[Want]) -> str:
    """A compact text of a tree: ``node[2]->slot[1]->(core[4],gpu[1])``."""
    parts = []
    for w in wants:
        text = f"{w.type}[{w.count.encode()}]"
        if w.children:
            inner = describe(w.children)
            text += "->" + (f"({inner})" if len(w.children) > 1 else inner)
        parts.append(text)
    return ",".join(parts)


def _fixed(n: int) -> Count:
    """A fixed count of *n*."""
    return Count(n, n)


def _amount(value: int | Count) -> Count:
    """A Request amount as a Count."""
    return value if isinstance(value, Count) else _fixed(value)


def wants_of_request(request: Request) -> tuple[Want, ...]:
    """The tree a plain Request stands for, read as today's pool reads it.

    ``node[N] -> slot[S] -> (core, gpu, memory, socket -> core)`` (the node
    exclusive for whole-node requests), or ``slot[S] -> ...`` without nodes.
    Memory is taken as an amount (never whole memory vertices) and sockets
    are shared, as in today's pool.
    """
    content: list[Want] = []
    if request.sockets_per_slot:
        content.append(Want("socket", _amount(request.sockets_per_slot), False,
                            (Want("core", _amount(request.cores_per_socket), True, loose=True),),
                            loose=True))
    elif request.slot_size != 0:
        content.append(Want("core", _amount(request.slot_size), True, loose=True))
    if request.gpu_per_slot != 0:
        content.append(Want("gpu", _amount(request.gpu_per_slot), True, loose=True))
    if request.memory_per_slot:
        content.append(Want("memory", _fixed(request.memory_per_slot), False, (), 1, loose=True))
    if request.min_nodes == 0:
        return (Want(_SLOT, _amount(request.nslots), False, tuple(content), loose=True),)
    slots = ((Want(_SLOT, _amount(request.nslots), False, tuple(content), loose=True),)
             if content else ())
    return (Want("node", _amount(request.nnodes), request.exclusive, slots, loose=True),)


@dataclass(frozen=True, slots=True)
class GraphRequest(Request):
    """A Request for any resources tree (``wants``); only a graph pool can place it.

    Its Request fields keep their defaults; ``duration`` and ``constraint``
    apply as for any request.  The placement key includes the tree, so the
    scheduler's caches tell different shapes apart.
    """

    wants: tuple[Want, ...] = ()

    def __post_init__(self) -> None:
        """Check the base fields and fold the tree into the placement key."""
        Request.__post_init__(self)
        if not self.wants or not all(isinstance(w, Want) for w in self.wants):
            raise ValueError("GraphRequest.wants: expected a non-empty tuple of Want")
        key = (self._key, self.wants)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash((key, self.duration)))

    def __hash__(self) -> int:
        """Hash computed once."""
        return self._hash

    def __str__(self) -> str:
        """The tree, e.g. ``rack[1]->node[2]->slot[1]->core[4]``, and the constraint."""
        text = describe(self.wants)
        return text if self.constraint is None else f"{text} {self.constraint}"


_ONE_CORE: Final = [{"type": "slot", "count": 1, "with": [{"type": "core", "count": 1}]}]


def graph_request(jobspec: Jobspec | Mapping[str, Any], requires: Sequence[str] = ()
                  ) -> Request:
    """The request of a jobspec for a graph pool.

    A shape :meth:`Request.from_jobspec` reads gives that Request; any other
    resources tree gives a :class:`GraphRequest` with the same duration and
    constraint (``requires`` ANDed in).  ValueError / InfeasibleRequest as
    :func:`parse_resources` and ``Request.from_jobspec`` raise them.
    """
    try:
        return Request.from_jobspec(jobspec, requires)
    except InfeasibleRequest:
        pass
    if isinstance(jobspec, Jobspec):
        resources: object = jobspec.resources
        attributes: object = jobspec.attributes
    elif isinstance(jobspec, Mapping):
        resources = jobspec.get("resources")
        attributes = jobspec.get("attributes", {})
    else:
        raise ValueError(f"graph_request: expected a Jobspec or a mapping, "
                         f"got {type(jobspec).__name__}")
    wants = parse_resources(resources)
    # duration and constraints are read exactly as for any request
    base = Request.from_jobspec({"resources": _ONE_CORE, "attributes": attributes}, requires)
    return GraphRequest(constraint=base.constraint, duration=base.duration, wants=wants)
