"""Opening Redis connections from a URL: one server, a Sentinel-managed primary, or a Cluster.

URL forms (redis-py's own clients do the work; we only parse and check):

* one server: ``redis://[user:pass@]host[:port][/db]``, ``rediss://...`` (TLS),
  ``unix://[user:pass@]/path/to/redis.sock[?db=N]``;
* Sentinel: ``redis+sentinel://[user:pass@]host:port[,host:port...]/SERVICE[?db=N]``
  (``rediss+sentinel://`` for TLS to the sentinels and to the primary): the
  primary Sentinel knows as SERVICE, looked up again after a failover;
* Cluster: ``redis+cluster://[user:pass@]host:port[,host:port...]``
  (``rediss+cluster://`` for TLS): any reachable seed node finds the rest.

Query parameters are a fixed set of connection options (see ``OPTIONS``); an
unknown one is an error rather than a keyword redis-py would reject only at
the first command.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qsl, unquote, urlsplit

from fluxes.env import ENV_REDIS_URL

# redis-py is imported where a connection is made, not here: reading a URL must not
# cost its import (about 90 ms, its package imports redis.asyncio), which a short
# command that talks to Redis through fluxes.store.lite never pays
if TYPE_CHECKING:
    import redis
    from redis.cluster import RedisCluster
    from redis.retry import Retry

#: Any client connect() returns. A RedisCluster has the command API of
#: redis.Redis but no ``connection_pool`` (one pool per node instead).
RedisClient: TypeAlias = "redis.Redis | RedisCluster"

#: URL scheme -> (kind, TLS on).
SCHEMES: dict[str, tuple[str, bool]] = {
    "redis": ("single", False), "rediss": ("single", True), "unix": ("single", False),
    "redis+sentinel": ("sentinel", False), "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False), "rediss+cluster": ("cluster", True),
}

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
#: Sentinels only answer short lookups; a stuck one must not hang the client.
SENTINEL_SOCKET_TIMEOUT = 5.0


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"want true or false, got {text!r}")


def _cert_reqs(text: str) -> str:
    if text not in ("none", "optional", "required"):
        raise ValueError(f"want none, optional or required, got {text!r}")
    return text


def _nonneg_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be > 0, got {text!r}")
    return value


@dataclass(frozen=True)
class Option:
    """A query parameter we accept: how to parse it and which URL kinds may use it."""

    parse: Callable[[str], Any]
    kinds: frozenset[str] = frozenset({"single", "sentinel", "cluster"})
    tls_only: bool = False
    #: Where it goes: "client" (every Redis connection) or "sentinel" (sentinel lookups).
    target: str = "client"


_NOT_CLUSTER = frozenset({"single", "sentinel"})

#: Every query parameter a fluxes Redis URL may carry (besides the instance's ``ns``,
#: which InstanceURI strips before we see the URL).
OPTIONS: dict[str, Option] = {
    # credentials in the query, as redis-py also accepts them (userinfo is the usual place)
    "username": Option(str),
    "password": Option(str),
    "db": Option(_nonneg_int, _NOT_CLUSTER),
    "socket_connect_timeout": Option(_positive_float),
    "health_check_interval": Option(_nonneg_int),
    "ssl_ca_certs": Option(str, tls_only=True),
    "ssl_ca_path": Option(str, tls_only=True),
    "ssl_certfile": Option(str, tls_only=True),
    "ssl_keyfile": Option(str, tls_only=True),
    "ssl_cert_reqs": Option(_cert_reqs, tls_only=True),
    "ssl_check_hostname": Option(_bool, tls_only=True),
    "sentinel_username": Option(str, frozenset({"sentinel"}), target="sentinel"),
    "sentinel_password": Option(str, frozenset({"sentinel"}), target="sentinel"),
}


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL: what kind of deployment, where its servers are, and options."""

    kind: str  # "single", "sentinel" or "cluster"
    tls: bool
    #: TCP servers: the one server, the sentinels, or the cluster seed nodes.
    nodes: tuple[tuple[str, int], ...] = ()
    #: The unix socket path (single server only).
    socket_path: str | None = None
    #: The Sentinel service (primary) name.
    service: str | None = None
    username: str | None = None
    password: str | None = None
    #: Parsed query options, by name (see ``OPTIONS``).
    options: dict[str, Any] = field(default_factory=dict)


