"""What every worker process shares: connection, signals, heartbeat, dead letters.

A worker is a loop of ``step()`` calls; SIGTERM/SIGINT ask it to finish the
current step and stop cleanly. Every few seconds it records a heartbeat in the
instance's worker registry, which ``fluxes status`` reads.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Mapping
from types import FrameType
from typing import Any

import orjson
import redis

from fluxes.proc import metrics
from fluxes.proc.gcpolicy import freeze
from fluxes.proc.logs import setup_logging
from fluxes.store.groups import stream_lags
from fluxes.store.instance import Instance

HEARTBEAT_INTERVAL = 2.0
#: Entries kept in the dead-letter stream (approximate trim).
DEAD_LETTER_MAXLEN = 10_000


class Worker:
    """Base class: subclasses set ``kind`` and implement ``setup``/``step``/``teardown``."""

    kind = "worker"

    def __init__(self, instance: Instance, name: str | None = None) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        self.name = name or f"{self.kind}-{socket.gethostname()}-{os.getpid()}"
        self.log: logging.Logger = setup_logging(f"fluxes.{self.kind}")
        self.stopping = False
        self._last_heartbeat = 0.0
        self.started = time.time()
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
        """Called after a Redis error: rebuild in-memory state (default: ``setup()`` again)."""
        try:
            self.setup()
        except (redis.ConnectionError, redis.TimeoutError):
            pass  # still down; the loop retries

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
        """Set up, loop until asked to stop, tear down; return an exit code."""
        self.install_signals()
        self.setup()
        freeze()  # what setup loaded lives as long as the process (fluxes/proc/gcpolicy.py)
        self.log.info("started", extra={"worker": self.name})
        backoff = 0.05
        try:
            while not self.stopping:
                try:
                    self.step()
                    self.heartbeat()
                    backoff = 0.05
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
                    # Redis restarted or the network blinked: wait, then rebuild
                    # what this worker holds in memory from what is stored.
                    self.log.warning("redis unavailable, retrying",
                                     extra={"error": str(exc), "retry_in": backoff})
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    self.reconnected()
                except redis.ResponseError as exc:
                    if not str(exc).startswith(("BUSY", "LOADING", "MASTERDOWN")):
                        raise
                    # Redis is busy (a long script, loading its data): transient
                    self.log.warning("redis busy, retrying", extra={"error": str(exc)})
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    self.reconnected()
        finally:
            self.teardown()
            self.unregister()
            self.log.info("stopped", extra={"worker": self.name})
        return 0

    # ------------------------------------------------------------ registry

    def heartbeat(self, force: bool = False) -> None:
        """Record liveness in the worker registry (rate-limited)."""
        now = time.time()
        if not force and now - self._last_heartbeat < HEARTBEAT_INTERVAL:
            return
        self._last_heartbeat = now
        record = {"kind": self.kind, "pid": os.getpid(), "host": socket.gethostname(),
                  "started": self.started, "heartbeat": now, **self.status()}
        port = metrics.served_port()
        if port is not None:
            record["metrics_port"] = port
            try:
                self.collect_metrics(record)
            except (redis.RedisError, ValueError) as exc:
                # metrics are best effort: they never stop the work or the heartbeat
                self.log.debug("metrics not refreshed", extra={"error": str(exc)})
        try:
            self.redis.hset(self.keys.workers, self.name, orjson.dumps(record, default=str))
        except redis.ConnectionError:
            pass  # the loop itself will notice and retry; liveness is best effort

    def unregister(self) -> None:
        """Remove this worker from the registry on a clean stop."""
        try:
            self.redis.hdel(self.keys.workers, self.name)
        except redis.ConnectionError:
            pass

    # ------------------------------------------------------------ poison messages

    def dead_letter(self, stream: str, msg_id: bytes | str, fields: Mapping[Any, Any],
                    error: str) -> None:
        """Park a message no code path can handle, with the error, and log it once."""
        record = {
            "stream": stream, "id": msg_id.decode() if isinstance(msg_id, bytes) else msg_id,
            "worker": self.name, "error": error, "time": repr(time.time()),
            "fields": orjson.dumps({_text(k): _text(v) for k, v in fields.items()}),
        }
        self.redis.xadd(self.keys.dead_letters, record, maxlen=DEAD_LETTER_MAXLEN,
                        approximate=True)
        metrics.DEAD_LETTERS.labels(worker=self.kind).inc()
        self.log.warning("dead letter", extra={"stream": stream, "id": record["id"],
                                               "error": error})


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
