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


def from_nodes(nodes: Sequence[int]) -> list[Block]:
    """The RFC 34 map of any placement: ``nodes[t]`` is the node id of task rank ``t``.

    Runs of consecutive tasks on one node make (node, 1, ppn) entries, runs of
    those with the same ppn on consecutive nodes merge into one entry, and an
    entry equal to the one before it repeats it (a cyclic placement of 2x2 is
    ``[[0, 2, 1, 2]]``, a block one ``[[0, 2, 2, 1]]``).
    """
    if not nodes or any(n < 0 for n in nodes):
        raise ValueError("a task map needs at least one task and no negative node id")
    runs: list[list[int]] = []  # [node, count]
    for node in nodes:
        if runs and runs[-1][0] == node:
            runs[-1][1] += 1
        else:
            runs.append([node, 1])
    triples: list[list[int]] = []  # [start, nnodes, ppn]
    for node, ppn in runs:
        last = triples[-1] if triples else None
        if last is not None and last[2] == ppn and last[0] + last[1] == node:
            last[1] += 1
        else:
            triples.append([node, 1, ppn])
    blocks: list[Block] = []
    for start, nnodes, ppn in triples:
        if blocks and blocks[-1][:3] == (start, nnodes, ppn):
            blocks[-1] = (start, nnodes, ppn, blocks[-1][3] + 1)
        else:
            blocks.append((start, nnodes, ppn, 1))
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
    """PMI-1's ``PMI_process_mapping`` (RFC 13: repeated blocks spelt out)."""
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
