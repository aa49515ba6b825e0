"""The exec worker's Redis side: request streams, job hashes, records, reports, the waker.

* :meth:`ExecStreams.load` reads what a (re)starting worker carries on from:
  its jobs' records, each request stream's ``exec`` group position, the
  instance's resource inventory (hostnames);
* :meth:`ExecStreams.read` reads the served ranks' requests (pending ones
  first after a restart) in one round trip, :meth:`ExecStreams.fetch` the job
  hash fields new starts need;
* :meth:`ExecStreams.flush` writes an :class:`~fluxes.domain.exec.outbox.Outbox`
  in one MULTI in the global slot (output, records, acknowledgements,
  registry, reports), reports to partitions in other slots right after;
* :class:`Waker` keeps a blocking read outstanding so that the loop can wait
  in ``poll()`` for a new request, a task exit and a timer at once.

Hot-path commands go through :class:`~fluxes.store.direct.Direct`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson
import redis

from fluxes.domain.exec import intake, records
from fluxes.domain.exec.intake import Entry
from fluxes.domain.exec.jobs import START_FIELDS
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.sched.inventory import Inventory
from fluxes.store.direct import Direct, execute_grouped, stream_entries
from fluxes.store.groups import ensure_group
from fluxes.store.keys import GROUP_EXEC, Keys

#: Requests read per rank and read (each entry may hold many messages).
READ_COUNT = 256
#: BLOCK of the outstanding "new request" read (re-armed when it times out).
WAKE_BLOCK_MS = 1000
#: How long closing a waker waits for its helper thread: CLIENT UNBLOCK ends the
#: read at once, so longer only when Redis is unreachable (the helper then
#: cleans up by itself when its read fails).
CLOSE_WAIT_S = 1.0



class Loaded(NamedTuple):
    """What a (re)starting worker reads back: records, group positions, hostnames."""

    records: dict[int, dict[Any, Any]]  # rank -> {job id: record}
    last_ids: dict[int, Any]  # rank -> the group's last delivered id
    hosts: dict[int, str]  # rank -> hostname, from the instance's resource inventory


def inventory_hosts(raw: Any, ranks: Iterable[int]) -> dict[int, str]:
    """The hostnames ``ranks`` have in the instance's resource inventory (JSON), if any."""
    if not raw:
        return {}
    try:
        inventory = Inventory.from_table(orjson.loads(raw))
    except ValueError:
        return {}  # a bad inventory is the scheduler's problem; keep what we have
    hosts = {}
    for rank in ranks:
        host = inventory[rank].hostname if rank in inventory else None
        if host:
            hosts[rank] = host
    return hosts


def entries(reply: Any) -> list[Entry]:
    """The entries of a stream read reply (every stream's, in order)."""
    out: list[Entry] = []
    for _stream, got in stream_entries(reply):
        out.extend(got)
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flat(mapping: Mapping[Any, Any]) -> list[Any]:
    """A mapping as the field/value list of HSET or XADD."""
    out: list[Any] = []
    for field_, value in mapping.items():
        out += (field_, value)
    return out


def _xadd(key: str, fields: Mapping[Any, Any]) -> tuple[Any, ...]:
    return ("XADD", key, "*", *_flat(fields))


def _raise_errors(replies: Iterable[Any]) -> None:
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise reply


