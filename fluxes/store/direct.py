"""Hot-path Redis calls: commands written straight to a pooled connection.

redis-py's command layer costs about 40 us of Python per call (argument
filtering, retry and telemetry wrappers, connection bookkeeping, reply
callbacks), more than Redis itself spends on most commands fluxes sends, and
a worker's loop sends a few per step. :class:`Direct` packs a step's
commands with hiredis, writes them in one go on a connection it keeps
(taken from the client's own pool, and dropped on any error), and returns
hiredis' replies as they are. Because the connection and pool are
redis-py's, TLS, authentication, health checks, Sentinel failover and a
cluster's per-node pools all still apply; only the per-command wrappers are
skipped. Measured with ``fluxes bench throughput`` (docs/operations.md,
"Throughput": with these, 1 node x 2 cores went from 380 to 550 jobs/s).

Replies are raw: a stream read is a map (RESP3) or a flat list (RESP2);
:func:`stream_entries` turns either into redis-py's familiar shape.
"""

from __future__ import annotations

import socket
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.exceptions import AskError, MovedError

from fluxes.store import scripts

try:  # redis-py's private parts: another redis-py than the lock's takes its own path
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
    from redis._parsers.hiredis import _HiredisParser
except ImportError:  # pragma: no cover
    _NOT_ENOUGH_DATA = _HiredisParser = None

#: Cluster redirections (redis-py strips the MOVED/ASK prefix into these types).
_REDIRECTS = (MovedError, AskError)
#: One command: its name and arguments, e.g. ("XACK", stream, group, id).
Command = Sequence[Any]
#: The shared Directs of each client (see Direct.of), dropped with the client.
_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], Direct]] = \
    weakref.WeakKeyDictionary()


