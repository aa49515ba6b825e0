"""What a job asks the resource pool for: :class:`Request`, and how jobspecs map to it.

A request is a number of *slots*, each holding ``slot_size`` cores (or
``sockets_per_slot`` sockets of ``cores_per_socket`` cores), ``gpu_per_slot``
gpus and ``memory_per_slot`` bytes of memory, every slot on one node.  With
``nnodes > 0`` the job gets exactly that many nodes and ``nslots`` slots on
*each* of them; with ``nnodes == 0`` the ``nslots`` slots go anywhere and
may share nodes.  ``exclusive`` (only with ``nnodes``) gives the job whole
nodes.  Counts may be :class:`~fluxes.formats.counts.Count` ranges, of which the
pool takes the most that is available.

:meth:`Request.from_jobspec` reads the RFC 14 resources tree; the shapes it
accepts are listed in ``docs/scheduler-pool.md``.  Shapes the pool cannot
represent raise :class:`~fluxes.domain.sched.errors.InfeasibleRequest` naming the
vertex, e.g. ``unsupported resource type 'switch' in resources[0].with[0]``;
malformed input raises ValueError.

Why one module: a request's fields, their wire form and the jobspec shapes that
map to them change together (a new field is all three at once).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.inventory import format_size
from fluxes.formats import constraints as _constraints
from fluxes.formats.constraints import Constraint
from fluxes.formats.counts import Count
from fluxes.formats.fsd import parse_duration
from fluxes.formats.jobspec import Jobspec

__all__ = ["MEMORY_UNITS", "Amount", "Request"]

Amount: TypeAlias = "int | Count"
"""A per-request quantity: a fixed int or a Count range."""

#: Memory units accepted in jobspec ``unit`` (case-insensitive), in bytes.
#: Powers of 1024 throughout, as memory is sized; a memory vertex without a
#: unit is read in GB, as flux-sched does.
MEMORY_UNITS: Final = {
    "b": 1, "byte": 1, "bytes": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_DEFAULT_MEMORY_UNIT: Final = "GB"


def _minimum(value: Amount) -> int:
    """The smallest accepted value of an amount."""
    return value if isinstance(value, int) else value.min


def _check_amount(name: str, value: object, lowest: int) -> Amount:
    """*value* as an int (a fixed Count becomes its int) or a Count; ValueError otherwise."""
    if isinstance(value, Count):
        return value.min if value.is_fixed else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"Request.{name}: expected an int or a Count, "
                         f"got {type(value).__name__}")
    if value < lowest:
        raise ValueError(f"Request.{name}: {value} is less than {lowest}")
    return value


def _grows(value: Amount) -> bool:
    """True if *value* is a range accepting more than its minimum."""
    return isinstance(value, Count) and not value.is_fixed


@dataclass(frozen=True, slots=True)
class Request:
    """An immutable, hashable resource request (see the module docstring).

    Fields:

    * ``nnodes``: nodes wanted (0: no node level, slots go anywhere);
    * ``nslots``: slots *per node* when ``nnodes > 0``, in all otherwise;
    * ``slot_size``: cores per slot (0 allowed with gpus or exclusive nodes);
    * ``gpu_per_slot``: gpus per slot;
    * ``exclusive``: whole nodes (needs ``nnodes > 0``): every core, gpu and
      all memory of each node is allocated, and the per-slot amounts only
      select which nodes qualify;
    * ``constraint``: an RFC 31 constraint restricting the candidate nodes;
    * ``duration``: seconds the job may run (0: unlimited);
    * ``memory_per_slot``: bytes per slot (a count range uses its minimum:
      R cannot record memory, so taking more would only block other jobs);
    * ``sockets_per_slot`` and ``cores_per_socket``: a slot's cores spread
      over that many distinct sockets of one node, that many per socket;
      given together, and then ``slot_size`` becomes their product;
    * ``run``: seconds a simulated job runs (``attributes.system.exec.test.run_duration``;
      0: not simulated): with ``duration`` it bounds when the job ends, which the
      session's staged starts read (docs/scheduling-policies.md, "Staged starts").

    ``nnodes``, ``nslots``, ``slot_size``, ``gpu_per_slot``,
    ``sockets_per_slot`` and ``cores_per_socket`` may be Count ranges; a
    fixed Count is stored as its int.  Bad values raise ValueError.
    """

    nnodes: Amount = 0
    nslots: Amount = 1
    slot_size: Amount = 1
    gpu_per_slot: Amount = 0
    exclusive: bool = False
    constraint: Constraint | None = None
    duration: float = 0.0
    memory_per_slot: int = 0
    sockets_per_slot: Amount = 0
    cores_per_socket: Amount = 0
    run: float = 0.0
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    _key: tuple[Any, ...] = field(init=False, repr=False, compare=False, default=())
    #: (min_cores, min_gpus), computed once: every pass asks each held request for them
    _least: tuple[int, int] = field(init=False, repr=False, compare=False, default=(0, 0))

    def __post_init__(self) -> None:
        """Check and normalize the fields (see the class docstring)."""
        put = object.__setattr__
        put(self, "nnodes", _check_amount("nnodes", self.nnodes, 0))
        put(self, "nslots", _check_amount("nslots", self.nslots, 1))
        put(self, "slot_size", _check_amount("slot_size", self.slot_size, 0))
        put(self, "gpu_per_slot", _check_amount("gpu_per_slot", self.gpu_per_slot, 0))
        put(self, "sockets_per_slot", _check_amount("sockets_per_slot",
                                                     self.sockets_per_slot, 0))
        put(self, "cores_per_socket", _check_amount("cores_per_socket",
                                                     self.cores_per_socket, 0))
        if not isinstance(self.exclusive, bool):
            raise ValueError(f"Request.exclusive: expected a bool, "
                             f"got {type(self.exclusive).__name__}")
        if self.constraint is not None and not isinstance(self.constraint, Constraint):
            raise ValueError("Request.constraint: expected a Constraint (use "
                             "fluxes.formats.constraints.parse) or None")
        mem = self.memory_per_slot
        if isinstance(mem, bool) or not isinstance(mem, int) or mem < 0:
            raise ValueError(f"Request.memory_per_slot: expected a non-negative number of "
                             f"bytes, got {mem!r}")
        dur = self.duration
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or not (
                math.isfinite(dur) and dur >= 0):
            raise ValueError(f"Request.duration: expected a finite number of seconds >= 0, "
                             f"got {dur!r}")
        put(self, "duration", float(dur))
        run = self.run
        if isinstance(run, bool) or not isinstance(run, (int, float)) or not (
                math.isfinite(run) and run >= 0):
            raise ValueError(f"Request.run: expected a finite number of seconds >= 0, "
                             f"got {run!r}")
        put(self, "run", float(run))
        sockets = _minimum(self.sockets_per_slot)
        per_socket = _minimum(self.cores_per_socket)
        if (sockets == 0) != (per_socket == 0):
            raise ValueError("Request: sockets_per_slot and cores_per_socket must be given "
                             "together")
        if sockets:
            product = sockets * per_socket
            if self.slot_size not in (1, product):
                raise ValueError(f"Request.slot_size: {self.slot_size} is not sockets_per_slot"
                                 f" × cores_per_socket ({product})")
            put(self, "slot_size", product)
        nodes = _minimum(self.nnodes)
        if self.exclusive and nodes == 0:
            raise ValueError("Request.exclusive: exclusive allocation needs nnodes > 0 "
                             "(it gives whole nodes)")
        if _minimum(self.slot_size) == 0 and _minimum(self.gpu_per_slot) == 0 and not (
                self.exclusive):
            raise ValueError("Request: a slot needs at least one core or gpu (or ask for "
                             "exclusive nodes)")
        key = (self.nnodes, self.nslots, self.slot_size, self.gpu_per_slot, self.exclusive,
               self.constraint, self.memory_per_slot, self.sockets_per_slot,
               self.cores_per_socket)
        put(self, "_key", key)
        put(self, "_hash", hash((key, self.duration, self.run)))
        per_node = max(nodes, 1) * _minimum(self.nslots)
        put(self, "_least", (per_node * _minimum(self.slot_size),
                             per_node * _minimum(self.gpu_per_slot)))

    def __hash__(self) -> int:
        """Hash computed once (requests key the pool's caches)."""
        return self._hash

    # -- derived values ---------------------------------------------------------

    @property
    def min_nodes(self) -> int:
        """The least number of nodes accepted (0 without a node level)."""
        return _minimum(self.nnodes)

    @property
    def min_slots(self) -> int:
        """The least number of slots accepted (per node when ``nnodes > 0``)."""
        return _minimum(self.nslots)

    @property
    def min_cores_per_slot(self) -> int:
        """The least number of cores in one slot."""
        return _minimum(self.slot_size)

    @property
    def min_gpus_per_slot(self) -> int:
        """The least number of gpus in one slot."""
        return _minimum(self.gpu_per_slot)

    @property
    def min_cores(self) -> int:
        """The least total number of cores (whole nodes may of course add more)."""
        return self._least[0]

    @property
    def min_gpus(self) -> int:
        """The least total number of gpus."""
        return self._least[1]

    @property
    def placement_key(self) -> tuple[Any, ...]:
        """Every field but the duration and run: what placement depends on (a hashable
        cache key)."""
        return self._key

    def describe_slot(self) -> str:
        """The contents of one slot in words: ``4 cores, 1 gpu, 4G memory``."""
        parts = []
        if _minimum(self.sockets_per_slot):
            parts.append(f"{self.sockets_per_slot} sockets of {self.cores_per_socket} cores")
        elif self.slot_size != 0:
            parts.append(f"{self.slot_size} core{'' if self.slot_size == 1 else 's'}")
        if self.gpu_per_slot != 0:
            parts.append(f"{self.gpu_per_slot} gpu{'' if self.gpu_per_slot == 1 else 's'}")
        if self.memory_per_slot:
            parts.append(f"{format_size(self.memory_per_slot)} memory")
        return ", ".join(parts) or "nothing"

    def __str__(self) -> str:
        """Short description, e.g. ``4 nodes (exclusive) × 1 slot of 4 cores [gpu]``."""
        slots = f"{self.nslots} slot{'' if self.nslots == 1 else 's'} of {self.describe_slot()}"
        text = slots
        if self.exclusive and not (self.slot_size or self.gpu_per_slot
                                   or self.memory_per_slot):
            text = f"{self.nnodes} whole node{'' if self.nnodes == 1 else 's'}"
        elif self.min_nodes:
            nodes = f"{self.nnodes} node{'' if self.nnodes == 1 else 's'}"
            if self.exclusive:
                nodes += " (exclusive)"
            text = f"{nodes} × {slots}"
        if self.constraint is not None:
            text += f" {self.constraint}"
        return text

    # -- wire form ------------------------------------------------------------------

    def to_wire(self) -> str:
        """A compact, lossless text form (``Request.from_wire(r.to_wire()) == r``).

        A JSON object with one-letter keys, each left out when it holds the
        default: ``{}`` is one core anywhere. The ingest stores it with the
        job and the ``new`` and ``alloc`` messages carry it, so the scheduler
        never parses a jobspec again (docs/protocol.md).
        """
        out: dict[str, Any] = {}
        for key, name, default in _WIRE_AMOUNTS:
            value = getattr(self, name)
            if value != default:
                out[key] = value.encode() if isinstance(value, Count) else value
        if self.exclusive:
            out["x"] = True
        if self.constraint is not None:
            out["k"] = self.constraint.to_dict()
        if self.duration:
            out["d"] = self.duration
        if self.memory_per_slot:
            out["m"] = self.memory_per_slot
        if self.run:
            out["t"] = self.run
        # stdlib json: a count or memory amount may pass 64 bits, which orjson refuses
        return json.dumps(out, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_wire(cls, text: str | bytes) -> Request:
        """The request :meth:`to_wire` wrote; ValueError (one line) for anything else."""
        if len(text) > MAX_WIRE_BYTES:
            raise ValueError(f"request: {len(text)} bytes, at most {MAX_WIRE_BYTES}")
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"request: not JSON: {str(exc).splitlines()[0]}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"request: expected an object, got {type(doc).__name__}")
        unknown = set(doc) - _WIRE_KEYS
        if unknown:
            raise ValueError(f"request: unknown key {sorted(unknown)[0]!r:.40}")
        fields: dict[str, Any] = {}
        for key, name, _default in _WIRE_AMOUNTS:
            if key in doc:
                value = doc[key]
                if isinstance(value, str):
                    try:
                        value = Count.decode(value)
                    except ValueError as exc:
                        raise ValueError(f"request.{name}: {exc}") from None
                fields[name] = value
        if "x" in doc:
            fields["exclusive"] = doc["x"]
        if "k" in doc:
            try:
                fields["constraint"] = _constraints.parse(doc["k"])
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"request.constraint: {str(exc).splitlines()[0]}") from None
        if "d" in doc:
            fields["duration"] = doc["d"]
        if "m" in doc:
            fields["memory_per_slot"] = doc["m"]
        if "t" in doc:
            fields["run"] = doc["t"]
        return cls(**fields)

    # -- jobspec --------------------------------------------------------------------

    @classmethod
    def from_jobspec(cls, jobspec: Jobspec | Mapping[str, Any],
                     requires: Sequence[str] = ()) -> Request:
        """The request of a jobspec (a :class:`~fluxes.formats.jobspec.Jobspec` or its dict).

        Reads the RFC 14 ``resources`` tree, ``attributes.system.duration``,
        ``attributes.system.exec.test.run_duration`` and
        ``attributes.system.constraints`` (RFC 31); *requires* are the properties
        an RFC 33 queue requires, ANDed into the constraint.
        Supported shapes (``[...]`` = optional, ``X`` = core, gpu, memory or
        socket->core):

        * ``node -> slot -> X...``: nnodes = node count, nslots = slot count
          per node; the node's ``exclusive`` flag (default false) applies.
          Several slots under one node (fixed counts) merge into one slot
          per node holding their sum;
        * ``slot -> X...``: nslots slots anywhere;
        * ``slot -> node -> [X...]``: slot count × node count nodes holding
          one slot each; the node is exclusive unless it says
          ``exclusive: false`` (RFC 14: resources in a slot default to
          exclusive).

        Anything else raises InfeasibleRequest naming the vertex.
        """
        if isinstance(jobspec, Jobspec):
            resources: object = jobspec.resources
            attributes: object = jobspec.attributes
        elif isinstance(jobspec, Mapping):
            resources = jobspec.get("resources")
            attributes = jobspec.get("attributes", {})
        else:
            raise ValueError(f"from_jobspec: expected a Jobspec or a mapping, "
                             f"got {type(jobspec).__name__}")
        fields = _resources_fields(resources)
        system: object = {}
        if isinstance(attributes, Mapping):
            system = attributes.get("system", {})
        if not isinstance(system, Mapping):
            raise ValueError("attributes.system: expected a mapping")
        duration = system.get("duration", 0.0)
        if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not (
                math.isfinite(duration) and duration >= 0):
            raise ValueError(f"attributes.system.duration: expected a number of seconds >= 0,"
                             f" got {duration!r}")
        raw = system.get("constraints")
        constraint = None
        try:
            if requires:
                raw = _constraints.and_properties(raw, list(requires))
            if raw is not None:
                constraint = _constraints.parse(raw)
        except ValueError as exc:
            raise ValueError(f"attributes.system.constraints: {exc}") from None
        if constraint is not None and constraint == _constraints.parse({}):
            constraint = None
        return cls(constraint=constraint, duration=float(duration), run=_run(system),
                   **fields)


def _run(system: Mapping[str, Any]) -> float:
    """Seconds a simulated job runs (``exec.test.run_duration``), 0 when not simulated or
    unreadable: the exec worker reports a bad value; here it only means no known end."""
    node: object = system
    for key in ("exec", "test", "run_duration"):
        if not isinstance(node, Mapping):
            return 0.0
        node = node.get(key)
    if not isinstance(node, (str, int, float)):
        return 0.0
    try:
        seconds = parse_duration(node)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


#: Longest wire form read (a constraint is the only part that can grow).
MAX_WIRE_BYTES: Final = 64 * 1024
#: Wire keys of the amounts: (key, field, default).
_WIRE_AMOUNTS: Final = (("n", "nnodes", 0), ("s", "nslots", 1), ("c", "slot_size", 1),
                        ("g", "gpu_per_slot", 0), ("sk", "sockets_per_slot", 0),
                        ("cs", "cores_per_socket", 0))
_WIRE_KEYS: Final = frozenset({key for key, _n, _d in _WIRE_AMOUNTS}
                              | {"x", "k", "d", "m", "t"})


# -- the resources tree -----------------------------------------------------------------


def _vertex(obj: object, path: str) -> tuple[str, list[Any]]:
    """The type and children of the resource vertex *obj* at *path*."""
    if not isinstance(obj, Mapping):
        raise ValueError(f"{path}: expected a resource vertex (mapping), "
                         f"got {type(obj).__name__}")
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"{path}.type: expected a string")
    if "id" in obj:
        raise InfeasibleRequest(f"{path}: requesting specific resource ids is unsupported")
    children = obj.get("with", [])
    if not isinstance(children, list):
        raise ValueError(f"{path}.with: expected a list")
    return kind, children