def _split_nodes(hosts: str, default_port: int) -> tuple[tuple[str, int], ...]:
    """``h1:p1,h2,[::1]:p3`` -> ((h1, p1), (h2, default), (::1, p3))."""
    nodes = []
    for item in hosts.split(","):
        if not item:
            raise ValueError("empty host in the host list")
        if item.startswith("["):  # IPv6 literal
            end = item.find("]")
            if end < 0:
                raise ValueError(f"unclosed '[' in {item!r}")
            host, rest = item[1:end], item[end + 1:]
            if rest and not rest.startswith(":"):
                raise ValueError(f"bad host {item!r}")
            port_text = rest[1:] if rest else ""
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise ValueError(f"empty host in {item!r}")
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"bad port in {item!r}")
            port = int(port_text)
        else:
            port = default_port
        nodes.append((unquote(host), port))
    return tuple(nodes)


def redact(url: str) -> str:
    """``url`` with its passwords replaced by ``***``, for messages and logs."""
    url = re.sub(r"^([^:/]+://[^/@]*?:)[^/@]*@", r"\1***@", url)
    return re.sub(r"([?&](?:sentinel_)?password=)[^&#]*", r"\1***", url)


def parse_redis_url(url: str) -> RedisTarget:
    """Parse a Redis URL of any form fluxes accepts; ValueError (one line) if it is bad."""
    try:
        return _parse(url)
    except ValueError as exc:
        # every message names the URL: say it once, without its passwords
        raise ValueError(f"bad Redis URL {redact(url)!r}: {exc}") from None


def _parse(url: str) -> RedisTarget:
    """parse_redis_url without the URL in its error messages."""
    scheme, sep, _rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError("want one of " + ", ".join(f"{s}://" for s in SCHEMES))
    kind, tls = SCHEMES[scheme.lower()]
    parts = urlsplit(url)
    if parts.fragment:
        raise ValueError("unexpected '#' fragment")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user_text, colon, pass_text = userinfo.partition(":")
        username = unquote(user_text) or None
        password = unquote(pass_text) if colon else None

    options = _query_options(parts.query, scheme, kind, tls)
    username = _only_once("username", username, options)
    password = _only_once("password", password, options)

    path = unquote(parts.path)
    if scheme.lower() == "unix":
        if hosts:
            raise ValueError("a unix:// URL names a socket path, not a host "
                             "(unix:///path/to/redis.sock)")
        if not path:
            raise ValueError("no socket path")
        return RedisTarget(kind, tls, socket_path=path, username=username, password=password,
                           options=options)

    if not hosts:
        raise ValueError("no host")
    default_port = DEFAULT_SENTINEL_PORT if kind == "sentinel" else DEFAULT_PORT
    nodes = _split_nodes(hosts, default_port)
    service = _path_meaning(kind, nodes, path.strip("/"), options)
    return RedisTarget(kind, tls, nodes=nodes, service=service, username=username,
                       password=password, options=options)


