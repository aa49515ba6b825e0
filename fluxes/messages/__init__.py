"""Messages between workers over streams, decoded in one bounded step.

Wire format (docs/protocol.md): a message stream entry has one field ``d``,
compact JSON ``{"e": epoch, "m": [message, ...]}``, so a worker sends a
batch with one XADD; every message is an object whose ``t`` names its type.
A user request (``{ns}:submit:<user>``), a reply and a resource event are one
object each. :mod:`fluxes.messages.types` defines every message, one
tagged union per stream; a :class:`Channel` names a stream's union and its
bounds.

Decoding checks the entry's size and nesting depth on the raw bytes
(:mod:`fluxes.messages.bounds`) and then decodes and validates it with
msgspec in one pass. Anything malformed raises :class:`MessageError` with a
one-line reason, so the reader dead-letters the entry instead of crashing.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec
import orjson

from fluxes.messages.bounds import MessageError, check_bounds, loads_bounded, one_line
from fluxes.messages.types import (
    ALLOC_ANNOTATE,
    ALLOC_CANCEL,
    ALLOC_DENY,
    ALLOC_SUCCESS,
    MODES,
    Alloc,
    AllocResponse,
    Cancel,
    CancelJobs,
    CancelRequest,
    Command,
    Control,
    Drain,
    ExecReport,
    ExecRequest,
    Expiration,
    Free,
    FreeResponse,
    HeldJob,
    Hello,
    HelloReply,
    JobResult,
    Kill,
    KillAll,
    KillAllRequest,
    LostRanks,
    Message,
    Mode,
    New,
    PmiWake,
    Prioritize,
    QueuesChanged,
    RaiseOnJobs,
    RaiseRequest,
    Ready,
    Reload,
    Reply,
    Request,
    Reset,
    ResourceChange,
    SchedError,
    SchedRequest,
    SchedResponse,
    SetUrgency,
    Signal,
    SignalJobs,
    SignalRequest,
    Start,
    SubmitItem,
    SubmitJobs,
    SubmitReqId,
    Undrain,
    UpdateJob,
    UpdateRequest,
    UrgencyRequest,
    UserRequest,
)

__all__ = [
    "ALLOC_ANNOTATE", "ALLOC_CANCEL", "ALLOC_DENY", "ALLOC_SUCCESS", "CONTROL", "EXEC_EVENTS",
    "EXEC_REQUESTS", "FIELD", "JOBSPEC_DEPTH", "MODES", "NEW_JOBS", "SCHED_REQUESTS",
    "SCHED_RESPONSES", "Alloc", "AllocResponse", "Cancel", "CancelJobs", "CancelRequest",
    "Channel", "Command", "Control", "Drain", "ExecReport", "ExecRequest", "Expiration", "Free",
    "FreeResponse",
    "HeldJob", "Hello", "HelloReply", "JobResult", "Kill", "KillAll", "KillAllRequest",
    "LostRanks", "Message", "MessageError", "Mode", "New", "PmiWake", "Prioritize", "QueuesChanged",
    "RaiseOnJobs", "RaiseRequest", "Ready", "Reload", "Reply", "Request", "Reset", "ResourceChange",
    "SchedError", "SchedRequest", "SchedResponse", "SetUrgency", "Signal", "SignalJobs",
    "SignalRequest", "Start", "SubmitItem", "SubmitJobs", "Undrain", "UpdateJob",
    "UpdateRequest", "UrgencyRequest", "UserRequest", "decode_entry", "decode_entry_sent",
    "decode_reply", "decode_request", "decode_resource_event", "encode_chunks", "encode_entry",
    "encode_reply", "encode_request", "load_queue_event", "request_id", "to_builtins",
]

FIELD = b"d"

M = TypeVar("M")

_MiB = 1 << 20
#: Nesting allowed in the streams between workers: the envelope takes 3 levels,
#: annotations and hello replies a few more.
MAX_DEPTH = 32
#: Nesting a jobspec may have (fluxes.formats.jobspec.MAX_DEPTH, which a test
#: keeps equal; not imported here: that module loads yaml and jsonschema).
JOBSPEC_DEPTH = 64
#: A user request: the request object, ``jobs``, the item, then the jobspec.
REQUEST_DEPTH = 3 + JOBSPEC_DEPTH
#: A new job's ``info`` holds its RFC 26 dependencies as the jobspec gave them:
#: 3 levels of envelope and message more than the jobspec, and a margin.
NEW_JOB_DEPTH = JOBSPEC_DEPTH + 8
#: A user request's size: 1000 jobs of a few KiB each fit (a bulk submission is
#: split into requests of at most CHUNK jobs by the client, and further by size).
MAX_REQUEST_BYTES = 16 * _MiB
#: Kept of a reply, a resource event or a queue admin event.
MAX_REPLY_BYTES = 64 * _MiB
MAX_RESOURCE_EVENT_BYTES = 16 * _MiB
MAX_QUEUE_EVENT_BYTES = 64 * 1024
QUEUE_EVENT_DEPTH = 4


class Envelope(msgspec.Struct, Generic[M], kw_only=True):
    """A stream entry: the sender's epoch, a batch of messages and, when the sender
    stamped it, its clock at sending (``s``, UNIX seconds; 0 when absent), from
    which the receiver measures the hand-off (:mod:`fluxes.proc.hops`)."""

    e: int = 0
    m: list[M]
    s: float = 0.0


class _Unstamped(msgspec.Struct, kw_only=True):
    """An envelope written without a send time (``s`` left out)."""

    e: int = 0
    m: list[Any]


class Channel(Generic[M]):
    """A message stream: the union of its message types and the bounds of an entry.

    Its decoder is built on first use: building one costs about a millisecond per
    union, and a short command (``fluxes submit``) decodes none of the streams.
    """

    __slots__ = ("_decoder", "_union", "max_bytes", "max_depth", "name")

    def __init__(self, name: str, max_bytes: int, max_depth: int,
                 decoder: msgspec.json.Decoder[Envelope[M]] | None = None,
                 union: Any = None) -> None:
        """A channel decoding with ``decoder``, or one built for ``union`` when needed."""
        self.name = name
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self._decoder = decoder
        self._union = union

    def bounded(self, max_bytes: int) -> Channel[M]:
        """This channel with another bound on an entry's size (a test's or an operator's
        smaller limit)."""
        return Channel(self.name, max_bytes, self.max_depth, self._decoder, self._union)

    @property
    def decoder(self) -> msgspec.json.Decoder[Envelope[M]]:
        """The envelope decoder of this channel's message union."""
        if self._decoder is None:
            self._decoder = msgspec.json.Decoder(Envelope[self._union])  # type: ignore[name-defined]
        return self._decoder

    def decode(self, raw: bytes) -> tuple[int, list[M]]:
        """Epoch and messages of an entry's ``d`` field; MessageError when malformed."""
        entry = self.envelope(raw)
        return entry.e, entry.m

    def envelope(self, raw: bytes) -> Envelope[M]:
        """The whole envelope of an entry's ``d`` field (epoch, messages, send time);
        MessageError when malformed."""
        check_bounds(raw, self.max_bytes, self.max_depth, self.name)
        try:
            return self.decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise MessageError(f"{self.name}: {one_line(str(exc))}") from None
        except msgspec.DecodeError as exc:
            raise MessageError(f"{self.name}: not JSON: {one_line(str(exc))}") from None


