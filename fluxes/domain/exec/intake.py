"""The exec worker's intake and messages, in one place: requests in, reports out.

The job manager sends ``start``, ``kill`` and ``signal`` messages on each rank's request
stream; the worker answers with cumulative ``exec`` reports on the job's
partition stream (docs/exec.md, "Contract with the job manager").  This
module is the only part of the exec worker that knows the wire form
(:mod:`fluxes.messages`): everything else sees :class:`Start`, :class:`Kill`
and :class:`~fluxes.domain.exec.jobs.ExecJob`, so a change of message
representation is one edit here.

:class:`Intake` holds the request entries read and not yet handled: they are
handled in order, a time budget per loop iteration, and an entry is
acknowledged only once all its requests are handled (their effects are in
the same write as the acknowledgement).
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluxes import messages as proto
from fluxes.domain.exec.jobs import ExecJob
from fluxes.messages import Command, ExecReport, Kill, PmiWake, Signal, Start

#: A request entry that does not follow the protocol (dead-lettered by the worker).
MessageError = proto.MessageError

#: Most report messages written in one stream entry.
REPORT_CHUNK = 1000

#: What a rank's request stream carries (the typed messages of :mod:`fluxes.messages`).
Request = Start | Kill | Signal | PmiWake | Command

__all__ = ["REPORT_CHUNK", "Backlog", "Command", "Entry", "Intake", "Kill", "MessageError",
           "PmiWake", "Poison", "Refusal", "Request", "Signal", "Start", "decode_requests",
           "decode_sent",
           "encode_reports", "report"]


def decode_requests(fields: Mapping[Any, Any] | None) -> list[Request]:
    """The requests of one entry of a rank's request stream.

    :class:`MessageError` (a ValueError) for an entry that cannot be handled
    as a whole: no fields (deleted or trimmed while pending), not the
    protocol, a message type other than start/kill, a signal out of range.
    """
    return decode_sent(fields)[0]


def decode_sent(fields: Mapping[Any, Any] | None) -> tuple[list[Request], float]:
    """:func:`decode_requests` and the entry's send time (0 when not stamped)."""
    if not fields:
        raise MessageError("entry has no fields (deleted or trimmed while pending)")
    _epoch, msgs, sent = proto.decode_entry_sent(proto.EXEC_REQUESTS, fields)
    for msg in msgs:
        match msg:
            case Kill(signal=sig) | Signal(signal=sig) if not 0 < sig < signal.NSIG:
                raise MessageError(f"{type(msg).__name__.lower()}: bad signal {sig}")
    return msgs, sent


def report(job: ExecJob) -> ExecReport:
    """The cumulative ``exec`` message for the job manager about ``job`` on its rank."""
    return ExecReport(id=job.id, rank=job.rank, started=job.started, status=job.status,
                      released=job.released and not job.held, error=job.error,
                      prolog=job.prolog, epilog=job.epilog)


def encode_reports(jobs: Sequence[ExecJob], sent: float | None = None
                   ) -> list[dict[bytes, bytes]]:
    """The stream entries (fields) carrying ``jobs``' reports: at most
    :data:`REPORT_CHUNK` a piece, and never more than the reader's bound; stamped
    with ``sent`` (the sender's clock) when given."""
    return proto.encode_chunks([report(job) for job in jobs], 0, REPORT_CHUNK,
                               proto.EXEC_EVENTS.max_bytes, sent)


#: A request stream entry as read: (entry id, fields).
Entry = tuple[bytes, Any]
#: A refused entry: (rank, entry id, fields, error) for the dead letters.
Poison = tuple[int, bytes, Mapping[Any, Any], str]
#: Called when handling one request raised: (rank, entry id, request, exception).  It
#: returns the request's dead letter (written with its entry's acknowledgement), or
#: re-raises what is not the request's fault (a lost connection).
Refusal = Callable[[int, bytes, Request, Exception], Any]


@dataclass
class Backlog:
    """A request entry being handled (its requests may span iterations)."""

    rank: int
    msg_id: bytes
    requests: list[Request]
    redelivered: bool
    index: int = 0
    dead: list[Any] = field(default_factory=list)  # dead letters of its refused requests
    sent: float = 0.0  # the sender's clock when it wrote the entry (0: not stamped)


