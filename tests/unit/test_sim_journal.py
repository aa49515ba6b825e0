"""The journal export format: a simulated journal replays, and re-simulates the same."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import orjson
import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.job.states import JobResult, JobState
from fluxes.sim.engine import Simulation
from fluxes.sim.journal import Writer, decode_line, read_records, record_of_entry, replay
from fluxes.sim.run import load_journal, load_swf
from fluxes.sim.workload import Machine

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"
T0 = 1_700_000_000


def _simulated_journal(name: str, policy: str = "easy") -> tuple[bytes, dict[int, tuple]]:
    with open(CASES / name, encoding="utf-8") as f:
        workload = load_swf(f)
    out = io.BytesIO()
    outcome = Simulation(workload.jobs, Machine.uniform(1, 4), InstanceConfig(),
                         overrides={"policy": policy}, writer=Writer(out)).run()
    schedule = {r.job.id: (r.start, r.end, r.result) for r in outcome.runs}
    assert outcome.journal_entries == out.getvalue().count(b"\n")
    return out.getvalue(), schedule


def test_a_simulated_journal_replays_to_the_simulated_outcome() -> None:
    data, schedule = _simulated_journal("ends.swf")
    replayed = replay(read_records(data.splitlines()))
    assert not replayed.broken
    assert sorted(replayed.records) == [1, 2, 3, 4, 5]
    for jobid, (start, _end, result) in schedule.items():
        job = replayed.records[jobid].job
        assert job.state is JobState.INACTIVE
        assert job.result == JobResult[result]
        assert job.t_run == start
    # every entry has a stream id, increasing
    ids = [tuple(map(int, orjson.loads(line)["id"].split("-"))) for line in data.splitlines()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_time_travel_over_a_file() -> None:
    data, _schedule = _simulated_journal("ends.swf")
    then = replay(read_records(data.splitlines()), until=T0 + 25)
    states = {jobid: rec.job.state for jobid, rec in then.records.items()}
    assert states[2] is JobState.INACTIVE  # failed at 20
    assert states[1] is JobState.RUN and states[3] is JobState.RUN
    assert 5 not in states  # submitted at 70


def test_the_journal_round_trip_simulates_the_same_schedule() -> None:
    for name, policy in (("ends.swf", "easy"), ("tiny.swf", "easy"), ("tiny.swf", "fcfs")):
        data, schedule = _simulated_journal(name, policy)
        workload = load_journal(data.splitlines())
        assert not workload.skipped
        again = Simulation(workload.jobs, Machine.uniform(1, 4), InstanceConfig(),
                           overrides={"policy": policy}).run()
        assert {r.job.id: (r.start, r.end, r.result) for r in again.runs} == schedule


def test_bad_lines_are_named_or_counted() -> None:
    lines = [b'{"j": 1, "n": "submit", "t": 1.0}', b"not json", b'{"j": "x", "n": "a", "t": 1}',
             b"[1]", b'{"j": 1, "n": "x", "t": 1, "c": 3}', b"", b'{"j": 1, "n": "x", "t": 1,'
             b' "s": -1}']
    with pytest.raises(ValueError, match=r"^hist:2: not JSON"):
        list(read_records(lines, name="hist"))
    errors: Counter[str] = Counter()
    assert len(list(read_records(lines, errors))) == 1
    assert sum(errors.values()) == 5
    with pytest.raises(ValueError, match="'t' missing"):
        decode_line(b'{"j": 1, "n": "submit"}')


def test_history_jobs_that_cannot_be_replayed_are_counted() -> None:
    records = [
        {"j": 1, "n": "submit", "t": 0.0, "c": {"userid": 1, "urgency": 16}},  # never ran
        {"j": 2, "n": "alloc", "t": 1.0},  # its submit was trimmed
        {"j": 3, "n": "submit", "t": 0.0, "x": {"ncores": 2, "duration": 50.0},
         "c": {"userid": 1, "urgency": 0}},
        {"j": 3, "n": "urgency", "t": 4.0, "c": {"urgency": 20, "userid": 0}},  # released
        {"j": 3, "n": "alloc", "t": 5.0},
        {"j": 3, "n": "exception", "t": 55.0, "c": {"type": "timelimit", "severity": 0}},
    ]
    workload = load_journal(records=records)
    assert [j.id for j in workload.jobs] == [3]
    assert workload.jobs[0].runtime == float("inf")  # it meets its limit again
    assert workload.jobs[0].urgency == 20  # as it was when it was scheduled, not held
    assert workload.skipped == {"never ran in the history (no run time to replay)": 1,
                                "history incomplete (no submit event: trimmed or purged)": 1}


def test_record_of_a_raw_entry() -> None:
    rec = record_of_entry("5-1", 9, 0, b"submit", b"12.5", b'{"userid":1}', b'{"ncores":2}')
    assert rec == {"id": "5-1", "j": 9, "s": 0, "n": "submit", "t": 12.5, "c": {"userid": 1},
                   "x": {"ncores": 2}}
    assert record_of_entry("5-2", 9, None, b"purge", b"13", None, None) == \
        {"id": "5-2", "j": 9, "n": "purge", "t": 13.0}
    with pytest.raises(ValueError, match="journal entry 5-3"):
        record_of_entry("5-3", 9, 1, b"x", b"1", b"{", None)
