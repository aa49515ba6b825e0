"""Progress records of submit requests: runs of (index, id), decoded and merged."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.jm.request_progress import decode, encode, merge
from fluxes.formats.jobid import MAX_ID


@st.composite
def pairs(draw: st.DrawFn) -> list[tuple[int, int]]:
    indices = sorted(draw(st.sets(st.integers(0, 300), max_size=60)))
    ids = draw(st.lists(st.integers(0, 2**40), min_size=len(indices), max_size=len(indices)))
    return list(zip(indices, ids, strict=True))


@given(pairs())
def test_round_trip(given_pairs: list[tuple[int, int]]) -> None:
    assert decode(encode(given_pairs), 301) == dict(given_pairs)


def test_bulk_ids_in_one_partition_are_one_run() -> None:
    # consecutive FLUIDs, every third in this partition: one run of step 3
    ids = list(range(5000, 5030))
    mine = [(i, j) for i, j in enumerate(ids) if j % 3 == 1]
    assert orjson.loads(encode(mine)) == [[mine[0][0], mine[0][1], 10, 3]]


def test_refused_jobs_break_runs_but_not_the_mapping() -> None:
    mine = [(0, 100), (1, 101), (3, 102), (4, 103)]
    assert decode(encode(mine), 5) == dict(mine)


def test_merge_of_several_records() -> None:
    assert merge([encode([(0, 10), (2, 12)]), encode([(1, 11)])], 3) == {0: 10, 1: 11, 2: 12}


@pytest.mark.parametrize(("blob", "message"), [
    (b"nope", "not JSON"),
    (b"{}", "must be a list"),
    (b"[[1,2,3]]", "4 integers"),
    (b"[[0,1,true,1]]", "4 integers"),
    (b"[[0,1,0,1]]", "count and step"),
    (b"[[0,1,2,0]]", "count and step"),
    (b"[[-1,1,1,1]]", "the request has 3 jobs"),
    (b"[[2,1,2,1]]", "the request has 3 jobs"),
    (orjson.dumps([[0, MAX_ID, 2, 1]]), "out of range"),
])
def test_malformed_records_are_refused(blob: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode(blob, 3)


def test_records_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="disagree on job 0"):
        merge([encode([(0, 10)]), encode([(0, 11)])], 1)
