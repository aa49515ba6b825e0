"""What every worker process shares: connection, signals, heartbeat, dead letters.

A worker is a loop of ``step()`` calls; SIGTERM/SIGINT ask it to finish the
current step and stop cleanly. Every few seconds it records a heartbeat in the
instance's worker registry, which ``fluxes status`` reads. The record also
keeps the times the worker (under its name) started in the last minute: a
clean stop removes the record, so several recent starts mean it crashed and
was restarted, and ``fluxes status`` reports it as crash-looping.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType
from typing import Any

import orjson

from fluxes.domain.liveness import Backoff
from fluxes.messages.bounds import one_line
from fluxes.proc import hops, metrics
from fluxes.proc.gcpolicy import freeze
from fluxes.proc.logs import setup_logging
from fluxes.store import deadletters, reachability
from fluxes.store.errors import ResponseError, StoreConnectionError, StoreError
from fluxes.store.groups import stream_lags
from fluxes.store.instance import Instance
from fluxes.store.registry import WorkerRegistry

HEARTBEAT_INTERVAL = 2.0
#: Entries kept in the dead-letter stream (approximate trim).
DEAD_LETTER_MAXLEN = 10_000
#: Bytes of a refused entry's payload a dead letter keeps (a prefix: entries may be MBs).
DEAD_LETTER_PAYLOAD = 4096
#: Fields of a refused entry a dead letter names at most.
MAX_DEAD_LETTER_FIELDS = 16
#: Characters of the reason a dead letter keeps.
MAX_DEAD_LETTER_ERROR = 1000
#: An entry read through a consumer group this many times without being
#: acknowledged is dead-lettered when it is read again, before it is handled:
#: every delivery after the first follows a crash, a failed commit or a Redis
#: outage in the middle of its step, so a worker that dies on an entry (in a way
#: no ``except`` catches: a segfault, the OOM killer, an error of Redis itself)
#: gets past it after five restarts instead of crash-looping for ever.
MAX_DELIVERIES = 5
#: Redis error replies that say nothing about the input being handled (a busy,
#: loading, failing-over or full server): the loop waits and retries.
TRANSIENT_REPLIES = reachability.STALL_REPLIES
#: Redis error replies an input causes (a key it names holds another type): the
#: input is refused like any other whose handling fails.
INPUT_REPLIES = ("WRONGTYPE",)
#: Starts of a worker (under one name) that ``fluxes status`` looks at: those of
#: the last minute.
RESTART_WINDOW_S = 60.0
#: Starts a registry record keeps at most.
MAX_STARTS_KEPT = 20


class Worker:
    """Base class: subclasses set ``kind`` and implement ``setup``/``step``/``teardown``."""

    kind = "worker"

    def __init__(self, instance: Instance, name: str | None = None) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        self.registry = WorkerRegistry(self.redis, self.keys)
        self.name = name or f"{self.kind}-{socket.gethostname()}-{os.getpid()}"
        self.log: logging.Logger = setup_logging(f"fluxes.{self.kind}")
        self.stopping = False
        #: the loop's retries after stall-like Redis errors, ever (they redeliver the
        #: entries in hand without any fault of theirs: see overdelivered())
        self.stall_retries = 0
        #: why Redis is unavailable (a reply code or error class), as last logged
        self._unavailable_why = ""
        self._last_heartbeat = 0.0
        self.started = time.time()
        #: this worker's starts (under its name) in the last RESTART_WINDOW_S, this one last
        self.starts = [self.started]
        metrics.DEAD_LETTERS.labels(worker=self.kind)  # scraped as 0 before the first one

    # ------------------------------------------------------------ lifecycle

    def request_stop(self, signum: int = 0, frame: FrameType | None = None) -> None:
        """Ask the loop to stop after the current step."""
        self.stopping = True

    def install_signals(self) -> None:
        """Stop cleanly on SIGTERM and SIGINT."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def setup(self) -> None:
        """Prepare (consumer groups, state rebuild); runs once before the loop."""

    def step(self) -> None:
        """One iteration: read a block of input, act, write. Must not block forever."""
        raise NotImplementedError

    def teardown(self) -> None:
        """Finish cleanly (checkpoints, lease release); runs once after the loop."""

    def reconnected(self) -> None:
        """Called after a Redis error: rebuild in-memory state (default: ``setup()`` again).
        A stall-like error raised here is waited out by the loop like any other."""
        self.setup()

    def status(self) -> dict[str, Any]:
        """Extra facts for the heartbeat (lag, leadership...)."""
        return {}

    def consumed(self) -> list[tuple[str, str]]:
        """(stream, consumer group) pairs this worker reads, for the stream lag metrics."""
        return []

    def collect_metrics(self, record: Mapping[str, Any]) -> None:
        """Refresh the gauges that describe stored state (only while a metrics server runs)."""
        if "leader" in record:
            metrics.LEADER.labels(worker=self.kind).set(1 if record["leader"] else 0)
        pairs = self.consumed()
        if pairs:
            mine = set(pairs)
            metrics.set_lags(g for g in stream_lags(self.redis, sorted({s for s, _ in pairs}))
                             if (g.stream, g.group) in mine)

    def run(self) -> int:
        """Set up, loop until asked to stop, tear down; return an exit code.

        A Redis that stalls, restarts, fills up or refuses this worker's password
        never ends the loop (docs/operations.md, "When Redis stalls or refuses"): the worker
        logs it once, waits with a bounded backoff, rebuilds what it holds in
        memory and goes on; only a stop request (or a bug) ends it.
        """
        self.install_signals()
        self.record_start()
        backoff = Backoff()
        while not self.stopping and not self._try(self.setup, backoff, ends=True):
            pass
        freeze()  # what setup loaded lives as long as the process (fluxes/proc/gcpolicy.py)
        self.log.info("started", extra={"worker": self.name})
        try:
            while not self.stopping:
                if self._try(lambda: self._round(backoff.since is not None), backoff,
                             ends=True):
                    continue
                self._try(self.reconnected, backoff, ends=False)
        finally:
            self.teardown()
            self.unregister()
            self.log.info("stopped", extra={"worker": self.name})
        return 0

    def _round(self, recovering: bool) -> None:
        self.step()
        # after a failure, a round counts only once Redis took a write again (a round
        # may touch no key: a standby between two looks at a lease)
        self.heartbeat(force=recovering)
        reachability.answered()

    def _try(self, action: Callable[[], object], backoff: Backoff, ends: bool) -> bool:
        """Run ``action``; True if it ran. A stall-like Redis error (see
        :func:`fluxes.store.reachability.is_stall`) is waited out (False): logged at the
        first failure of an episode and whenever its reason changes; an episode ends
        when an ``ends`` action (a round of the loop) runs. Other errors propagate."""
        try:
            action()
        except StoreError as exc:
            if not reachability.is_stall(exc):
                raise
            now = time.monotonic()
            reachability.CLOCK.unanswered(now)
            self.stall_retries += 1
            delay = backoff.failed(now)
            kind = reachability.reply_code(exc) or type(exc).__name__
            if backoff.first_failure or kind != self._unavailable_why:
                self.log.warning("redis unavailable, waiting for it",
                                 extra={"why": reachability.explain(exc)})
            self._unavailable_why = kind
            if kind == "BUSY" and reachability.kill_runaway(self.redis):
                self.log.warning("killed a runaway script (SCRIPT KILL): ours are functions")
            self._pause(delay)
            return False
        lasted = backoff.succeeded(time.monotonic()) if ends else None
        if lasted is not None:
            self._unavailable_why = ""
            self.log.warning("redis answers again", extra={"unavailable_s": round(lasted, 3)})
        return True

    def _pause(self, seconds: float) -> None:
        """Wait before a retry (a stop request may cut it short in subclasses)."""
        time.sleep(seconds)

    # ------------------------------------------------------------ registry

    def record_start(self) -> None:
        """Register this start before anything else runs, with the earlier starts of the
        last minute under this name (what a crash left in the registry): a worker
        that dies in its first step still shows up, as crash-looping."""
        try:
            raw = self.registry.stored(self.name)
            self.starts = [*recent_starts(raw, self.started), self.started][-MAX_STARTS_KEPT:]
            record = {"kind": self.kind, "pid": os.getpid(), "host": socket.gethostname(),
                      "started": self.started, "heartbeat": time.time(),
                      "starts": self.starts}
            self.registry.publish(self.name, record)
        except StoreError:
            pass  # best effort: setup() meets the same Redis next

    def heartbeat(self, force: bool = False) -> None:
        """Record liveness in the worker registry (rate-limited)."""
        now = time.time()
        if not force and now - self._last_heartbeat < HEARTBEAT_INTERVAL:
            return
        self._last_heartbeat = now
        record = {"kind": self.kind, "pid": os.getpid(), "host": socket.gethostname(),
                  "started": self.started, "heartbeat": now, **self.status()}
        if len(self.starts) > 1:
            record["starts"] = [t for t in self.starts if now - t < RESTART_WINDOW_S]
        port = metrics.served_port()
        if port is not None:
            record["metrics_port"] = port
            try:
                self.collect_metrics(record)
            except (StoreError, ValueError) as exc:
                # metrics are best effort: they never stop the work or the heartbeat
                self.log.debug("metrics not refreshed", extra={"error": str(exc)})
        try:
            # with the hand-off latency histograms (fluxes/proc/hops.py), for fluxes bench
            self.registry.publish(self.name, record, hops.snapshot())
        except StoreConnectionError:
            if force:
                raise  # the loop's proof that Redis is back
            # else the loop itself will notice and retry; liveness is best effort

    def unregister(self) -> None:
        """Remove this worker from the registry on a clean stop."""
        try:
            self.registry.remove(self.name)
        except StoreConnectionError:
            pass

    # ------------------------------------------------------------ poison messages

    def dead_letter_record(self, stream: str, msg_id: bytes | str,
                           fields: Mapping[Any, Any], error: str) -> dict[str, bytes | str]:
        """The dead-letter stream entry for a refused input: where it came from, why
        (one line), and a bounded prefix of its fields (never the whole entry)."""
        ident = msg_id.decode() if isinstance(msg_id, bytes) else str(msg_id)
        self.log.warning("dead letter", extra={"stream": stream, "id": ident,
                                               "error": one_line(error)})
        return {"stream": stream, "id": ident, "worker": self.name,
                "error": one_line(error, MAX_DEAD_LETTER_ERROR), "time": repr(time.time()),
                "fields": payload_prefix(fields)}

    def count_dead_letters(self, n: int) -> None:
        """Count dead letters written (the metric)."""
        metrics.DEAD_LETTERS.labels(worker=self.kind).inc(n)

    def write_dead_letters(self, records: list[dict[str, bytes | str]]) -> None:
        """XADD dead-letter records on their own (not with an acknowledgement), and count
        them per stream."""
        deadletters.append(self.redis, self.keys, records, per_stream(records),
                           DEAD_LETTER_MAXLEN)

    def dead_letter(self, stream: str, msg_id: bytes | str, fields: Mapping[Any, Any],
                    error: str) -> None:
        """Park an input no code path can handle, with the error (acknowledging it, if
        it was read through a group, is the caller's business)."""
        self.write_dead_letters([self.dead_letter_record(stream, msg_id, fields, error)])
        self.count_dead_letters(1)

    def refuse(self, stream: str, group: str,
               refused: list[tuple[bytes, Mapping[Any, Any], str]],
               replies: Sequence[tuple[str, bytes, int]] = ()) -> None:
        """Dead-letter and acknowledge inputs of ``stream`` (read through ``group``) in one
        MULTI/EXEC, with the ``replies`` (key, data, TTL ms) that answer them.

        Every key must share the dead-letter stream's hash slot (the global one):
        one atomic step touches one slot.
        """
        if not refused:
            return
        keys = self.keys
        for key in [stream, *(key for key, _d, _t in replies)]:
            if not keys.same_slot(key, keys.dead_letters):
                raise ValueError(f"{key} is not in the slot of {keys.dead_letters}")
        records = [self.dead_letter_record(stream, msg_id, fields, error)
                   for msg_id, fields, error in refused]
        failed = deadletters.refuse(self.redis, keys, stream, group, records,
                                    [msg_id for msg_id, _f, _e in refused], replies,
                                    DEAD_LETTER_MAXLEN)
        # A reply key of another type fails its RPUSH alone (MULTI/EXEC applies the
        # rest): the input is refused and acknowledged all the same, never retried.
        for result in failed:
            if not str(result).startswith(INPUT_REPLIES):
                raise result
            self.log.warning("reply not written", extra={"stream": stream,
                                                          "error": str(result)})
        self.count_dead_letters(len(refused))

    def overdelivered(self, stream: str, group: str, consumer: str,
                      entries: Sequence[tuple[bytes, Any]]) -> dict[bytes, int]:
        """The entries of ``entries`` (this consumer's pending ones, just read again)
        delivered more than MAX_DELIVERIES times (plus one per retry of this process
        after a Redis stall), with their delivery counts.

        One XPENDING over their range; Redis counts every delivery, the
        re-reads of a consumer's pending entries included.
        """
        got = deadletters.deliveries(self.redis, stream, group, consumer,
                                     [msg_id for msg_id, _f in entries])
        # Retries after a Redis stall re-read the entries in hand (OOM lets reads
        # through and refuses the writes): those deliveries are not the entry's fault.
        limit = MAX_DELIVERIES + self.stall_retries
        return {msg_id: times for msg_id, times in got.items() if times > limit}


