"""A resource graph from an R alone (RFC 20 ``R_lite``), as Fluxion's ``rv1exec`` reader builds one.

The graph is ``cluster0`` holding one vertex per rank, named by its host
(``nodelist``; ``node<rank>`` without one), its basename the hostname
without its numeric suffix and its id that suffix (else the rank), each
holding its cores and gpus by id (``core0``, ``gpu3``).  R's properties go
on the host vertices.  This is what ``fluxes resource-query -f rv1exec``
loads; Fluxion's reader is the model.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from fluxes.domain.graph.model import GraphBuilder, ResourceGraph
from fluxes.formats.rset import ResourceSet

__all__ = ["load_rv1exec"]

_SUFFIX: Final = re.compile(r"^(.*?)(\d+)$")


def load_rv1exec(text: str | bytes) -> ResourceGraph:
    """The graph of an R document (JSON *text*); ValueError naming what is wrong."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"rv1exec: invalid JSON: {exc}") from None
    try:
        rset = ResourceSet(doc)
    except ValueError as exc:
        raise ValueError(f"rv1exec: {exc}") from None
    if rset.is_empty():
        raise ValueError("rv1exec: R holds no resources")
    builder = GraphBuilder()
    root = builder.add(None, "cluster", id=0, name="cluster0", basename="cluster")
    props: dict[int, dict[str, str]] = {}
    for name, ranks in rset.properties.items():
        for r in ranks:
            props.setdefault(r, {})[name] = ""
    for rank in rset.ranks:
        host = rset.hostname(rank) or f"node{rank}"
        found = _SUFFIX.match(host)
        base, hid = (found.group(1), int(found.group(2))) if found else (host, rank)
        node = builder.add(root, "node", id=hid, name=host, basename=base or "node",
                           rank=rank, properties=props.get(rank))
        for kind, ids in (("core", rset.cores(rank)), ("gpu", rset.gpus(rank))):
            for i in ids:
                builder.add(node, kind, id=i, rank=rank)
    return builder.build()
