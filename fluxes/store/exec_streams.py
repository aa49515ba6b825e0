"""The exec worker's Redis side: request streams, job hashes, records, reports, the waker.

* :meth:`ExecStreams.load` reads what a (re)starting worker carries on from:
  its jobs' records, each request stream's ``exec`` group position, the
  instance's resource inventory (hostnames);
* :meth:`ExecStreams.read` reads the served ranks' requests (pending ones
  first after a restart) in one round trip, :meth:`ExecStreams.fetch` what new
  starts need of their jobs (through :mod:`fluxes.store.jobhash`), and
  :meth:`ExecStreams.identities` what a root worker checks before it runs a
  job as its owner (the submit events' userids, the registered users);
* :meth:`ExecStreams.flush` writes an :class:`~fluxes.domain.exec.outbox.Outbox`
  in one MULTI in the global slot (output, records, acknowledgements with the
  dead letters of refused requests, registry, reports), reports to partitions
  in other slots right after;
* :class:`Waker` keeps a blocking read outstanding so that the loop can wait
  in ``poll()`` for a new request, a task exit and a timer at once.

Hot-path commands go through :class:`~fluxes.store.direct.Direct`.

Why one module: it is every Redis command of the exec worker, and the waker
shares its connection setup; split, each half would import the other.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import hiredis
import orjson
import redis
from hiredis import pack_command

from fluxes.domain.exec import intake, records
from fluxes.domain.exec.intake import Entry
from fluxes.domain.exec.jobs import StartFacts
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.sched.inventory import Inventory
from fluxes.store import jobfacts, jobhash
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
#: Entries kept in the dead-letter stream (approximate trim), as every worker keeps.
DEAD_LETTER_MAXLEN = 10_000


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


def submit_userid(reply: Any) -> int | None:
    """The userid of a job's ``submit`` event, from an ``XRANGE <eventlog> - + COUNT 1``
    reply; None when the eventlog is missing or does not begin with a readable one."""
    try:
        [(_id, flat)] = reply
        fields = dict(zip(flat[::2], flat[1::2], strict=True)) if isinstance(flat, list) \
            else flat
        if fields.get(b"n") != b"submit":
            return None
        userid = orjson.loads(fields.get(b"c") or b"{}").get("userid")
    except (ValueError, TypeError, AttributeError, orjson.JSONDecodeError):
        return None
    return userid if isinstance(userid, int) and not isinstance(userid, bool) else None


class Identities(NamedTuple):
    """What a root exec worker checks before running jobs as their owners."""

    submitters: dict[int, int | None]  # job -> userid of its submit event
    registered: frozenset[int]  # the uids of the users of ``fluxes admin adduser``
    instance_owner: int  # the instance owner's uid


class ExecStreams:
    """The Redis keys of the exec worker serving ``ranks``."""

    def __init__(self, client: Any, keys: Keys, ranks: Sequence[int]) -> None:
        self.redis = client
        self.keys = keys
        self.ranks = list(ranks)
        self.streams = {r: keys.exec_rank(r) for r in self.ranks}
        self.direct = Direct(client, keys.exec_registry)  # its own: the global slot
        self.hashes = jobhash.JobHashes(client, keys)  # keeps the blobs it read
        self.dead_letter_maxlen = DEAD_LETTER_MAXLEN

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

    def fetch(self, jobids: Iterable[int], carried: Mapping[int, Any] | None = None
              ) -> dict[int, StartFacts]:
        """What each job's start needs (jobspec, R, owner, result), read through
        :meth:`fluxes.store.jobhash.JobHashes.for_start` (``carried``: packed facts)."""
        return {jobid: StartFacts(*facts)
                for jobid, facts in self.hashes.for_start(list(jobids), carried).items()}

    def now_ms(self) -> int:
        """The request streams' Redis clock (ms): later entries have later ids."""
        seconds, micros = self.direct.execute([("TIME",)])[0]
        return int(seconds) * 1000 + int(micros) // 1000

    def identities(self, jobids: Sequence[int]) -> Identities:
        """The userid of each job's ``submit`` event, the registered users and the
        instance owner, in two round trips (per slot on a cluster): the eventlog
        indexes, then the journal entries their first ids name."""
        unique = list(dict.fromkeys(jobids))
        keys = self.keys
        commands = [(keys.eventlog(j), r) for j in unique for r in jobfacts.index_reads(keys, j)]
        commands += [(keys.users, ("HVALS", keys.users)),
                     (keys.instance, ("HGET", keys.instance, "owner_uid"))]
        *both, uids, owner = execute_grouped(self.redis, commands)
        indexes = jobfacts.indexes_in(both)
        firsts = [jobfacts.first_entry_read(keys, j, index)
                  for j, index in zip(unique, indexes, strict=True)]
        _raise_errors([uids, owner])
        # an entry that cannot be read names no userid (the job is refused, not the batch)
        events = [None if isinstance(e, redis.ResponseError) else e
                  for e in execute_grouped(self.redis, firsts)]
        registered = set()
        for raw in uids or []:
            with contextlib.suppress(ValueError):
                registered.add(int(raw))
        try:
            instance_owner = int(owner) if owner is not None else os.getuid()
        except ValueError:
            instance_owner = os.getuid()
        return Identities({j: submit_userid(e) for j, e in zip(unique, events, strict=True)},
                          frozenset(registered), instance_owner)

    def answer_command(self, token: str, fields: Mapping[bytes, bytes], ttl_s: int) -> None:
        """Send the answer of a ``fluxes exec`` command to its caller's reply stream
        (``token``), which expires ``ttl_s`` seconds after if nobody reads it."""
        key = self.keys.exec_reply(token)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(key, dict(fields))
        pipe.expire(key, ttl_s)
        pipe.execute()

    def gone(self, jobids: Sequence[int]) -> list[bool]:
        """For each job: is it inactive (its hash has a ``result``) or purged?"""
        return self.hashes.gone(jobids)

    def flush(self, box: Outbox) -> None:
        """Write ``box``: one MULTI for the global slot, then reports to other slots."""
        keys = self.keys
        tx: list[tuple[Any, ...]] = []
        later: list[tuple[str, tuple[Any, ...]]] = []
        for (owner, jobid), lines in box.output.items():
            key = keys.output(owner, jobid)
            tx.extend(_xadd(key, fields) for fields in lines)
        sets, dels = box.record_changes()
        for rank, changed in sets.items():
            tx.append(("HSET", keys.exec_jobs(rank),
                       *_flat({name: records.encode(job) for name, job in changed.items()})))
        for rank, names in dels.items():
            tx.append(("HDEL", keys.exec_jobs(rank), *names))
        for rank, ids in box.acks.items():
            tx.append(("XACK", self.streams[rank], GROUP_EXEC, *ids))
        # refused requests: parked in the write that acknowledges them (one slot)
        tx.extend(("XADD", keys.dead_letters, "MAXLEN", "~", self.dead_letter_maxlen, "*",
                   *_flat(record)) for record in box.dead_letters)
        if box.registry:
            tx.append(("HSET", keys.exec_registry, *_flat(box.registry)))
        anchor = keys.exec_registry
        for partition, reported in box.reports_by_partition(keys.partition_of).items():
            stream = keys.exec_events(partition)
            for fields in intake.encode_reports(reported, time.time()):
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

    def waker(self, own_socket: bool | None = None) -> Waker | SocketWaker:
        """A new waker on the request streams' node: a :class:`SocketWaker` when the
        client's connections are plain unix or TCP ones (``own_socket`` None), else
        (TLS, Sentinel, cluster, RESP3, or ``own_socket`` False) a :class:`Waker`."""
        params = socket_params(self.redis) if own_socket is not False else None
        if params is not None:
            return SocketWaker(self.redis, self.keys.exec_registry, params)
        if own_socket:
            raise ValueError("this client's connections are not plain unix or TCP ones")
        return Waker(self.redis, self.keys.exec_registry)


