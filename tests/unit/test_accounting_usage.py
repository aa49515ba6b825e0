"""Usage folded from journal entries: charges, decay, running jobs, reports over a period,
and the fold in blocks of any size equal to one fold from scratch."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.accounting.usage import (
    Accum,
    Figures,
    JobCharge,
    OpenJob,
    UsageError,
    UsageState,
    decayed_usage,
    held,
    window_usage,
)

H = 100.0
Entry = tuple[int, str, float, dict[str, Any], dict[str, Any]]


def submit(jobid: int, t: float, uid: int = 1001, **extra: Any) -> Entry:
    return (jobid, "submit", t, {"urgency": 16, "userid": uid, "flags": 0, "version": 1},
            {"ncores": 2, "ngpus": 0, "nnodes": 1, **extra})


def life(jobid: int, t_submit: float, t_alloc: float, t_free: float, uid: int = 1001,
         alloc_extra: dict[str, Any] | None = None, **extra: Any) -> list[Entry]:
    return [submit(jobid, t_submit, uid, **extra), (jobid, "validate", t_submit, {}, {}),
            (jobid, "alloc", t_alloc, {}, alloc_extra or {"ranks": "0"}),
            (jobid, "start", t_alloc, {}, {}), (jobid, "finish", t_free, {"status": 0}, {}),
            (jobid, "free", t_free, {}, {}), (jobid, "clean", t_free, {}, {})]


def test_decay_integral_is_exact() -> None:
    assert held(0, 0, H) == 0 and held(5, 3, H) == 0
    assert held(0, 50, 0) == 50  # no decay
    # a full half-life held, as of its end: h/ln2 * (1 - 1/2)
    assert held(0, H, H) == pytest.approx(H / math.log(2) / 2)
    # against a numeric integral of 2**(-(end - s)/h)
    steps = 20000
    numeric = sum(2 ** (-(30 - (i + 0.5) * 30 / steps) / H) for i in range(steps)) * 30 / steps
    assert held(0, 30, H) == pytest.approx(numeric, rel=1e-9)
    # a tiny span loses nothing to cancellation
    assert held(0.0, 1e-9, H) == pytest.approx(1e-9, rel=1e-8)


def test_a_job_is_charged_from_alloc_to_free() -> None:
    state = UsageState(H)
    state.feed_all(life(1, 0.0, 10.0, 110.0, bank="physics"))
    accum = state.accums[(1001, "physics")]
    assert accum.raw == Figures(200.0, 0.0, 100.0) and accum.jobs == 1
    assert accum.t_ref == 110.0
    assert accum.decayed.core_seconds == pytest.approx(2 * held(10, 110, H))
    # a half-life later it counts half
    assert accum.at(110.0 + H, H).core_seconds == pytest.approx(accum.decayed.core_seconds / 2)
    assert state.open == {}
    assert state.take_changes().charges == [
        JobCharge(1, 1001, "physics", "", 10.0, 110.0, 2, 0, 1)]


def test_the_alloc_entry_gives_the_counts_of_r_when_it_carries_them() -> None:
    state = UsageState(0.0)
    state.feed_all(life(1, 0.0, 0.0, 10.0, alloc_extra={"ranks": "0-3", "ncores": 64,
                                                         "ngpus": 8}))
    assert state.accums[(1001, "")].raw == Figures(640.0, 80.0, 40.0)


def test_a_staged_job_is_charged_from_its_start() -> None:
    """A job staged behind a running one (alloc extra ``staged``) holds its cores only
    once that one ends: charged from its start; a staged job killed before it starts is
    never charged; the flag survives storage."""
    state = UsageState(0.0)
    state.feed_all([submit(1, 0.0), (1, "alloc", 1.0, {}, {"ranks": "0", "staged": True})])
    assert state.open[1].staged
    stored = OpenJob.from_obj(orjson.loads(orjson.dumps(state.open[1].to_obj())))
    assert stored == state.open[1]
    state.feed_all([(1, "start", 4.0, {}, {}), (1, "finish", 5.0, {"status": 0}, {}),
                    (1, "free", 5.0, {}, {}), (1, "clean", 5.0, {}, {})])
    assert state.accums[(1001, "")].raw == Figures(2.0, 0.0, 1.0)
    assert state.take_changes().charges[0].t_alloc == 4.0
    # not staged: from its alloc, as before (a start entry changes nothing)
    plain = UsageState(0.0)
    plain.feed_all([*life(2, 0.0, 1.0, 5.0)[:3], (2, "start", 4.0, {}, {}),
                    (2, "free", 5.0, {}, {})])
    assert plain.accums[(1001, "")].raw == Figures(8.0, 0.0, 4.0)
    with pytest.raises(UsageError):
        plain.feed_all([submit(3, 0.0), (3, "alloc", 1.0, {}, {"staged": "yes"})])


def test_decayed_usage_adds_running_jobs_and_sums_several_charges() -> None:
    state = UsageState(H)
    state.feed_all(life(1, 0.0, 0.0, 50.0))
    state.feed_all([submit(2, 60.0), (2, "alloc", 60.0, {}, {"ranks": "0"})])
    now = 100.0
    got = decayed_usage(state.accums, state.open.values(), H, now)
    expected = 2 * held(0, 50, H) * 2 ** (-50 / H) + 2 * held(60, 100, H)
    assert got[(1001, "")].core_seconds == pytest.approx(expected)
    # no decay: plain core-seconds
    plain = UsageState(0.0)
    plain.feed_all(life(1, 0.0, 0.0, 50.0) + life(3, 0.0, 50.0, 80.0))
    assert plain.accums[(1001, "")] == Accum(Figures(160.0, 0.0, 80.0),
                                             Figures(160.0, 0.0, 80.0), 80.0, 2)


def test_an_entry_stamped_before_the_last_charge_is_decayed_to_it() -> None:
    late, early = UsageState(H), UsageState(H)
    late.feed_all(life(1, 0.0, 0.0, 200.0) + life(2, 0.0, 0.0, 100.0))
    early.feed_all(life(2, 0.0, 0.0, 100.0) + life(1, 0.0, 0.0, 200.0))
    a, b = late.accums[(1001, "")], early.accums[(1001, "")]
    assert a.t_ref == b.t_ref == 200.0
    assert a.decayed.core_seconds == pytest.approx(b.decayed.core_seconds)


def test_pending_jobs_change_bank_and_queue_with_jobspec_update() -> None:
    state = UsageState(0.0)
    state.feed_all([submit(1, 0.0, queue="batch"),
                    (1, "jobspec-update", 1.0, {"attributes.system.bank": "chem",
                                                "attributes.system.queue": "debug"}, {})])
    assert (state.open[1].bank, state.open[1].queue) == ("chem", "debug")
    state.feed_all([(1, "alloc", 2.0, {}, {}),
                    (1, "jobspec-update", 3.0, {"attributes.system.bank": "x"}, {})])
    assert state.open[1].bank == "chem"  # a running job's bank no longer changes


def test_the_pending_jobs_of_one_submission_share_one_record() -> None:
    """Equal pending jobs (issue 26: memory per pending job) share one open job; a change
    to one of them is its own, never its neighbours'."""
    state = UsageState(0.0)
    state.feed_all([submit(j, 5.0, queue="batch") for j in (1, 2, 3, 4)])
    assert state.open[1] is state.open[2] is state.open[3] is state.open[4]
    state.feed_all([(2, "alloc", 6.0, {}, {"ranks": "0-1"}),
                    (3, "jobspec-update", 6.0, {"attributes.system.queue": "debug"}, {})])
    assert (state.open[1].t_alloc, state.open[1].nnodes, state.open[1].queue) == \
        (None, 1, "batch")
    assert (state.open[2].t_alloc, state.open[2].nnodes) == (6.0, 2)
    assert state.open[3].queue == "debug" and state.open[3].t_alloc is None
    # loaded from storage, they share again
    loaded = UsageState(0.0, {}, {j: OpenJob.from_obj(orjson.loads(orjson.dumps(
        job.to_obj()))) for j, job in state.open.items()})
    assert loaded.open[1] is loaded.open[4] is not loaded.open[3]
    assert loaded.open == state.open and loaded.active == state.active