class Direct:
    """Send commands for keys of one hash slot in one round trip.

    ``anchor`` is any key of the slot the commands touch: on a Redis Cluster
    it picks the node whose pool is used (the slot map is looked up on every
    call, so it follows resharding); elsewhere the client's pool serves all.
    """

    __slots__ = ("__weakref__", "_anchor", "_client", "_conn", "_conn_pool", "_pool")

    def __init__(self, client: Any, anchor: str) -> None:
        self._client = client
        self._anchor = anchor
        self._pool = getattr(client, "connection_pool", None)
        # One connection is kept for this object's calls (a worker loop is one
        # thread): taking it from the pool and giving it back cost as much as
        # the command. Any error drops it, so a failover or a reconnect gets
        # a fresh one from the pool (Sentinel's pool finds the new primary).
        self._conn: Any = None
        self._conn_pool: Any = None

    @classmethod
    def of(cls, client: Any, anchor: str) -> Direct:
        """The shared Direct of ``client`` for ``anchor``'s slot, in this thread.

        One per client and thread (one per slot on a cluster), so a worker keeps
        one connection for all its hot-path calls, and no connection is ever
        used by two threads at once.
        """
        last = _last
        if last is not None and last[0]() is client and last[1] == threading.get_ident():
            found = last[2]()
            if found is not None:
                return found  # a worker's loop asks for the same one at every step
        per_client = _SHARED.get(client)
        if per_client is None:
            per_client = _SHARED[client] = {}
        slot = "" if getattr(client, "connection_pool", None) is not None else slot_tag(anchor)
        key = (threading.get_ident(), slot)
        found = per_client.get(key)
        if found is None:
            found = per_client[key] = cls(client, anchor)
        if not slot:
            _remember(client, key[0], found)
        return found

    def _pool_now(self) -> Any:
        if self._pool is not None:
            return self._pool
        return self._client.get_node_from_key(self._anchor).redis_connection.connection_pool

    def _connection(self) -> Any:
        """The kept connection (a new one when the slot's node changed)."""
        pool = self._pool_now()
        conn = self._conn
        if conn is not None and self._conn_pool is pool:
            return conn
        self.close()
        conn = pool.get_connection()
        self._conn, self._conn_pool = conn, pool
        return conn

    def close(self) -> None:
        """Give the kept connection back to its pool."""
        if self._conn is not None:
            self._conn_pool.release(self._conn)
            self._conn = self._conn_pool = None

    def execute(self, commands: Iterable[Command]) -> list[Any]:
        """Send ``commands`` in one write and return every reply, in order.

        An error reply comes back as a ``redis.ResponseError`` in its place
        (the other commands still ran, as in a pipeline); a connection error
        is raised, after dropping the connection. A cluster redirect
        (MOVED/ASK: the slot moved) refreshes the slot map and is raised as a
        ``redis.ConnectionError``, which workers treat like any outage:
        reconnect and rebuild from what is stored.
        """
        commands = list(commands)
        if not commands:
            return []
        conn = self._connection()
        try:
            _send(conn, _pack(conn, commands))
            replies = _read_replies(conn, len(commands))
        except BaseException:
            # a reply may be half read: the connection cannot be reused
            conn.disconnect()
            self.close()
            raise
        for reply in replies:
            if isinstance(reply, _REDIRECTS):
                manager = getattr(self._client, "nodes_manager", None)
                if manager is not None:
                    manager.initialize()
                raise redis.ConnectionError(f"cluster slot moved: {reply}")
        return replies

    def call(self, *command: Any) -> Any:
        """One command; its error reply is raised."""
        reply = self.execute([command])[0]
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def transaction(self, commands: Iterable[Command]) -> list[Any]:
        """Run ``commands`` in MULTI/EXEC (one round trip); raise the first error."""
        commands = list(commands)
        replies = self.execute([("MULTI",), *commands, ("EXEC",)])
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply  # EXECABORT, or a command refused while queueing
        results = replies[-1]
        if results is None:
            raise redis.WatchError("transaction aborted")
        for result in results:
            if isinstance(result, redis.ResponseError):
                raise result
        return list(results)

    def fcall(self, source: str | bytes, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run one of our scripts (its text ``source``) as a Redis function, loading its
        library first when the server does not have it (a new version, a Redis that
        never saw it): fluxes/store/scripts.py."""
        command = scripts.fcall_command(source, keys, args)
        reply = self.execute([command])[0]
        if scripts.is_missing(reply):
            scripts.load_via(self.call, source)
            reply = self.execute([command])[0]
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def evalsha(self, sha: str, source: str | bytes, keys: Sequence[Any],
                args: Sequence[Any]) -> Any:
        """:meth:`fcall` (kept for callers that name the SHA-1; no script is EVALed)."""
        return self.fcall(source, keys, args)


def _send(conn: Any, packed: list[bytes]) -> None:
    """Write ``packed`` on ``conn``: straight to its socket when it is connected and no
    health check is due (redis-py's ``send_packed_command`` is ~6 us more on cold
    caches), else through redis-py (connecting, or checking the connection first).
    Errors are raised as redis-py raises them; the caller drops the connection."""
    sock = getattr(conn, "_sock", None)
    interval = getattr(conn, "health_check_interval", 0)
    if not isinstance(sock, socket.socket) or (
            interval and time.monotonic() > conn.next_health_check):
        conn.send_packed_command(packed)
        return
    try:
        for item in packed:
            sock.sendall(item)
    except TimeoutError:  # socket.timeout
        raise redis.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        raise redis.ConnectionError(f"Error while writing to socket: {exc.args}") from None


#: The shared Direct :meth:`Direct.of` gave last for a client of one pool (weak
#: references to the client and the Direct, and the thread): found again without the
#: weak dictionary's lookup, ~7 us on the caches a worker's step starts on.
_last: tuple[weakref.ref[Any], int, weakref.ref[Direct]] | None = None


def _remember(client: Any, thread: int, found: Direct) -> None:
    global _last  # one cached answer, replaced whole (atomic under the GIL)
    _last = (weakref.ref(client), thread, weakref.ref(found))


def _read_replies(conn: Any, n: int) -> list[Any]:
    """The next ``n`` replies on ``conn``, an error reply in its place.

    With redis-py's hiredis parser, read straight from the socket into its
    reader: redis-py's reply path (about ten Python functions a reply: error
    mapping, push handling, health bookkeeping) cost ~20 us a reply on the caches
    a worker wakes up to (a round trip of two replies, with the caches emptied
    before each: ~100 us through redis-py, ~58 us this way; ~8.5 and ~6.5 warm).
    What it does is kept: an error reply in its place, an outage reply
    (``LOADING``...) raised, a push message handed to the parser and skipped, a
    timeout or a closed socket raised as redis-py raises them. Any other parser or
    socket: redis-py's path.
    """
    parser: Any = getattr(conn, "_parser", None)
    sock = getattr(conn, "_sock", None)
    # (fakeredis: hiredis' parser on a fake socket)
    if _HiredisParser is None or type(parser) is not _HiredisParser or \
            not isinstance(sock, socket.socket) or parser._reader is None:
        return _read_replies_redis_py(conn, n)
    reader, buf = parser._reader, parser._buffer
    push = parser._hiredis_PushNotificationType
    replies: list[Any] = []
    while len(replies) < n:
        reply = reader.gets()
        while reply is _NOT_ENOUGH_DATA:
            try:
                got = sock.recv_into(buf)
            except TimeoutError:  # socket.timeout
                raise redis.TimeoutError("Timeout reading from socket") from None
            except OSError as exc:
                raise redis.ConnectionError(f"Error while reading from socket: {exc.args}"
                                            ) from None
            if not got:
                raise redis.ConnectionError("Connection closed by server.")
            reader.feed(buf, 0, got)
            reply = reader.gets()
        if push is not None and isinstance(reply, push):
            parser.handle_push_response(reply)  # not a reply (RESP3 push): read on
            continue
        if isinstance(reply, redis.ConnectionError):
            raise reply
        if isinstance(reply, list) and reply and isinstance(reply[0], redis.ConnectionError):
            raise reply[0]
        replies.append(reply)
    interval = getattr(conn, "health_check_interval", 0)
    if interval:
        # as redis-py's reply path does: a connection in use needs no PING
        conn.next_health_check = time.monotonic() + interval
    return replies


def _read_replies_redis_py(conn: Any, n: int) -> list[Any]:
    """:func:`_read_replies` through redis-py's reply path."""
    replies: list[Any] = []
    for _ in range(n):
        try:
            replies.append(conn.read_response())
        except redis.ResponseError as exc:
            replies.append(exc)
    return replies


