"""Which task ranks each node of a job runs: the ``taskmap`` shell option (``--taskmap``).

The layout decides how many tasks each rank of R runs; this module decides
their numbers. ``block`` (the default) numbers them in node order (node 0 runs
0..k-1); ``cyclic`` deals them out one at a time round the nodes, ``cyclic:N``
N at a time; ``manual:MAP`` takes an RFC 34 map (``fluxes job taskmap``
prints one), which must give each node as many tasks as the layout does.
The option is ``{"scheme": ..., "value": ...}`` (flux's form) or a string
``SCHEME[:VALUE]``. MPI sees the result through ``PMI_process_mapping``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from fluxes.formats import taskmap

SCHEMES = ("block", "cyclic", "manual")


def parse_taskmap(option: Any) -> tuple[str, str]:
    """(scheme, value) of a ``taskmap`` option; ValueError for anything else."""
    if isinstance(option, str):
        scheme, _sep, value = option.partition(":")
    elif isinstance(option, Mapping):
        got_scheme, got_value = option.get("scheme"), option.get("value", "")
        if not isinstance(got_scheme, str) or not isinstance(got_value, str):
            raise ValueError("taskmap: scheme and value must be strings")
        scheme, value = got_scheme, got_value
    else:
        raise ValueError("taskmap must be a string or {scheme, value}")
    if scheme not in SCHEMES:
        raise ValueError(f"taskmap: unknown scheme {scheme!r} (block, cyclic[:N], "
                         "manual:MAP)")
    if scheme == "cyclic" and value and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"taskmap: cyclic:{value}: the block size must be a number >= 1")
    if scheme == "block" and value:
        raise ValueError("taskmap: block takes no value")
    if scheme == "manual":
        _manual_blocks(value)
    return scheme, value


def _manual_blocks(value: str) -> list[taskmap.Block]:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ValueError("taskmap: manual: not a JSON task map") from None
    raw = doc.get("map") if isinstance(doc, dict) else doc
    if not isinstance(raw, list) or not all(
            isinstance(b, list) and len(b) == 4 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in b)
            for b in raw):
        raise ValueError("taskmap: manual: expected [[nodeid, nnodes, ppn, repeat], ...]")
    return [(b[0], b[1], b[2], b[3]) for b in raw]


def task_order(option: Any, counts: Sequence[int]) -> list[list[int]] | None:
    """Per node (in order), the task ranks it runs, or None for the block order.

    ``counts[n]`` is how many tasks node ``n`` runs; ValueError (the job's
    exec error) for a bad option or a manual map that does not fit them.
    """
    if option is None:
        return None
    scheme, value = parse_taskmap(option)
    if scheme == "block":
        return None
    if scheme == "cyclic":
        return _cyclic(counts, int(value) if value else 1)
    lists = [list(ids) for ids in taskmap.node_tasks(_manual_blocks(value))]
    have = [len(ids) for ids in lists] + [0] * (len(counts) - len(lists))
    if have != list(counts) or sorted(t for ids in lists for t in ids) != list(
            range(sum(counts))):
        raise ValueError(f"taskmap: manual: the map gives the nodes {have} tasks, the job "
                         f"runs {list(counts)}")
    return lists + [[] for _ in range(len(counts) - len(lists))]


def _cyclic(counts: Sequence[int], size: int) -> list[list[int]]:
    """Deal ``size`` task ranks at a time to each node in turn, while it has room."""
    lists: list[list[int]] = [[] for _ in counts]
    task = 0
    total = sum(counts)
    while task < total:
        for node, count in enumerate(counts):
            take = min(size, count - len(lists[node]), total - task)
            if take > 0:
                lists[node].extend(range(task, task + take))
                task += take
    return lists
