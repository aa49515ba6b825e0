"""The resource graph: vertices in a containment tree (RFC 4), stored as columns.

A :class:`ResourceGraph` is immutable once built.  Vertices are numbered
0..n-1 in depth-first pre-order (children in the order their containment
edges were given), so the subtree of vertex ``v`` is exactly the index range
``v .. end(v) - 1``; the root is vertex 0.  Each vertex has a ``type``
(``cluster``, ``rack``, ``node``, ``socket``, ``core``, ``gpu``,
``memory``, ``ssd``...), a ``basename``, a ``name`` (``node3``), an ``id``
(its number among its kind), a ``rank`` (the execution target it belongs
to, -1 above the nodes), a ``size`` (how many units it holds: 1 for a core,
the amount for a memory pool), a ``unit`` and ``properties``.

The *host* of a vertex is its topmost ancestor-or-self with a rank: the
execution target (usually the ``node``).  R (RFC 20) lists cores and gpus
per host rank.

Build one with :class:`GraphBuilder` (any order, then :meth:`GraphBuilder.build`),
from JGF (:mod:`fluxes.domain.graph.jgf`), a GRUG recipe
(:mod:`fluxes.domain.graph.grug`) or an inventory (:mod:`fluxes.domain.graph.recipe`).
Bad input raises ValueError with a one-line message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = ["MAX_VERTICES", "UNIT_BYTES", "GraphBuilder", "ResourceGraph", "unit_bytes"]

#: Most vertices a graph may hold (a typo in a recipe must not eat the memory).
MAX_VERTICES: Final = 4_000_000

#: Units a vertex size may be given in, in bytes (powers of 1024, as memory is sized).
UNIT_BYTES: Final = {
    "b": 1, "byte": 1, "bytes": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def unit_bytes(unit: str) -> int | None:
    """Bytes of one *unit* (``GB``, ``MiB``...), None when it is not a size unit."""
    return UNIT_BYTES.get(unit.strip().lower())


@dataclass(slots=True)
class _Draft:
    """A vertex as given to the builder (before re-numbering)."""

    type: str
    name: str
    basename: str
    id: int
    rank: int
    size: int
    unit: str
    uniq_id: int
    properties: dict[str, str]
    parent: int
    children: list[int] = field(default_factory=list)


def _check_int(value: object, what: str, lowest: int) -> int:
    """*value* if it is an int >= *lowest*."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ValueError(f"{what}: expected an integer >= {lowest}, got {value!r}")
    return value


class GraphBuilder:
    """Collects vertices and containment edges, then builds a :class:`ResourceGraph`."""

    def __init__(self) -> None:
        """An empty builder."""
        self._drafts: list[_Draft] = []

    def __len__(self) -> int:
        """How many vertices were added."""
        return len(self._drafts)

    def add(self, parent: int | None, type: str, *, id: int = -1,
            name: str | None = None, basename: str | None = None, rank: int = -1,
            size: int = 1, unit: str = "", uniq_id: int | None = None,
            properties: Mapping[str, str] | None = None) -> int:
        """Add a vertex under *parent* (a handle returned earlier, None for the root).

        Returns the new vertex's handle.  *name* defaults to basename + id
        (``core3``), *basename* to the type.  ValueError for bad values.
        """
        where = f"vertex {len(self._drafts)}"
        if not isinstance(type, str) or not _TYPE.fullmatch(type):
            raise ValueError(f"{where}: invalid resource type {type!r}")
        _check_int(id, f"{where} ({type}) id", -1)
        _check_int(rank, f"{where} ({type}) rank", -1)
        _check_int(size, f"{where} ({type}) size", 1)
        base = type if basename is None else basename
        if not isinstance(base, str):
            raise ValueError(f"{where}: basename must be a string")
        label = (f"{base}{id}" if id >= 0 else base) if name is None else name
        if not isinstance(label, str) or not label or "/" in label:
            raise ValueError(f"{where}: invalid name {label!r}")
        if not isinstance(unit, str):
            raise ValueError(f"{where}: unit must be a string")
        props = dict(properties or {})
        for key, value in props.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"{where}: properties must map strings to strings")
        handle = len(self._drafts)
        if handle >= MAX_VERTICES:
            raise ValueError(f"graph: more than {MAX_VERTICES} vertices")
        if parent is None:
            up = -1
        else:
            if not isinstance(parent, int) or not 0 <= parent < handle:
                raise ValueError(f"{where}: unknown parent {parent!r}")
            up = parent
            self._drafts[parent].children.append(handle)
        self._drafts.append(_Draft(type, label, base, id, rank, size, unit,
                                   handle if uniq_id is None else uniq_id, props, up))
        return handle

    def attach(self, parent: int, child: int) -> None:
        """Make *child* (added without a parent) a child of *parent*.

        For readers that see vertices before edges; ValueError if *child*
        already has a parent or either handle is unknown.
        """
        count = len(self._drafts)
        for handle in (parent, child):
            if not isinstance(handle, int) or not 0 <= handle < count:
                raise ValueError(f"edge: unknown vertex {handle!r}")
        if parent == child:
            raise ValueError(f"edge: vertex {child} cannot contain itself")
        draft = self._drafts[child]
        if draft.parent != -1:
            raise ValueError(f"edge: vertex {draft.name} has two containment parents")
        draft.parent = parent
        self._drafts[parent].children.append(child)

    def build(self) -> ResourceGraph:
        """The graph, re-numbered in pre-order; ValueError unless it is one tree."""
        drafts = self._drafts
        if not drafts:
            raise ValueError("graph: no vertices")
        roots = [h for h, d in enumerate(drafts) if d.parent == -1]
        if len(roots) != 1:
            names = ", ".join(drafts[h].name for h in roots[:4])
            raise ValueError(f"graph: expected one containment root, found {len(roots)} "
                             f"({names})")
        order: list[int] = []
        stack = [roots[0]]
        while stack:
            h = stack.pop()
            order.append(h)
            stack.extend(reversed(drafts[h].children))
        if len(order) != len(drafts):
            raise ValueError("graph: containment edges form a cycle")
        return ResourceGraph(drafts, order)


