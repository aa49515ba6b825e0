"""The hot standby scheduler's bookkeeping (fluxes/domain/sched/standby.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.sched.standby import Mirror, reconcile


def test_allocated_jobs_are_wanted_until_read_or_freed() -> None:
    mirror = Mirror()
    assert mirror.apply([(1, True), (2, True), (3, True), (2, False)], held=set()) == []
    assert mirror.take(1) == [1]
    assert mirror.take(10) == [3]
    assert mirror.take(10) == []


def test_a_freed_job_the_pool_holds_is_to_be_freed() -> None:
    mirror = Mirror()
    assert mirror.apply([(7, False), (8, False)], held={7}) == [7]
    # a job the pool holds already is not read again
    assert mirror.apply([(7, True)], held={7}) == [] and mirror.take(5) == []


def test_reconcile_frees_what_the_reply_does_not_name_and_adopts_the_rest() -> None:
    stale, missing = reconcile([1, 2, 3], [3, 4, 2, 5, 4])
    assert stale == [1] and missing == [4, 5]


@given(st.sets(st.integers(0, 50)), st.lists(st.integers(0, 50)))
def test_reconciled_pool_is_the_reply(pooled: set[int], held: list[int]) -> None:
    stale, missing = reconcile(pooled, held)
    assert (pooled - set(stale)) | set(missing) == set(held)
    assert not set(stale) & set(held) and not set(missing) & pooled