class ExecStreams:
    """The Redis keys of the exec worker serving ``ranks``."""

    def __init__(self, client: Any, keys: Keys, ranks: Sequence[int]) -> None:
        self.redis = client
        self.keys = keys
        self.ranks = list(ranks)
        self.streams = {r: keys.exec_rank(r) for r in self.ranks}
        self.direct = Direct(client, keys.exec_registry)  # its own: the global slot

    def load(self) -> Loaded:
        """Create the ``exec`` groups; read the records, group positions and inventory."""
        for rank in self.ranks:
            ensure_group(self.redis, self.streams[rank], GROUP_EXEC)
        pipe = self.redis.pipeline(transaction=False)
        for rank in self.ranks:
            pipe.hgetall(self.keys.exec_jobs(rank))
        for rank in self.ranks:
            pipe.xinfo_groups(self.streams[rank])
        pipe.hget(self.keys.instance, "resources")
        replies = pipe.execute()
        hosts = inventory_hosts(replies.pop(), self.ranks)
        n = len(self.ranks)
        recs = dict(zip(self.ranks, replies[:n], strict=True))
        last_ids: dict[int, Any] = {}
        for rank, groups in zip(self.ranks, replies[n:], strict=True):
            for group in groups:
                if _text(group.get("name")) == GROUP_EXEC:
                    last_ids[rank] = group.get("last-delivered-id") or "0-0"
        return Loaded(recs, last_ids, hosts)

    def read(self, pending: Mapping[int, bool]) -> dict[int, list[Entry]]:
        """Each rank's next request entries (its pending ones while ``pending[rank]``)."""
        # every rank's request stream is in the global slot: one round trip
        replies = self.direct.execute(
            ("XREADGROUP", "GROUP", GROUP_EXEC, f"rank{rank}", "COUNT", READ_COUNT,
             "STREAMS", self.streams[rank], "0" if pending[rank] else ">")
            for rank in self.ranks)
        _raise_errors(replies)
        return {rank: entries(reply) for rank, reply in zip(self.ranks, replies, strict=True)}

    def fetch(self, jobids: Iterable[int]) -> dict[int, tuple[Any, ...]]:
        """(jobspec, R, owner, result) of each job, in one round trip (per slot)."""
        unique = list(dict.fromkeys(jobids))
        keys = [self.keys.job(jobid) for jobid in unique]
        replies = execute_grouped(self.redis, [(key, ("HMGET", key, *START_FIELDS))
                                               for key in keys])
        _raise_errors(replies)
        out = {}
        for jobid, (full, submitted, r_raw, owner, result) in zip(unique, replies, strict=True):
            # The ingest stores jobspec_full only when defaults changed the jobspec.
            out[jobid] = (full if full is not None else submitted, r_raw, owner, result)
        return out

    def gone(self, jobids: Sequence[int]) -> list[bool]:
        """For each job: is it inactive (its hash has a ``result``) or purged?"""
        pipe = self.redis.pipeline(transaction=False)
        for jobid in jobids:
            key = self.keys.job(jobid)
            pipe.hexists(key, "result")
            pipe.exists(key)
        replies = pipe.execute()
        return [bool(replies[2 * i]) or not replies[2 * i + 1] for i in range(len(jobids))]

    def flush(self, box: Outbox) -> None:
        """Write ``box``: one MULTI for the global slot, then reports to other slots."""
        keys = self.keys
        tx: list[tuple[Any, ...]] = []
        later: list[tuple[str, tuple[Any, ...]]] = []
        for jobid, lines in box.output.items():
            key = keys.output(jobid)
            tx.extend(_xadd(key, fields) for fields in lines)
        sets, dels = box.record_changes()
        for rank, changed in sets.items():
            tx.append(("HSET", keys.exec_jobs(rank),
                       *_flat({name: records.encode(job) for name, job in changed.items()})))
        for rank, names in dels.items():
            tx.append(("HDEL", keys.exec_jobs(rank), *names))
        for rank, ids in box.acks.items():
            tx.append(("XACK", self.streams[rank], GROUP_EXEC, *ids))
        if box.registry:
            tx.append(("HSET", keys.exec_registry, *_flat(box.registry)))
        anchor = keys.exec_registry
        for partition, reported in box.reports_by_partition(keys.partition_of).items():
            stream = keys.exec_events(partition)
            for fields in intake.encode_reports(reported):
                command = _xadd(stream, fields)
                if keys.same_slot(stream, anchor):
                    tx.append(command)
                else:
                    later.append((stream, command))
        if tx:
            self.direct.transaction(tx)
        if later:
            _raise_errors(execute_grouped(self.redis, later))

    def registry(self, hostnames: Mapping[int, str], worker: str, now: float,
                 running: Mapping[int, int]) -> dict[str, bytes]:
        """The served ranks' registry entries (hostname, pid, worker, heartbeat, running)."""
        pid = os.getpid()
        return {str(rank): orjson.dumps({
            "hostname": hostnames[rank], "pid": pid, "worker": worker, "heartbeat": now,
            "running": running.get(rank, 0)}) for rank in self.ranks}

    def waker(self) -> Waker:
        """A new :class:`Waker` on the request streams' node."""
        return Waker(self.redis, self.keys.exec_registry)


