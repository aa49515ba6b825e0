"""Allocation shapes: one R template, and its encodings, per distinct small allocation.

Building an allocation's R (``ResourceSet.from_ranks`` with hostnames and
properties), then encoding it (JSON for the job hash, the summary for the
annotations, the rank idset and the nodelist for the SUCCESS response), cost
the scheduler about as much as finding the resources: ~60 us a one-core job
(``fluxes bench throughput``, docs/operations.md "Throughput"). A small
machine hands out the same few allocations over and over (a core of a node),
so R is built once per shape, without times, and each allocation gets a copy
with its own start and expiration; the encodings are computed once per
shape. Only small allocations are kept (:data:`MAX_RANKS_CACHED`), at most
:data:`MAX_SHAPES` of them (the cache is emptied when full: it is only a
cache). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

#: Allocations over this many ranks are built each time (rare, and their keys cost).
MAX_RANKS_CACHED = 8
#: Shapes kept at most.
MAX_SHAPES = 8192

#: (rank, cores, gpus) of every rank of an allocation, in rank order, ids as (lo, hi) runs.
ShapeKey = tuple[tuple[int, tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]], ...]


class Shape:
    """One allocation shape: its R template (no times) and encodings, made when asked."""

    __slots__ = ("_doc", "_nodelist", "_ranks", "_summary", "template")

    def __init__(self, template: ResourceSet) -> None:
        self.template = template
        self._doc: dict[str, Any] | None = None
        self._summary: str | None = None
        self._ranks: str | None = None
        self._nodelist: str | None = None

    def rset(self, start: float | None, expiration: float | None) -> ResourceSet:
        """A new R of this shape valid from ``start`` until ``expiration``."""
        out = self.template.copy()
        if start is not None:
            out.starttime = start
        if expiration is not None:
            out.expiration = expiration
        return out

    def dumps(self, start: float | None, expiration: float | None) -> str:
        """What ``self.rset(start, expiration).dumps()`` gives, without building it."""
        doc = self._doc
        if doc is None:
            doc = self._doc = self.template.encode()
        execution = dict(doc["execution"])
        # ResourceSet.encode puts the times last, in this order
        if start is not None:
            execution["starttime"] = start
        if expiration is not None:
            execution["expiration"] = expiration
        return orjson.dumps({"version": doc["version"], "execution": execution}).decode()

    def summary(self) -> str:
        """The R's summary (``rank0/core1``)."""
        if self._summary is None:
            self._summary = self.template.summary()
        return self._summary

    def ranks(self) -> str:
        """The R's ranks as an idset string."""
        if self._ranks is None:
            self._ranks = str(self.template.ranks)
        return self._ranks

    def nodelist(self) -> str:
        """The R's hostlist as a string."""
        if self._nodelist is None:
            self._nodelist = str(self.template.hostlist)
        return self._nodelist


class ShapeCache:
    """The shapes met so far; ``build(parts)`` makes a template for new ones."""

    __slots__ = ("_build", "_shapes")

    def __init__(self, build: Callable[[Mapping[int, tuple[IDSet, IDSet]]], ResourceSet]
                 ) -> None:
        self._build = build
        self._shapes: dict[ShapeKey, Shape] = {}

    def get(self, parts: Mapping[int, tuple[IDSet, IDSet, Any]]) -> Shape | None:
        """The shape of ``parts`` (rank -> (cores, gpus, ...)); None for a large one."""
        if len(parts) > MAX_RANKS_CACHED:
            return None
        key: ShapeKey = tuple((r, tuple(p[0].ranges()), tuple(p[1].ranges()))
                              for r, p in sorted(parts.items()))
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
            shape = self._shapes[key] = Shape(self._build(
                {r: (p[0], p[1]) for r, p in parts.items()}))
        return shape

    def clear(self) -> None:
        """Forget every shape (the inventory's hostnames or properties changed)."""
        self._shapes.clear()
