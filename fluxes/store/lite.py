"""A small Redis client for short commands (``fluxes submit``, ``fluxes run``).

Importing redis-py costs about 90 ms (its package imports redis.asyncio),
more than a whole ``fluxes submit`` may take (issue 26: 80 ms). A command
that sends a few commands and exits talks through :class:`LiteRedis`
instead: one socket, commands packed and replies parsed by hiredis (which
redis-py uses too), replies shaped as redis-py shapes them for the few
commands it offers, so code written against redis-py runs unchanged.

Only for what that is sound for: one server, by unix socket or plain TCP
(``unix://``, ``redis://``), with a user name, password, database and
connect timeout; :func:`lite_target` says None for anything else (TLS,
Sentinel, Cluster, other options), which goes through redis-py
(:func:`fluxes.store.connection.connect`). Errors are redis-py's own types,
imported when one happens, so callers catch them as they always did.
"""

from __future__ import annotations

import _socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import hiredis

from fluxes.store.connection import RedisTarget, parse_redis_url

#: The URL options a lite connection honours (anything else: redis-py).
_OPTIONS = frozenset({"username", "password", "db", "socket_connect_timeout"})
#: What redis-py waits for a connection by default in fluxes (connection._client_options).
CONNECT_TIMEOUT_S = 10.0


def lite_target(url: str) -> RedisTarget | None:
    """``url`` parsed, when a :class:`LiteRedis` can serve it; None otherwise."""
    target = parse_redis_url(url)
    if target.kind != "single" or target.tls or set(target.options) - _OPTIONS:
        return None
    return target


def _error(message: str) -> Exception:
    """The redis-py exception for an error reply (as its own parser builds it)."""
    from redis._parsers.base import BaseParser

    error: Exception = BaseParser.parse_error(message)
    return error


def _pairs(flat: Sequence[Any] | None) -> dict[Any, Any]:
    """A flat RESP2 field list as a dict (redis-py's pairs_to_dict)."""
    if not flat:
        return {}
    it = iter(flat)
    return dict(zip(it, it, strict=True))


def _entries(raw: Sequence[Any] | None) -> list[tuple[Any, dict[Any, Any]]]:
    """Stream entries as redis-py gives them: (id, {field: value})."""
    return [(entry[0], _pairs(entry[1])) for entry in raw or () if entry is not None]


