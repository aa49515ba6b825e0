"""Hand-off latency histograms (fluxes/proc/hops.py): buckets, sums, percentiles."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.proc import hops


@pytest.fixture(autouse=True)
def _fresh() -> None:
    hops.reset()


@given(st.floats(min_value=2e-6, max_value=100.0))
def test_a_bucket_stands_for_its_latency_within_five_percent(seconds: float) -> None:
    assert abs(hops.value(hops.bucket(seconds)) - seconds) <= 0.05 * seconds


@pytest.mark.parametrize("seconds", [0.0, -1.0, math.nan, math.inf, -math.inf, 1e300])
def test_odd_latencies_land_in_the_end_buckets_without_raising(seconds: float) -> None:
    hops.record("x", seconds)
    [(index, n)] = hops.snapshot()["x"].items()
    assert n == 1 and int(index) in (0, 64 * hops.PER_OCTAVE)


def test_percentiles_of_a_known_distribution() -> None:
    for _ in range(98):
        hops.record(hops.EXEC_TO_JM, 0.0005)
    hops.record(hops.EXEC_TO_JM, 0.004)
    hops.record(hops.EXEC_TO_JM, 0.008)
    counts = hops.merge([hops.snapshot()])[hops.EXEC_TO_JM]
    assert hops.percentile(counts, 0.5) == pytest.approx(0.0005, rel=0.05)
    assert hops.percentile(counts, 0.99) == pytest.approx(0.004, rel=0.05)
    assert hops.percentile(counts, 1.0) == pytest.approx(0.008, rel=0.05)
    assert hops.percentile({}, 0.5) is None


def test_snapshots_add_up_and_subtract_to_what_happened_in_between() -> None:
    hops.record(hops.JM_TO_SCHED, 0.001)
    before = hops.merge([hops.snapshot()])
    hops.record(hops.JM_TO_SCHED, 0.001)
    hops.record(hops.SCHED_TO_JM, 0.002)
    other = {hops.SCHED_TO_JM: {str(hops.bucket(0.002)): 3}, "junk": "x", "bad": {"a": "b"}}
    after = hops.merge([hops.snapshot(), other, "not a snapshot"])
    assert after[hops.SCHED_TO_JM] == {hops.bucket(0.002): 4}
    assert hops.subtract(after, before) == {hops.JM_TO_SCHED: {hops.bucket(0.001): 1},
                                            hops.SCHED_TO_JM: {hops.bucket(0.002): 4}}


def test_record_since_skips_unstamped_entries_and_summary_orders_the_path() -> None:
    hops.record_since(hops.JM_TO_EXEC, [0.0, 99.0, 99.5], now=100.0)
    hops.record("custom", 0.001)
    hops.record(hops.EXEC_TO_JM, 0.001)
    summary = hops.summary(hops.merge([hops.snapshot()]))
    assert list(summary) == [hops.EXEC_TO_JM, hops.JM_TO_EXEC, "custom"]
    assert summary[hops.JM_TO_EXEC]["n"] == 2
    assert summary[hops.JM_TO_EXEC]["p50_us"] == pytest.approx(5e5, rel=0.05)
    assert summary[hops.JM_TO_EXEC]["p99_us"] == pytest.approx(1e6, rel=0.05)
