"""Resource graphs: hierarchical matching of any RFC 14 resources tree, as Fluxion does it.

* :mod:`fluxes.domain.graph.model`: the graph (``ResourceGraph``, ``GraphBuilder``);
* :mod:`fluxes.domain.graph.recipe`, :mod:`~fluxes.domain.graph.grug`,
  :mod:`~fluxes.domain.graph.jgf`: graphs from recipes, GRUG, JGF, inventories, R;
* :mod:`fluxes.domain.graph.wants`: what a job asks for (``Want``, ``GraphRequest``);
* :mod:`fluxes.domain.graph.state`, :mod:`~fluxes.domain.graph.match`,
  :mod:`~fluxes.domain.graph.traverser`: planners, the matcher, the operations;
* :mod:`fluxes.domain.graph.output`: R with its ``scheduling`` subgraph, listings;
* :mod:`fluxes.domain.graph.query`: a ``resource-query`` session;
* :mod:`fluxes.domain.graph.pool`: ``GraphPool``, today's pool interface on a graph.

See ``docs/resource-graph.md``.
"""

from __future__ import annotations

from fluxes.domain.graph.model import GraphBuilder, ResourceGraph
from fluxes.domain.graph.pool import GraphPool, SchedulerPool
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import GraphRequest, Want, graph_request, parse_resources

__all__ = [
    "GraphBuilder",
    "GraphPool",
    "GraphRequest",
    "ResourceGraph",
    "SchedulerPool",
    "Traverser",
    "Want",
    "graph_request",
    "parse_resources",
]
