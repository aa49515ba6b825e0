"""Forwarding tasks' output (pure): lines, long lines, budgets, the output limit, entries."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.exec.jobs import ExecJob, Stream
from fluxes.domain.exec.output import (
    MAX_LINE,
    OUTPUT_BYTES_BUDGET,
    OUTPUT_LINES_BUDGET,
    READ_CHUNK,
    Budget,
    add_lines,
    eof_entry,
    limit_note,
    pump,
    split_long,
    within_limit,
)


class File:
    """A growing output file: ``read`` is what pump gets, with the calls it made."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def read(self, stream: Stream, size: int, offset: int) -> bytes:
        self.reads.append((size, offset))
        return self.data[offset:offset + size]


def stream() -> Stream:
    return Stream("stdout", "/nowhere", None)


# ----------------------------------------------------------------------------- lines


def test_whole_lines_are_forwarded_and_a_partial_one_waits() -> None:
    f, s = File(b"a\nbb\ncc"), stream()
    assert pump(s, f.read, False, Budget()) == [b"a\n", b"bb\n"]
    assert (s.offset, s.buf, s.done) == (5, b"cc", False)
    f.data += b"c\n"
    assert pump(s, f.read, False, Budget()) == [b"ccc\n"]
    assert (s.offset, s.buf) == (9, b"")
    assert f.reads[-1] == (min(READ_CHUNK, OUTPUT_BYTES_BUDGET), 7)  # read after the buffer


def test_a_last_line_without_newline_goes_out_once_the_task_ended() -> None:
    f, s = File(b"x\ntail"), stream()
    assert pump(s, f.read, False, Budget()) == [b"x\n"]
    assert pump(s, f.read, True, Budget()) == [b"tail"]
    assert (s.offset, s.buf, s.done) == (6, b"", True)


def test_an_ended_task_with_nothing_left_is_done() -> None:
    f, s = File(b""), stream()
    assert pump(s, f.read, True, Budget()) == []
    assert s.done


def test_a_live_task_gets_one_read_per_call() -> None:
    big = b"y\n" * READ_CHUNK  # two chunks' worth
    f, s = File(big), stream()
    got = pump(s, f.read, False, Budget())
    assert len(f.reads) == 1 and sum(map(len, got)) == READ_CHUNK
    f2, s2 = File(big), stream()
    got = pump(s2, f2.read, True, Budget())
    assert b"".join(got) == big and s2.done and len(f2.reads) == 3  # two chunks, then the end


@pytest.mark.parametrize(("size", "pieces"), [
    (MAX_LINE - 1, [MAX_LINE]),  # with its newline: exactly MAX_LINE, one piece
    (MAX_LINE, [MAX_LINE, 1]),  # one byte too long: the newline goes alone
    (2 * MAX_LINE + 5, [MAX_LINE, MAX_LINE, 6]),
])
def test_long_lines_are_split_at_max_line(size: int, pieces: list[int]) -> None:
    f, s = File(b"z" * size + b"\n"), stream()
    got = pump(s, f.read, False, Budget())
    assert [len(g) for g in got] == pieces
    assert b"".join(got) == f.data and s.offset == len(f.data)


def test_a_long_line_without_newline_is_forwarded_in_max_line_pieces() -> None:
    f, s = File(b"q" * (MAX_LINE + 10)), stream()
    assert [len(g) for g in pump(s, f.read, False, Budget())] == [MAX_LINE]
    assert s.offset == MAX_LINE and s.buf == b"q" * 10


def test_split_long_keeps_short_lines_whole() -> None:
    assert split_long(b"abc\n") == [b"abc\n"]
    assert split_long(b"a" * (MAX_LINE + 1)) == [b"a" * MAX_LINE, b"a"]


@given(st.lists(st.binary(max_size=300), max_size=12), st.integers(1, 64))
def test_forwarded_lines_are_the_file_exactly(chunks: list[bytes], chunk_read: int) -> None:
    """Whatever the writes and the read sizes: nothing lost, nothing twice, whole lines
    (ended by a line break: ``bytes.splitlines`` also breaks at a lone CR) of at most
    MAX_LINE bytes."""
    f, s = File(), stream()
    out: list[bytes] = []
    for chunk in chunks:
        f.data += chunk
        out += pump(s, f.read, False, Budget(chunk_read, OUTPUT_LINES_BUDGET))
        assert all(line.endswith((b"\n", b"\r")) or len(line) == MAX_LINE for line in out)
        assert all(len(line) <= MAX_LINE for line in out)
    while not s.done:
        out += pump(s, f.read, True, Budget(chunk_read, OUTPUT_LINES_BUDGET))
    assert b"".join(out) == f.data and s.offset == len(f.data)


