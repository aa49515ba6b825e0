"""Opening Redis connections from a URL (TCP, TLS, unix socket)."""

from __future__ import annotations

import os

import redis

from fluxes.env import ENV_REDIS_URL


def connect(url: str | None = None, *, client_name: str | None = None) -> redis.Redis:
    """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``), or $FLUXES_REDIS_URL.

    Responses stay bytes: decoding is left to the caller, who knows which
    fields are text, and hiredis parses bytes fastest.
    """
    target = url or os.environ.get(ENV_REDIS_URL)
    if not target:
        raise ValueError(f"no Redis URL given (set {ENV_REDIS_URL} or pass --redis)")
    # No read timeout: clients block on replies (BLPOP, XREAD BLOCK) far longer
    # than redis-py's default of 5 s; dead peers are found by keepalive and
    # the health check instead.
    options: dict[str, object] = {"decode_responses": False, "client_name": client_name,
                                  "health_check_interval": 30, "socket_timeout": None,
                                  "socket_connect_timeout": 10}
    if not target.startswith("unix:"):
        options["socket_keepalive"] = True  # TCP only; unix sockets refuse the option
    try:
        client: redis.Redis = redis.Redis.from_url(target, **options)
    except ValueError as exc:
        raise ValueError(f"bad Redis URL {target!r}: {exc}") from None
    return client