class Intake:
    """The served ranks' request entries, from reading to acknowledging.

    ``pending[rank]`` is true until the rank's pending entries (delivered to
    a predecessor, never acknowledged) have been read again; ``last_ids``
    are the ids of the last entries read (where the waker's XREAD starts);
    ``maybe_new`` says a read may find more (a full read left some behind);
    ``fetched`` holds the job hash facts of the starts in the backlog.
    """

    def __init__(self, ranks: Iterable[int]) -> None:
        ranks = list(ranks)
        self.backlog: deque[Backlog] = deque()
        self.pending = dict.fromkeys(ranks, True)
        self.last_ids: dict[int, Any] = dict.fromkeys(ranks, "$")
        self.maybe_new = True
        self.fetched: dict[int, Any] = {}
        #: the job facts fresh start entries carried (raw, per job; read by the store)
        self.carried: dict[int, Any] = {}
        #: entries whose id time (Redis clock, ms) is past this were written while
        #: this worker ran, so their carried facts are current (None: never use them)
        self.fresh_after_ms: int | None = None
        #: the send time of the entry whose request the handler is given (0: none)
        self.sent = 0.0
        #: the id of that entry
        self.entry_id = b""

    def wants_read(self) -> bool:
        """Whether a read may find entries (pending ones, or more after a full read)."""
        return self.maybe_new or any(self.pending.values())

    def take(self, got: Mapping[int, Sequence[Entry]],
             known: Callable[[int, int], bool]) -> tuple[list[int], list[Poison]]:
        """Queue the entries read per rank (``pending[rank]``: redelivered ones).

        Returns the job ids of new starts whose hash fields must be fetched
        (not fetched yet, not ``known(rank, job)``) and the entries refused
        (dead-letter and acknowledge them).  A rank's empty read of pending
        entries ends its redelivery.
        """
        new_starts: list[int] = []
        poison: list[Poison] = []
        for rank, entries in got.items():
            redelivered = self.pending[rank]
            if redelivered and not entries:
                self.pending[rank] = False
            for msg_id, fields in entries:
                if not redelivered:
                    self.last_ids[rank] = msg_id
                try:
                    requests, sent = decode_sent(fields)
                except Exception as exc:  # any refusal is the entry's: park it
                    poison.append((rank, msg_id, fields or {}, f"{type(exc).__name__}: {exc}"))
                    continue
                starts = [r.id for r in requests if isinstance(r, Start)
                          and r.id not in self.fetched and not known(rank, r.id)]
                if starts and not redelivered and self._fresh(msg_id):
                    self._keep_carried(fields, starts)
                new_starts += starts
                self.backlog.append(Backlog(rank, msg_id, requests, redelivered, sent=sent))
        return new_starts, poison

    def _fresh(self, msg_id: Any) -> bool:
        """Whether entry ``msg_id`` was written while this worker ran: a start written
        before (while it was down) may be of a job that ended since, so its hash is
        read instead (the result the job got meanwhile)."""
        if self.fresh_after_ms is None:
            return False
        try:
            return int(bytes(msg_id).split(b"-", 1)[0]) > self.fresh_after_ms
        except (TypeError, ValueError):
            return False

    def _keep_carried(self, fields: Mapping[Any, Any], starts: Iterable[int]) -> None:
        for jobid in starts:
            raw = fields.get(proto.FACTS_FIELD % jobid)
            if raw is not None:
                self.carried[jobid] = raw

    def handle(self, handler: Callable[[int, Request, bool], None],
               ack: Callable[[int, bytes, list[Any]], None], budget: float,
               clock: Callable[[], float], refuse: Refusal) -> None:
        """Hand the backlog's requests to ``handler(rank, request, redelivered)`` in order,
        for about ``budget`` seconds of ``clock``; ``ack(rank, entry id, dead letters)``
        each entry fully handled.

        A request whose handler raises goes to ``refuse``, whose dead letter is
        kept with the entry and handed to ``ack`` with it (one write holds both),
        and the next request is handled: one request never stops the others.
        What ``refuse`` raises propagates.
        """
        deadline = clock() + budget
        backlog = self.backlog
        while backlog:
            entry = backlog[0]
            requests = entry.requests
            self.sent = entry.sent
            self.entry_id = entry.msg_id
            while entry.index < len(requests):
                request = requests[entry.index]
                entry.index += 1
                try:
                    handler(entry.rank, request, entry.redelivered)
                except Exception as exc:  # refuse decides what is the input's
                    entry.dead.append(refuse(entry.rank, entry.msg_id, request, exc))
                if clock() > deadline:
                    break
            if entry.index < len(requests):
                return  # the rest of this entry waits for the next iteration
            backlog.popleft()
            ack(entry.rank, entry.msg_id, entry.dead)
            if not backlog:
                self.fetched.clear()
                self.carried.clear()
            if clock() > deadline:
                return