def _pool_for(client: Any, key: str) -> Any:
    """The connection pool serving ``key``: the client's own, or (Redis Cluster) the
    pool of the node that holds the key's slot."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        return pool
    return client.get_node_from_key(key).redis_connection.connection_pool


def _wake_read(streams: Mapping[str, Any], consumer: str | None) -> tuple[Any, ...]:
    """The blocking read a waker keeps outstanding (see :meth:`Waker.arm`)."""
    if consumer is not None:
        return ("XREADGROUP", "GROUP", GROUP_EXEC, consumer, "COUNT", READ_COUNT, "BLOCK",
                WAKE_BLOCK_MS, "STREAMS", *streams.keys(), *(">" for _ in streams))
    return ("XREAD", "COUNT", 1, "BLOCK", WAKE_BLOCK_MS, "STREAMS", *streams.keys(),
            *streams.values())


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
        self.conn.send_command(*_wake_read(streams, consumer))
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


# -- a socket of our own ---------------------------------------------------------------

#: How long connecting, the handshake, a send, or the rest of a reply whose beginning
#: arrived may take before the waker gives up (a connection error for the loop).
SOCKET_TIMEOUT_S = 10.0
#: Bytes taken per recv.
RECV_BYTES = 1 << 16


def socket_params(client: Any) -> dict[str, Any] | None:
    """How to open a connection as ``client``'s pool would, when a waker can own its
    socket: a plain unix or TCP connection speaking RESP2 (no TLS, Sentinel, cluster);
    None otherwise.  Only redis-py's public pool attributes are read."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return None  # a cluster client: per-node pools
    kind = getattr(pool, "connection_class", None)
    if kind not in (redis.connection.Connection, redis.connection.UnixDomainSocketConnection):
        return None  # TLS (a subclass), Sentinel-managed, or something of the site's
    params = dict(pool.connection_kwargs)
    if params.get("protocol") not in (None, 2, "2"):
        return None
    params["unix"] = kind is redis.connection.UnixDomainSocketConnection
    return params


