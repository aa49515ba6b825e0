"""Read GRUG recipes: Fluxion's GraphML files that describe how to generate a resource graph.

A GRUG file is plain GraphML (``http://graphml.graphdrawing.org``).  Its
``<key>`` elements declare the attributes (with ``<default>`` values); each
recipe ``<node>`` describes one kind of vertex (``type``, ``basename``,
``size``, ``unit``, ``subsystem``; ``root`` = 1 on the root), and each
``<edge>`` says how children are made: ``gen_method`` ``MULTIPLY`` with
``multi_scale`` copies per parent, ids numbered per ``id_scope`` from
``id_start`` by ``id_stride`` (see :mod:`fluxes.domain.graph.recipe`).  Only the
``containment`` subsystem is read; ``ASSOCIATE_*`` edges and other subsystems
(power, network...) are skipped, as the CA matcher ignores them.

:func:`read_grug` returns the recipe's root :class:`~fluxes.domain.graph.recipe.Level`;
:func:`load_grug` the generated graph.  Bad input raises ValueError with a
one-line message naming the element.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Final

from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.recipe import MAX_LEVELS, Level, generate

__all__ = ["MAX_GRUG_BYTES", "load_grug", "read_grug"]

#: Largest recipe accepted (recipes are small: they describe, not list).
MAX_GRUG_BYTES: Final = 4 << 20

_CONTAINMENT: Final = "containment"


def _local(tag: str) -> str:
    """An element tag without its XML namespace."""
    return tag.rsplit("}", 1)[-1]


def _int(value: str, where: str, lowest: int) -> int:
    """*value* (text) as an int >= *lowest*."""
    try:
        number = int(value.strip())
    except ValueError:
        raise ValueError(f"{where}: expected an integer, got {value!r}") from None
    if number < lowest:
        raise ValueError(f"{where}: expected an integer >= {lowest}, got {number}")
    return number


def _data(element: ET.Element, names: dict[str, str], defaults: dict[str, str]
          ) -> dict[str, str]:
    """The attributes of a recipe node or edge: defaults, then its ``<data>`` children."""
    out = dict(defaults)
    for child in element:
        if _local(child.tag) != "data":
            continue
        key = child.get("key", "")
        out[names.get(key, key)] = (child.text or "").strip()
    return out


def read_grug(text: str | bytes) -> Level:
    """The recipe in GRUG *text* as a tree of Levels (containment subsystem only)."""
    if len(text) > MAX_GRUG_BYTES:
        raise ValueError(f"grug: recipe larger than {MAX_GRUG_BYTES} bytes")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"grug: invalid XML: {exc}") from None
    if _local(root.tag) != "graphml":
        raise ValueError(f"grug: expected a <graphml> document, got <{_local(root.tag)}>")
    names: dict[str, str] = {}
    node_defaults: dict[str, str] = {}
    edge_defaults: dict[str, str] = {}
    graph = None
    for child in root:
        tag = _local(child.tag)
        if tag == "key":
            kid = child.get("id", "")
            name = child.get("attr.name", kid)
            names[kid] = name
            default = next((d for d in child if _local(d.tag) == "default"), None)
            if default is not None:
                table = edge_defaults if child.get("for") == "edge" else node_defaults
                table[name] = (default.text or "").strip()
        elif tag == "graph" and graph is None:
            graph = child
    if graph is None:
        raise ValueError("grug: no <graph> element")
    recipes: dict[str, dict[str, str]] = {}
    edges: list[tuple[str, str, dict[str, str]]] = []
    for element in graph:
        tag = _local(element.tag)
        if tag == "node":
            rid = element.get("id")
            if not rid:
                raise ValueError("grug: a <node> has no id")
            if rid in recipes:
                raise ValueError(f"grug: node {rid!r} is defined twice")
            recipes[rid] = _data(element, names, node_defaults)
        elif tag == "edge":
            source, target = element.get("source") or "", element.get("target") or ""
            if not source or not target:
                raise ValueError(f"grug: edge {element.get('id', '?')!r} needs a source and "
                                 "a target")
            edges.append((source, target, _data(element, names, edge_defaults)))
    return _levels(recipes, edges)


def _levels(recipes: dict[str, dict[str, str]],
            edges: list[tuple[str, str, dict[str, str]]]) -> Level:
    """Turn recipe nodes and containment edges into a Level tree."""
    def subsystem(attrs: dict[str, str], key: str) -> str:
        return attrs.get(key) or _CONTAINMENT

    out: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for source, target, attrs in edges:
        for end in (source, target):
            if end not in recipes:
                raise ValueError(f"grug: edge {source!r} -> {target!r} names unknown node "
                                 f"{end!r}")
        if subsystem(attrs, "e_subsystem") != _CONTAINMENT:
            continue
        method = (attrs.get("gen_method") or "MULTIPLY").upper()
        if method != "MULTIPLY":
            continue  # associations link subsystems; the containment tree ignores them
        out.setdefault(source, []).append((target, attrs))
    roots = [rid for rid, attrs in recipes.items()
             if attrs.get("root", "0") == "1" and subsystem(attrs, "subsystem") == _CONTAINMENT]
    if len(roots) != 1:
        raise ValueError(f"grug: expected one containment node with root=1, found "
                         f"{len(roots)}")
    # A recipe may reach a node by several edges: equal edges share one Level,
    # so a recipe is read in time linear in its size, not in its expansion.
    made: dict[tuple[str, tuple[tuple[str, str], ...]], Level] = {}
    visiting: set[str] = set()

    def level(rid: str, edge: dict[str, str] | None, depth: int) -> Level:
        key = (rid, tuple(sorted((edge or {}).items())))
        done = made.get(key)
        if done is not None:
            return done
        attrs = recipes[rid]
        where = f"grug: node {rid!r}"
        if rid in visiting:
            raise ValueError(f"{where}: recipe edges form a cycle")
        if depth > MAX_LEVELS:
            raise ValueError(f"{where}: recipe deeper than {MAX_LEVELS} levels")
        visiting.add(rid)
        kids = []
        for target, eattrs in out.get(rid, []):
            kids.append(level(target, eattrs, depth + 1))
        visiting.discard(rid)
        kind = attrs.get("type") or ""
        if not kind:
            raise ValueError(f"{where}: no type")
        count = 1
        scope, start, stride = 0, 0, 1
        if edge is not None:
            ewhere = f"grug: edge to {rid!r}"
            count = _int(edge.get("multi_scale") or "1", f"{ewhere}: multi_scale", 1)
            scope = _int(edge.get("id_scope") or "0", f"{ewhere}: id_scope", 0)
            start = _int(edge.get("id_start") or "0", f"{ewhere}: id_start", 0)
            stride = _int(edge.get("id_stride") or "1", f"{ewhere}: id_stride", 1)
        made[key] = Level(kind, count, tuple(kids),
                          size=_int(attrs.get("size") or "1", f"{where}: size", 1),
                          unit=attrs.get("unit") or "",
                          basename=attrs.get("basename") or kind,
                          id_scope=scope, id_start=start, id_stride=stride)
        return made[key]

    return level(roots[0], None, 0)


def load_grug(text: str | bytes, rank_type: str = "node") -> ResourceGraph:
    """The graph a GRUG recipe generates (vertices of *rank_type* get ranks 0, 1, ...)."""
    return generate(read_grug(text), rank_type)