def _count(obj: Mapping[str, Any], path: str) -> Amount:
    """The count of a vertex, as an int when fixed."""
    if "count" not in obj:
        raise ValueError(f"{path}: count is required")
    try:
        count = Count.decode(obj["count"])
    except ValueError as exc:
        raise ValueError(f"{path}.count: {exc}") from None
    return count.min if count.is_fixed else count


def _exclusive(obj: Mapping[str, Any], path: str, default: bool) -> bool:
    """The exclusive flag of a vertex."""
    value = obj.get("exclusive", default)
    if not isinstance(value, bool):
        raise ValueError(f"{path}.exclusive: expected a bool")
    return value


def _unsupported(kind: str, path: str) -> InfeasibleRequest:
    """The error for a resource type the pool cannot place."""
    return InfeasibleRequest(f"unsupported resource type {kind!r} in {path}")


def _resources_fields(resources: object) -> dict[str, Any]:
    """Request fields for the RFC 14 resources list (see Request.from_jobspec)."""
    if not isinstance(resources, list) or not resources:
        raise ValueError("resources: expected a non-empty list")
    _check_types(resources, "resources")
    if len(resources) > 1:
        raise InfeasibleRequest(f"resources: {len(resources)} top-level resources are "
                                "unsupported (give one node or slot)")
    top = resources[0]
    path = "resources[0]"
    kind, children = _vertex(top, path)
    if kind == "node":
        return _node_of_slots(top, children, path)
    if kind == "slot":
        nslots = _count(top, path)
        if any(isinstance(c, Mapping) and c.get("type") == "node" for c in children):
            return _slot_of_node(nslots, children, path)
        content = _slot_content(children, path)
        return {"nnodes": 0, "nslots": nslots, **content}
    raise _unsupported(kind, path)


