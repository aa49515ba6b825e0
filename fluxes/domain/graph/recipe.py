"""Generate resource graphs: from a recipe of levels (what GRUG describes), an inventory or R.

A :class:`Level` says "under each parent, make ``count`` vertices of this
type, each holding these child levels", e.g. the issue's example
``cluster[1] -> rack[2] -> node[4] -> socket[2] -> core[18], memory[8] x 2 GB,
gpu[1]`` is::

    Level("cluster", children=(Level("rack", 2, children=(
        Level("node", 4, children=(Level("socket", 2, children=(
            Level("core", 18, id_scope=1), Level("memory", 8, size=2, unit="GB", id_scope=1),
            Level("gpu", 1, id_scope=1))),)),)),))

Ids follow GRUG's rules: a vertex's id is ``id_start + id_stride * k`` where
``k`` counts the vertices of its level made so far under the same ancestor
``id_scope`` levels up (0: the parent, 1: the grandparent...; beyond the root:
the whole graph).  Names are basename + id (``core17``).  Vertices of the
``rank_type`` (``node`` by default) get ranks 0, 1, 2... in the order they
are made, and their descendants share their rank.

:func:`from_inventory` turns the scheduler's inventory (an instance config or
an R) into ``cluster0 -> node -> [socket ->] core, gpu, memory``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fluxes.domain.graph.model import MAX_VERTICES, GraphBuilder, ResourceGraph
from fluxes.domain.sched.inventory import Inventory
from fluxes.formats.rset import ResourceSet

__all__ = ["MAX_LEVELS", "Level", "from_config", "from_inventory", "from_rset", "generate",
           "parse_recipe"]

#: Deepest recipe accepted (real machines have a handful of levels).
MAX_LEVELS = 64


@dataclass(frozen=True, slots=True)
class Level:
    """One level of a recipe (see the module docstring)."""

    type: str
    count: int = 1
    children: tuple[Level, ...] = ()
    size: int = 1
    unit: str = ""
    basename: str | None = None
    id_scope: int = 0
    id_start: int = 0
    id_stride: int = 1


def _check_level(level: Level, where: str) -> None:
    """ValueError for a level with bad numbers."""
    for name in ("count", "size", "id_stride"):
        value = getattr(level, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.{name}: expected an integer >= 1, got {value!r}")
    for name in ("id_scope", "id_start"):
        value = getattr(level, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}.{name}: expected an integer >= 0, got {value!r}")


def _size(level: Level, where: str, depth: int, seen: dict[int, int]) -> int:
    """How many vertices *level* makes under one parent (levels checked on the way).

    *seen* remembers shared levels, so a recipe reusing a level is measured
    in time linear in its size.
    """
    known = seen.get(id(level))
    if known is not None:
        return known
    if depth > MAX_LEVELS:
        raise ValueError(f"{where}: recipe deeper than {MAX_LEVELS} levels")
    _check_level(level, where)
    below = 0
    for i, child in enumerate(level.children):
        below += _size(child, f"{where}.children[{i}]", depth + 1, seen)
        if below > MAX_VERTICES:
            break
    total = level.count * (1 + below)
    if total > MAX_VERTICES:
        raise ValueError(f"{where}: the recipe makes more than {MAX_VERTICES} vertices")
    seen[id(level)] = total
    return total


def generate(root: Level, rank_type: str = "node") -> ResourceGraph:
    """Build the graph *root* describes (its count must be 1: a graph has one root).

    ValueError for bad numbers, a recipe deeper than :data:`MAX_LEVELS` or
    making more than ``MAX_VERTICES`` vertices (checked before making any).
    """
    _size(root, root.type, 0, {})
    if root.count != 1:
        raise ValueError(f"{root.type}: the root level must have count 1")
    builder = GraphBuilder()
    # (level identity, scope anchor) -> vertices of that level made so far
    counters: dict[tuple[int, int], int] = {}
    parents: list[int] = []  # builder handles of each made vertex's parent (-1: root)
    next_rank = [0]

    def make(level: Level, parent: int, where: str) -> None:
        anchor = parent
        for _ in range(level.id_scope):
            anchor = parents[anchor] if anchor >= 0 else -1
        key = (id(level), anchor)
        k = counters.get(key, 0)
        counters[key] = k + 1
        vid = level.id_start + level.id_stride * k
        rank = -1
        if level.type == rank_type:
            rank = next_rank[0]
            next_rank[0] += 1
        elif parent >= 0:
            rank = ranks[parent]
        handle = builder.add(None if parent < 0 else parent, level.type, id=vid,
                             basename=level.basename, rank=rank, size=level.size,
                             unit=level.unit)
        parents.append(parent)
        ranks.append(rank)
        for i, child in enumerate(level.children):
            cwhere = f"{where}.children[{i}]"
            for _ in range(child.count):
                make(child, handle, cwhere)

    ranks: list[int] = []
    make(root, -1, root.type)
    return builder.build()


_ITEM = re.compile(r"\s*([A-Za-z][A-Za-z0-9_-]*)\s*\[\s*([0-9]+)\s*\]"
                   r"(?:\s*x\s*([0-9]+)\s*([A-Za-z]*))?\s*")
#: Longest recipe text read (a recipe is a line, not a document).
MAX_RECIPE_CHARS = 4096


def parse_recipe(text: str, rank_type: str = "node") -> Level:
    """The recipe written as text: ``cluster[1] -> rack[2] -> node[4] -> socket[2] ->
    core[18], memory[8] x 2 GB, gpu[1]``.

    Levels are chained with ``->`` (each under the one before); the last
    link may list several levels, comma-separated, all under the one before.
    ``x SIZE UNIT`` gives a pool vertex's size. Vertices down to the
    *rank_type* level are numbered across the graph, those below it per
    *rank_type* vertex (so the cores of a node have distinct ids, as R needs).
    ValueError (one line) for anything else.
    """
    if not isinstance(text, str) or len(text) > MAX_RECIPE_CHARS:
        raise ValueError(f"recipe: expected a text of at most {MAX_RECIPE_CHARS} characters")
    links = text.split("->")
    parsed: list[list[tuple[str, int, int, str]]] = []
    for n, link in enumerate(links):
        items = []
        for item in link.split(","):
            found = _ITEM.fullmatch(item)
            if found is None:
                raise ValueError(f"recipe: {item.strip()!r:.60} is not TYPE[COUNT] "
                                 "(optionally followed by x SIZE UNIT)")
            kind, count, size, unit = found.groups()
            items.append((kind, int(count), int(size or 1), unit or ""))
        if len(items) > 1 and n != len(links) - 1:
            raise ValueError("recipe: only the last link may list several levels")
        parsed.append(items)
    chain = [items[0][0] for items in parsed[:-1]]
    node_depth = chain.index(rank_type) if rank_type in chain else len(links)

    def scope(depth: int) -> int:
        """GRUG id_scope: across the graph down to the rank level, then per rank vertex."""
        return max(depth - 1, 0) if depth <= node_depth else depth - node_depth - 1

    level: tuple[Level, ...] = tuple(
        Level(kind, count, size=size, unit=unit, id_scope=scope(len(links) - 1))
        for kind, count, size, unit in parsed[-1])
    for depth in range(len(links) - 2, -1, -1):
        kind, count, size, unit = parsed[depth][0]
        level = (Level(kind, count, level, size=size, unit=unit, id_scope=scope(depth)),)
    return level[0]


def _memory_vertex(size: int) -> tuple[int, str]:
    """*size* bytes as (amount, unit) in the largest unit that divides it."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size % scale == 0:
            return size // scale, unit
    return size, "B"