class SocketWaker:
    """A :class:`Waker` that owns its connection's socket, so the loop polls the socket
    itself: no helper thread, no pipe, no hand-over between threads per wake-up.

    For plain unix and TCP connections only (:func:`socket_params`): it connects
    where the client's pool does and logs in as redis-py would (``AUTH`` with the
    pool's user and password or credential provider, ``CLIENT SETNAME``,
    ``SELECT``), then sends its blocking read and parses the answer with hiredis.
    Anything else keeps the thread (:meth:`ExecStreams.waker`).
    """

    thread = None  # no helper thread

    def __init__(self, client: Any, anchor: str, params: Mapping[str, Any]) -> None:
        self.client = client
        self.anchor = anchor
        self.params = params
        self.sock: socket.socket | None = None
        self.reader: Any = None
        self.outstanding = False
        self.client_id: Any = None

    def fileno(self) -> int:
        """The socket: readable when the outstanding read's answer (or the connection's
        end) came.  Opened here if not yet (the loop registers it once per waker)."""
        if self.sock is None:
            self._connect()
        assert self.sock is not None
        return self.sock.fileno()

    def _connect(self) -> None:
        params = self.params
        timeout = params.get("socket_connect_timeout") or SOCKET_TIMEOUT_S
        try:
            if params["unix"]:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(params["path"])
            else:
                sock = socket.create_connection((params.get("host") or "localhost",
                                                 int(params.get("port") or 6379)), timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if params.get("socket_keepalive"):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except OSError as exc:
            raise redis.ConnectionError(f"exec waker cannot connect: {exc}") from None
        self.sock = sock
        self.reader = hiredis.Reader(replyError=redis.ResponseError)
        try:
            self._handshake()
        except BaseException:
            self._drop()
            raise
        sock.setblocking(False)

    def _handshake(self) -> None:
        """Log in as the pool's connections do, and learn the CLIENT ID (to unblock)."""
        params = self.params
        commands: list[tuple[Any, ...]] = []
        provider = params.get("credential_provider")
        auth = provider.get_credentials() if provider is not None else tuple(
            a for a in (params.get("username"), params.get("password")) if a)
        if auth and not params.get("password") and provider is None:
            auth = ()  # a user name alone logs nobody in (redis-py sends nothing either)
        if auth:
            commands.append(("AUTH", *auth))
        if params.get("client_name"):
            commands.append(("CLIENT", "SETNAME", params["client_name"]))
        if params.get("db"):
            commands.append(("SELECT", params["db"]))
        commands.append(("CLIENT", "ID"))
        self._send(commands)
        for command in commands:
            reply = self._reply(blocking=True)
            if isinstance(reply, redis.ResponseError):
                if command[0] == "AUTH":
                    raise redis.AuthenticationError(str(reply))
                raise reply
            if command[:2] == ("CLIENT", "ID"):
                self.client_id = reply

    def _send(self, commands: list[tuple[Any, ...]]) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(b"".join(pack_command(c) for c in commands))
        except OSError as exc:
            self._drop()
            raise redis.ConnectionError(f"exec waker: {exc}") from None

    def _reply(self, blocking: bool) -> Any:
        """The next reply; False when none has (fully) arrived and not ``blocking``."""
        sock, reader = self.sock, self.reader
        assert sock is not None
        while True:
            reply = reader.gets()
            if reply is not False:
                return reply
            try:
                if blocking:
                    ready = select.poll()
                    ready.register(sock.fileno(), select.POLLIN)
                    if not ready.poll(int(SOCKET_TIMEOUT_S * 1000)):
                        raise TimeoutError("no answer")
                data = sock.recv(RECV_BYTES)
            except BlockingIOError:
                return False
            except OSError as exc:
                self._drop()
                raise redis.ConnectionError(f"exec waker: {exc}") from None
            if not data:
                self._drop()
                raise redis.ConnectionError("exec waker: connection closed by the server")
            reader.feed(data)

    def arm(self, streams: Mapping[str, Any], consumer: str | None = None) -> None:
        """Send the blocking read unless one is already out (as :meth:`Waker.arm`)."""
        if self.outstanding:
            return
        if self.sock is None:
            self._connect()
        self._send([_wake_read(streams, consumer)])
        self.outstanding = True

    def consume(self) -> Any:
        """The answer: the raw stream reply (None when the read timed out); the rest
        of an answer whose beginning arrived is waited for."""
        self.outstanding = False
        reply = self._reply(blocking=False)
        if reply is False:
            reply = self._reply(blocking=True)
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def close(self) -> None:
        """End the outstanding read (CLIENT UNBLOCK: nothing is delivered to it) and
        close the socket."""
        if self.outstanding and self.sock is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                Direct.of(self.client, self.anchor).call("CLIENT", "UNBLOCK", self.client_id)
                self._reply(blocking=True)  # the unblocked read's empty answer
        self._drop()

    def _drop(self) -> None:
        self.outstanding = False
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