def _pack(conn: Any, commands: list[Command]) -> list[bytes]:
    """The commands in the wire format, as the chunk list send_packed_command takes:
    hiredis' packer (a few us a command, where redis-py's wrapper around it costs
    ~10), redis-py's for an argument type hiredis does not take."""
    try:
        return [b"".join([pack_command(tuple(command)) for command in commands])]
    except TypeError:
        return conn.pack_commands(commands)  # type: ignore[no-any-return]


def stream_entries(reply: Any) -> list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]:
    """An XREAD/XREADGROUP reply as ``[(stream, [(id, {field: value}), ...]), ...]``.

    Accepts the RESP3 map and the RESP2 list forms; a timed-out read (nil)
    gives []. An entry deleted from the stream while pending has no fields
    (``{}``).
    """
    if not reply:
        return []
    pairs = reply.items() if isinstance(reply, dict) else reply
    out = []
    for stream, entries in pairs:
        decoded = []
        for msg_id, fields in entries:
            if fields:
                it = iter(fields)
                decoded.append((msg_id, dict(zip(it, it, strict=True))))
            else:
                decoded.append((msg_id, {}))
        out.append((stream, decoded))
    return out


def slot_tag(key: str) -> str:
    """The hash-tag part of a key (``{fx:p1}``), which decides its Cluster slot."""
    end = key.find("}")
    return key[: end + 1] if key.startswith("{") and end > 0 else key


def execute_grouped(client: Any, commands: Sequence[tuple[str, Command]]) -> list[Any]:
    """Run ``(anchor key, command)`` pairs, one round trip per hash slot on a cluster and
    one in all elsewhere; replies (errors in place) come back in the given order."""
    raw = getattr(client, "execute_raw", None)
    if raw is not None:
        # the CLI's small client (fluxes.store.lite): one plain server, one round trip
        answers: list[Any] = raw([command for _anchor, command in commands])
        return answers
    if getattr(client, "connection_pool", None) is not None or not commands:
        return Direct.of(client, commands[0][0] if commands else "").execute(
            [command for _anchor, command in commands])
    by_tag: dict[str, list[int]] = {}
    for i, (anchor, _command) in enumerate(commands):
        by_tag.setdefault(slot_tag(anchor), []).append(i)
    replies: list[Any] = [None] * len(commands)
    for indexes in by_tag.values():
        got = Direct.of(client, commands[indexes[0]][0]).execute(
            [commands[i][1] for i in indexes])
        for i, reply in zip(indexes, got, strict=True):
            replies[i] = reply
    return replies