def from_inventory(inventory: Inventory, name: str = "cluster0") -> ResourceGraph:
    """The graph of an inventory: ``cluster0 -> node -> [socket ->] core, gpu, memory``.

    Nodes are named after their hostnames (``node<rank>`` without) and have
    id and rank = the target's rank; cores and gpus keep their ids; sockets,
    when the inventory knows them, hold their cores; memory is one vertex per
    node.  Properties become vertex properties (with empty values).
    """
    builder = GraphBuilder()
    root = builder.add(None, "cluster", name=name, id=0, basename="cluster")
    for t in inventory:
        node = builder.add(root, "node", id=t.rank, rank=t.rank,
                           name=t.hostname if t.hostname is not None else f"node{t.rank}",
                           basename="node", properties={p: "" for p in sorted(t.properties)})
        if t.sockets is not None:
            for i, cores in enumerate(t.sockets):
                sock = builder.add(node, "socket", id=i, rank=t.rank)
                for c in cores:
                    builder.add(sock, "core", id=c, rank=t.rank)
        else:
            for c in t.cores:
                builder.add(node, "core", id=c, rank=t.rank)
        for g in t.gpus:
            builder.add(node, "gpu", id=g, rank=t.rank)
        if t.memory:
            amount, unit = _memory_vertex(t.memory)
            builder.add(node, "memory", id=0, rank=t.rank, size=amount, unit=unit)
    return builder.build()


def from_rset(R: ResourceSet | Mapping[str, Any] | str | bytes,  # noqa: N803
              name: str = "cluster0") -> ResourceGraph:
    """The graph of an RFC 20 R's execution part (see :func:`from_inventory`)."""
    return from_inventory(Inventory.from_rset(R), name)


def from_config(config: Mapping[str, Any], name: str = "cluster0") -> ResourceGraph:
    """The graph of an instance's ``[[resource.config]]`` entries (see :func:`from_inventory`)."""
    return from_inventory(Inventory.from_config(config), name)
