"""RFC 21 job events: one frozen dataclass per event, decoded and checked from RFC 18 form.

An event on the wire (RFC 18) is ``{"timestamp": float, "name": str,
"context": {...}}``. :func:`decode` turns it into the matching dataclass after
checking the context keys RFC 21 requires; unknown names become
:class:`UnknownEvent` (RFC 21 allows them) and ``debug.*`` names
:class:`DebugEvent`. :meth:`Event.to_rfc18` gives the wire form back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from fluxes.formats.shown import shown as _show

#: Shared immutable empty context: most events have none, so no dict per event.
NO_CONTEXT: Mapping[str, Any] = MappingProxyType({})

MAX_PRIORITY = 4294967295
MAX_URGENCY = 31


class EventError(ValueError):
    """An event (or its context) does not follow RFC 21."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every job event: a timestamp plus whatever RFC 21 defines for the name."""

    name: ClassVar[str] = ""
    timestamp: float
    #: context keys beyond those RFC 21 defines (allowed for plugins), kept for export
    extra: Mapping[str, Any] = field(default_factory=lambda: NO_CONTEXT)

    def context(self) -> dict[str, Any]:
        """The event context as RFC 21 lays it out (defined keys plus extras)."""
        if not self.extra:
            # nearly every event (each a fresh dict): no copy of the empty extras
            return self._defined_context()
        ctx = dict(self.extra)
        ctx.update(self._defined_context())
        return ctx

    def _defined_context(self) -> dict[str, Any]:
        return {}

    @property
    def event_name(self) -> str:
        """The event's name (``debug.*`` and unknown events carry their own)."""
        return self.name

    def to_rfc18(self) -> dict[str, Any]:
        """The RFC 18 object; ``context`` is left out when empty, as flux does."""
        obj: dict[str, Any] = {"timestamp": self.timestamp, "name": self.event_name}
        ctx = self.context()
        if ctx:
            obj["context"] = ctx
        return obj


# ---------------------------------------------------------------- context checks


