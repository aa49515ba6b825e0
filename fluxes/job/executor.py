"""``FluxExecutor``: jobs as ``concurrent.futures`` futures (flux's ``FluxExecutor``).

One background thread owns a :class:`~fluxes.job.handle.Flux` handle: it
takes the jobspecs submitted since its last step, sends them as one request,
and follows every job it submitted in the partition journals (read from a
position taken before the jobs existed), so its futures are fulfilled from
one XREAD per step whatever their number: no thread and no request per job.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fluxes.job.future import EventLogEvent, JobException

#: The events ``add_event_callback`` accepts (flux's main events).
EVENTS = frozenset({"submit", "validate", "depend", "priority", "flux-restart", "urgency",
                    "alloc", "free", "start", "release", "finish", "clean", "debug",
                    "exception", "invalidate", "set-flags", "sched", "prolog-start",
                    "prolog-finish", "epilog-start", "epilog-finish", "memo"})

log = logging.getLogger(__name__)

#: The events that may end a job's future (its result or its exception).
_ENDING = frozenset({"finish", "exception"})

#: With at least this many jobs in flight, a read that brought fewer than
#: GATHER_ENTRIES events is followed by a GATHER_S pause (flux's executor, too,
#: delivers events in batches); fewer jobs in flight (a small sliding window) read
#: at once.
GATHER_IN_FLIGHT = 32
GATHER_ENTRIES = 256
GATHER_S = 0.01


class FluxExecutorFuture(concurrent.futures.Future[int]):
    """A job's future: ``jobid(timeout)``, ``add_jobid_callback``,
    ``add_event_callback(event, fn)``; ``result()`` is the job's exit code
    (-signal when its tasks were killed), ``exception()`` a :class:`JobException`
    when a fatal exception ended it (canceled, timed out, failed to start)."""

    EVENTS = EVENTS

    def __init__(self, owning_thread_id: int | None = None) -> None:
        """A future not yet submitted."""
        super().__init__()
        self._owner = owning_thread_id
        self._jobid: Any = None
        self._jobid_error: BaseException | None = None
        self._jobid_set = threading.Event()
        self._lock = threading.RLock()
        self._jobid_callbacks: list[Callable[[Any], Any]] = []
        self._occurred: dict[str, list[EventLogEvent]] = {}
        self._callbacks: dict[str, list[Callable[[Any, EventLogEvent], Any]]] = {}

    def _set_jobid(self, jobid: Any, error: BaseException | None = None) -> None:
        with self._lock:
            if self._jobid_set.is_set():
                return  # the follower's bind and the submission's answer both tell it
            self._jobid, self._jobid_error = jobid, error
            self._jobid_set.set()
            callbacks = list(self._jobid_callbacks)
        if error is None:
            for cb in callbacks:
                _call(cb, self)

    def jobid(self, timeout: float | None = None) -> Any:
        """The job's JobID, once submitted; ``concurrent.futures.TimeoutError`` after
        ``timeout``; the submission's error if it was refused."""
        if not self._jobid_set.wait(timeout):
            raise concurrent.futures.TimeoutError()
        if self._jobid_error is not None:
            raise self._jobid_error
        return self._jobid

    def add_jobid_callback(self, callback: Callable[[Any], Any]) -> FluxExecutorFuture:
        """Call ``callback(future)`` once the job has its id (at once if it has)."""
        with self._lock:
            if not self._jobid_set.is_set():
                self._jobid_callbacks.append(callback)
                return self
        if self._jobid_error is None:
            _call(callback, self)
        return self

    def add_event_callback(self, event: str, callback: Callable[[Any, EventLogEvent], Any]
                           ) -> FluxExecutorFuture:
        """Call ``callback(future, event)`` each time ``event`` happens (at once for
        those that happened); ``ValueError`` for an event name that does not exist."""
        if event not in self.EVENTS:
            raise ValueError(event)
        with self._lock:
            self._callbacks.setdefault(event, []).append(callback)
            past = list(self._occurred.get(event, ()))
        for entry in past:
            _call(callback, self, entry)
        return self

    def _set_event(self, entry: EventLogEvent) -> None:
        name = entry.name
        with self._lock:
            occurred = self._occurred.get(name)
            if occurred is None:
                self._occurred[name] = [entry]
            else:
                occurred.append(entry)
            callbacks = self._callbacks.get(name)
            if not callbacks:
                return  # the common case: no callback for this event
            callbacks = list(callbacks)
        for cb in callbacks:
            _call(cb, self, entry)

    def result(self, timeout: float | None = None) -> int:
        """The job's exit code (blocking)."""
        self._not_in_callback()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The job's JobException, or None (blocking)."""
        self._not_in_callback()
        return super().exception(timeout)

    def _not_in_callback(self) -> None:
        if not self.done() and threading.get_ident() == self._owner:
            raise RuntimeError("Cannot wait for future from inside callback")

    def set_exception(self, exception: BaseException | None) -> None:
        """Fail the future (and its jobid, if it never got one)."""
        if not self._jobid_set.is_set():
            self._set_jobid(None, RuntimeError(f"job could not be submitted: {exception!r}"))
        super().set_exception(exception)

    def cancel(self) -> bool:
        """Cancel the future if its job is not submitted yet (as flux: a submitted job
        runs on; cancel it with ``fluxes.job.cancel``)."""
        cancelled = super().cancel()
        if cancelled and not self._jobid_set.is_set():
            self._set_jobid(None, concurrent.futures.CancelledError())
        return cancelled