@pytest.mark.parametrize("entry", [
    (1, "submit", 0.0, {"urgency": 16}, {}),
    (1, "submit", 0.0, {"userid": "1001"}, {}),
    (1, "submit", 0.0, {"userid": 1}, {"ncores": -1}),
    (1, "submit", 0.0, {"userid": 1}, {"bank": 5}),
])
def test_malformed_entries_raise_and_change_nothing(entry: Entry) -> None:
    state = UsageState(H)
    state.feed_all([submit(9, 0.0)])
    state.take_changes()
    with pytest.raises(UsageError):
        state.feed(*entry)
    with pytest.raises(UsageError):
        state.feed(9, "alloc", 1.0, {}, {"ranks": "3-1"})
    assert state.open == {9: OpenJob(1001, "", "", 2, 0, 1, 0.0)}
    assert state.take_changes().opened == {}


def test_entries_of_unknown_jobs_and_other_events_are_passed_over() -> None:
    state = UsageState(H)
    state.feed_all([(5, "alloc", 0.0, {}, {}), (5, "free", 1.0, {}, {}),
                    (5, "priority", 1.0, {"priority": 3}, {})])
    assert state.accums == {} and state.open == {}


def test_a_job_canceled_while_pending_is_never_charged() -> None:
    state = UsageState(H)
    state.feed_all([submit(1, 0.0), (1, "exception", 1.0, {"type": "cancel"}, {}),
                    (1, "clean", 1.0, {}, {})])
    assert state.accums == {} and state.open == {}


