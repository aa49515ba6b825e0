"""The exec worker's intake (pure): requests decoded, reports encoded, the backlog."""

from __future__ import annotations

import signal
from typing import Any

import orjson
import pytest

from fluxes import messages as proto
from fluxes.domain.exec.intake import (
    REPORT_CHUNK,
    Intake,
    Kill,
    MessageError,
    Request,
    Start,
    decode_requests,
    encode_reports,
    report,
)
from fluxes.domain.exec.jobs import ExecJob


def entry(*msgs: dict[str, Any]) -> dict[bytes, bytes]:
    return proto.encode(msgs)


def test_starts_and_kills_are_decoded_in_order() -> None:
    got = decode_requests(entry({"t": "start", "id": 5, "ranks": "0-1"},
                                {"t": "kill", "id": 5, "signal": 15},
                                {"t": "start", "id": 6, "ranks": "0", "extra": 1}))
    assert got == [Start(5, "0-1"), Kill(5, 15), Start(6, "0")]


@pytest.mark.parametrize(("fields", "error"), [
    (None, "entry has no fields"),
    ({}, "entry has no fields"),
    (entry({"t": "alloc", "id": 1, "priority": 0, "userid": 0}),
     "take start and kill, not 'alloc'"),
    (entry({"t": "kill", "id": 1, "signal": 0}), "kill: bad signal 0"),
    (entry({"t": "kill", "id": 1, "signal": signal.NSIG}), f"kill: bad signal {signal.NSIG}"),
    (entry({"t": "kill", "id": 1, "signal": -1}), "kill: bad signal -1"),
])
def test_requests_exec_refuses(fields: Any, error: str) -> None:
    with pytest.raises(MessageError, match=error):
        decode_requests(fields)


@pytest.mark.parametrize("fields", [
    {b"d": b"not json"},
    {b"x": b"1"},
    entry({"t": "kill", "id": 1}),  # no signal
    entry({"t": "start", "id": "1", "ranks": "0"}),
    # one bad message refuses the whole entry, even after good ones
    entry({"t": "start", "id": 1, "ranks": "0"}, {"t": "nope"}),
])
def test_entries_off_the_protocol_are_refused_whole(fields: Any) -> None:
    with pytest.raises(MessageError):
        decode_requests(fields)


def test_signal_bounds() -> None:
    assert decode_requests(entry({"t": "kill", "id": 1, "signal": 1})) == [Kill(1, 1)]
    top = signal.NSIG - 1
    assert decode_requests(entry({"t": "kill", "id": 1, "signal": top})) == [Kill(1, top)]


def test_a_report_is_the_cumulative_exec_message() -> None:
    job = ExecJob(7, 2, "done", started=True, status=256, released=True, error="x")
    msg = report(job)
    assert msg == {"t": "exec", "id": 7, "rank": 2, "started": True, "status": 256,
                   "released": True, "error": "x"}
    assert proto.check(msg) == msg


@pytest.mark.parametrize(("n", "sizes"), [
    (0, []), (1, [1]), (REPORT_CHUNK, [REPORT_CHUNK]), (REPORT_CHUNK + 1, [REPORT_CHUNK, 1]),
    (2 * REPORT_CHUNK + 3, [REPORT_CHUNK, REPORT_CHUNK, 3]),
])
def test_reports_are_chunked(n: int, sizes: list[int]) -> None:
    jobs = [ExecJob(i, 0, "sim", started=True) for i in range(n)]
    chunks = encode_reports(jobs)
    decoded = [proto.decode(fields)[1] for fields in chunks]
    assert [len(msgs) for msgs in decoded] == sizes
    assert [m["id"] for msgs in decoded for m in msgs] == list(range(n))
    assert all(orjson.loads(fields[b"d"])["e"] == 0 for fields in chunks)


# ----------------------------------------------------------------------------- the backlog


def starts(*ids: int) -> dict[bytes, bytes]:
    return entry(*({"t": "start", "id": i, "ranks": "0"} for i in ids))


def test_take_queues_entries_and_names_the_starts_to_fetch() -> None:
    intake = Intake([0, 1])
    intake.pending = {0: False, 1: False}
    intake.fetched[3] = ("spec", None, None, None)
    known = {(0, 4)}
    new, poison = intake.take({0: [(b"1-0", starts(2, 3, 4))], 1: [(b"2-0", starts(4))]},
                              lambda rank, jobid: (rank, jobid) in known)
    assert new == [2, 4] and poison == []  # 3 is fetched; 4 is known on rank 0 only
    assert [(b.rank, b.msg_id, len(b.requests)) for b in intake.backlog] == [
        (0, b"1-0", 3), (1, b"2-0", 1)]
    assert intake.last_ids == {0: b"1-0", 1: b"2-0"}


def test_take_returns_poison_for_the_dead_letters() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    new, poison = intake.take({0: [(b"1-0", {b"d": b"{"}), (b"2-0", {})]},
                              lambda _r, _j: False)
    assert new == [] and not intake.backlog
    assert [(r, m, f) for r, m, f, _e in poison] == [(0, b"1-0", {b"d": b"{"}), (0, b"2-0", {})]
    assert all(e.startswith("MessageError: ") for *_x, e in poison)
    assert intake.last_ids[0] == b"2-0"  # read past them all the same


def test_pending_entries_are_redelivered_until_an_empty_read() -> None:
    intake = Intake([0])
    assert intake.wants_read()
    intake.maybe_new = False
    intake.take({0: [(b"5-0", starts(1))]}, lambda _r, _j: False)
    assert intake.pending[0] and intake.backlog[0].redelivered
    assert intake.last_ids[0] == "$"  # pending entries do not move the waker's position
    intake.take({0: []}, lambda _r, _j: False)
    assert not intake.pending[0] and not intake.wants_read()


class Clock:
    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_handle_goes_in_order_and_acks_whole_entries() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"1-0", starts(1, 2)), (b"2-0", starts(3))]}, lambda _r, _j: False)
    intake.fetched[1] = ("x",)
    seen: list[tuple[int, Request, bool]] = []
    acks: list[tuple[int, bytes]] = []
    intake.handle(lambda r, q, red: seen.append((r, q, red)),
                  lambda r, m: acks.append((r, m)), 10.0, Clock(0.001))
    assert seen == [(0, Start(1, "0"), False), (0, Start(2, "0"), False),
                    (0, Start(3, "0"), False)]
    assert acks == [(0, b"1-0"), (0, b"2-0")]
    assert not intake.backlog and intake.fetched == {}  # fetched fields go with the backlog


def test_handle_stops_at_the_budget_and_resumes_mid_entry() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"1-0", starts(1, 2, 3))]}, lambda _r, _j: False)
    intake.fetched[1] = ("x",)
    seen: list[int] = []
    acks: list[bytes] = []
    # the budget is spent after the second request: the entry is not acknowledged yet
    intake.handle(lambda _r, q, _red: seen.append(q.id), lambda _r, m: acks.append(m),
                  1.5, Clock(1.0))
    assert seen == [1, 2] and acks == [] and intake.fetched
    intake.handle(lambda _r, q, _red: seen.append(q.id), lambda _r, m: acks.append(m),
                  1.5, Clock(1.0))
    assert seen == [1, 2, 3] and acks == [b"1-0"]
