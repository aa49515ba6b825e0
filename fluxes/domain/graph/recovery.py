"""Reading held resources back into a graph pool: R documents, subgraphs, inventories.

A restarted scheduler re-reads the R of every job holding resources
(:meth:`GraphPool.adopt <fluxes.domain.graph.pool.GraphPool.adopt>`):

* :func:`picks_of_graph`: an R's ``scheduling`` subgraph gives exactly the
  vertices and units (exclusive vertices, whose subtrees are closed again,
  shared parts of pools, vertices passed through), matched to the graph by
  containment path (else by rank, type and id);
* :func:`picks_of_rset`: without one, ``R_lite`` gives cores and gpus by id,
  whole hosts for exclusive jobs, and memory as an amount per rank;
* :func:`check_free`: a hold may be taken back only if nothing else holds it;
* :func:`picks_of_rv1exec` and :func:`ranks_of_r`: what resource-query's
  ``update`` and ``partial-cancel`` read from a given R.

:func:`inventory_of` gives the hosts of a graph as the scheduler's
:class:`~fluxes.domain.sched.inventory.Inventory`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import orjson

from fluxes.domain.graph.jgf import graph_part
from fluxes.domain.graph.match import EXCLUSIVE, PASS, SHARED
from fluxes.domain.graph.model import ResourceGraph, unit_bytes
from fluxes.domain.graph.state import GraphState, Hold
from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.errors import ConfigError
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet, check_property_name

__all__ = ["check_free", "inventory_of", "picks_of_graph", "picks_of_rset", "picks_of_rv1exec",
           "r_document", "r_times", "ranks_of_r"]

_GB: Final = 1 << 30

Picks = list[tuple[int, int, int]]


def r_document(R: ResourceSet | Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:  # noqa: N803
    """R as a JSON object (a GraphR keeps its scheduling key)."""
    if isinstance(R, ResourceSet):
        return R.encode()
    if isinstance(R, (str, bytes)):
        try:
            doc = orjson.loads(R)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"R: invalid JSON: {exc}") from None
    else:
        doc = R
    if not isinstance(doc, Mapping):
        raise ValueError("R: expected a JSON object")
    return doc


def r_times(doc: Mapping[str, Any], where: str) -> tuple[float | None, float | None]:
    """``execution.starttime`` and ``expiration`` of an R document (None when absent)."""
    execution = doc.get("execution", {})
    if not isinstance(execution, Mapping):
        raise ValueError(f"{where}: R: execution must be an object")
    out: list[float | None] = []
    for key in ("starttime", "expiration"):
        value = execution.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise ValueError(f"{where}: R: execution.{key}: expected a number, got {value!r}")
        out.append(None if value is None else float(value))
    return out[0], out[1]


def _vertex_of(g: ResourceGraph, meta: Mapping[str, Any]) -> int | None:
    """The graph vertex a JGF vertex's metadata names (by path, else rank/type/id)."""
    paths = meta.get("paths")
    if isinstance(paths, Mapping) and isinstance(paths.get("containment"), str):
        return g.by_path(paths["containment"])
    rank, kind, vid = meta.get("rank"), meta.get("type"), meta.get("id")
    if isinstance(rank, int) and isinstance(kind, str) and isinstance(vid, int):
        return g.find(rank, kind, vid)
    return None


