"""User requests as the ingest handles them: decoded requests, their progress-record
names and digests, blocks of bounded size, and how much a read should bring."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from fluxes import messages as proto
from fluxes.domain.jm import arrays

#: Requests one read brings at most.
READ_COUNT = 500
#: Bytes of requests one read should bring at most: after a read of big requests the
#: next reads take fewer (down to one), so what a read holds stays near this.
READ_BYTES = 32 << 20
#: Requests of the first read (then doubled while they are small, up to READ_COUNT).
READ_FIRST = 16
#: Jobs handled (checked, held, committed) in one block at most: a read of many big
#: requests is handled in several blocks, so the ingest's memory stays bounded
#: (issue 26). A request with more jobs (up to [ingest] max-jobs-per-request) is
#: a block of its own.
BLOCK_JOBS = 10_000

_ENCODER = msgspec.json.Encoder()


@dataclass(slots=True)
class Pending:
    """A decoded request and where it came from."""

    stream: str
    msg_id: bytes
    fields: Mapping[bytes, bytes]
    user: str
    uid: int
    request: proto.Request


def record_name(user: str, request: proto.UserRequest) -> str:
    """The name of a request's progress records: request ids are only unique per user."""
    return f"{user}:{request.req[:64]}"


def request_digest(request: proto.Request) -> str:
    """A digest of a request as decoded (the same request, sent again, has the same one),
    which its progress records keep: a request id used again for another request is
    refused rather than answered with the first one's jobs."""
    return hashlib.blake2b(_ENCODER.encode(request), digest_size=12).hexdigest()


def reused(request: proto.Request) -> str:
    """The answer to a request whose id was used for another request."""
    return (f"request id {request.req[:64]!r} was used for another request within 24 "
            "hours: send it with a new one")


def job_count(request: proto.Request) -> int:
    """How many jobs a request stands for (a control request: 1)."""
    return arrays.job_count(request) if isinstance(request, proto.SubmitJobs) else 1


def blocks(requests: Sequence[Pending], most: int = BLOCK_JOBS) -> Iterator[list[Pending]]:
    """``requests`` in blocks of at most ``most`` jobs (a request with more is a block of
    its own), in order."""
    block: list[Pending] = []
    jobs = 0
    for pending in requests:
        size = job_count(pending.request)
        if block and jobs + size > most:
            yield block
            block, jobs = [], 0
        block.append(pending)
        jobs += size
    if block:
        yield block


def first_copies(requests: Sequence[Pending]) -> tuple[dict[int, int], dict[str, str]]:
    """For each request of a block, the index of the first one with its record name (a
    request sent twice is handled once), and the digest of each first one by name."""
    first: dict[str, int] = {}
    copies: dict[int, int] = {}
    digests: dict[str, str] = {}
    for n, pending in enumerate(requests):
        name = record_name(pending.user, pending.request)
        copies[n] = first.setdefault(name, n)
        if copies[n] == n:
            digests[name] = request_digest(pending.request)
    return copies, digests


def control_ids(request: proto.Request) -> list[int] | None:
    """The job ids a control request names (None: it goes to every partition, as
    ``job killall`` does)."""
    if isinstance(request, proto.KillAll):
        return None
    if isinstance(request, proto.SetUrgency | proto.UpdateJob):
        return [request.id]
    if isinstance(request, proto.CancelJobs | proto.RaiseOnJobs | proto.SignalJobs):
        return list(request.ids)
    return []


def next_read_count(count: int, got_bytes: int) -> int:
    """Requests to read next, after a read of ``count`` that brought ``got_bytes``:
    scaled down to bring about READ_BYTES when it brought more, doubled (up to
    READ_COUNT) while twice as many would still fit."""
    if got_bytes > READ_BYTES:
        return max(1, count * READ_BYTES // got_bytes)
    if got_bytes * 2 <= READ_BYTES:
        return min(READ_COUNT, count * 2)
    return count


def reply_bytes(reply: list[Any]) -> int:
    """Bytes of the request fields an XREADGROUP brought."""
    return sum(len(value) for _stream, entries in reply for _sid, fields in entries
               if fields for value in fields.values())