def test_window_usage_takes_each_allocation_s_part_of_the_period() -> None:
    charges = [JobCharge(1, 1, "a", "", 0.0, 100.0, 2, 1, 1),
               JobCharge(2, 1, "a", "", 150.0, 150.0, 4, 0, 1),
               JobCharge(3, 2, "b", "", 300.0, 400.0, 1, 0, 1)]
    running = [OpenJob(2, "b", "", 1, 0, 1, 0.0, 450.0), OpenJob(2, "b", "", 1, 0, 1, 0.0)]
    got = window_usage(charges, running, 50.0, 350.0, 500.0)
    assert got[(1, "a")].figures == Figures(100.0, 50.0, 50.0) and got[(1, "a")].jobs == 2
    assert got[(2, "b")].figures == Figures(50.0, 0.0, 50.0) and got[(2, "b")].jobs == 1
    # adjacent periods add up to the whole, and count every job once
    whole = window_usage(charges, running, 0.0, 1000.0, 500.0)
    parts = [window_usage(charges, running, lo, hi, 500.0) for lo, hi in
             ((0.0, 150.0), (150.0, 420.0), (420.0, 1000.0))]
    for key, total in whole.items():
        assert sum(p[key].figures.core_seconds for p in parts if key in p) == \
            pytest.approx(total.figures.core_seconds)
        assert sum(p[key].jobs for p in parts if key in p) == total.jobs
    assert whole[(2, "b")].figures.core_seconds == 150.0  # the running job up to now


# ---------------------------------------------------------------- blocks == one fold


@st.composite
def journals(draw: st.DrawFn) -> list[Entry]:
    """Several jobs' entries interleaved, with clocks that need not agree, some jobs
    canceled, some still running, and a few malformed entries."""
    streams: list[list[Entry]] = []
    for jobid in range(1, draw(st.integers(1, 8)) + 1):
        t0 = draw(st.floats(0, 500))
        times = sorted(draw(st.lists(st.floats(0, 300), min_size=4, max_size=4)))
        uid = draw(st.sampled_from([1, 2, 3]))
        bank = draw(st.sampled_from(["", "a", "b"]))
        job = [submit(jobid, t0, uid, bank=bank, ncores=draw(st.integers(1, 64)),
                      ngpus=draw(st.integers(0, 4)))]
        fate = draw(st.sampled_from(["done", "running", "canceled", "pending", "moved"]))
        if fate == "moved":
            job.append((jobid, "jobspec-update", t0, {"attributes.system.bank": "c"}, {}))
            fate = "done"
        if fate == "canceled":
            job += [(jobid, "exception", t0 + times[0], {"type": "cancel"}, {}),
                    (jobid, "clean", t0 + times[1], {}, {})]
        elif fate in ("done", "running"):
            skew = draw(st.floats(-5, 5))
            job.append((jobid, "alloc", t0 + times[0] + skew, {},
                        {"ranks": draw(st.sampled_from(["0", "0-3", "1,5"]))}))
            if fate == "done":
                job += [(jobid, "free", t0 + times[2], {}, {}),
                        (jobid, "clean", t0 + times[3], {}, {})]
        if draw(st.booleans()):
            job.insert(1, (jobid, "alloc", t0, {}, {"ranks": "bad"}))  # refused, passed over
        streams.append(job)
    out: list[Entry] = []
    while any(streams):
        pick = draw(st.sampled_from([s for s in streams if s]))
        out.append(pick.pop(0))
    return out


