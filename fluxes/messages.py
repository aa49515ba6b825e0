"""Messages between workers over streams: RFC 27 (job manager <-> scheduler), exec, control.

Each stream entry has one field ``d``: compact JSON ``{"e": epoch, "m": [msg...]}``
so a worker sends a whole batch with one XADD. Every message is an object
with a type ``t`` and the keys listed in :data:`SCHEMA`; :func:`decode`
checks them, and anything malformed raises :class:`MessageError` so the
reader can dead-letter the entry instead of crashing.

RFC 27 names map as follows (the ``t`` values):

* scheduler -> job manager: ``hello`` (a new scheduler epoch), ``ready``
  (``mode``: single | unlimited | limited, ``limit``), ``alloc`` (response:
  ``type`` 0 SUCCESS, 1 ANNOTATE, 2 DENY, 3 CANCEL; ``annotations``, ``note``,
  and on SUCCESS the ``R`` it stored), ``free`` (response), ``error`` (RFC 27's
  error response and ``disconnect``: the scheduler cannot go on; optional
  ``note`` text and the ``id`` of the job whose request failed), after which
  the job manager suspends scheduling until the next ``hello``;
* job manager -> scheduler: ``hello-reply`` (``alloc``: jobs holding
  resources), ``alloc``, ``cancel``, ``prioritize`` (``jobs``: [[id, priority]]),
  ``free``, ``reset`` (ask the scheduler to start a new epoch);
* job manager -> exec (per rank): ``start``, ``kill``;
* exec -> job manager: ``exec`` (per job and rank: ``started``, ``status``,
  ``released``, ``error``);
* ingest -> job manager: ``new`` (jobs created), ``cancel``, ``urgency``,
  ``raise`` (forwarded user requests, with the authenticated ``userid``),
  ``queues`` (queue admin state changed); scheduler -> job manager
  ``lost-ranks`` (exec workers stopped heart-beating: their jobs fail).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

FIELD = b"d"

ALLOC_SUCCESS, ALLOC_ANNOTATE, ALLOC_DENY, ALLOC_CANCEL = 0, 1, 2, 3
MODES = ("single", "unlimited", "limited")


class MessageError(ValueError):
    """A stream entry or message does not follow the protocol."""


_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_LIST = (list,)
_DICT = (dict,)
_BOOL = (bool,)
_OPT_STR = (str, type(None))
_OPT_INT = (int, type(None))
_OPT_DICT = (dict, type(None))

#: type -> {key: accepted python types}; keys not listed are allowed (extensions).
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    # scheduler -> job manager
    "hello": {},
    "ready": {"mode": _STR},
    "alloc-response": {"id": _INT, "type": _INT},
    "free-response": {"id": _INT},
    "error": {},
    # job manager -> scheduler
    "hello-reply": {"alloc": _LIST},
    "alloc": {"id": _INT, "priority": _INT, "userid": _INT},
    "cancel": {"id": _INT},
    "prioritize": {"jobs": _LIST},
    "free": {"id": _INT},
    "reset": {},
    # job manager -> exec
    "start": {"id": _INT, "ranks": _STR},
    "kill": {"id": _INT, "signal": _INT},
    # exec -> job manager
    "exec": {"id": _INT, "rank": _INT},
    # ingest / admin -> job manager
    "new": {"id": _INT, "userid": _INT, "urgency": _INT, "flags": _INT, "t_submit": _NUM},
    "cancel-request": {"ids": _LIST, "userid": _INT},
    "urgency-request": {"id": _INT, "urgency": _INT, "userid": _INT},
    "raise": {"ids": _LIST, "userid": _INT, "type": _STR, "severity": _INT},
    "queues": {},
    "lost-ranks": {"ranks": _STR},
}


def encode(messages: Iterable[Mapping[str, Any]], epoch: int = 0) -> dict[bytes, bytes]:
    """Stream entry fields for a batch of messages."""
    return {FIELD: orjson.dumps({"e": epoch, "m": list(messages)})}


def decode(fields: Mapping[bytes, bytes]) -> tuple[int, list[dict[str, Any]]]:
    """Epoch and checked messages of a stream entry; MessageError when malformed."""
    raw = fields.get(FIELD)
    if raw is None:
        raise MessageError("entry has no 'd' field")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MessageError(f"entry is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MessageError("entry is not an object")
    epoch = doc.get("e", 0)
    msgs = doc.get("m")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not isinstance(msgs, list):
        raise MessageError("entry needs an integer 'e' and a list 'm'")
    for msg in msgs:
        check(msg)
    return epoch, msgs


def check(msg: Any) -> dict[str, Any]:
    """Check one message against :data:`SCHEMA`; return it or raise MessageError."""
    if not isinstance(msg, dict):
        raise MessageError(f"message is not an object: {msg!r:.80}")
    kind = msg.get("t")
    spec = SCHEMA.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise MessageError(f"unknown message type {kind!r:.40}")
    for key, types in spec.items():
        value = msg.get(key)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise MessageError(f"{kind}: '{key}' must be {_names(types)}, got {value!r:.40}")
    return msg


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
