"""RFC 34 task maps (fluxes/formats/taskmap.py), on the RFC's own test vectors."""

from __future__ import annotations

import pytest

from fluxes.formats import taskmap

#: raw task map -> Flux task map, from RFC 34's test vectors
VECTORS = [
    ("0", [[0, 1, 1, 1]]),
    ("0;1", [[0, 2, 1, 1]]),
    ("0-1", [[0, 1, 2, 1]]),
    ("0-1;2-3", [[0, 2, 2, 1]]),
    ("0,2;1,3", [[0, 2, 1, 2]]),
    ("0-3;4-7;8-11;12-15", [[0, 4, 4, 1]]),
    ("0,4,8,12;1,5,9,13;2,6,10,14;3,7,11,15", [[0, 4, 1, 4]]),
    ("0-1,8-9;2-3,10-11;4-5,12-13;6-7,14-15", [[0, 4, 2, 2]]),
    ("0-1;2-3;4-5;6-7;8-11;12-15", [[0, 4, 2, 1], [4, 2, 4, 1]]),
    ("0,6;1,7;2,8;3,9;4,10,12,14;5,11,13,15", [[0, 6, 1, 2], [4, 2, 1, 2]]),
]


@pytest.mark.parametrize(("raw", "blocks"), VECTORS)
def test_raw_form_of_the_rfc_vectors(raw: str, blocks: list[list[int]]) -> None:
    assert taskmap.raw([tuple(b) for b in blocks]) == raw  # type: ignore[misc]


@pytest.mark.parametrize(("counts", "blocks"), [
    ([1], [(0, 1, 1, 1)]), ([2, 2], [(0, 2, 2, 1)]),
    ([2, 2, 2, 2, 4, 4], [(0, 4, 2, 1), (4, 2, 4, 1)]),
    ([3, 1, 1], [(0, 1, 3, 1), (1, 2, 1, 1)]), ([2, 0, 2], [(0, 1, 2, 1), (1, 1, 0, 1),
                                                             (2, 1, 2, 1)]),
])
def test_block_maps_from_counts(counts: list[int], blocks: list[taskmap.Block]) -> None:
    assert taskmap.block_map(counts) == blocks
    per_node = [len(ids) for ids in taskmap.node_tasks(blocks)]
    assert per_node == counts


def test_other_forms() -> None:
    blocks = taskmap.block_map([2, 2, 1])
    assert taskmap.encode(blocks) == '{"version":1,"map":[[0,2,2,1],[2,1,1,1]]}'
    assert taskmap.raw(blocks) == "0-1;2-3;4"
    assert taskmap.pmi(blocks) == "(vector,(0,2,2),(2,1,1))"
    assert [taskmap.node_of(blocks, t) for t in range(5)] == [0, 0, 1, 1, 2]
    with pytest.raises(ValueError, match="task 5 is not in the task map"):
        taskmap.node_of(blocks, 5)


@pytest.mark.parametrize("counts", [[], [0], [1, -1]])
def test_bad_counts(counts: list[int]) -> None:
    with pytest.raises(ValueError, match="at least one task"):
        taskmap.block_map(counts)
