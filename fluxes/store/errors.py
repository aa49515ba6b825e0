"""What code outside the store needs from the Redis client: its error types and client type.

Only ``fluxes/store/`` (and ``fluxes/proc/redis_server.py``, which runs the
server process) import ``redis``; workers, the CLI, the web server, benches
and drills name these instead, so the client library is wired in one place
(and ``tests/unit/test_layers.py`` keeps it so). Connecting is
``fluxes.store.connection.connect``, re-exported here.

The names that would shadow a builtin (redis-py's ``ConnectionError`` and
``TimeoutError`` are not the builtins' subclasses) carry a ``Store`` prefix.
"""

from __future__ import annotations

from typing import TypeAlias

import redis
from redis import exceptions as _exceptions

from fluxes.store.connection import RedisClient, connect

__all__ = [
    "TRANSIENT",
    "AuthenticationError",
    "BusyLoadingError",
    "Client",
    "NoPermissionError",
    "RedisClient",
    "ResponseError",
    "StoreConnectionError",
    "StoreError",
    "StoreTimeoutError",
    "connect",
]

#: A client to one server (what ``connect`` returns for a single server or a
#: Sentinel primary, and what a private redis-server hands out).
Client: TypeAlias = redis.Redis

#: Every error the client raises.
StoreError = redis.RedisError
#: The server cannot be reached, or the connection dropped.
StoreConnectionError = redis.ConnectionError
#: The server did not answer in time.
StoreTimeoutError = redis.TimeoutError
#: The server is loading its data set after a restart.
BusyLoadingError = redis.BusyLoadingError
#: The server answered with an error (wrong type, a failing script, a missing group...).
ResponseError = redis.ResponseError
#: The ACL user may not run this command or touch this key.
NoPermissionError = _exceptions.NoPermissionError
#: Wrong user name or password.
AuthenticationError = redis.AuthenticationError

#: Errors that go away by themselves: worth a retry after a pause.
TRANSIENT: tuple[type[Exception], ...] = (StoreConnectionError, StoreTimeoutError,
                                          BusyLoadingError)
