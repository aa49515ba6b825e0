"""Futures, eventlog events and job exceptions of the Python API (flux's shapes).

A :class:`Future` is fulfilled by its handle's engine
(:mod:`fluxes.job.handle`): ``then(cb)`` runs ``cb`` from
``Flux.reactor_run()``, ``get()`` and ``wait_for()`` drive the engine until
the future is ready. Streaming futures (event watches) are fulfilled once
per event and reset by ``get_event()``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from fluxes.job.handle import Flux


class EventLogEvent:
    """One eventlog entry: ``name``, ``timestamp`` and ``context`` (a dict; the JSON
    is decoded when first read)."""

    __slots__ = ("_ctx", "_raw", "name", "timestamp")

    def __init__(self, name: str, timestamp: float, context: bytes | dict[str, Any] | None
                 ) -> None:
        """An event from its parts (``context`` raw JSON or a dict)."""
        self.name = name
        self.timestamp = timestamp
        self._raw = context if isinstance(context, bytes) else None
        self._ctx = context if isinstance(context, dict) else None

    @property
    def context(self) -> dict[str, Any]:
        """The event's context ({} when it has none)."""
        if self._ctx is None:
            obj = orjson.loads(self._raw) if self._raw else {}
            self._ctx = obj if isinstance(obj, dict) else {}
        return self._ctx

    @property
    def context_string(self) -> str:
        """The context as JSON text ("" when empty)."""
        ctx = self.context
        return orjson.dumps(ctx).decode() if ctx else ""

    def __getitem__(self, key: str) -> Any:
        return {"name": self.name, "timestamp": self.timestamp, "context": self.context}[key]

    def __str__(self) -> str:
        return f"{self.timestamp:.6f} {self.name} {self.context_string}".rstrip()

    def __repr__(self) -> str:
        return f"EventLogEvent({self.name!r}, {self.timestamp!r}, {self.context!r})"


class JobException(Exception):
    """An ``exception`` event of a job: ``type``, ``note``, ``severity``, ``timestamp``
    (severity 0 ended the job)."""

    def __init__(self, event: EventLogEvent) -> None:
        """The exception the event reports."""
        ctx = event.context
        self.timestamp = event.timestamp
        self.type = str(ctx.get("type", ""))
        self.note = str(ctx.get("note", ""))
        self.severity = int(ctx.get("severity", 0))
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"job.exception: type={self.type}: {self.note}"


class Future:
    """A result that arrives later through the handle (flux's ``flux.future.Future``)."""

    def __init__(self, handle: Flux) -> None:
        """A pending future of ``handle``."""
        self.flux_handle = handle
        self._ready = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._then: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None = None
        self._called = False

    # -- fulfilment (the engine) ------------------------------------------

    def _fulfil(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error, self._ready = value, error, True
        if self._then is not None:
            self.flux_handle._ready_callback(self)

    def _run_callback(self) -> None:
        if self._then is None or self._called or not self._ready:
            return
        self._called = True
        cb, args, kwargs = self._then
        cb(self, *args, **kwargs)

    def _finished(self) -> bool:
        """True when no more fulfilment will come (single-shot: once ready)."""
        return self._ready

    # -- flux's methods ----------------------------------------------------

    def then(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        """Call ``callback(future, *args, **kwargs)`` from ``reactor_run()`` once ready."""
        self._then = (callback, args, kwargs)
        self.flux_handle._watch_callback(self)
        if self._ready:
            self.flux_handle._ready_callback(self)
        return self

    def is_ready(self) -> bool:
        """True once the result (or error) is in."""
        return self._ready

    def wait_for(self, timeout: float | None = None) -> Future:
        """Block until ready; ``TimeoutError`` after ``timeout`` seconds."""
        self.flux_handle._drive_until(self.is_ready, timeout)
        return self

    def get(self) -> Any:
        """The result (blocking); raises the error the request ended with."""
        self.wait_for()
        if self._error is not None:
            raise self._error
        return self._value

    def reset(self) -> None:
        """Make the future pending again (streaming futures)."""
        self._ready = False
        self._called = False

    def cancel(self, stop: bool = False) -> None:
        """Stop caring about the result: no callback will run."""
        self._then = None
        self.flux_handle._forget(self)


class WatchFuture(Future):
    """A streaming future: ready while events are queued (flux's event watch future)."""

    def __init__(self, handle: Flux, jobid: int) -> None:
        """A watch of ``jobid``'s eventlog."""
        super().__init__(handle)
        self.jobid = jobid
        self._events: collections.deque[EventLogEvent | None] = collections.deque()
        self._ended = False

    def _push(self, event: EventLogEvent | None) -> None:
        """Queue an event (None: the eventlog ended)."""
        if event is None:
            self._ended = True
        self._events.append(event)
        self._fulfil(self._events[0])

    def _fail(self, error: BaseException) -> None:
        self._ended = True
        self._events.append(None)
        self._fulfil(None, error)

    def _finished(self) -> bool:
        return self._ended and not self._events

    def _run_callback(self) -> None:
        # once per queued event, unless the callback consumed them itself
        while self._then is not None and self._events:
            before = len(self._events)
            cb, args, kwargs = self._then
            cb(self, *args, **kwargs)
            if len(self._events) == before:  # not consumed: do it for the callback
                self._events.popleft()
        self._ready = bool(self._events)

    def is_ready(self) -> bool:
        """True while an event is queued, or once the eventlog ended."""
        return bool(self._events) or self._ended or self._error is not None

    def get_event(self, autoreset: bool = True) -> EventLogEvent | None:
        """The next event (blocking), None once the eventlog ended."""
        self.wait_for()
        if self._error is not None:
            raise self._error
        event = self._events[0] if self._events else None
        if autoreset and self._events:
            self._events.popleft()
            self._ready = bool(self._events)
        return event

    def get(self) -> EventLogEvent | None:
        """Same as :meth:`get_event`."""
        return self.get_event()

    def cancel(self, stop: bool = False) -> None:
        """Stop watching."""
        self._then = None
        self._ended = True
        self._events.clear()
        self.flux_handle._forget(self)
