"""``Flux``: a handle on an instance, and the engine that fulfils its futures.

One handle is one Redis connection and one thread's engine: every pending
request of the handle is served by the same few round trips per step.
Submissions queued since the last step go out as one request per chunk
(one pipelined XADD); their replies are popped in one pipeline; every
watched eventlog, and the partition journals when jobs are followed from
their submission (the executor), are read with one XREAD. So thousands of
futures in flight cost one blocking read per step, not a thread or a
request each.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fluxes.job.future import EventLogEvent, Future, WatchFuture

if TYPE_CHECKING:
    from fluxes.store.client import Client
    from fluxes.store.instance import Instance
    from fluxes.store.jobfacts import EventlogFollower

#: Events after which a job's eventlog ends.
_LAST = frozenset({b"clean", b"invalidate"})
_LAST_NAMES = frozenset(name.decode() for name in _LAST)
#: Entries per stream per read.
_COUNT = 1000


class SubmitFuture(Future):
    """The id of a submitted job (flux's ``SubmitFuture``): ``get_id()``."""

    def __init__(self, handle: Flux, item: dict[str, Any], follow: Any = None) -> None:
        """A submission of ``item``; ``follow`` (an object with ``_event``, and
        optionally ``_bind`` to learn the job's id before its events) gets the
        job's events from its submission on."""
        super().__init__(handle)
        self.item = item
        self.follow = follow

    def get_id(self) -> Any:
        """The job's :class:`~fluxes.job.jobid.JobID` (blocking); ``OSError`` when the
        submission was refused."""
        return self.get()


class Flux:
    """A handle on the instance named by ``uri``, ``$FLUXES_URI`` or the credentials file."""

    def __init__(self, uri: str | None = None, flags: int = 0) -> None:
        """Connect (``OSError`` with ECONNREFUSED when no instance answers)."""
        from fluxes.store.instance import Instance, NoInstanceError

        try:
            instance = Instance.connect(uri, client_name="fluxes-python")
        except NoInstanceError as exc:
            raise ConnectionRefusedError(errno.ECONNREFUSED, str(exc)) from None
        self._setup(instance)

    @classmethod
    def of_instance(cls, instance: Instance) -> Flux:
        """A handle on an instance already connected (tests, tools)."""
        handle = cls.__new__(cls)
        handle._setup(instance)
        return handle

    def _setup(self, instance: Instance) -> None:
        from fluxes.store.client import Client

        self.instance: Instance = instance
        self.client: Client = Client(self.instance)
        self.redis = self.instance.redis
        self.keys = self.instance.keys
        self._outbox: list[SubmitFuture] = []
        self._replies: dict[str, list[SubmitFuture]] = {}
        # watched eventlogs, by job: the follower (its stream and position), the
        # watchers, the events delivered so far (a late watcher replays them) and
        # the history read but not delivered yet (the next step delivers it)
        self._logs: dict[int, EventlogFollower] = {}
        self._log_watchers: dict[int, list[Any]] = {}
        self._log_seen: dict[int, list[EventLogEvent]] = {}
        self._log_new: dict[int, list[Any]] = {}
        self._journal: dict[str, str] | None = None  # journal key -> position
        self._followed: dict[int, Any] = {}
        self._orphans: dict[int, list[EventLogEvent]] = {}
        self._orphan_since: dict[int, float] = {}  # jobid -> when its first entry was read
        self._posted: dict[str, float] = {}  # reply key -> when its request went out
        self._pruned = 0.0
        self._ready: list[Future] = []
        self._waiting: set[Future] = set()
        #: waitable jobs submitted through this handle and not waited for yet
        self.waitable: list[int] = []

    # -- flux's handle methods ---------------------------------------------

    def reactor_run(self, flags: int = 0) -> int:
        """Run callbacks of pending futures until none is left; returns 0."""
        while True:
            self._run_ready()
            live = [f for f in self._waiting if not f._finished()]
            self._waiting = set(live)
            if not live and not self._ready:
                return 0
            if not self._ready:
                self.step(1.0)

    def reactor_stop(self) -> None:
        """Stop caring about pending callbacks (the next ``reactor_run`` returns)."""
        self._waiting.clear()
        self._ready.clear()

    def fatal_error(self, message: str) -> None:
        """Say ``message`` on stderr and exit 1 (flux's handle method)."""
        import sys

        sys.exit(f"fatal error: {message}")

    def close(self) -> None:
        """Drop the connection."""
        self.redis.close()

    def __enter__(self) -> Flux:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- futures' hooks ----------------------------------------------------

    def _ready_callback(self, future: Future) -> None:
        self._ready.append(future)

    def _watch_callback(self, future: Future) -> None:
        self._waiting.add(future)

    def _forget(self, future: Future) -> None:
        self._waiting.discard(future)
        if isinstance(future, WatchFuture):
            self.unwatch_log(future.jobid, future)

    def _run_ready(self) -> None:
        while self._ready:
            ready, self._ready = self._ready, []
            for future in ready:
                future._run_callback()

    def _drive_until(self, done: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done():
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(errno.ETIMEDOUT, "timed out waiting for the future")
            self.step(min(left, 1.0))

    # -- requests ----------------------------------------------------------

    def queue_submit(self, item: dict[str, Any], follow: Any = None) -> SubmitFuture:
        """Queue a submission (sent by the next step, batched with others)."""
        future = SubmitFuture(self, item, follow)
        self._outbox.append(future)
        return future

    def watch_log(self, jobid: int, watcher: Any) -> None:
        """Deliver ``jobid``'s eventlog from its start to ``watcher._event`` (then
        ``watcher._end()``); ``OSError`` ENOENT for an unknown job."""
        from fluxes.store.jobfacts import EventlogFollower

        if jobid not in self._logs:
            follower = EventlogFollower(self.redis, self.keys, jobid)
            if not follower.exists:
                raise FileNotFoundError(errno.ENOENT, f"job {jobid} not found")
            self._logs[jobid] = follower
            self._log_watchers[jobid] = []
            self._log_seen[jobid] = []
            self._log_new[jobid] = follower.history
        else:
            # a new watcher of an eventlog already read replays it from the start
            for event in self._log_seen[jobid]:
                watcher._event(event)
        self._log_watchers[jobid].append(watcher)

    def unwatch_log(self, jobid: int, watcher: Any) -> None:
        """Stop delivering to ``watcher``."""
        watchers = self._log_watchers.get(jobid)
        if watchers and watcher in watchers:
            watchers.remove(watcher)
            if not watchers:
                self._drop_log(jobid)

    def _drop_log(self, jobid: int) -> None:
        for table in (self._logs, self._log_watchers, self._log_seen, self._log_new):
            table.pop(jobid, None)

    # -- the engine --------------------------------------------------------

    def step(self, timeout: float) -> int:
        """One round: send queued submissions, take replies, read watched streams
        (blocking up to ``timeout`` seconds when nothing else is due); the number of
        stream entries read."""
        from fluxes.store.groups import read_streams

        self._flush()
        if self._replies:
            self._take_replies()
        self._deliver_histories()
        # one read per stream, from the earliest position any of its readers is at
        streams: dict[str, str] = {}
        for follower in self._logs.values():
            _earliest(streams, follower.key, follower.position)
        if self._journal is not None:
            if not self._followed and not self._replies:
                self._journal = None
                self._orphans.clear()
                self._orphan_since.clear()
            else:
                for key, position in self._journal.items():
                    _earliest(streams, key, position)
        busy = bool(self._replies or self._outbox or self._ready)
        if not streams:
            if self._replies and not self._outbox:
                self._block_for_reply(timeout)
            return 0
        block = 2 if self._replies else (None if busy else max(1, int(timeout * 1000)))
        read = 0
        for stream, entries in read_streams(self.redis, streams, _COUNT, block):
            read += len(entries)
            key = stream.decode()
            for jobid, follower in list(self._logs.items()):
                if follower.key == key and jobid in self._logs:
                    mine = follower.take(_after(entries, follower.position))
                    if mine:
                        self._deliver_log(jobid, mine)
            if self._journal is not None and key in self._journal:
                # read from an earlier position for a watch, the entries may all be
                # behind this one: it only moves on (read from its own position,
                # every entry is new: no need to compare ids)
                at = self._journal[key]
                new = entries if streams[key] == at else _after(entries, at)
                if new:
                    self._journal[key] = new[-1][0].decode()
                    self._deliver_journal(new)
        return read

    def _deliver_histories(self) -> None:
        """Deliver the eventlogs read by new watches (their history so far)."""
        for jobid in [j for j, new in self._log_new.items() if new]:
            new = self._log_new.get(jobid)  # a delivery may have dropped the watch
            if new:
                self._log_new[jobid] = []
                self._deliver_log(jobid, new)

    def _flush(self) -> None:
        if not self._outbox:
            return
        from fluxes import messages as proto
        from fluxes.store.client import CHUNK, _fitted, _submission_item

        outbox, self._outbox = self._outbox, []
        if self._journal is None and any(f.follow is not None for f in outbox):
            # positions taken before the jobs exist: all their events come after
            from fluxes.store.eventstore import EventStore

            store = EventStore(self.redis, self.keys)
            self._journal = {self.keys.journal(p): store.journal_last_id(p)
                             for p in range(self.keys.partitions)}
        items = []
        for future in outbox:
            try:
                items.append(_submission_item(future.item))
            except ValueError as exc:
                future._fulfil(None, ValueError(str(exc)))
        live = [f for f in outbox if not f.is_ready()]
        sendable: list[tuple[Any, list[SubmitFuture]]] = []
        requests = [r for i in range(0, len(items), CHUNK) for r in _fitted(items[i:i + CHUNK])]
        for request in requests:
            n = len(request.jobs)  # type: ignore[attr-defined]
            futures, live = live[:n], live[n:]
            if len(proto.encode_request(request)["d"]) > proto.MAX_REQUEST_BYTES:
                for future in futures:  # the ingest reads no request this large
                    future._fulfil(None, OSError(errno.E2BIG, "job is too large"))
            else:
                sendable.append((request, futures))
        keys = self.client._post([request for request, _ in sendable])
        now = time.monotonic()
        for key, (_request, futures) in zip(keys, sendable, strict=True):
            self._posted[key] = now
            self._replies[key] = futures

    def _take_replies(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        keys = list(self._replies)
        for key in keys:
            pipe.lpop(key)
        for key, raw in zip(keys, pipe.execute(), strict=True):
            if raw is not None:
                self._answer(key, raw)

    def _block_for_reply(self, timeout: float) -> None:
        got = self.redis.blpop(list(self._replies), timeout=max(timeout, 0.01))
        if got is not None:
            self._answer(got[0].decode(), got[1])

    def _answer(self, key: str, raw: bytes) -> None:
        from fluxes import messages as proto
        from fluxes.job.jobid import JobID

        futures = self._replies.pop(key)
        self._posted.pop(key, None)
        try:
            answer = proto.decode_reply(raw)
        except proto.MessageError as exc:
            for future in futures:
                future._fulfil(None, OSError(errno.EPROTO, f"malformed answer: {exc}"))
            return
        if answer.jobs is None:
            reason = str((answer.errors or ["submission refused"])[0])
            for future in futures:
                future._fulfil(None, _refused(reason))
            return
        for future, result in zip(futures, answer.jobs, strict=False):
            if result.id is None:
                future._fulfil(None, _refused(str(result.error)))
                continue
            jobid = JobID(result.id)
            future._fulfil(jobid)
            if future.follow is not None:
                # the follower learns the id before any event: an event's callback
                # (even the clean of a job read before this reply) may ask for it
                bind = getattr(future.follow, "_bind", None)
                if bind is not None:
                    bind(jobid)
                self._followed[jobid] = future.follow
                self._orphan_since.pop(jobid, None)
                for event in self._orphans.pop(jobid, []):
                    self._to_follower(jobid, future.follow, event, event.name in _LAST_NAMES)

    def _deliver_log(self, jobid: int, entries: list[Any]) -> None:
        watchers = list(self._log_watchers.get(jobid, ()))
        seen = self._log_seen.get(jobid)
        for _sid, fields in entries:
            event = _event(fields)
            if seen is not None:
                seen.append(event)
            for watcher in watchers:
                watcher._event(event)
            if fields.get(b"n") in _LAST:
                for watcher in watchers:
                    watcher._end()
                self._drop_log(jobid)
                return

    def _deliver_journal(self, entries: list[Any]) -> None:
        followed = self._followed
        keep = bool(self._replies)
        for _sid, fields in entries:
            raw = fields.get(b"j")
            name = fields.get(b"n")
            if raw is None or name is None or name == b"annotations":
                continue
            jobid = int(raw)
            follower = followed.get(jobid)
            if follower is not None:  # the hot path: every event of every followed job
                self._to_follower(jobid, follower, EventLogEvent(
                    name.decode(), float(fields[b"t"]), fields.get(b"c")), name in _LAST)
            elif keep:
                # a job of a request whose reply has not been read yet (or anyone's)
                if jobid not in self._orphans:
                    self._orphans[jobid] = []
                    self._orphan_since[jobid] = time.monotonic()
                self._orphans[jobid].append(_event(fields))
        if keep:
            self._prune_orphans()

    def _prune_orphans(self) -> None:
        """Drop the entries of jobs first read before the oldest request still awaiting
        its reply went out: they belong to none of ours (someone else's jobs)."""
        now = time.monotonic()
        if now - self._pruned < 1.0 or not self._posted:
            return
        self._pruned = now
        oldest = min(self._posted.values())
        for jobid in [j for j, t in self._orphan_since.items() if t < oldest]:
            del self._orphan_since[jobid]
            self._orphans.pop(jobid, None)

    def _to_follower(self, jobid: int, follower: Any, event: EventLogEvent,
                     last: bool) -> None:
        """Give job ``jobid``'s follower ``event``; ``last``: the job's last event."""
        follower._event(event)
        if last:
            del self._followed[jobid]
            follower._end()


def _earliest(streams: dict[str, str], key: str, position: str) -> None:
    """Read ``key`` from ``position`` unless from an earlier one already."""
    from fluxes.store.jobfacts import id_key

    have = streams.get(key)
    if have is None or id_key(position) < id_key(have):
        streams[key] = position


def _after(entries: list[Any], position: str) -> list[Any]:
    """The entries read after ``position`` (a stream read from an earlier one for
    another reader)."""
    from fluxes.store.jobfacts import id_key

    after = id_key(position)
    return [e for e in entries if id_key(e[0]) > after]


def _event(fields: dict[bytes, bytes]) -> EventLogEvent:
    """An eventlog or journal entry's event."""
    return EventLogEvent(fields[b"n"].decode(), float(fields[b"t"]), fields.get(b"c"))


def _refused(reason: str) -> OSError:
    """flux raises OSError for a refused submission (EINVAL: a bad jobspec)."""
    low = reason.lower()
    code = errno.EPERM if "permission" in low or "not allowed" in low else errno.EINVAL
    return OSError(code, reason)
