"""The exec worker's intake and messages, in one place: requests in, reports out.

The job manager sends ``start`` and ``kill`` messages on each rank's request
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
from dataclasses import dataclass
from typing import Any, NamedTuple

from fluxes import messages as proto
from fluxes.domain.exec.jobs import ExecJob

#: A request entry that does not follow the protocol (dead-lettered by the worker).
MessageError = proto.MessageError

#: Most report messages written in one stream entry.
REPORT_CHUNK = 1000


class Start(NamedTuple):
    """Start the job's share on the rank that received the request."""

    id: int
    ranks: str


class Kill(NamedTuple):
    """Send ``signal`` to the job's tasks on the rank (SIGKILL follows after the grace)."""

    id: int
    signal: int


Request = Start | Kill


def decode_requests(fields: Mapping[Any, Any] | None) -> list[Request]:
    """The requests of one entry of a rank's request stream.

    :class:`MessageError` (a ValueError) for an entry that cannot be handled
    as a whole: no fields (deleted while pending), not the protocol, a
    message type other than start/kill, a signal out of range.
    """
    if not fields:
        raise MessageError("entry has no fields (deleted?)")
    _epoch, msgs = proto.decode(fields)
    out: list[Request] = []
    for msg in msgs:
        kind = msg["t"]
        if kind == "start":
            out.append(Start(msg["id"], msg["ranks"]))
        elif kind == "kill":
            sig = msg["signal"]
            if not 0 < sig < signal.NSIG:
                raise MessageError(f"kill: bad signal {sig}")
            out.append(Kill(msg["id"], sig))
        else:
            raise MessageError(f"exec workers take start and kill, not {kind!r}")
    return out


def report(job: ExecJob) -> dict[str, Any]:
    """The cumulative ``exec`` message for the job manager about ``job`` on its rank."""
    return {"t": "exec", "id": job.id, "rank": job.rank, "started": job.started,
            "status": job.status, "released": job.released, "error": job.error}


def encode_reports(jobs: Sequence[ExecJob]) -> list[dict[bytes, bytes]]:
    """The stream entries (fields) carrying ``jobs``' reports, :data:`REPORT_CHUNK` a piece."""
    msgs = [report(job) for job in jobs]
    return [proto.encode(msgs[i:i + REPORT_CHUNK]) for i in range(0, len(msgs), REPORT_CHUNK)]


#: A request stream entry as read: (entry id, fields).
Entry = tuple[bytes, Any]
#: A refused entry: (rank, entry id, fields, error) for the dead letters.
Poison = tuple[int, bytes, Mapping[Any, Any], str]


@dataclass
class Backlog:
    """A request entry being handled (its requests may span iterations)."""

    rank: int
    msg_id: bytes
    requests: list[Request]
    redelivered: bool
    index: int = 0


class Intake:
    """The served ranks' request entries, from reading to acknowledging.

    ``pending[rank]`` is true until the rank's pending entries (delivered to
    a predecessor, never acknowledged) have been read again; ``last_ids``
    are the ids of the last entries read (where the waker's XREAD starts);
    ``maybe_new`` says a read may find more (a full read left some behind);
    ``fetched`` holds the job hash fields of the starts in the backlog.
    """

    def __init__(self, ranks: Iterable[int]) -> None:
        ranks = list(ranks)
        self.backlog: deque[Backlog] = deque()
        self.pending = dict.fromkeys(ranks, True)
        self.last_ids: dict[int, Any] = dict.fromkeys(ranks, "$")
        self.maybe_new = True
        self.fetched: dict[int, tuple[Any, ...]] = {}

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
                    requests = decode_requests(fields)
                except MessageError as exc:
                    poison.append((rank, msg_id, fields or {}, f"MessageError: {exc}"))
                    continue
                new_starts += [r.id for r in requests if isinstance(r, Start)
                               and r.id not in self.fetched and not known(rank, r.id)]
                self.backlog.append(Backlog(rank, msg_id, requests, redelivered))
        return new_starts, poison

    def handle(self, handler: Callable[[int, Request, bool], None],
               ack: Callable[[int, bytes], None], budget: float,
               clock: Callable[[], float]) -> None:
        """Hand the backlog's requests to ``handler(rank, request, redelivered)`` in order,
        for about ``budget`` seconds of ``clock``; ``ack`` each entry fully handled."""
        deadline = clock() + budget
        backlog = self.backlog
        while backlog:
            entry = backlog[0]
            requests = entry.requests
            while entry.index < len(requests):
                request = requests[entry.index]
                entry.index += 1
                handler(entry.rank, request, entry.redelivered)
                if clock() > deadline:
                    break
            if entry.index < len(requests):
                return  # the rest of this entry waits for the next iteration
            backlog.popleft()
            ack(entry.rank, entry.msg_id)
            if not backlog:
                self.fetched.clear()
            if clock() > deadline:
                return