class LiteRedis:
    """A blocking connection to one Redis server with a redis-py-like surface for
    ``hget``, ``hmget``, ``hgetall``, ``hexists``, ``hvals``, ``exists``, ``blpop``, ``xadd``,
    ``xread``, ``xrange``, ``xrevrange``, ``xinfo_groups``, ``xpending``, ``smembers``, ``zrange``,
    ``zrevrange`` and ``pipeline`` (without transactions); bytes in, bytes out."""

    def __init__(self, target: RedisTarget, client_name: str | None = None) -> None:
        self._target = target
        self._client_name = client_name
        self._sock: _socket.socket | None = None
        self._reader = hiredis.Reader()

    # -- the wire ----------------------------------------------------------------

    def _handshake(self) -> list[tuple[Any, ...]]:
        """The commands a new connection starts with (their replies are checked)."""
        target = self._target
        out: list[tuple[Any, ...]] = []
        password = target.options.get("password", target.password)
        username = target.options.get("username", target.username)
        if password is not None:
            out.append(("AUTH", username, password) if username else ("AUTH", password))
        if target.options.get("db"):
            out.append(("SELECT", target.options["db"]))
        if self._client_name:
            out.append(("CLIENT", "SETNAME", self._client_name))
        return out

    def _open(self) -> _socket.socket:
        target = self._target
        timeout = float(target.options.get("socket_connect_timeout", CONNECT_TIMEOUT_S))
        sock: _socket.socket
        try:
            if target.socket_path is not None:
                # the C socket type itself: the socket module's import costs ~1.5 ms
                # of a short command (its enums), and a unix socket needs none of it
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                sock.settimeout(timeout)
                sock.connect(target.socket_path)
            else:
                import socket

                host, port = target.nodes[0]
                sock = socket.create_connection((host, port), timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except OSError as exc:
            import redis

            where = target.socket_path or f"{target.nodes[0][0]}:{target.nodes[0][1]}"
            raise redis.ConnectionError(f"Error connecting to {where}: {exc}") from None
        # no read timeout: BLPOP and XREAD BLOCK wait as long as they were told to
        sock.settimeout(None)
        return sock

    def _roundtrip(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one write and read their replies (error replies are
        returned as exceptions, not raised)."""
        prefix: list[tuple[Any, ...]] = []
        if self._sock is None:
            self._sock = self._open()
            prefix = self._handshake()
        wire = b"".join(hiredis.pack_command(tuple(c)) for c in (*prefix, *commands))
        try:
            self._sock.sendall(wire)
            replies = [self._read() for _ in range(len(prefix) + len(commands))]
        except OSError as exc:
            self.close()
            import redis

            raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from None
        for reply in replies[:len(prefix)]:
            if isinstance(reply, hiredis.ReplyError):
                self.close()
                raise _error(str(reply))
        return [_error(str(r)) if isinstance(r, hiredis.ReplyError) else r
                for r in replies[len(prefix):]]

    def _read(self) -> Any:
        assert self._sock is not None
        while True:
            reply = self._reader.gets()
            if reply is not False:
                return reply
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            self._reader.feed(data)

    def close(self) -> None:
        """Close the connection (the next command opens another)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._reader = hiredis.Reader()

    def execute_command(self, *args: Any) -> Any:
        """Send one command; its raw reply (an error reply raises redis-py's error)."""
        [reply] = self._roundtrip([args])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def execute_raw(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one round trip; their raw replies, errors in place (as
        :func:`fluxes.store.direct.execute_grouped` answers)."""
        return self._roundtrip(commands) if commands else []

    def pipeline(self, transaction: bool = False) -> LitePipeline:
        """Commands sent together by :meth:`LitePipeline.execute` (no MULTI/EXEC)."""
        if transaction:
            raise ValueError("LiteRedis pipelines are not transactions")
        return LitePipeline(self)

    # -- commands, shaped as redis-py's ------------------------------------------

    def hget(self, name: str, key: str) -> Any:
        """HGET."""
        return self.execute_command("HGET", name, key)

    def hmget(self, name: str, keys: Iterable[str]) -> Any:
        """HMGET."""
        return self.execute_command("HMGET", name, *keys)

    def hgetall(self, name: str) -> dict[Any, Any]:
        """HGETALL, as a dict."""
        return _pairs(self.execute_command("HGETALL", name))

    def exists(self, *names: str) -> int:
        """EXISTS: how many of ``names`` exist."""
        return int(self.execute_command("EXISTS", *names))

    def blpop(self, keys: Sequence[str], timeout: float = 0) -> tuple[Any, Any] | None:
        """BLPOP: (key, value), or None when ``timeout`` seconds passed first."""
        reply = self.execute_command("BLPOP", *keys, timeout)
        return (reply[0], reply[1]) if reply else None

    def xadd(self, name: str, fields: Mapping[Any, Any], id: str = "*") -> Any:
        """XADD (no trimming)."""
        return self.execute_command("XADD", name, id, *_flat(fields))

    def xread(self, streams: Mapping[str, Any], count: int | None = None,
              block: int | None = None) -> list[list[Any]]:
        """XREAD, as redis-py returns it: [[stream, [(id, fields), ...]], ...]."""
        args: list[Any] = ["XREAD"]
        if count is not None:
            args += ["COUNT", count]
        if block is not None:
            args += ["BLOCK", block]
        args += ["STREAMS", *streams, *streams.values()]
        reply = self.execute_command(*args)
        return [[r[0], _entries(r[1])] for r in reply or ()]

    def xrange(self, name: str, min: str = "-", max: str = "+",
               count: int | None = None) -> list[tuple[Any, dict[Any, Any]]]:
        """XRANGE, as (id, fields) pairs."""
        args: list[Any] = ["XRANGE", name, min, max]
        if count is not None:
            args += ["COUNT", count]
        return _entries(self.execute_command(*args))

    def xrevrange(self, name: str, max: str = "+", min: str = "-",
                  count: int | None = None) -> list[tuple[Any, dict[Any, Any]]]:
        """XREVRANGE, as (id, fields) pairs, newest first."""
        args: list[Any] = ["XREVRANGE", name, max, min]
        if count is not None:
            args += ["COUNT", count]
        return _entries(self.execute_command(*args))

    def xinfo_groups(self, name: str) -> list[dict[str, Any]]:
        """XINFO GROUPS, as redis-py returns it: a dict per group, names as text."""
        return [_info(group) for group in self.execute_command("XINFO", "GROUPS", name)]

    def xpending(self, name: str, groupname: str) -> dict[str, Any]:
        """XPENDING's summary form, as redis-py returns it."""
        count, low, high, consumers = self.execute_command("XPENDING", name, groupname)
        return {"pending": int(count), "min": low, "max": high,
                "consumers": [{"name": c[0], "pending": int(c[1])} for c in consumers or ()]}

    def hexists(self, name: str, key: str) -> bool:
        """HEXISTS."""
        return bool(self.execute_command("HEXISTS", name, key))

    def hvals(self, name: str) -> list[Any]:
        """HVALS."""
        return list(self.execute_command("HVALS", name))

    def smembers(self, name: str) -> set[Any]:
        """SMEMBERS."""
        return set(self.execute_command("SMEMBERS", name))

    def zrange(self, name: str, start: int, end: int, withscores: bool = False) -> list[Any]:
        """ZRANGE by rank, with (member, score) pairs when ``withscores``."""
        return _scored(self.execute_command("ZRANGE", name, start, end,
                                            *(["WITHSCORES"] if withscores else [])),
                       withscores)

    def zrevrange(self, name: str, start: int, end: int,
                  withscores: bool = False) -> list[Any]:
        """ZREVRANGE by rank, with (member, score) pairs when ``withscores``."""
        return _scored(self.execute_command("ZREVRANGE", name, start, end,
                                            *(["WITHSCORES"] if withscores else [])),
                       withscores)


def _info(flat: Sequence[Any]) -> dict[str, Any]:
    """An XINFO reply's flat field list as redis-py gives it: field names as text."""
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in _pairs(flat).items()}


def _scored(reply: Sequence[Any], withscores: bool) -> list[Any]:
    """A sorted set range: members, or (member, score) pairs (redis-py's shape)."""
    if not withscores:
        return list(reply)
    it = iter(reply)
    return [(member, float(score)) for member, score in zip(it, it, strict=True)]


def _flat(fields: Mapping[Any, Any]) -> list[Any]:
    """A mapping as the flat field/value list of a command."""
    out: list[Any] = []
    for key, value in fields.items():
        out += (key, value)
    return out


class LitePipeline:
    """Commands of a :class:`LiteRedis` queued and sent in one round trip."""

    def __init__(self, client: LiteRedis) -> None:
        self._client = client
        self._commands: list[tuple[Any, ...]] = []
        #: how each reply is shaped as redis-py shapes it (None: as it comes)
        self._shapes: list[Callable[[Any], Any] | None] = []

    def _queue(self, shape: Callable[[Any], Any] | None, *command: Any) -> LitePipeline:
        self._commands.append(command)
        self._shapes.append(shape)
        return self

    def xadd(self, name: str, fields: Mapping[Any, Any], id: str = "*") -> LitePipeline:
        """Queue an XADD."""
        return self._queue(None, "XADD", name, id, *_flat(fields))

    def hget(self, name: str, key: str) -> LitePipeline:
        """Queue an HGET."""
        return self._queue(None, "HGET", name, key)

    def hmget(self, name: str, keys: Iterable[Any]) -> LitePipeline:
        """Queue an HMGET."""
        return self._queue(None, "HMGET", name, *keys)

    def hgetall(self, name: str) -> LitePipeline:
        """Queue an HGETALL (its reply a dict)."""
        return self._queue(_pairs, "HGETALL", name)

    def exists(self, *names: str) -> LitePipeline:
        """Queue an EXISTS."""
        return self._queue(int, "EXISTS", *names)

    def xrange(self, name: str, min: str = "-", max: str = "+",
               count: int | None = None) -> LitePipeline:
        """Queue an XRANGE (its reply (id, fields) pairs)."""
        extra = ["COUNT", count] if count is not None else []
        return self._queue(_entries, "XRANGE", name, min, max, *extra)

    def xrevrange(self, name: str, max: str = "+", min: str = "-",
                  count: int | None = None) -> LitePipeline:
        """Queue an XREVRANGE (its reply (id, fields) pairs, newest first)."""
        extra = ["COUNT", count] if count is not None else []
        return self._queue(_entries, "XREVRANGE", name, max, min, *extra)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the queued commands; their replies (the first error raises, unless
        ``raise_on_error`` is False: then errors are in the list)."""
        commands, self._commands = self._commands, []
        shapes, self._shapes = self._shapes, []
        if not commands:
            return []
        replies = self._client._roundtrip(commands)
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return [r if shape is None or isinstance(r, Exception) else shape(r)
                for shape, r in zip(shapes, replies, strict=True)]