def not_the_input(exc: BaseException) -> bool:
    """True for errors of Redis itself (a lost connection, a busy or loading server, a
    command it refuses), which no input causes: they propagate to the worker's loop,
    which retries the transient ones, rather than getting the input being handled
    refused. A key named by the input that holds another type (WRONGTYPE) is the
    input's fault: False, so the input is refused."""
    if isinstance(exc, ResponseError):
        return not str(exc).startswith(INPUT_REPLIES)
    return isinstance(exc, StoreError)


def overdelivered_reason(times: int) -> str:
    """The dead-letter reason of an entry delivered ``times`` times."""
    return (f"delivered {times} times without being handled: every attempt crashed or "
            f"failed (the worker's log says how); refused after {MAX_DELIVERIES}")


def per_stream(records: Iterable[Mapping[str, bytes | str]]) -> dict[str, int]:
    """How many of the dead-letter ``records`` each stream has."""
    out: dict[str, int] = {}
    for record in records:
        stream = record.get("stream", "")
        name = stream.decode("utf-8", "replace") if isinstance(stream, bytes) else stream
        out[name] = out.get(name, 0) + 1
    return out


def recent_starts(raw: bytes | None, now: float) -> list[float]:
    """The start times of the last RESTART_WINDOW_S kept in a registry record (``raw``,
    as stored; its own ``started`` counts): [] when there is none or it is unreadable."""
    if not raw:
        return []
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(record, dict):
        return []
    times = record.get("starts")
    found = list(times) if isinstance(times, list) else []
    found.append(record.get("started"))
    return sorted({float(t) for t in found if isinstance(t, int | float)
                   and not isinstance(t, bool) and 0 <= now - float(t) < RESTART_WINDOW_S})


def payload_prefix(fields: Mapping[Any, Any], limit: int = DEAD_LETTER_PAYLOAD) -> bytes:
    """JSON ``{field: text}`` of an entry's fields, each value cut so that all of them
    together keep at most ``limit`` bytes of the payload; cut values end with
    ``...[N bytes]`` (their full size)."""
    out: dict[str, str] = {}
    budget = limit
    for key, value in list(fields.items())[:MAX_DEAD_LETTER_FIELDS]:
        raw = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        kept = raw[:max(budget, 0)]
        budget -= len(kept)
        text = kept.decode("utf-8", "replace")
        if len(kept) < len(raw):
            text += f"...[{len(raw)} bytes]"
        out[_text(key)[:200]] = text
    return orjson.dumps(out)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