def fold(entries: list[Entry], state: UsageState) -> list[JobCharge]:
    for entry in entries:
        try:
            state.feed(*entry)
        except UsageError:
            pass
    return state.take_changes().charges


def stored(state: UsageState) -> UsageState:
    """The state as the store keeps it: every record through its JSON form."""
    return UsageState(state.half_life,
                      {k: Accum.from_obj(orjson.loads(orjson.dumps(a.to_obj())))
                       for k, a in state.accums.items()},
                      {j: OpenJob.from_obj(orjson.loads(orjson.dumps(o.to_obj())))
                       for j, o in state.open.items()})


@settings(max_examples=200, deadline=None)
@given(journals(), st.lists(st.integers(1, 10), min_size=1, max_size=30),
       st.sampled_from([0.0, 60.0, 3600.0]))
def test_folding_in_blocks_with_stores_between_equals_one_fold(
        entries: list[Entry], sizes: list[int], half_life: float) -> None:
    whole = UsageState(half_life)
    all_charges = fold(entries, whole)
    state = UsageState(half_life)
    charges: list[JobCharge] = []
    i = 0
    for size in sizes * (len(entries) + 1):
        if i >= len(entries):
            break
        charges += fold(entries[i:i + size], state)
        state = stored(state)
        i += size
    assert state.accums == whole.accums  # exactly: the same operations in the same order
    assert state.open == whole.open
    assert charges == all_charges


def scratch_counts(state: UsageState) -> dict[tuple[int, str], int]:
    """Active jobs per association counted from scratch from the open jobs."""
    out: dict[tuple[int, str], int] = {}
    for job in state.open.values():
        out[job.key] = out.get(job.key, 0) + 1
    return out


@settings(max_examples=200, deadline=None)
@given(journals(), st.lists(st.integers(1, 10), min_size=1, max_size=30))
def test_active_counts_written_per_block_equal_a_count_from_scratch(
        entries: list[Entry], sizes: list[int]) -> None:
    state = UsageState(60.0)
    written: dict[tuple[int, str], int] = {}  # what the store holds: changed keys only
    i = 0
    for size in sizes * (len(entries) + 1):
        if i >= len(entries):
            break
        for entry in entries[i:i + size]:
            try:
                state.feed(*entry)
            except UsageError:
                pass
        for key, count in state.take_changes().active.items():
            if count:
                written[key] = count
            else:
                written.pop(key, None)
        assert written == state.active == scratch_counts(state)
        state = stored(state)  # a restarted worker counts its loaded open jobs again
        assert state.active == written
        i += size


def test_a_pending_job_moved_to_another_bank_counts_there() -> None:
    state = UsageState(60.0)
    state.feed(*submit(1, 0.0, 7, bank="a"))
    state.feed(*submit(2, 0.0, 7, bank="a"))
    assert state.active == {(7, "a"): 2}
    state.feed(2, "jobspec-update", 1.0, {"attributes.system.bank": "b"}, {})
    assert state.active == {(7, "a"): 1, (7, "b"): 1}
    assert state.take_changes().active == {(7, "a"): 1, (7, "b"): 1}
    state.feed(1, "clean", 2.0, {}, {})
    assert state.active == {(7, "b"): 1}


def test_clear_usage_leaves_exactly_the_usage_since_the_clear() -> None:
    from fluxes.domain.accounting.usage import decay, minus_cleared

    h = 60.0
    # 4 cores held from 0 to 100; clear-usage at 50 found the running part so far
    total_at_200 = Figures(4 * held(0, 100, h) * decay(100, h), 0.0, 0.0)
    found_at_50 = (4 * held(0, 50, h), 0.0, 0.0)
    left = minus_cleared({(1, "a"): total_at_200, (2, "a"): Figures(5.0, 0.0, 0.0)},
                         {(1, "a"): (50.0, h, found_at_50)}, 200.0, h)
    assert left[(1, "a")].core_seconds == pytest.approx(4 * held(50, 100, h) * decay(100, h))
    assert left[(2, "a")] == Figures(5.0, 0.0, 0.0)  # not cleared
    # a clear under another half-life no longer compares: passed over
    assert minus_cleared({(1, "a"): total_at_200}, {(1, "a"): (50.0, 30.0, found_at_50)},
                         200.0, h)[(1, "a")] == total_at_200
    # never below zero (float rounding)
    assert minus_cleared({(1, "a"): Figures(1.0, 0.0, 0.0)}, {(1, "a"): (0.0, 0.0, (
        1.0 + 1e-12, 0.0, 0.0))}, 5.0, 0.0)[(1, "a")].core_seconds == 0.0


