"""RFC 34 task maps: which node (by its index in the job's R) runs which task ranks.

A map is a list of blocks ``[nodeid, nnodes, ppn, repeat]``. fluxes places a
job's tasks in node order (block distribution), so a map here is built from
the number of tasks on each node; the other forms (raw idsets, PMI-1's
``PMI_process_mapping`` and one node id per task) are derived from it.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from fluxes.formats.idset import IDSet

Block = tuple[int, int, int, int]


def block_map(counts: Sequence[int]) -> list[Block]:
    """The RFC 34 map of tasks dealt out in node order, ``counts[n]`` on node ``n``:
    runs of nodes with the same count make one block."""
    if not counts or any(n < 0 for n in counts) or not any(counts):
        raise ValueError("a task map needs at least one task and no negative count")
    blocks: list[Block] = []
    for node, ppn in enumerate(counts):
        if blocks and blocks[-1][2] == ppn and blocks[-1][0] + blocks[-1][1] == node:
            start, nnodes, _ppn, _rep = blocks[-1]
            blocks[-1] = (start, nnodes + 1, ppn, 1)
        else:
            blocks.append((node, 1, ppn, 1))
    return blocks


def encode(blocks: Sequence[Block]) -> str:
    """The map wrapped in its version object, as flux prints it."""
    return orjson.dumps({"version": 1, "map": [list(b) for b in blocks]}).decode()


def node_tasks(blocks: Sequence[Block]) -> list[IDSet]:
    """Per node id (in order), the task ranks it runs."""
    per_node: dict[int, list[int]] = {}
    task = 0
    for start, nnodes, ppn, repeat in blocks:
        for _round in range(repeat):  # a block repeats itself before the next one
            for node in range(start, start + nnodes):
                per_node.setdefault(node, []).extend(range(task, task + ppn))
                task += ppn
    return [IDSet(per_node.get(node, [])) for node in range(max(per_node, default=-1) + 1)]


def raw(blocks: Sequence[Block]) -> str:
    """RFC 34's raw form: each node's task idset, in node order, ``;``-separated."""
    return ";".join(str(ids) for ids in node_tasks(blocks))


def pmi(blocks: Sequence[Block]) -> str:
    """PMI-1's ``PMI_process_mapping`` (a block map has no repeats to spell out)."""
    parts = []
    for start, nnodes, ppn, repeat in blocks:
        parts += [f"({start},{nnodes},{ppn})"] * repeat
    return "(vector," + ",".join(parts) + ")"


def node_of(blocks: Sequence[Block], task: int) -> int:
    """The node id that runs task rank ``task``; ValueError when no node does."""
    for node, ids in enumerate(node_tasks(blocks)):
        if task in ids:
            return node
    raise ValueError(f"task {task} is not in the task map")