def _channel(name: str, union: Any, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    return Channel(name, max_bytes, max_depth, union=union)


#: {p}:sched:req: job manager -> scheduler (a hello reply lists every job holding resources).
SCHED_REQUESTS: Channel[SchedRequest] = _channel("sched:req", SchedRequest, 64 * _MiB)
#: {p}:sched:resp: scheduler -> job manager.
SCHED_RESPONSES: Channel[SchedResponse] = _channel("sched:resp", SchedResponse, 64 * _MiB)
#: {ns}:exec:rank:<r>: job manager -> exec.
EXEC_REQUESTS: Channel[ExecRequest] = _channel("exec:rank", ExecRequest, 16 * _MiB)
#: {p}:exec:events: exec -> job manager.
EXEC_EVENTS: Channel[ExecReport] = _channel("exec:events", ExecReport, 16 * _MiB)
#: {p}:jm:new: ingest -> job manager.
NEW_JOBS: Channel[New] = _channel("jm:new", New, 64 * _MiB, NEW_JOB_DEPTH)
#: {p}:jm:ctl: ingest, scheduler, CLI -> job manager (lost-ranks can name 2^20 ranks).
CONTROL: Channel[Control] = _channel("jm:ctl", Control, 16 * _MiB)

_ENCODER = msgspec.json.Encoder()


# The decoders below are built on first use (about a millisecond each; a short command
# needs one at most).


@functools.cache
def _requests() -> msgspec.json.Decoder[Request]:
    return msgspec.json.Decoder(Request)


@functools.cache
def _request_id() -> msgspec.json.Decoder[SubmitReqId]:
    return msgspec.json.Decoder(SubmitReqId)


@functools.cache
def _replies() -> msgspec.json.Decoder[Reply]:
    return msgspec.json.Decoder(Reply)


@functools.cache
def _resource_events() -> msgspec.json.Decoder[ResourceChange]:
    return msgspec.json.Decoder(ResourceChange)


def _field(fields: Mapping[bytes, bytes] | Mapping[str, Any] | None, what: str) -> bytes:
    if not fields:
        # an entry deleted or trimmed (XADD MAXLEN, XTRIM) while it was pending
        raise MessageError(f"{what}: entry has no fields (deleted or trimmed while pending)")
    raw = fields.get(FIELD)  # type: ignore[call-overload]
    if raw is None:
        raw = fields.get("d")  # type: ignore[call-overload]
    if raw is None:
        raise MessageError(f"{what}: entry has no 'd' field")
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if not isinstance(raw, bytes):
        raise MessageError(f"{what}: 'd' is not bytes")
    return raw


def decode_entry(channel: Channel[M], fields: Mapping[bytes, bytes]) -> tuple[int, list[M]]:
    """Epoch and typed messages of a stream entry of ``channel``; MessageError when malformed."""
    return channel.decode(_field(fields, channel.name))


def decode_entry_sent(channel: Channel[M], fields: Mapping[bytes, bytes]
                      ) -> tuple[int, list[M], float]:
    """Epoch, typed messages and send time (0: not stamped) of a stream entry of
    ``channel``; MessageError when malformed."""
    entry = channel.envelope(_field(fields, channel.name))
    return entry.e, entry.m, entry.s


def encode_entry(msgs: Sequence[Message], epoch: int = 0,
                 sent: float | None = None) -> dict[bytes, bytes]:
    """Stream entry fields for a batch of typed messages, stamped with ``sent`` (the
    sender's clock, for the receiver's hand-off latency) when given."""
    if sent is None:
        return {FIELD: _ENCODER.encode(_Unstamped(e=epoch, m=list(msgs)))}
    return {FIELD: _ENCODER.encode(Envelope(e=epoch, m=list(msgs), s=sent))}


def encode_chunks(msgs: Sequence[Message], epoch: int, per_entry: int,
                  max_bytes: int, sent: float | None = None) -> list[dict[bytes, bytes]]:
    """Entries for ``msgs``: at most ``per_entry`` messages and (but for a single
    message) ``max_bytes`` bytes each, so that the reader's bound never refuses them;
    each stamped with ``sent`` when given."""
    return [entry for _msgs, entry in chunk_messages(msgs, epoch, per_entry, max_bytes, sent)]


def chunk_messages(msgs: Sequence[Message], epoch: int, per_entry: int, max_bytes: int,
                   sent: float | None = None) -> list[tuple[list[Message], dict[bytes, bytes]]]:
    """:func:`encode_chunks`, each entry with the messages it holds."""
    out = []
    for i in range(0, len(msgs), per_entry):
        out += _fitted(list(msgs[i:i + per_entry]), epoch, max_bytes, sent)
    return out


#: The field of a start request entry carrying a job's stored facts (its job id
#: filled in): the job hash fields the writer copied in (fluxes.store.jobhash).
FACTS_FIELD = b"f:%d"


def _fitted(msgs: list[Message], epoch: int, max_bytes: int,
            sent: float | None) -> list[tuple[list[Message], dict[bytes, bytes]]]:
    entry = encode_entry(msgs, epoch, sent)
    if len(entry[FIELD]) <= max_bytes or len(msgs) == 1:
        return [(msgs, entry)]
    half = len(msgs) // 2
    return _fitted(msgs[:half], epoch, max_bytes, sent) + \
        _fitted(msgs[half:], epoch, max_bytes, sent)


# -- user requests, replies ---------------------------------------------------------------


def decode_request(fields: Mapping[bytes, bytes],
                   max_bytes: int = MAX_REQUEST_BYTES) -> Request:
    """A user request (one per entry of ``{ns}:submit:<user>``); MessageError when malformed."""
    raw = _field(fields, "request")
    check_bounds(raw, max_bytes, REQUEST_DEPTH, "request")
    try:
        return _requests().decode(raw)
    except msgspec.ValidationError as exc:
        raise MessageError(f"request: {one_line(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise MessageError(f"request: not JSON: {one_line(str(exc))}") from None


def request_id(fields: Mapping[bytes, bytes], max_bytes: int = MAX_REQUEST_BYTES) -> str | None:
    """The ``req`` of a request that failed to decode, when it can be read safely (to answer it)."""
    try:
        raw = _field(fields, "request")
        check_bounds(raw, max_bytes, REQUEST_DEPTH, "request")
        return _request_id().decode(raw).req
    except (MessageError, msgspec.ValidationError, msgspec.DecodeError):
        return None


def encode_request(request: UserRequest) -> dict[str, bytes]:
    """Stream entry fields of a user request."""
    return {"d": _ENCODER.encode(request)}


def encode_reply(reply: Reply) -> bytes:
    """A reply as the client reads it."""
    return _ENCODER.encode(reply)


def decode_reply(raw: bytes) -> Reply:
    """A reply read from a reply list; MessageError when malformed."""
    check_bounds(raw, MAX_REPLY_BYTES, MAX_DEPTH, "reply")
    try:
        return _replies().decode(raw)
    except msgspec.ValidationError as exc:
        raise MessageError(f"reply: {one_line(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise MessageError(f"reply: not JSON: {one_line(str(exc))}") from None


# -- admin events ----------------------------------------------------------------------------


def decode_resource_event(fields: Mapping[bytes, bytes]) -> ResourceChange:
    """A drain/undrain event of ``{ns}:resource:events``; MessageError when malformed."""
    raw = _field(fields, "resource event")
    check_bounds(raw, MAX_RESOURCE_EVENT_BYTES, MAX_DEPTH, "resource event")
    try:
        return _resource_events().decode(raw)
    except msgspec.ValidationError as exc:
        raise MessageError(f"resource event: {one_line(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise MessageError(f"resource event: not JSON: {one_line(str(exc))}") from None


def load_queue_event(fields: Mapping[bytes, bytes]) -> Any:
    """A queue admin event of ``{ns}:queues`` as stored (a dict for
    :meth:`fluxes.domain.jm.queues.QueueEvent.from_dict`, which checks it); bounded."""
    return loads_bounded(_field(fields, "queue event"), MAX_QUEUE_EVENT_BYTES,
                         QUEUE_EVENT_DEPTH, "queue event")


# -- tests and tools -----------------------------------------------------------------------


def to_builtins(msg: Message | msgspec.Struct) -> dict[str, Any]:
    """A message as a plain dict (its JSON object), for logs and tests."""
    out = orjson.loads(_ENCODER.encode(msg))
    assert isinstance(out, dict)
    return out


def convert(channel: Channel[M], obj: Mapping[str, Any]) -> M:
    """A typed message of ``channel`` from a dict (tests, tools); MessageError when malformed."""
    # json, not orjson: a test may well hold an int past 64 bits
    [msg] = channel.decode(json.dumps({"e": 0, "m": [obj]}).encode())[1]
    return msg