class ResourceGraph:
    """An immutable containment tree of resource vertices (see the module docstring)."""

    __slots__ = ("_by_path", "_by_rtid", "_kids_high", "_kids_low", "basenames", "cap",
                 "children", "depth", "end", "host", "hosts", "ids", "name", "names",
                 "parent", "props", "rank_host", "ranks", "sizes", "type_units", "types",
                 "uniq", "units", "upper_types")

    def __init__(self, drafts: list[_Draft], order: list[int]) -> None:
        """Use :class:`GraphBuilder`; *order* lists the drafts in pre-order."""
        index = {h: i for i, h in enumerate(order)}
        n = len(order)
        self.types: list[str] = []
        self.names: list[str] = []
        self.basenames: list[str] = []
        self.ids: list[int] = []
        self.ranks: list[int] = []
        self.sizes: list[int] = []
        self.units: list[str] = []
        self.uniq: list[int] = []
        self.props: list[dict[str, str] | None] = []
        self.parent: list[int] = []
        self.children: list[list[int]] = []
        intern: dict[str, str] = {}
        for h in order:
            d = drafts[h]
            self.types.append(intern.setdefault(d.type, d.type))
            self.names.append(d.name)
            self.basenames.append(intern.setdefault(d.basename, d.basename))
            self.ids.append(d.id)
            self.ranks.append(d.rank)
            self.sizes.append(d.size)
            self.units.append(d.unit)
            self.uniq.append(d.uniq_id)
            self.props.append(d.properties or None)
            self.parent.append(-1 if d.parent == -1 else index[d.parent])
            self.children.append([index[c] for c in d.children])
        self.name = self.names[0]
        self.depth = [1] * n
        for v in range(1, n):
            self.depth[v] = self.depth[self.parent[v]] + 1
        self.end = list(range(1, n + 1))
        for v in range(n - 1, 0, -1):
            p = self.parent[v]
            self.end[p] = max(self.end[p], self.end[v])
        self.type_units = self._normalize_units()
        self.cap = self._capacities()
        self.host, self.hosts, self.rank_host = self._hosts()
        upper = {self.types[v] for v in range(n) if self.host[v] in (-1, v)}
        self.upper_types = frozenset(upper)
        self._kids_low: dict[int, list[int]] = {}
        self._kids_high: dict[int, list[int]] = {}
        self._by_path: dict[str, int] | None = None
        self._by_rtid: dict[tuple[int, str, int], int] | None = None

    # -- construction helpers -----------------------------------------------------

    def _normalize_units(self) -> dict[str, str]:
        """One unit per type: sizes given in other size units are converted to the smallest.

        ValueError when a type mixes units that cannot be converted.
        """
        seen: dict[str, set[str]] = {}
        for t, u in zip(self.types, self.units, strict=True):
            seen.setdefault(t, set()).add(u)
        chosen: dict[str, str] = {}
        for t, units in seen.items():
            if len(units) == 1:
                chosen[t] = next(iter(units))
                continue
            scales = {u: unit_bytes(u) for u in units}
            bad = sorted(u or "(none)" for u, s in scales.items() if s is None)
            if bad:
                raise ValueError(f"graph: {t} vertices mix units ({', '.join(sorted(units))})"
                                 " that cannot be converted")
            chosen[t] = min(units, key=lambda u: scales[u] or 0)
        for v, (t, u) in enumerate(zip(self.types, self.units, strict=True)):
            target = chosen[t]
            if u != target:
                src, dst = unit_bytes(u), unit_bytes(target)
                assert src is not None and dst is not None
                self.sizes[v] = self.sizes[v] * src // dst
                self.units[v] = target
        return chosen

    def _capacities(self) -> dict[str, list[int]]:
        """type -> per vertex, the units of that type in its subtree."""
        n = len(self.types)
        cap = {t: [0] * n for t in self.type_units}
        for v in range(n - 1, -1, -1):
            cap[self.types[v]][v] += self.sizes[v]
            p = self.parent[v]
            if p >= 0:
                for t, col in cap.items():
                    if col[v]:
                        cap[t][p] += col[v]
        return cap

    def _hosts(self) -> tuple[list[int], list[int], dict[int, int]]:
        """Each vertex's host, the host vertices, and rank -> host vertex."""
        n = len(self.types)
        host = [-1] * n
        hosts: list[int] = []
        by_rank: dict[int, int] = {}
        for v in range(n):
            p = self.parent[v]
            above = host[p] if p >= 0 else -1
            if above >= 0:
                host[v] = above
                if self.ranks[v] not in (-1, self.ranks[above]):
                    raise ValueError(f"graph: {self.path(v)} has rank {self.ranks[v]} inside "
                                     f"{self.names[above]} of rank {self.ranks[above]}")
            elif self.ranks[v] >= 0:
                host[v] = v
                hosts.append(v)
                other = by_rank.setdefault(self.ranks[v], v)
                if other != v:
                    raise ValueError(f"graph: rank {self.ranks[v]} is held by both "
                                     f"{self.path(other)} and {self.path(v)}")
        return host, hosts, by_rank

    # -- queries ---------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of vertices."""
        return len(self.types)

    def rank_of(self, v: int) -> int:
        """The rank of vertex *v*: its own, else its host's (-1 above the hosts)."""
        h = self.host[v]
        return -1 if h < 0 else self.ranks[h]

    def path(self, v: int) -> str:
        """The containment path of *v*: ``/tiny0/rack0/node1``."""
        parts = []
        while v >= 0:
            parts.append(self.names[v])
            v = self.parent[v]
        return "/" + "/".join(reversed(parts))

    def ancestors(self, v: int) -> Iterator[int]:
        """The proper ancestors of *v*, nearest first."""
        v = self.parent[v]
        while v >= 0:
            yield v
            v = self.parent[v]

    def subtree(self, v: int) -> range:
        """*v* and its descendants (a pre-order index range)."""
        return range(v, self.end[v])

    def kids_low(self, v: int) -> list[int]:
        """Children of *v* by ascending id (graph order among equal ids)."""
        kids = self._kids_low.get(v)
        if kids is None:
            ids = self.ids
            kids = sorted(self.children[v], key=lambda c: ids[c])
            self._kids_low[v] = kids
        return kids

    def kids_high(self, v: int) -> list[int]:
        """Children of *v* by descending id (graph order among equal ids)."""
        kids = self._kids_high.get(v)
        if kids is None:
            ids = self.ids
            kids = sorted(self.children[v], key=lambda c: -ids[c])
            self._kids_high[v] = kids
        return kids

    def by_path(self, path: str) -> int | None:
        """The vertex at containment *path*, or None."""
        if self._by_path is None:
            self._by_path = {self.path(v): v for v in range(len(self))}
        return self._by_path.get(path)

    def find(self, rank: int, type: str, id: int) -> int | None:
        """The vertex of *type* with *id* on *rank*, or None (first in pre-order)."""
        if self._by_rtid is None:
            index: dict[tuple[int, str, int], int] = {}
            for v in range(len(self)):
                index.setdefault((self.rank_of(v), self.types[v], self.ids[v]), v)
            self._by_rtid = index
        return self._by_rtid.get((rank, type, id))

    def total(self, type: str) -> int:
        """Units of *type* in the whole graph."""
        col = self.cap.get(type)
        return col[0] if col is not None else 0

    def describe(self) -> str:
        """One line: the root and the vertices per type, e.g. ``tiny0: 2 node, 72 core``."""
        counts: dict[str, int] = {}
        for t in self.types:
            counts[t] = counts.get(t, 0) + 1
        return f"{self.name}: " + ", ".join(f"{n} {t}" for t, n in counts.items())
