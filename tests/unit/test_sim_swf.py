"""The SWF reader: every rule of the definition it applies, counted, and never a crash."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.sim import swf
from fluxes.sim.workload import CANCELED, COMPLETED, FAILED, jobs_from_swf, machine_for_trace

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"


def _read(name: str) -> swf.Trace:
    with open(CASES / name, encoding="utf-8") as f:
        return swf.parse(f)


def test_tiny_trace_reads_whole() -> None:
    trace = _read("tiny.swf")
    assert [j.number for j in trace.jobs] == [1, 2, 3, 4, 5]
    assert not trace.skipped and not trace.fixed
    assert trace.max_procs == 4 and trace.max_nodes == 1
    assert trace.start_time == 1_700_000_000
    j2 = trace.jobs[1]
    assert (j2.submit, j2.runtime, j2.procs, j2.requested, j2.user) == (10, 100, 4, 100, 2)


def test_messy_trace_counts_every_rule() -> None:
    trace = _read("messy.swf")
    assert dict(trace.skipped) == {
        swf.MALFORMED: 4,  # prose, 17 fields, "5x0", "nan"
        swf.NO_RUNTIME: 2,  # -1 and 0
        swf.NO_SUBMIT: 1,
        swf.NO_PROCS: 1,  # requested and allocated both -1
        swf.PARTIAL: 1,  # status 2
        swf.DUPLICATE: 1,  # the second job 9
    }
    assert dict(trace.fixed) == {swf.ALLOCATED_USED: 1, swf.MAXRUNTIME_USED: 1,
                                 swf.UNKNOWN_USER: 1}
    by_number = {j.number: j for j in trace.jobs}
    assert sorted(by_number) == [1, 6, 7, 9, 10, 11, 12]
    assert by_number[6].procs == 2  # from the allocated processors
    assert by_number[7].requested == 3600  # the header's MaxRuntime
    assert by_number[9].submit == 70  # the first of the two lines numbered 9


def test_missing_estimate_without_max_runtime_uses_the_run_time() -> None:
    trace = swf.parse_text("; MaxProcs: 4\n1 0 -1 77 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    assert trace.jobs[0].requested == 77
    assert trace.fixed == {swf.RUNTIME_USED: 1}


def test_jobs_map_statuses_users_queues_and_times() -> None:
    trace = _read("messy.swf")
    jobs = {j.id: j for j in jobs_from_swf(trace, queue_map={2: "debug"})}
    assert jobs[1].submit == 1_700_000_000 and jobs[1].outcome == COMPLETED
    assert jobs[12].outcome == CANCELED
    assert jobs[9].userid == swf.NOBODY and jobs[9].user == "-1" and jobs[9].queue is None
    assert jobs[7].queue == "debug" and jobs[6].queue is None and jobs[6].queue_label == "1"
    failed = swf.parse_text("1 0 -1 5 1 -1 -1 1 9 -1 0 1 1 -1 1 -1 -1 -1\n")
    assert jobs_from_swf(failed)[0].outcome == FAILED


def test_machine_from_header_and_flags() -> None:
    procs_only = swf.parse_text("; MaxProcs: 64\n")
    assert machine_for_trace(procs_only, None, None, False).description == "1 node x 64 cores"
    smp = swf.parse_text("; MaxNodes: 16\n; MaxProcs: 64\n")
    assert machine_for_trace(smp, None, None, False).description == "16 nodes x 4 cores"
    assert machine_for_trace(smp, 8, None, False).description == "8 nodes x 8 cores"
    assert machine_for_trace(smp, None, 32, False).description == "2 nodes x 32 cores"
    assert machine_for_trace(smp, None, None, True).description == "16 nodes x 4 cores"
    nothing = swf.parse_text("1 0 -1 5 12 -1 -1 12 9 -1 1 1 1 -1 1 -1 -1 -1\n")
    assert machine_for_trace(nothing, None, None, False).cores == 12


def test_output_line_replaces_columns_3_to_5_only() -> None:
    job = _read("tiny.swf").jobs[3]
    line = swf.format_line(job, wait=170.0, runtime=150.0, procs=2)
    assert line.split() == ["4", "30", "170", "150", "2", "-1", "-1", "2", "200", "-1", "1",
                            "3", "1", "-1", "1", "-1", "-1", "-1"]
    assert swf.format_line(job, 1.5, 2.25, 2).split()[2:4] == ["1.50", "2.25"]
    out = io.StringIO()
    swf.write(out, ["; a", "b"], [line])
    assert out.getvalue() == f"; a\n; b\n{line}\n"


_FIELD = st.one_of(st.integers(-5, 10**6).map(str), st.sampled_from(
    ["-1", "0", "1.5", "nan", "inf", "x", "1e400", "-0", ";"]))
_PROSE = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Zl", "Zp")), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.lists(_FIELD, min_size=0, max_size=20).map(" ".join), _PROSE),
                max_size=30))
def test_never_raises_and_every_data_line_is_kept_or_counted(lines: list[str]) -> None:
    trace = swf.parse(lines)
    data = sum(1 for line in lines if line.strip() and not line.strip().startswith(";"))
    assert len(trace.jobs) + sum(trace.skipped.values()) == data
    for job in trace.jobs:
        assert job.submit >= 0 and job.runtime > 0 and job.procs > 0 and job.requested > 0
