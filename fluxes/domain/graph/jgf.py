"""JSON Graph Format (JGF) as RFC 20's ``scheduling`` key and Fluxion carry it.

A JGF document is ``{"graph": {"nodes": [...], "edges": [...]}}``.  Each
node is ``{"id": "<unique id>", "metadata": {...}}`` with ``type`` (required),
``basename``, ``name``, ``id``, ``uniq_id``, ``rank``, ``size``, ``unit``,
``exclusive``, ``paths`` (``{"containment": "/cluster0/node3"}``) and
``properties`` (``{"name": "value"}``).  Edges ``{"source", "target",
"metadata"}`` are containment edges unless their metadata names another
subsystem (RFC 20 ``subsystem``/``relationship``, or Fluxion's older
``name: {subsystem: relation}``); reverse ``in`` edges are ignored.

:func:`read_jgf` builds a :class:`~fluxes.domain.graph.model.ResourceGraph`
from a JGF document or from an R whose ``scheduling`` key holds one;
:func:`write_jgf` writes a graph, or the part of it a job holds
(:func:`subgraph`), back.  Bad input raises ValueError naming the place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from fluxes.domain.graph.model import GraphBuilder, ResourceGraph

__all__ = ["MAX_JGF_BYTES", "load_jgf", "read_jgf", "subgraph", "write_jgf"]

#: Largest JGF text accepted.
MAX_JGF_BYTES: Final = 1 << 30

_CONTAINMENT: Final = "containment"


def load_jgf(text: str | bytes) -> ResourceGraph:
    """Parse JGF (or an R with a ``scheduling`` key) from JSON *text*."""
    if len(text) > MAX_JGF_BYTES:
        raise ValueError(f"jgf: document larger than {MAX_JGF_BYTES} bytes")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"jgf: invalid JSON: {exc}") from None
    return read_jgf(doc)


def graph_part(doc: object) -> Mapping[str, Any]:
    """The ``graph`` object of a JGF document or of an R's ``scheduling`` key."""
    if not isinstance(doc, Mapping):
        raise ValueError("jgf: expected a JSON object")
    if "graph" not in doc and isinstance(doc.get("scheduling"), Mapping):
        doc = doc["scheduling"]
    graph = doc.get("graph") if isinstance(doc, Mapping) else None
    if not isinstance(graph, Mapping):
        raise ValueError("jgf: missing 'graph' object")
    return graph


def _is_containment(edge: Mapping[str, Any]) -> bool:
    """Whether a JGF edge is a containment ``contains`` edge."""
    meta = edge.get("metadata")
    if not isinstance(meta, Mapping):
        return True
    sub = meta.get("subsystem")
    if isinstance(sub, str):
        return sub == _CONTAINMENT and meta.get("relationship", "contains") != "in"
    names = meta.get("name")
    if isinstance(names, Mapping) and names:
        return names.get(_CONTAINMENT) == "contains"
    return True


def _meta_int(meta: Mapping[str, Any], key: str, default: int, where: str) -> int:
    """An integer metadata field (numbers written as strings are accepted)."""
    value = meta.get(key, default)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def read_jgf(doc: object) -> ResourceGraph:
    """Build the graph a JGF document (or an R with ``scheduling``) describes."""
    graph = graph_part(doc)
    nodes = graph.get("nodes")
    edges = graph.get("edges", [])
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise ValueError("jgf: graph.nodes and graph.edges must be lists")
    builder = GraphBuilder()
    handles: dict[str, int] = {}
    for i, node in enumerate(nodes):
        _add_node(builder, handles, i, node)
    for i, edge in enumerate(edges):
        _add_edge(builder, handles, i, edge)
    return builder.build()