def _call(callback: Callable[..., Any], *args: Any) -> None:
    """Run a user callback; its exception is logged, never raised into the executor."""
    try:
        callback(*args)
    except Exception:
        log.exception("exception in a FluxExecutorFuture callback")


class _Follower:
    """Feeds one future from the engine: events, the exit code, the end."""

    __slots__ = ("future", "settled")

    def __init__(self, future: FluxExecutorFuture) -> None:
        self.future = future
        #: the future got its result or exception from this follower (no more
        #: asking the future, which takes its lock, for every later event)
        self.settled = False

    def _event(self, event: EventLogEvent) -> None:
        future = self.future
        name = event.name
        if name in EVENTS:
            future._set_event(event)
        if self.settled or name not in _ENDING:
            return
        if future.done():  # e.g. failed by the executor meanwhile
            self.settled = True
            return
        if name == "finish":
            self.settled = True
            status = int(event.context.get("status", 0))
            if os.WIFSIGNALED(status):
                future.set_result(-os.WTERMSIG(status))
            else:
                future.set_result(os.WEXITSTATUS(status))
        elif event.context.get("severity") == 0:
            self.settled = True
            future.set_exception(JobException(event))

    def _bind(self, jobid: Any) -> None:
        self.future._set_jobid(jobid)

    def _end(self) -> None:
        if not self.future.done():
            self.future.set_exception(RuntimeError("the job ended without a result"))


class _Worker(threading.Thread):
    """The executor's one thread: a handle's engine plus the inbox of jobspecs."""

    def __init__(self, uri: str | None, inbox: queue.SimpleQueue[Any],
                 stop: threading.Event, ready: threading.Event) -> None:
        super().__init__(name="fluxes-executor", daemon=True)
        self.uri, self.inbox, self.stop, self.ready = uri, inbox, stop, ready
        self.error: BaseException | None = None
        self.in_flight = 0

    def run(self) -> None:
        from fluxes.job.handle import Flux

        try:
            handle = Flux(self.uri)
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            self._fail_all(exc)
            return
        self.ready.set()
        try:
            self._loop(handle)
        except BaseException as exc:
            self.error = exc
            self._fail_all(exc)
        finally:
            handle.close()

    def _loop(self, handle: Any) -> None:
        while True:
            idle = not self.in_flight and not handle._outbox and not handle._replies
            self._take(handle, wait=idle and not self.stop.is_set())
            if self.stop.is_set() and not self.in_flight and self.inbox.empty() \
                    and not handle._outbox and not handle._replies:
                return
            read = handle.step(0.02)
            handle._run_ready()
            if self.in_flight >= GATHER_IN_FLIGHT and read < GATHER_ENTRIES \
                    and self.inbox.empty() and not self.stop.is_set():
                # Many jobs in flight: let their events gather for a moment rather
                # than read (and wake) for every few of them; one more read per job
                # costs the client and Redis more than this delay costs anyone
                # (the instance runs the jobs meanwhile).
                time.sleep(GATHER_S)

    def _done(self, _future: Any) -> None:
        self.in_flight -= 1  # only ever called in this thread: the engine fulfils futures

    def _take(self, handle: Any, wait: bool = False) -> None:
        """Queue the jobspecs submitted since the last step (with ``wait``, nothing being
        in flight, block a little for the first: an idle executor must not spin)."""
        from fluxes.job.api import _spec_item

        while True:
            try:
                future, jobspec = self.inbox.get(timeout=0.1) if wait else \
                    self.inbox.get_nowait()
            except queue.Empty:
                return
            wait = False
            if not future.set_running_or_notify_cancel():
                continue
            if isinstance(jobspec, _Attach):
                self._attach(handle, future, jobspec.jobid)
                continue
            try:
                item = _spec_item(jobspec, None, 0)
            except (ValueError, TypeError) as exc:
                future.set_exception(exc)
                continue
            self.in_flight += 1
            future.add_done_callback(self._done)
            sub = handle.queue_submit(item, follow=_Follower(future))
            sub.then(_on_id, future)
            handle._waiting.discard(sub)

    def _attach(self, handle: Any, future: FluxExecutorFuture, jobid: int) -> None:
        """Follow an existing job from the start of its eventlog."""
        from fluxes.job.jobid import JobID

        try:
            handle.watch_log(int(jobid), _Follower(future))
        except FileNotFoundError:
            future.set_exception(ValueError("job ID does not match any job"))
            return
        self.in_flight += 1
        future.add_done_callback(self._done)
        future._set_jobid(JobID(jobid))

    def _fail_all(self, exc: BaseException) -> None:
        while True:
            try:
                future, _ = self.inbox.get_nowait()
            except queue.Empty:
                return
            if not future.done():
                future.set_exception(exc)