# ----------------------------------------------------------------------------- budgets


def test_the_byte_budget_bounds_the_reads() -> None:
    f, s = File(b"1234\n" * 10), stream()
    budget = Budget(12, OUTPUT_LINES_BUDGET)
    assert pump(s, f.read, True, budget) == [b"1234\n", b"1234\n"]
    assert budget.bytes == 0 and not budget.left() and not s.done
    assert s.buf == b"12"  # read, held for the next iteration
    assert f.reads == [(12, 0)]


def test_the_line_budget_counts_lines_forwarded() -> None:
    f, s = File(b"a\n" * 5), stream()
    budget = Budget(OUTPUT_BYTES_BUDGET, 5)
    pump(s, f.read, False, budget)
    assert budget.lines == 0 and not budget.left()
    assert Budget(1, 1).left() and not Budget(0, 1).left() and not Budget(1, 0).left()


def test_an_exhausted_budget_reads_nothing() -> None:
    f, s = File(b"data\n"), stream()
    assert pump(s, f.read, True, Budget(0, 10)) == []
    assert f.reads == [] and not s.done


# ----------------------------------------------------------------------------- limit


def job(**kw: Any) -> ExecJob:
    return ExecJob(7, 3, "run", **kw)


def test_output_exactly_at_the_limit_is_kept() -> None:
    j = job()
    assert within_limit(j, [b"12345\n", b"6789\n"], 11) == [b"12345\n", b"6789\n"]
    assert (j.forwarded, j.truncated) == (11, False)


def test_the_line_crossing_the_limit_becomes_the_note() -> None:
    j = job(forwarded=10)
    assert within_limit(j, [b"a\n", b"b\n"], 11) == [limit_note(11, 3)]
    assert (j.forwarded, j.truncated) == (10, True)
    assert within_limit(j, [b"c\n"], 11) == []  # everything after is dropped


def test_the_note_names_the_limit_and_the_rank() -> None:
    assert limit_note(100 << 20, 4) == (
        b"fluxes: output limit of 100M reached on rank 4: further output dropped "
        b"(use --output/--error files for more)\n")
    assert b"of 1000 reached" in limit_note(1000, 0)


def test_entries_carry_task_rank_and_stream_and_the_note_is_stderr() -> None:
    j = job()
    entries: list[dict[str, Any]] = []
    add_lines(entries, j, 5, "stdout", [b"x\n"])
    assert entries == [{"rank": "5", "stream": "stdout", "data": b"x\n"}]
    kept = within_limit(j, [b"y" * 20], 10)
    add_lines(entries, j, 5, "stdout", kept)
    assert entries[-1] == {"rank": "5", "stream": "stderr", "data": limit_note(10, 3)}


def test_a_line_that_only_looks_like_the_note_stays_on_its_stream() -> None:
    entries: list[dict[str, Any]] = []
    add_lines(entries, job(), 0, "stdout", [b"fluxes: output limit is a phrase\n"])
    assert entries[0]["stream"] == "stdout"


def test_the_end_marker_names_the_exec_rank_and_task_ranks() -> None:
    assert eof_entry(2, [4, 5, 6, 9]) == {"eof": "1", "rank": "2", "tasks": "4-6,9"}
    assert eof_entry(0, []) == {"eof": "1", "rank": "0", "tasks": ""}


def test_pids_entries_round_trip() -> None:
    from fluxes.domain.exec.jobs import TaskProc
    from fluxes.domain.exec.output import parse_pids, pids_entry

    entry = pids_entry(3, "node7", [TaskProc(4, 1001, True), TaskProc(5, 1002, True)])
    assert entry == {"pids": "4:1001,5:1002", "rank": "3", "host": "node7"}
    fields = {k.encode(): v.encode() for k, v in entry.items()}
    assert parse_pids(fields) == [(4, "node7", 1001), (5, "node7", 1002)]
    assert parse_pids({b"pids": b"", b"rank": b"1"}) == []
    for bad in ({b"data": b"x"}, {b"pids": b"4-1001"}, {b"pids": b"a:1"}):
        with pytest.raises(ValueError):
            parse_pids(bad)
