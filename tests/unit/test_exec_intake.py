"""The exec worker's intake (pure): requests decoded, reports encoded, the backlog."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from fluxes import messages as proto
from fluxes.domain.exec.intake import (
    REPORT_CHUNK,
    Command,
    Intake,
    Kill,
    MessageError,
    Request,
    Signal,
    Start,
    decode_requests,
    encode_reports,
    report,
)
from fluxes.domain.exec.jobs import ExecJob
from tests import wire


def entry(*msgs: dict[str, Any]) -> dict[bytes, bytes]:
    return wire.entry(msgs)


def test_starts_and_kills_are_decoded_in_order() -> None:
    got = decode_requests(entry({"t": "start", "id": 5, "ranks": "0-1"},
                                {"t": "kill", "id": 5, "signal": 15},
                                {"t": "start", "id": 6, "ranks": "0", "extra": 1}))
    assert got == [Start(id=5, ranks="0-1"), Kill(id=5, signal=15), Start(id=6, ranks="0")]
    assert Start is proto.Start and Kill is proto.Kill  # the typed messages themselves


def test_signal_requests_are_decoded() -> None:
    got = decode_requests(entry({"t": "signal", "id": 5, "signal": 10}))
    assert got == [Signal(id=5, signal=10)]


@pytest.mark.parametrize(("fields", "error"), [
    (None, "entry has no fields"),
    ({}, "entry has no fields"),
    (entry({"t": "alloc", "id": 1, "priority": 0, "userid": 0}), "exec:rank: .*'alloc'"),
    (entry({"t": "kill", "id": 1, "signal": 0}), "kill: bad signal 0"),
    (entry({"t": "kill", "id": 1, "signal": signal.NSIG}), f"kill: bad signal {signal.NSIG}"),
    (entry({"t": "kill", "id": 1, "signal": -1}), "kill: bad signal -1"),
    (entry({"t": "signal", "id": 1, "signal": 0}), r">= 1 - at `\$.m\[0\].signal`"),
    (entry({"t": "signal", "id": 1, "signal": 65}), r"<= 64 - at `\$.m\[0\].signal`"),
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
    assert decode_requests(entry({"t": "kill", "id": 1, "signal": 1})) == [Kill(id=1, signal=1)]
    top = signal.NSIG - 1
    assert decode_requests(entry({"t": "kill", "id": 1, "signal": top})) == [
        Kill(id=1, signal=top)]


def job_of(request: Request) -> int:
    """The job a (job) request is about."""
    assert not isinstance(request, Command)
    return request.id


def test_a_report_is_the_cumulative_exec_message() -> None:
    job = ExecJob(7, 2, "done", started=True, status=256, released=True, error="x")
    msg = report(job)
    assert msg == proto.ExecReport(id=7, rank=2, started=True, status=256, released=True,
                                   error="x")
    [back] = wire.full(proto.EXEC_EVENTS, encode_reports([job])[0])
    assert back == {"t": "exec", "id": 7, "rank": 2, "started": True, "status": 256,
                    "released": True, "error": "x", "prolog": None, "epilog": None}


def test_a_held_job_is_not_reported_released_and_says_its_hooks() -> None:
    job = ExecJob(7, 2, "done", started=True, status=0, released=True, held=True)
    job.prolog, job.epilog = 0, -1
    msg = report(job)
    assert not msg.released and msg.prolog == 0 and msg.epilog == -1
    job.held = False
    assert report(job).released


@pytest.mark.parametrize(("n", "sizes"), [
    (0, []), (1, [1]), (REPORT_CHUNK, [REPORT_CHUNK]), (REPORT_CHUNK + 1, [REPORT_CHUNK, 1]),
    (2 * REPORT_CHUNK + 3, [REPORT_CHUNK, REPORT_CHUNK, 3]),
])
def test_reports_are_chunked(n: int, sizes: list[int]) -> None:
    jobs = [ExecJob(i, 0, "sim", started=True) for i in range(n)]
    chunks = encode_reports(jobs)
    decoded = [proto.decode_entry(proto.EXEC_EVENTS, fields) for fields in chunks]
    assert [len(msgs) for _e, msgs in decoded] == sizes
    assert [m.id for _e, msgs in decoded for m in msgs] == list(range(n))
    assert all(epoch == 0 for epoch, _m in decoded)


def test_reports_fit_the_readers_bound() -> None:
    # long errors (a command name is the user's) split an entry before the bound does
    jobs = [ExecJob(i, 0, "done", error="x" * 40_000) for i in range(REPORT_CHUNK)]
    chunks = encode_reports(jobs)
    assert len(chunks) > 1
    assert all(len(fields[proto.FIELD]) <= proto.EXEC_EVENTS.max_bytes for fields in chunks)
    assert sum(len(proto.decode_entry(proto.EXEC_EVENTS, f)[1]) for f in chunks) == len(jobs)


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


def test_only_fresh_entries_carry_facts() -> None:
    """Facts carried by a start written before the worker ran (or redelivered) may be
    stale (the job may have ended meanwhile): those starts read the job hash."""
    def carrying(*jobids: int) -> dict[bytes, bytes]:
        return {**starts(*jobids), **{proto.FACTS_FIELD % j: b"facts%d" % j for j in jobids}}

    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"5-0", carrying(1))]}, lambda _r, _j: False)
    assert intake.carried == {}  # fresh_after_ms unset: never trusted
    intake.fresh_after_ms = 10
    new, _ = intake.take({0: [(b"10-0", carrying(2)), (b"11-0", carrying(3, 4)),
                              (b"12-0", starts(5)), (b"bad", carrying(6))]},
                         lambda _r, _j: False)
    assert new == [2, 3, 4, 5, 6] and intake.carried == {3: b"facts3", 4: b"facts4"}
    intake.pending[0] = True
    intake.take({0: [(b"13-0", carrying(7))]}, lambda _r, _j: False)
    assert 7 not in intake.carried  # redelivered
    intake.handle(lambda _r, _q, _d: None, lambda _r, _m, _x: None, 1.0, Clock(0.0),
                  lambda *_a: None)
    assert intake.carried == {} and intake.fetched == {}


def test_take_returns_poison_for_the_dead_letters() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    new, poison = intake.take({0: [(b"1-0", {b"d": b"{"}), (b"2-0", {})]},
                              lambda _r, _j: False)
    assert new == [] and not intake.backlog
    assert [(r, m, f) for r, m, f, _e in poison] == [(0, b"1-0", {b"d": b"{"}), (0, b"2-0", {})]
    assert all(e.startswith("MessageError: ") for *_x, e in poison)
    assert "trimmed while pending" in poison[1][3]
    assert intake.last_ids[0] == b"2-0"  # read past them all the same


def test_pending_entries_are_redelivered_until_an_empty_read() -> None:
    intake = Intake([0])
    assert intake.wants_read()
    intake.maybe_new = False
    intake.take({0: [(b"5-0", starts(1))]}, lambda _r, _j: False)
    assert intake.pending[0] and intake.backlog[0].redelivered
    assert intake.last_ids[0] == "$"  # pending entries do not move the waker's position
    intake.take({0: []}, lambda _r, _j: False)
    # a tuple: mypy would keep intake.pending[0] narrowed to True past take(), which clears it
    assert (intake.pending[0], intake.wants_read()) == (False, False)


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
    acks: list[tuple[int, bytes, list[Any]]] = []
    intake.handle(lambda r, q, red: seen.append((r, q, red)),
                  lambda r, m, d: acks.append((r, m, d)), 10.0, Clock(0.001), never)
    assert seen == [(0, Start(id=1, ranks="0"), False), (0, Start(id=2, ranks="0"), False),
                    (0, Start(id=3, ranks="0"), False)]
    assert acks == [(0, b"1-0", []), (0, b"2-0", [])]
    assert not intake.backlog and intake.fetched == {}  # fetched fields go with the backlog


def test_handle_stops_at_the_budget_and_resumes_mid_entry() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"1-0", starts(1, 2, 3))]}, lambda _r, _j: False)
    intake.fetched[1] = ("x",)
    seen: list[int] = []
    acks: list[bytes] = []
    # the budget is spent after the second request: the entry is not acknowledged yet
    intake.handle(lambda _r, q, _red: seen.append(job_of(q)), lambda _r, m, _d: acks.append(m),
                  1.5, Clock(1.0), never)
    assert seen == [1, 2] and acks == [] and intake.fetched
    intake.handle(lambda _r, q, _red: seen.append(job_of(q)), lambda _r, m, _d: acks.append(m),
                  1.5, Clock(1.0), never)
    assert seen == [1, 2, 3] and acks == [b"1-0"]


def never(_rank: int, _msg_id: bytes, _request: Request, exc: Exception) -> Any:
    raise AssertionError(f"nothing should be refused here: {exc!r}")


def test_a_request_that_raises_is_refused_with_its_entry_and_the_rest_go_on() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"1-0", starts(1, 2, 3)), (b"2-0", starts(4))]}, lambda _r, _j: False)
    seen: list[int] = []
    refused: list[tuple[int, bytes, int, str]] = []
    acks: list[tuple[bytes, list[Any]]] = []

    def handler(_rank: int, request: Request, _redelivered: bool) -> None:
        assert not isinstance(request, Command)
        if request.id in (2, 4):
            raise TypeError(f"boom {request.id}")
        seen.append(request.id)

    def refuse(rank: int, msg_id: bytes, request: Request, exc: Exception) -> Any:
        assert not isinstance(request, Command)
        refused.append((rank, msg_id, request.id, str(exc)))
        return f"dead letter of {request.id}"

    intake.handle(handler, lambda _r, m, d: acks.append((m, list(d))), 10.0, Clock(0.001),
                  refuse)
    assert seen == [1, 3]
    assert refused == [(0, b"1-0", 2, "boom 2"), (0, b"2-0", 4, "boom 4")]
    # each dead letter goes with the acknowledgement of its entry (one write holds both)
    assert acks == [(b"1-0", ["dead letter of 2"]), (b"2-0", ["dead letter of 4"])]
    assert not intake.backlog


def test_what_refuse_raises_propagates() -> None:
    intake = Intake([0])
    intake.pending[0] = False
    intake.take({0: [(b"1-0", starts(1))]}, lambda _r, _j: False)

    def handler(_rank: int, _request: Request, _redelivered: bool) -> None:
        raise ConnectionError("redis went away")

    def refuse(_rank: int, _msg_id: bytes, _request: Request, exc: Exception) -> Any:
        raise exc

    with pytest.raises(ConnectionError):
        intake.handle(handler, lambda _r, _m, _d: None, 10.0, Clock(0.001), refuse)