def test_records_carry_the_project_and_read_those_written_before_it() -> None:
    charge = JobCharge(7, 1, "a", "q", 1.0, 2.0, 4, 0, 1, "bronze")
    assert JobCharge.from_obj(7, charge.to_obj()) == charge
    old = JobCharge(7, 1, "a", "q", 1.0, 2.0, 4, 0, 1)
    assert len(old.to_obj()) == 8 and JobCharge.from_obj(7, old.to_obj()) == old
    with pytest.raises(ValueError):
        JobCharge.from_obj(7, [*charge.to_obj(), "extra"])
    job = OpenJob(1, "a", "q", 4, 0, 1, 0.0, 1.0, "bronze")
    assert OpenJob.from_obj(job.to_obj()) == job
    assert len(job._replace(project="").to_obj()) == 8  # trailing defaults left out
    assert job._replace(t_alloc=None, project="").to_obj() == [1, "a", "q", 4, 0, 1, 0.0]
    # the object form stored before still reads
    assert OpenJob.from_obj({"u": 1, "b": "a", "q": "q", "c": 4, "g": 0, "n": 1, "s": 0.0,
                             "a": 1.0, "p": "bronze"}) == job
    assert OpenJob.from_obj({"u": 1, "b": "a", "q": "q", "c": 4, "g": 0, "n": 1, "s": 0.0,
                             "a": None}) == job._replace(t_alloc=None, project="")
    for bad in ([1, "a"], [*job.to_obj(), 0.0, "extra"], {"u": 1}):
        with pytest.raises(ValueError):
            OpenJob.from_obj(bad)
    state = UsageState(0.0)
    state.feed(9, "submit", 0.0, {"userid": 1}, {"bank": "a", "project": "bronze"})
    state.feed(9, "alloc", 1.0, {}, {"ranks": "0"})
    state.feed(9, "free", 3.0, {}, {})
    [charged] = state.take_changes().charges
    assert charged.project == "bronze"


def test_decayed_since_counts_the_part_after_since() -> None:
    from fluxes.domain.accounting.usage import decay, decayed_since

    h = 60.0
    charges = [JobCharge(1, 1, "a", "", 0.0, 100.0, 4, 0, 1),
               JobCharge(2, 1, "a", "", 0.0, 40.0, 4, 0, 1)]  # all before: nothing
    running = [OpenJob(2, "a", "", 1, 0, 1, 0.0, 120.0)]
    got = decayed_since(charges, running, 50.0, 200.0, h)
    assert got[(1, "a")].core_seconds == pytest.approx(4 * held(50, 100, h) * decay(100, h))
    assert got[(2, "a")].core_seconds == pytest.approx(held(120, 200, h))


def test_records_keep_the_submit_time_and_requested_duration() -> None:
    # view-job-records -d/-e/-D filter on them; records from before them read as 0
    state = UsageState(0.0)
    state.feed(9, "submit", 5.0, {"userid": 1}, {"bank": "a", "duration": 600.0})
    state.feed(9, "jobspec-update", 6.0, {"attributes.system.duration": 120.0}, {})
    state.feed(9, "alloc", 10.0, {}, {"ranks": "0"})
    state.feed(9, "free", 40.0, {}, {})
    [charged] = state.take_changes().charges
    assert (charged.t_submit, charged.duration) == (5.0, 120.0)
    assert (charged.actual_duration, charged.duration_delta) == (30.0, 90.0)
    assert JobCharge.from_obj(9, charged.to_obj()) == charged
    job = OpenJob(1, "a", "q", 4, 0, 1, 0.0, 1.0, duration=60.0)
    assert OpenJob.from_obj(job.to_obj()) == job
    # a malformed duration extra is no limit, not a fold error
    state.feed(10, "submit", 5.0, {"userid": 1}, {"duration": "soon"})
    assert state.open[10].duration == 0.0