def _int(ctx: Mapping[str, Any], key: str, lo: int | None = None, hi: int | None = None) -> int:
    value = ctx.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventError(f"context.{key}: expected an integer, got {_show(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise EventError(f"context.{key}: {_show(value)} is out of range {lo}..{hi}")
    return value


def _str(ctx: Mapping[str, Any], key: str) -> str:
    value = ctx.get(key)
    if not isinstance(value, str):
        raise EventError(f"context.{key}: expected a string, got {_show(value)}")
    return value


def _bool(ctx: Mapping[str, Any], key: str) -> bool:
    value = ctx.get(key)
    if not isinstance(value, bool):
        raise EventError(f"context.{key}: expected true or false, got {_show(value)}")
    return value


def _dict(ctx: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = ctx.get(key)
    if not isinstance(value, dict):
        raise EventError(f"context.{key}: expected an object, got {_show(value)}")
    return value


def _label(name: str) -> str:
    """An event name for a message: unknown names may be long or hold newlines."""
    return name if len(name) <= 40 and name.isprintable() else _show(name)


def _float_ok(value: float) -> bool:
    """True unless ``value`` is NaN or an int too large for a float."""
    try:
        return not math.isnan(value)
    except OverflowError:
        return False


def _extra(ctx: Mapping[str, Any], *defined: str) -> Mapping[str, Any]:
    if len(ctx) <= len(defined) and all(k in defined for k in ctx):
        return NO_CONTEXT
    return {k: v for k, v in ctx.items() if k not in defined}


# ---------------------------------------------------------------- the events

@dataclass(frozen=True, slots=True, kw_only=True)
class Submit(Event):
    """Job was submitted; always the first event."""

    name: ClassVar[str] = "submit"
    urgency: int
    userid: int
    flags: int = 0
    version: int = 1

    def _defined_context(self) -> dict[str, Any]:
        return {"urgency": self.urgency, "userid": self.userid,
                "flags": self.flags, "version": self.version}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Submit:
        """Decode and check a submit context."""
        return cls(timestamp=ts, urgency=_int(ctx, "urgency", 0, MAX_URGENCY),
                   userid=_int(ctx, "userid", 0), flags=_int(ctx, "flags", 0),
                   version=_int(ctx, "version", 1, 1),
                   extra=_extra(ctx, "urgency", "userid", "flags", "version"))


@dataclass(frozen=True, slots=True, kw_only=True)
class _NoContext(Event):
    """An event RFC 21 defines without context keys."""

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Event:
        """Decode an event that has no defined context."""
        return cls(timestamp=ts, extra=dict(ctx) if ctx else NO_CONTEXT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Validate(_NoContext):
    """Job submission is valid: NEW -> DEPEND."""

    name: ClassVar[str] = "validate"


@dataclass(frozen=True, slots=True, kw_only=True)
class Invalidate(_NoContext):
    """Job submission is invalid: NEW -> INACTIVE."""

    name: ClassVar[str] = "invalidate"


@dataclass(frozen=True, slots=True, kw_only=True)
class Depend(_NoContext):
    """All dependencies are met: DEPEND -> PRIORITY."""

    name: ClassVar[str] = "depend"


@dataclass(frozen=True, slots=True, kw_only=True)
class FluxRestart(_NoContext):
    """The job manager restarted: SCHED -> PRIORITY (the alloc is requested again)."""

    name: ClassVar[str] = "flux-restart"


@dataclass(frozen=True, slots=True, kw_only=True)
class Start(_NoContext):
    """Job shells have started."""

    name: ClassVar[str] = "start"


@dataclass(frozen=True, slots=True, kw_only=True)
class Free(_NoContext):
    """Resources have been returned to the scheduler."""

    name: ClassVar[str] = "free"


@dataclass(frozen=True, slots=True, kw_only=True)
class Clean(_NoContext):
    """Cleanup is complete: CLEANUP -> INACTIVE."""

    name: ClassVar[str] = "clean"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobspecUpdate(Event):
    """Jobspec attributes changed after submission (period-delimited ``attributes.*`` keys)."""

    name: ClassVar[str] = "jobspec-update"
    updates: Mapping[str, Any]

    def _defined_context(self) -> dict[str, Any]:
        return dict(self.updates)

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> JobspecUpdate:
        """Decode; at least one key, every key starting with ``attributes.``."""
        if not ctx:
            raise EventError("jobspec-update: context must contain at least one key")
        for key in ctx:
            if not key.startswith("attributes."):
                raise EventError(f"jobspec-update: key {_show(key)} does not start with "
                                 "'attributes.'")
        return cls(timestamp=ts, updates=dict(ctx))


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceUpdate(Event):
    """R changed while the job holds it (e.g. a new expiration)."""

    name: ClassVar[str] = "resource-update"
    expiration: float | None = None

    def _defined_context(self) -> dict[str, Any]:
        return {} if self.expiration is None else {"expiration": self.expiration}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> ResourceUpdate:
        """Decode; ``expiration`` must be a non-negative number when present."""
        if not ctx:
            raise EventError("resource-update: context must contain at least one key")
        exp = ctx.get("expiration")
        if exp is not None and (isinstance(exp, bool) or not isinstance(exp, int | float)
                                or exp < 0 or not _float_ok(exp)):
            raise EventError(f"context.expiration: expected a number >= 0, got {_show(exp)}")
        return cls(timestamp=ts, expiration=None if exp is None else float(exp),
                   extra=_extra(ctx, "expiration"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SetFlags(Event):
    """Flags were set on the job (e.g. ``debug``, ``waitable``)."""

    name: ClassVar[str] = "set-flags"
    flags: tuple[str, ...]

    def _defined_context(self) -> dict[str, Any]:
        return {"flags": list(self.flags)}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> SetFlags:
        """Decode; ``flags`` is a list of strings."""
        flags = ctx.get("flags")
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise EventError(f"context.flags: expected a list of strings, got {_show(flags)}")
        return cls(timestamp=ts, flags=tuple(flags), extra=_extra(ctx, "flags"))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Described(Event):
    """An event whose context names a description (dependency, prolog, epilog)."""

    description: str

    def _defined_context(self) -> dict[str, Any]:
        return {"description": self.description}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Event:
        """Decode; ``description`` is a string."""
        return cls(timestamp=ts, description=_str(ctx, "description"),
                   extra=_extra(ctx, "description"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyAdd(_Described):
    """A dependency was added; it must later be removed for the job to leave DEPEND."""

    name: ClassVar[str] = "dependency-add"


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyRemove(_Described):
    """A previously added dependency was satisfied."""

    name: ClassVar[str] = "dependency-remove"


@dataclass(frozen=True, slots=True, kw_only=True)
class PrologStart(_Described):
    """A prolog started; the job may not start until it finishes."""

    name: ClassVar[str] = "prolog-start"


@dataclass(frozen=True, slots=True, kw_only=True)
class EpilogStart(_Described):
    """An epilog started; resources may not be freed until it finishes."""

    name: ClassVar[str] = "epilog-start"


@dataclass(frozen=True, slots=True, kw_only=True)
class _DescribedStatus(Event):
    """A prolog/epilog completion: description and status."""

    description: str
    status: int

    def _defined_context(self) -> dict[str, Any]:
        return {"description": self.description, "status": self.status}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Event:
        """Decode; ``description`` string and integer ``status``."""
        return cls(timestamp=ts, description=_str(ctx, "description"),
                   status=_int(ctx, "status"), extra=_extra(ctx, "description", "status"))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrologFinish(_DescribedStatus):
    """A prolog completed (status 0 = success)."""

    name: ClassVar[str] = "prolog-finish"


@dataclass(frozen=True, slots=True, kw_only=True)
class EpilogFinish(_DescribedStatus):
    """An epilog completed (status 0 = success)."""

    name: ClassVar[str] = "epilog-finish"


@dataclass(frozen=True, slots=True, kw_only=True)
class Priority(Event):
    """The priority plugin assigned a priority: PRIORITY -> SCHED (or a change in SCHED)."""

    name: ClassVar[str] = "priority"
    priority: int

    def _defined_context(self) -> dict[str, Any]:
        return {"priority": self.priority}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Priority:
        """Decode; priority is 0..4294967295."""
        return cls(timestamp=ts, priority=_int(ctx, "priority", 0, MAX_PRIORITY),
                   extra=_extra(ctx, "priority"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Urgency(Event):
    """The job's urgency changed (0 holds, 31 expedites)."""

    name: ClassVar[str] = "urgency"
    urgency: int
    userid: int

    def _defined_context(self) -> dict[str, Any]:
        return {"urgency": self.urgency, "userid": self.userid}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Urgency:
        """Decode; urgency is 0..31."""
        return cls(timestamp=ts, urgency=_int(ctx, "urgency", 0, MAX_URGENCY),
                   userid=_int(ctx, "userid", 0), extra=_extra(ctx, "urgency", "userid"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Alloc(Event):
    """The scheduler allocated resources; carries the annotation snapshot."""

    name: ClassVar[str] = "alloc"
    annotations: Mapping[str, Any] | None = None

    def _defined_context(self) -> dict[str, Any]:
        return {} if self.annotations is None else {"annotations": dict(self.annotations)}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Alloc:
        """Decode; ``annotations`` is optional and an object when present."""
        ann = _dict(ctx, "annotations") if "annotations" in ctx else None
        return cls(timestamp=ts, annotations=ann, extra=_extra(ctx, "annotations"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Release(Event):
    """The exec system released (some of) the job's resources."""

    name: ClassVar[str] = "release"
    ranks: str
    final: bool

    def _defined_context(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "final": self.final}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Release:
        """Decode; ``ranks`` an idset string or "all", ``final`` a boolean."""
        return cls(timestamp=ts, ranks=_str(ctx, "ranks"), final=_bool(ctx, "final"),
                   extra=_extra(ctx, "ranks", "final"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish(Event):
    """Job shells terminated; ``status`` is the largest wait(2) status."""

    name: ClassVar[str] = "finish"
    status: int

    def _defined_context(self) -> dict[str, Any]:
        return {"status": self.status}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Finish:
        """Decode; ``status`` is a wait status (0..65535)."""
        return cls(timestamp=ts, status=_int(ctx, "status", 0, 0xFFFF),
                   extra=_extra(ctx, "status"))


@dataclass(frozen=True, slots=True, kw_only=True)
class JobException(Event):
    """An exception; severity 0 is fatal and moves an active job to CLEANUP."""

    name: ClassVar[str] = "exception"
    type: str
    severity: int
    note: str = ""
    userid: int | None = None

    def _defined_context(self) -> dict[str, Any]:
        ctx: dict[str, Any] = {"type": self.type, "severity": self.severity, "note": self.note}
        if self.userid is not None:
            ctx["userid"] = self.userid
        return ctx

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> JobException:
        """Decode; type string, severity 0..7, note string, optional userid."""
        userid = _int(ctx, "userid", 0) if "userid" in ctx else None
        return cls(timestamp=ts, type=_str(ctx, "type"), severity=_int(ctx, "severity", 0, 7),
                   note=_str(ctx, "note"), userid=userid,
                   extra=_extra(ctx, "type", "severity", "note", "userid"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Memo(Event):
    """Key-value data attached to the job; a null value removes the key."""

    name: ClassVar[str] = "memo"
    values: Mapping[str, Any]

    def _defined_context(self) -> dict[str, Any]:
        return dict(self.values)

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Memo:
        """Decode; the whole context is the memo."""
        if not ctx:
            raise EventError("memo: context must contain at least one key")
        return cls(timestamp=ts, values=dict(ctx))


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotations(Event):
    """Scheduler annotations (journal only, never in a job eventlog; RFC 27 merge rules)."""

    name: ClassVar[str] = "annotations"
    annotations: Mapping[str, Any] | None

    def _defined_context(self) -> dict[str, Any]:
        return {"annotations": None if self.annotations is None else dict(self.annotations)}

    @classmethod
    def from_context(cls, ts: float, ctx: Mapping[str, Any]) -> Annotations:
        """Decode; ``annotations`` is an object (or null to clear)."""
        ann = ctx.get("annotations")
        if ann is not None and not isinstance(ann, dict):
            raise EventError(f"context.annotations: expected an object, got {_show(ann)}")
        return cls(timestamp=ts, annotations=ann)


@dataclass(frozen=True, slots=True, kw_only=True)
class DebugEvent(Event):
    """A ``debug.*`` event: free-form, ignored by the state machine."""

    debug_name: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event_name(self) -> str:
        """The full ``debug.*`` name."""
        return self.debug_name

    def _defined_context(self) -> dict[str, Any]:
        return dict(self.data)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownEvent(Event):
    """An event this version does not know: kept for export, ignored by the state machine."""

    unknown_name: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def event_name(self) -> str:
        """The name as it appeared in the eventlog."""
        return self.unknown_name

    def _defined_context(self) -> dict[str, Any]:
        return dict(self.data)


_DECODERS: dict[str, Callable[[float, Mapping[str, Any]], Event]] = {
    cls.name: cls.from_context
    for cls in (
        Submit, Validate, Invalidate, JobspecUpdate, ResourceUpdate, SetFlags,
        DependencyAdd, DependencyRemove, Depend, Priority, FluxRestart, Urgency, Alloc,
        PrologStart, PrologFinish, EpilogStart, EpilogFinish, Start, Release, Finish,
        Free, Clean, JobException, Memo, Annotations,
    )
}

#: Every event name RFC 21 defines (plus the journal-only ``annotations``).
EVENT_NAMES: frozenset[str] = frozenset(_DECODERS)

_NUMBER = (int, float)


def decode(name: str, timestamp: float, context: Mapping[str, Any] | None = None) -> Event:
    """Build the event named ``name``; raise EventError if its context breaks RFC 21."""
    if name.__class__ is not str or not name:
        raise EventError(f"event name must be a non-empty string, got {_show(name)}")
    if timestamp.__class__ is not float:
        if isinstance(timestamp, bool) or not isinstance(timestamp, _NUMBER):
            raise EventError(f"{_label(name)}: timestamp must be a number, "
                             f"got {_show(timestamp)}")
        try:
            timestamp = float(timestamp)
        except OverflowError:
            raise EventError(f"{_label(name)}: timestamp is too large") from None
    if not 0 <= timestamp < math.inf:  # also false for NaN
        raise EventError(f"{_label(name)}: timestamp must be a finite number >= 0, "
                         f"got {_show(timestamp)}")
    if context is None:
        context = NO_CONTEXT
    elif context.__class__ is not dict and not isinstance(context, Mapping):
        raise EventError(f"{_label(name)}: context must be an object, "
                         f"got {type(context).__name__}")
    decoder = _DECODERS.get(name)
    if decoder is not None:
        try:
            return decoder(timestamp, context)
        except EventError as exc:
            raise EventError(f"{name}: {exc}") from None
    if name.startswith("debug."):
        return DebugEvent(timestamp=float(timestamp), debug_name=name, data=dict(context))
    return UnknownEvent(timestamp=float(timestamp), unknown_name=name, data=dict(context))


def from_rfc18(obj: Any) -> Event:
    """Decode an RFC 18 event object ``{"timestamp", "name", "context"?}``."""
    if not isinstance(obj, Mapping):
        raise EventError(f"an event must be an object, got {type(obj).__name__}")
    fields: Mapping[str, Any] = obj
    return decode(fields.get("name", ""), fields.get("timestamp", -1), fields.get("context"))