def _add_node(builder: GraphBuilder, handles: dict[str, int], i: int, node: object) -> None:
    """Add JGF node ``i`` to ``builder``; ``handles`` maps its id to the new vertex."""
    where = f"jgf: nodes[{i}]"
    if not isinstance(node, Mapping):
        raise ValueError(f"{where}: expected an object")
    key = node.get("id")
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str):
        raise ValueError(f"{where}.id: expected a string")
    if key in handles:
        raise ValueError(f"{where}.id: {key!r} appears twice")
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError(f"{where}.metadata: expected an object")
    kind = meta.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"{where}.metadata.type: expected a string")
    paths = meta.get("paths")
    if isinstance(paths, Mapping) and paths and _CONTAINMENT not in paths:
        return  # a vertex of another subsystem only (power, network): not matched here
    mwhere = f"{where}.metadata"
    props = meta.get("properties") or {}
    if not isinstance(props, Mapping):
        raise ValueError(f"{mwhere}.properties: expected an object")
    name = meta.get("name")
    basename = meta.get("basename")
    unit = meta.get("unit") or ""
    for field_name, value in (("name", name), ("basename", basename), ("unit", unit)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{mwhere}.{field_name}: expected a string")
    uniq = _meta_int(meta, "uniq_id", int(key) if key.isdigit() else i, mwhere)
    try:
        handles[key] = builder.add(
            None, kind, id=_meta_int(meta, "id", -1, mwhere), name=name or None,
            basename=basename or None, rank=_meta_int(meta, "rank", -1, mwhere),
            size=_meta_int(meta, "size", 1, mwhere), unit=unit, uniq_id=uniq,
            properties={str(k): str(v) for k, v in props.items()})
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _add_edge(builder: GraphBuilder, handles: dict[str, int], i: int, edge: object) -> None:
    """Attach the target of JGF edge ``i`` to its source, if it is a containment edge."""
    where = f"jgf: edges[{i}]"
    if not isinstance(edge, Mapping):
        raise ValueError(f"{where}: expected an object")
    if not _is_containment(edge):
        return
    ends = []
    for end in ("source", "target"):
        value = edge.get(end)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or value not in handles:
            raise ValueError(f"{where}.{end}: unknown vertex {value!r}")
        ends.append(handles[value])
    try:
        builder.attach(ends[0], ends[1])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _vertex_doc(g: ResourceGraph, v: int, size: int, exclusive: bool) -> dict[str, Any]:
    """The JGF node of vertex *v* holding *size* units."""
    meta: dict[str, Any] = {
        "type": g.types[v], "basename": g.basenames[v], "name": g.names[v], "id": g.ids[v],
        "uniq_id": g.uniq[v], "rank": g.rank_of(v), "exclusive": exclusive,
        "unit": g.units[v], "size": size, "paths": {_CONTAINMENT: g.path(v)},
    }
    props = g.props[v]
    if props:
        meta["properties"] = dict(props)
    return {"id": str(g.uniq[v]), "metadata": meta}


def subgraph(g: ResourceGraph, held: Mapping[int, tuple[int, bool]]) -> dict[str, Any]:
    """JGF of the vertices in *held* (vertex -> (units held, exclusive)), in pre-order.

    *held* must be closed under ancestors (a job's selection always is).
    """
    order = sorted(held)
    nodes = [_vertex_doc(g, v, held[v][0], held[v][1]) for v in order]
    edges = [_edge_doc(g, v) for v in order if g.parent[v] >= 0 and g.parent[v] in held]
    return {"graph": {"nodes": nodes, "edges": edges}}


def _edge_doc(g: ResourceGraph, v: int) -> dict[str, Any]:
    """The containment edge from *v*'s parent to *v*."""
    return {"source": str(g.uniq[g.parent[v]]), "target": str(g.uniq[v]),
            "metadata": {"subsystem": _CONTAINMENT, "relationship": "contains"}}


def write_jgf(g: ResourceGraph, vertices: Iterable[int] | None = None) -> dict[str, Any]:
    """JGF of the whole graph (or of *vertices*, closed under ancestors), sizes as built."""
    chosen = range(len(g)) if vertices is None else vertices
    return subgraph(g, {v: (g.sizes[v], False) for v in chosen})