class _Attach:
    """An inbox entry asking to follow an existing job."""

    __slots__ = ("jobid",)

    def __init__(self, jobid: int) -> None:
        self.jobid = jobid


def _on_id(sub: Any, future: FluxExecutorFuture) -> None:
    """The submission's answer: the job's id, or the refusal on the future."""
    try:
        jobid = sub.get_id()
    except Exception as exc:
        future.set_exception(exc)
        return
    future._set_jobid(jobid)


class FluxExecutor(concurrent.futures.Executor):
    """Runs jobspecs as jobs; ``submit(jobspec)`` returns a :class:`FluxExecutorFuture`.

    ``handle_args``/``handle_kwargs`` go to :class:`~fluxes.job.handle.Flux` (the
    instance URI); ``threads`` is accepted for flux's signature (one thread serves
    every job).
    """

    def __init__(self, threads: int = 1, thread_name_prefix: str = "",
                 poll_interval: float = 0.1, handle_args: tuple[Any, ...] = (),
                 handle_kwargs: dict[str, Any] | None = None) -> None:
        """Start the executor's thread."""
        uri = (handle_args[0] if handle_args else None) or (handle_kwargs or {}).get("uri")
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._shut = False
        self._worker = _Worker(uri, self._inbox, self._stop, self._ready)
        self._worker.start()
        self._ready.wait()

    def submit(self, jobspec: Any, *args: Any, **kwargs: Any) -> FluxExecutorFuture:  # type: ignore[override]
        """Submit ``jobspec`` (a JobspecV1); the future is the job's."""
        if self._shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = FluxExecutorFuture(self._worker.ident)
        if self._worker.error is not None:
            future.set_exception(self._worker.error)
            return future
        self._inbox.put((future, jobspec))
        return future

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: float | None = None, chunksize: int = 1) -> Iterator[Any]:
        """``fn(*args)`` builds a jobspec for each tuple of arguments; yields the jobs'
        exit codes in order."""
        futures = [self.submit(fn(*args)) for args in zip(*iterables, strict=False)]
        return (future.result(timeout) for future in futures)

    def attach(self, jobid: int) -> FluxExecutorFuture:
        """A future for a job submitted elsewhere: its events from the first on, its
        exit code; ``ValueError`` on the future when no such job exists."""
        if self._shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future = FluxExecutorFuture(self._worker.ident)
        self._inbox.put((future, _Attach(int(jobid))))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking jobs; with ``wait``, block until every job's future is done."""
        self._shut = True
        if cancel_futures:
            while True:
                try:
                    future, _ = self._inbox.get_nowait()
                except queue.Empty:
                    break
                future.cancel()
        self._stop.set()
        if wait:
            self._worker.join()

    def __enter__(self) -> FluxExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(wait=True)