def _pool_for(client: Any, key: str) -> Any:
    """The connection pool serving ``key``: the client's own, or (Redis Cluster) the
    pool of the node that holds the key's slot."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    return client.get_node_from_key(key).redis_connection.connection_pool


class Waker:
    """A blocking read kept outstanding on a connection of its own; :meth:`fileno` to poll.

    Redis answers a blocking read's *timeout* only at its cron rate (every
    100 ms by default), so the loop cannot rely on short BLOCKs: it sends
    one long blocking read here (:meth:`arm`) and waits in ``poll()`` on
    :meth:`fileno`, its tasks' pidfds and its stop pipe together.

    Why a pipe and a helper thread: redis-py has no public way to get a
    connection's socket (``Connection._sock`` and ``_get_socket()`` are
    private; redis-py 8 documents no accessor), and a socket of our own
    would lose what the client's pool provides (TLS, ACL users, Sentinel
    failover, cluster nodes).  So the connection stays redis-py's, used
    through public methods only (``send_command``, ``read_response``): the
    loop sends the read, a helper thread waits for the answer in
    ``read_response`` (in ``recv()``, without the GIL), keeps it and writes
    a byte to a pipe of ours, which is what the loop polls.  The connection
    is never used by both threads at once: the helper reads only after
    :meth:`arm` sent, the loop sends again only after :meth:`consume` took
    the answer.  :meth:`close` ends an outstanding read with ``CLIENT
    UNBLOCK`` (it then returns no entries, so none is delivered to a waker
    nobody listens to any more).
    """

    def __init__(self, client: Any, anchor: str) -> None:
        self.client = client
        self.anchor = anchor
        self.pool: Any = None
        self.conn: Any = None
        self.outstanding = False  # a read was sent and its answer not consumed yet
        self.client_id: Any = None  # the connection's CLIENT ID (for CLIENT UNBLOCK)
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._go = threading.Lock()  # released by arm() for each read the helper waits on
        self._go.acquire()
        self._closed = threading.Event()
        self._reply: Any = None
        self._error: Exception | None = None
        self.thread: threading.Thread | None = None  # the helper, started with the first read
        self._cleanup_lock = threading.Lock()
        self._cleaned = False

    def fileno(self) -> int:
        """Readable when the outstanding read has its answer (or failed)."""
        return self._r

    def arm(self, streams: Mapping[str, Any], consumer: str | None = None) -> None:
        """Send the blocking read unless one is already out.

        With ``consumer`` (a worker serving one rank) it is the consumer
        group read itself, so its answer carries the new entries and saves a
        round trip per wake-up; otherwise an XREAD from the last delivered ids
        only signals that the per-rank group reads have something to take.
        """
        if self.outstanding:
            return
        if self.conn is None:
            self.pool = _pool_for(self.client, self.anchor)
            self.conn = self.pool.get_connection()
            self.conn.send_command("CLIENT", "ID")
            self.client_id = self.conn.read_response()
        if consumer is not None:
            self.conn.send_command("XREADGROUP", "GROUP", GROUP_EXEC, consumer, "COUNT",
                                   READ_COUNT, "BLOCK", WAKE_BLOCK_MS, "STREAMS",
                                   *streams.keys(), *(">" for _ in streams))
        else:
            self.conn.send_command("XREAD", "COUNT", 1, "BLOCK", WAKE_BLOCK_MS, "STREAMS",
                                   *streams.keys(), *streams.values())
        self.outstanding = True
        if self.thread is None:
            self.thread = threading.Thread(target=self._wait_for_answers,
                                            name="fluxes-exec-waker", daemon=True)
            self.thread.start()
        self._go.release()

    def consume(self) -> Any:
        """The answer: the raw stream reply (None when the read timed out)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self._r, 64)
        self.outstanding = False
        error, self._error = self._error, None
        if error is not None:
            raise error
        reply, self._reply = self._reply, None
        return reply

    def _wait_for_answers(self) -> None:
        """The helper thread: read each answer, keep it, and say so through the pipe."""
        while True:
            self._go.acquire()
            if self._closed.is_set():
                break
            try:
                self._reply = self.conn.read_response()
            except Exception as exc:  # handed to the loop's thread, which raises it
                self._error = exc
            if self._closed.is_set():
                break
            os.write(self._w, b"x")
        self._cleanup()

    def close(self) -> None:
        """End the outstanding read, drop the connection and the helper thread."""
        self._closed.set()
        thread = self.thread
        if thread is not None:
            if self.outstanding:
                self._unblock()
            with contextlib.suppress(RuntimeError):
                self._go.release()  # a helper waiting for the next read sees the close
            thread.join(CLOSE_WAIT_S)
            if thread.is_alive():
                return  # Redis unreachable: the helper cleans up when its read fails
        self._cleanup()

    def _unblock(self) -> None:
        """Make the outstanding blocking read return at once (nothing delivered)."""
        with contextlib.suppress(redis.RedisError, OSError):
            Direct.of(self.client, self.anchor).call("CLIENT", "UNBLOCK", self.client_id)

    def _cleanup(self) -> None:
        with self._cleanup_lock:
            if self._cleaned:
                return
            self._cleaned = True
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.disconnect()
                self.pool.release(self.conn)
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