def test_view_job_records_duration_filters() -> None:
    from fluxes.domain.accounting.records import DurationTest, job_records

    assert DurationTest.parse("< 60") == DurationTest("<", 60.0)
    assert DurationTest.parse(">=1.5") == DurationTest(">=", 1.5)
    for bad in ("60", "<", "< soon", "=> 5", "< inf"):
        with pytest.raises(ValueError):
            DurationTest.parse(bad)
    short = JobCharge(1, 1, "a", "", 0.0, 20.0, 1, 0, 1, "", 0.0, 60.0)   # ran 20 of 60
    long = JobCharge(2, 1, "a", "", 0.0, 500.0, 1, 0, 1, "", 0.0, 3600.0)  # 500 of 3600

    def ids(requested: tuple[str, ...] = (), actual: tuple[str, ...] = (),
            delta: tuple[str, ...] = ()) -> list[int]:
        return [c.jobid for c in job_records(
            [short, long], requested=[DurationTest.parse(t) for t in requested],
            actual=[DurationTest.parse(t) for t in actual],
            delta=[DurationTest.parse(t) for t in delta])]

    assert ids(requested=("< 120",)) == [1]
    assert ids(requested=("> 60", "< 7200")) == [2]
    assert ids(actual=("= 20",)) == [1]
    assert ids(delta=("> 1000",)) == [2]
    assert ids(requested=("<= 60",), actual=("> 30",)) == []


def test_usage_per_project_over_a_period() -> None:
    from fluxes.domain.accounting.usage import project_usage

    charges = [JobCharge(1, 1, "a", "", 0.0, 100.0, 2, 0, 1, "bronze"),
               JobCharge(2, 2, "b", "", 50.0, 150.0, 1, 0, 1, "bronze"),
               JobCharge(3, 1, "a", "", 0.0, 10.0, 1, 0, 1)]  # from before projects
    running = [OpenJob(3, "a", "", 4, 0, 1, 0.0, 100.0, "gold"),
               OpenJob(3, "a", "", 4, 0, 1, 0.0, None, "gold")]  # pending: nothing
    got = project_usage(charges, running, 50.0, 200.0, 120.0)
    assert set(got) == {"bronze", "gold"}  # job 3 ended before the period
    assert got["bronze"].jobs == 2 and got["bronze"].figures.core_seconds == 2 * 50 + 100
    assert got["gold"].jobs == 1 and got["gold"].figures.core_seconds == 4 * 20
    assert "" in project_usage(charges, [], 0.0, 200.0, 120.0)


def test_view_job_records_format_has_a_header_in_each_fields_width() -> None:
    from fluxes.cli.cmd_account import _format_lines
    from fluxes.cli.util import UsageError

    rows = [{"userid": 5001, "t_inactive": 1750178788.3331, "jobid": "ƒ2abc"}]
    assert _format_lines("{userid:<8} || {t_inactive:<12.3f}", rows) == [
        "userid   || t_inactive  ", "5001     || 1750178788.333"]
    assert _format_lines("{jobid:>8}|{userid:08d}", rows) == [
        "   jobid|  userid", "   ƒ2abc|00005001"]
    for bad in ("{nosuch}", "{userid:q}", "{userid"):
        with pytest.raises(UsageError):
            _format_lines(bad, rows)


def test_alloc_ranks_count_the_same_short_long_and_again() -> None:
    """Rank sets are counted once each (a short one is kept): the same count every
    time, a long one too, and a bad one refused every time."""
    long_ranks = ",".join(str(r) for r in range(0, 400, 2))
    assert len(long_ranks) > 64
    for ranks, nodes in (("0-3", 4), ("0-3", 4), ("1,5", 2), (long_ranks, 200),
                         (long_ranks, 200)):
        state = UsageState(H)
        state.feed_all([submit(9, 0.0), (9, "alloc", 1.0, {}, {"ranks": ranks})])
        assert state.open[9].nnodes == nodes
    for _ in range(2):
        state = UsageState(H)
        state.feed_all([submit(9, 0.0)])
        with pytest.raises(UsageError):
            state.feed(9, "alloc", 1.0, {}, {"ranks": "2-1"})