def _query_options(query: str, scheme: str, kind: str, tls: bool) -> dict[str, Any]:
    """The connection options of a URL's query, parsed and checked against ``kind``."""
    options: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        option = OPTIONS.get(name)
        if option is None or kind not in option.kinds:
            known = ", ".join(n for n, o in OPTIONS.items() if kind in o.kinds)
            raise ValueError(f"unknown option {name!r} for {scheme}:// (known: {known})")
        if option.tls_only and not tls:
            secure = "rediss" if kind == "single" else f"rediss+{kind}"
            raise ValueError(f"{name} needs TLS (use {secure}://)")
        try:
            options[name] = option.parse(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return options


def _only_once(field: str, before_at: str | None, options: dict[str, Any]) -> str | None:
    """``field`` (username or password) from before the '@' or from ``options``, not both;
    taken out of ``options``."""
    if field not in options:
        return before_at
    if before_at is not None:
        raise ValueError(f"{field} given twice (before '@' and {field}=)")
    value: str = options.pop(field)
    return value


def _path_meaning(kind: str, nodes: tuple[tuple[str, int], ...], name: str,
                  options: dict[str, Any]) -> str | None:
    """Check a URL's path (without slashes) for ``kind``; a database number goes into
    ``options``; returns the Sentinel service name (None for the other kinds)."""
    if kind == "single":
        if len(nodes) > 1:
            raise ValueError("several hosts need redis+sentinel:// or redis+cluster://")
        if name:
            if "db" in options:
                raise ValueError("database given twice (path and db=)")
            if not name.isdigit():
                raise ValueError("the path must be a database number")
            options["db"] = int(name)
        return None
    if kind == "sentinel":
        if not name or "/" in name:
            raise ValueError("want the Sentinel service name as the path "
                             "(redis+sentinel://host:26379/mymaster)")
        return name
    if name:
        raise ValueError("a cluster has no databases; drop the path")
    return None


def _client_options(target: RedisTarget, client_name: str | None) -> dict[str, Any]:
    """Keyword arguments for every connection to a Redis server (not to a sentinel)."""
    # No read timeout: clients block on replies (BLPOP, XREAD BLOCK) far longer
    # than a socket timeout would allow; dead peers are found by TCP keepalive
    # and the health check (a PING before using a connection idle that long).
    # Responses stay bytes: decoding is left to the caller, who knows which
    # fields are text, and hiredis parses bytes fastest.
    # No automatic retries: redis-py would silently resend a command whose
    # reply was lost, which is wrong for what fluxes sends (a MULTI with
    # HINCRBYs counted twice; an XREADGROUP ">" whose first delivery is then
    # never seen). Workers handle a connection error themselves: reconnect and
    # rebuild from what is stored. (Found by the Redis kill drill.)
    options: dict[str, Any] = {
        "decode_responses": False, "client_name": client_name,
        "socket_timeout": None, "socket_connect_timeout": 10.0,
        "health_check_interval": 30, "retry": no_retry(),
    }
    if target.socket_path is None:
        options["socket_keepalive"] = True  # TCP only; unix sockets refuse the option
    if target.username is not None:
        options["username"] = target.username
    if target.password is not None:
        options["password"] = target.password
    if target.tls:
        options["ssl"] = True
    options.update((name, value) for name, value in target.options.items()
                   if OPTIONS[name].target == "client")
    return options


def no_retry() -> Retry:
    """A redis-py retry policy that never retries."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def connect(url: str | None = None, *, client_name: str | None = None) -> RedisClient:
    """Connect to ``url`` (any form in this module's docstring), or $FLUXES_REDIS_URL.

    Returns a ``redis.Redis`` for one server or a Sentinel-managed primary
    (which follows failovers), and a ``redis.cluster.RedisCluster`` for a
    cluster. Connections are opened lazily, except that a cluster client asks
    its seed nodes for the slot map at once (so a dead cluster fails here).
    """
    text = url or os.environ.get(ENV_REDIS_URL)
    if not text:
        raise ValueError(f"no Redis URL given (set {ENV_REDIS_URL} or pass --redis)")
    import redis

    target = parse_redis_url(text)
    options = _client_options(target, client_name)
    if target.kind == "single":
        if target.socket_path is not None:
            return redis.Redis(unix_socket_path=target.socket_path, **options)
        host, port = target.nodes[0]
        return redis.Redis(host=host, port=port, **options)
    if target.kind == "sentinel":
        return _sentinel_primary(target, options)
    return _cluster(target, options, text)


def _sentinel_primary(target: RedisTarget, options: dict[str, Any]) -> redis.Redis:
    """The primary of ``target.service``, through a pool that asks the sentinels where it is."""
    sentinel_options: dict[str, Any] = {
        "decode_responses": False, "socket_timeout": SENTINEL_SOCKET_TIMEOUT,
        "socket_connect_timeout": options["socket_connect_timeout"],
        "socket_keepalive": True,
    }
    # Sentinels keep their own users (sentinel.conf), so their credentials are
    # separate options; TLS settings are shared, since a TLS deployment runs
    # the sentinels on TLS ports with the same CA.
    if "sentinel_username" in target.options:
        sentinel_options["username"] = target.options["sentinel_username"]
    if "sentinel_password" in target.options:
        sentinel_options["password"] = target.options["sentinel_password"]
    if target.tls:
        sentinel_options["ssl"] = True
        sentinel_options.update((k, v) for k, v in options.items() if k.startswith("ssl_"))
    from redis.sentinel import Sentinel

    manager = Sentinel(list(target.nodes), sentinel_kwargs=sentinel_options, **options)
    return manager.master_for(target.service)


def _cluster(target: RedisTarget, options: dict[str, Any], url: str) -> RedisCluster:
    """A cluster client seeded with ``target.nodes``."""
    # The cluster client keeps a pool per node and re-reads the slot map on
    # MOVED; it has no health-check option of its own.
    options.pop("health_check_interval", None)
    import redis
    from redis.cluster import ClusterNode, RedisCluster

    seeds = [ClusterNode(host, port) for host, port in target.nodes]
    try:
        return RedisCluster(startup_nodes=seeds, **options)
    except redis.RedisClusterException as exc:
        raise redis.ConnectionError(
            f"cannot reach the cluster at {redact(url)!r}: {exc}") from None
