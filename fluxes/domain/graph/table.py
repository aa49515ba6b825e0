"""An instance's resources as a graph: the ``[resource]`` keys that give one, and the pool.

``[resource]`` may describe the resources as a graph instead of
``config`` entries or an R ``path``:

* ``graph = "FILE"``: a JGF document (or an R whose ``scheduling`` key
  holds one) or a GRUG GraphML recipe;
* ``graph-format = "jgf" | "grug"``: how to read it (default: ``grug`` for
  ``.graphml`` / ``.xml`` files, else ``jgf``);
* or ``graph-recipe = "cluster[1] -> rack[2] -> node[4] -> core[16], gpu[2]"``:
  a recipe written inline (:func:`~fluxes.domain.graph.recipe.parse_recipe`).

``fluxes start`` and ``fluxes admin init`` record the graph itself, as JGF,
under the table's ``scheduling`` key (what RFC 20's ``scheduling`` key of an
R holds), instead of the file name or recipe (:func:`recorded_table`): every
scheduler replica and every ingest then reads the very same graph from
Redis, wherever it runs. :func:`graph_of_table` reads either form;
:func:`pool_of_table` gives the scheduler its pool (a
:class:`~fluxes.domain.graph.pool.GraphPool` when there is a graph, else
today's :class:`~fluxes.domain.sched.pool.ResourcePool`), chosen once.

Reading the file is the only I/O here, as for ``resource.path``
(:meth:`Inventory.from_table <fluxes.domain.sched.inventory.Inventory.from_table>`).
Every problem is a ConfigError naming the key, in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.jgf import MAX_JGF_BYTES, load_jgf, read_jgf, write_jgf
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recipe import generate, parse_recipe
from fluxes.domain.graph.recovery import inventory_of
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.errors import ConfigError

__all__ = ["FORMATS", "GRAPH_KEYS", "graph_of_table", "has_graph", "inventory_of_graph_table",
           "pool_of_table", "recorded_table"]

#: Graph file formats of ``resource.graph-format``.
FORMATS: Final = ("jgf", "grug")
#: The ``[resource]`` keys that describe a graph (``scheduling``: as recorded).
GRAPH_KEYS: Final = ("graph", "graph-format", "graph-recipe", "scheduling")
#: Keys that describe the resources another way: none of them may come with a graph.
_OTHER: Final = ("config", "path")


def has_graph(table: Mapping[str, Any]) -> bool:
    """Whether a ``[resource]`` table (as configured or recorded) describes a graph."""
    return any(key in table for key in GRAPH_KEYS)


def _format_of(table: Mapping[str, Any], path: str) -> str:
    """The ``graph-format`` given, else the one the file name suggests."""
    fmt = table.get("graph-format")
    if fmt is None:
        return "grug" if path.lower().endswith((".graphml", ".xml")) else "jgf"
    if fmt not in FORMATS:
        raise ConfigError(f"resource.graph-format: expected one of {', '.join(FORMATS)}, "
                          f"got {fmt!r:.40}")
    return str(fmt)


def _check_alone(table: Mapping[str, Any]) -> None:
    """ConfigError when a graph comes with ``config`` entries or an R ``path``."""
    for key in _OTHER:
        if key in table:
            raise ConfigError(f"resource.graph: cannot be given with resource.{key} "
                              "(the graph describes every resource)")
    if "graph-format" in table and "graph" not in table:
        raise ConfigError("resource.graph-format: needs resource.graph (the file to read)")
    if "graph-recipe" in table and "graph" in table:
        raise ConfigError("resource.graph-recipe: cannot be given with resource.graph")


def _read_file(table: Mapping[str, Any]) -> ResourceGraph:
    """The graph of ``resource.graph`` (a file) in its ``graph-format``."""
    path = table["graph"]
    if not isinstance(path, str) or not path or "\0" in path:
        raise ConfigError("resource.graph: expected the path of a JGF or GRUG file")
    fmt = _format_of(table, path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JGF_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"resource.graph: cannot read {path}: "
                          f"{exc.strerror or exc}") from None
    try:
        return load_grug(data) if fmt == "grug" else load_jgf(data)
    except (ValueError, RecursionError) as exc:
        # RecursionError: a document nested deeper than the parser goes
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"resource.graph: {path} ({fmt}): {first}") from None


def _from_recipe(text: object) -> ResourceGraph:
    """The graph of ``resource.graph-recipe``."""
    if not isinstance(text, str):
        raise ConfigError("resource.graph-recipe: expected a recipe such as "
                          "\"cluster[1] -> rack[2] -> node[4] -> core[16]\"")
    try:
        return generate(parse_recipe(text))
    except ValueError as exc:
        raise ConfigError(f"resource.graph-recipe: {exc}") from None


def graph_of_table(table: Mapping[str, Any]) -> ResourceGraph | None:
    """The graph a ``[resource]`` table describes (recorded JGF or a file); None if none.

    A recorded ``scheduling`` key wins over a ``graph`` file name (the
    record is what every replica shares). ConfigError naming the key.
    """
    if not has_graph(table):
        return None
    _check_alone(table)
    if "scheduling" in table:
        try:
            graph = read_jgf(table["scheduling"])
        except (ValueError, RecursionError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"resource.scheduling: {first}") from None
    elif "graph-recipe" in table:
        graph = _from_recipe(table["graph-recipe"])
    else:
        graph = _read_file(table)
    if not graph.hosts:
        raise ConfigError("resource.graph: the graph has no vertex of type node (no host to "
                          "run tasks on)")
    return graph


def inventory_of_graph_table(table: Mapping[str, Any]) -> Inventory | None:
    """The execution targets of the graph a table describes (None without a graph)."""
    graph = graph_of_table(table)
    if graph is None:
        return None
    inventory = inventory_of(graph)
    if not len(inventory):
        raise ConfigError("resource.graph: no node of the graph holds a core or gpu")
    return inventory


def recorded_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[resource]`` table as the instance records it: a graph file or recipe is
    replaced by the graph itself (JGF under ``scheduling``), so every worker reads the
    same graph."""
    out = dict(table)
    if not ("graph" in out or "graph-recipe" in out) or "scheduling" in out:
        return out
    graph = graph_of_table(out)
    assert graph is not None  # has_graph: a graph key is there
    for key in ("graph", "graph-format", "graph-recipe"):
        out.pop(key, None)
    out["scheduling"] = write_jgf(graph)
    return out


def pool_of_table(table: Mapping[str, Any], clock: Callable[[], float] = time.time
                  ) -> SchedulerPool:
    """The scheduler's pool for a ``[resource]`` table: a graph pool when it describes a
    graph (its R carry their ``scheduling`` subgraph), else today's pool."""
    graph = graph_of_table(table)
    if graph is not None:
        return GraphPool(graph, clock)
    return ResourcePool(Inventory.from_table(table), clock)