#: Resource types the pool knows; any other is reported before shape problems.
_KNOWN_TYPES: Final = ("node", "slot", "core", "gpu", "memory", "socket")


def _check_types(vertices: list[Any], path: str, depth: int = 0) -> None:
    """InfeasibleRequest naming the first vertex (depth first) of an unknown type."""
    if depth > 64:
        raise ValueError(f"{path}: resources nested too deeply")
    for i, vertex in enumerate(vertices):
        where = f"{path}[{i}]"
        kind, children = _vertex(vertex, where)
        if kind not in _KNOWN_TYPES:
            raise _unsupported(kind, where)
        _check_types(children, f"{where}.with", depth + 1)


def _node_of_slots(node: Mapping[str, Any], children: list[Any], path: str) -> dict[str, Any]:
    """``node -> slot(s) -> ...``: nslots per node on nnodes nodes."""
    nnodes = _count(node, path)
    exclusive = _exclusive(node, path, False)
    slots: list[tuple[Mapping[str, Any], list[Any], str]] = []
    for i, child in enumerate(children):
        where = f"{path}.with[{i}]"
        kind, grandchildren = _vertex(child, where)
        if kind != "slot":
            if kind in ("core", "gpu", "memory", "socket"):
                raise InfeasibleRequest(f"{where}: a {kind} directly under a node (outside "
                                        "a slot) is unsupported")
            raise _unsupported(kind, where)
        slots.append((child, grandchildren, where))
    if not slots:
        raise InfeasibleRequest(f"{path}: a node without a slot is unsupported")
    if len(slots) == 1:
        slot, grandchildren, where = slots[0]
        content = _slot_content(grandchildren, where)
        return {"nnodes": nnodes, "nslots": _count(slot, where), "exclusive": exclusive,
                **content}
    # Several slot shapes on one node: the node must hold all of them, so
    # one slot per node holding their sum allocates exactly the same.
    cores = gpus = memory = 0
    for slot, grandchildren, where in slots:
        count = _count(slot, where)
        content = _slot_content(grandchildren, where)
        amounts = [count, content["slot_size"], content["gpu_per_slot"]]
        if any(isinstance(a, Count) for a in amounts) or content["sockets_per_slot"]:
            raise InfeasibleRequest(f"{where}: several slots under one node need fixed "
                                    "counts and no sockets")
        cores += count * content["slot_size"]
        gpus += count * content["gpu_per_slot"]
        memory += count * content["memory_per_slot"]
    return {"nnodes": nnodes, "nslots": 1, "exclusive": exclusive, "slot_size": cores,
            "gpu_per_slot": gpus, "memory_per_slot": memory}