def picks_of_graph(g: ResourceGraph, scheduling: Mapping[str, Any], where: str) -> Picks:
    """Picks from a JGF subgraph: exclusive tops, shared leaves, passed-through vertices."""
    try:
        nodes = graph_part(scheduling).get("nodes")
    except ValueError as exc:
        raise ValueError(f"{where}: scheduling: {exc}") from None
    if not isinstance(nodes, list):
        raise ValueError(f"{where}: scheduling.graph.nodes must be a list")
    held: dict[int, tuple[int, bool]] = {}
    for i, node in enumerate(nodes):
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        if not isinstance(meta, Mapping):
            raise ValueError(f"{where}: scheduling nodes[{i}] has no metadata")
        v = _vertex_of(g, meta)
        if v is None:
            raise ValueError(f"{where}: vertex {meta.get('name')!r} is not in the graph")
        size = meta.get("size", 1)
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= g.sizes[v]:
            raise ValueError(f"{where}: bad size for {g.path(v)}")
        held[v] = (size, meta.get("exclusive") is True)
    picks: Picks = []
    inner = {g.parent[v] for v in held}
    for v, (size, excl) in held.items():
        if excl:
            # the vertex closes its subtree again; what was named below comes with it
            picks.append((v, size, EXCLUSIVE))
        elif v in inner:
            picks.append((v, 0, PASS))
        else:
            picks.append((v, size, SHARED))
    return picks