def _slot_of_node(nslots: Amount, children: list[Any], path: str) -> dict[str, Any]:
    """``slot -> node -> ...``: each slot is one (by default exclusive) node."""
    if len(children) != 1:
        raise InfeasibleRequest(f"{path}: a slot holding a node and other resources is "
                                "unsupported")
    where = f"{path}.with[0]"
    node = children[0]
    _, grandchildren = _vertex(node, where)
    per_slot = _count(node, where)
    exclusive = _exclusive(node, where, True)
    if isinstance(nslots, int) and isinstance(per_slot, int):
        nnodes: Amount = nslots * per_slot
    elif per_slot == 1:
        nnodes = nslots
    elif nslots == 1:
        nnodes = per_slot
    else:
        raise InfeasibleRequest(f"{where}: count ranges on both a slot and its nodes are "
                                "unsupported")
    if not grandchildren:
        if not exclusive:
            raise InfeasibleRequest(f"{where}: a non-exclusive node needs cores or gpus")
        return {"nnodes": nnodes, "nslots": 1, "exclusive": True, "slot_size": 0}
    content = _slot_content(grandchildren, where, whole_node=exclusive)
    return {"nnodes": nnodes, "nslots": 1, "exclusive": exclusive, **content}


def _slot_content(children: list[Any], path: str, whole_node: bool = False) -> dict[str, Any]:
    """Per-slot amounts from the vertices inside a slot (or a node in a slot).

    With *whole_node* (an exclusive node) the vertices only select nodes,
    so they need not include cores or gpus.
    """
    if not children:
        raise InfeasibleRequest(f"{path}: an empty slot is unsupported")
    seen: dict[str, str] = {}
    cores: Amount = 0
    gpus: Amount = 0
    memory = 0
    sockets: Amount = 0
    per_socket: Amount = 0
    for i, child in enumerate(children):
        where = f"{path}.with[{i}]"
        kind, grandchildren = _vertex(child, where)
        if kind in seen:
            raise InfeasibleRequest(f"{where}: a second {kind!r} vertex in one slot is "
                                    f"unsupported (first at {seen[kind]})")
        seen[kind] = where
        if kind in ("core", "gpu", "memory") and grandchildren:
            raise InfeasibleRequest(f"{where}.with: resources inside a {kind} are unsupported")
        if kind == "core":
            cores = _count(child, where)
        elif kind == "gpu":
            # gpu: 0 is a valid jobspec (RFC 25 / flux-core): no gpus.
            zero = type(child.get("count")) is int and child["count"] == 0
            gpus = 0 if zero else _count(child, where)
        elif kind == "memory":
            memory = _memory(child, where)
        elif kind == "socket":
            sockets = _count(child, where)
            per_socket = _socket_cores(grandchildren, where)
        elif kind in ("node", "slot"):
            raise InfeasibleRequest(f"{where}: a {kind} inside a slot's other resources is "
                                    "unsupported")
        else:
            raise _unsupported(kind, where)
    if "socket" in seen and "core" in seen:
        raise InfeasibleRequest(f"{seen['core']}: cores both inside and outside sockets are "
                                "unsupported")
    if "socket" in seen:
        cores = _minimum(sockets) * _minimum(per_socket)
    elif "core" not in seen and "gpu" not in seen and not whole_node:
        raise InfeasibleRequest(f"{path}: a slot without cores or gpus is unsupported")
    return {"slot_size": cores, "gpu_per_slot": gpus, "memory_per_slot": memory,
            "sockets_per_slot": sockets, "cores_per_socket": per_socket}


def _socket_cores(children: list[Any], path: str) -> Amount:
    """Cores per socket from a socket's children (exactly one core vertex)."""
    if len(children) != 1:
        raise InfeasibleRequest(f"{path}.with: a socket must hold exactly one core vertex")
    where = f"{path}.with[0]"
    kind, grandchildren = _vertex(children[0], where)
    if kind != "core":
        raise _unsupported(kind, where) if kind not in ("gpu", "memory") else \
            InfeasibleRequest(f"{where}: a {kind} inside a socket is unsupported")
    if grandchildren:
        raise InfeasibleRequest(f"{where}.with: resources inside a core are unsupported")
    return _count(children[0], where)


def _memory(vertex: Mapping[str, Any], path: str) -> int:
    """Bytes of a memory vertex: the minimum count times its unit."""
    unit = vertex.get("unit", _DEFAULT_MEMORY_UNIT)
    if not isinstance(unit, str):
        raise ValueError(f"{path}.unit: expected a string")
    scale = MEMORY_UNITS.get(unit.strip().lower())
    if scale is None:
        raise InfeasibleRequest(f"{path}.unit: unsupported memory unit {unit!r} "
                                "(use B, KB, MB, GB or TB)")
    return _minimum(_count(vertex, path)) * scale