def picks_of_rset(g: ResourceGraph, state: GraphState, rset: ResourceSet,
                  memory: Mapping[int, int] | None, exclusive: bool, where: str) -> Picks:
    """Picks from R_lite: cores and gpus by id (whole hosts when *exclusive*), memory."""
    picks: Picks = []
    for r in rset.ranks:
        host = g.rank_host.get(r)
        if host is None:
            raise ValueError(f"{where}: rank {r} is not in the graph")
        if exclusive:
            picks.append((host, g.sizes[host], EXCLUSIVE))
            continue
        for kind, ids in (("core", rset.cores(r)), ("gpu", rset.gpus(r))):
            for i in ids:
                v = g.find(r, kind, i)
                if v is None:
                    raise ValueError(f"{where}: rank {r} has no {kind} {i}")
                picks.append((v, 1, EXCLUSIVE))
        want = int((memory or {}).get(r, 0))
        if want:
            scale = unit_bytes(g.type_units.get("memory", "")) or _GB
            units = -(-want // scale)
            for v in g.subtree(host):
                if units <= 0:
                    break
                if g.types[v] == "memory":
                    take = min(units, g.sizes[v] - state.used[v])
                    if take > 0:
                        picks.append((v, take, SHARED))
                        units -= take
            if units > 0:
                raise ValueError(f"{where}: rank {r} memory is already held")
    return picks


def _rlite(doc: Mapping[str, Any], where: str) -> list[tuple[IDSet, Mapping[str, Any]]]:
    """``execution.R_lite`` of an R document as (ranks, children) pairs."""
    execution = doc.get("execution")
    rlite = execution.get("R_lite") if isinstance(execution, Mapping) else None
    if not isinstance(rlite, list):
        raise ValueError(f"{where}: R: execution.R_lite must be a list")
    out = []
    for i, entry in enumerate(rlite):
        ranks = entry.get("rank") if isinstance(entry, Mapping) else None
        children = entry.get("children", {}) if isinstance(entry, Mapping) else None
        if not isinstance(ranks, str) or not isinstance(children, Mapping):
            raise ValueError(f"{where}: R: R_lite[{i}] needs a rank idset and children")
        try:
            out.append((IDSet(ranks), children))
        except ValueError as exc:
            raise ValueError(f"{where}: R: R_lite[{i}].rank: {exc}") from None
    return out


def picks_of_rv1exec(g: ResourceGraph, doc: Mapping[str, Any], where: str) -> Picks:
    """Picks from an R's ``R_lite`` alone (Fluxion's rv1exec reader): each core and gpu
    listed exclusively, and its host too when every leaf below the host is listed."""
    picks: Picks = []
    listed: set[int] = set()
    hosts: list[int] = []
    for ranks, children in _rlite(doc, where):
        for r in ranks:
            host = g.rank_host.get(r)
            if host is None:
                raise ValueError(f"{where}: rank {r} is not in the graph")
            if host not in hosts:
                hosts.append(host)
            for kind, text in children.items():
                try:
                    ids = IDSet(text) if isinstance(text, str) else None
                except ValueError:
                    ids = None
                if ids is None:
                    raise ValueError(f"{where}: R: rank {r} {kind}: expected an idset")
                for i in ids:
                    v = g.find(r, str(kind), i)
                    if v is None:
                        raise ValueError(f"{where}: rank {r} has no {kind} {i}")
                    if v not in listed:
                        listed.add(v)
                        picks.append((v, g.sizes[v], EXCLUSIVE))
    for host in hosts:
        leaves = [v for v in g.subtree(host) if not g.children[v]]
        whole = all(v in listed for v in leaves)
        picks.append((host, g.sizes[host] if whole else 0, EXCLUSIVE if whole else PASS))
    return picks


def ranks_of_r(g: ResourceGraph, doc: Mapping[str, Any], reader: str, where: str
               ) -> set[int]:
    """The ranks an R names: its ``R_lite`` (*reader* ``rv1exec``), else the ranks of
    the vertices of its JGF (``jgf``: a subgraph or an R's ``scheduling`` key)."""
    if reader == "rv1exec":
        return {r for ranks, _ in _rlite(doc, where) for r in ranks}
    try:
        nodes = graph_part(doc).get("nodes")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(nodes, list):
        raise ValueError(f"{where}: graph.nodes must be a list")
    out: set[int] = set()
    for node in nodes:
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        if not isinstance(meta, Mapping):
            raise ValueError(f"{where}: a JGF node has no metadata")
        v = _vertex_of(g, meta)
        rank = g.rank_of(v) if v is not None else meta.get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
            out.add(rank)
    return out


def check_free(g: ResourceGraph, state: GraphState, hold: Hold, where: str) -> None:
    """ValueError unless *hold* fits what allocations hold now."""
    sizes = g.sizes
    shown = hold.shown
    for v in hold.touched:
        excl = shown[v][1] if v in shown else True  # below an exclusive vertex: closed
        if excl and state.holds[v]:
            raise ValueError(f"{where}: {g.path(v)} is already held")
        if not excl and v not in hold.amounts and state.used[v] >= sizes[v]:
            raise ValueError(f"{where}: {g.path(v)} is held exclusively")
    for v, a in hold.blocked.items():
        if state.used[v] + a > sizes[v]:
            raise ValueError(f"{where}: {g.path(v)} is already held")


def _valid_property(name: str) -> bool:
    """Whether *name* is a valid R property name."""
    try:
        check_property_name(name)
    except ValueError:
        return False
    return True


def inventory_of(g: ResourceGraph) -> Inventory:
    """The execution targets of a graph: each host holding a core or gpu."""
    targets = []
    scale = unit_bytes(g.type_units.get("memory", "")) or _GB
    for h in g.hosts:
        cores: list[int] = []
        gpus: list[int] = []
        memory = 0
        sockets: list[list[int]] = []
        in_socket = 0
        for v in g.subtree(h):
            t = g.types[v]
            if t == "core":
                cores.append(g.ids[v])
                if any(g.types[a] == "socket" for a in g.ancestors(v)):
                    in_socket += 1
            elif t == "gpu":
                gpus.append(g.ids[v])
            elif t == "memory":
                memory += g.sizes[v] * scale
            elif t == "socket":
                sockets.append([g.ids[c] for c in g.subtree(v) if g.types[c] == "core"])
        if not cores and not gpus:
            continue
        props = frozenset(p for p in (g.props[h] or {}) if _valid_property(p))
        socket_sets = None
        if sockets and in_socket == len(cores) and all(sockets):
            socket_sets = tuple(IDSet(s) for s in sockets)
        targets.append(Target(g.ranks[h], g.names[h], IDSet(cores), IDSet(gpus), props,
                              memory or None, socket_sets))
    try:
        inv = Inventory(targets)
        inv.rset()
        return inv
    except ConfigError:
        # sockets that do not partition the cores, or names no hostlist takes
        plain = [Target(t.rank, None, t.cores, t.gpus, t.properties, t.memory, None)
                 for t in targets]
        return Inventory(plain)
