"""Finding and describing a fluxes instance: its Redis URL, namespace and partitions.

An instance is named by a URI: a Redis URL (``redis://``, ``rediss://``,
``unix://``, ``redis+sentinel://``, ``redis+cluster://`` and their TLS forms;
see ``fluxes.store.connection.SCHEMES``) with an optional ``ns`` query
parameter for the namespace, e.g.
``unix:///tmp/fluxes-1/redis.sock?ns=fx``. Clients find it in ``$FLUXES_URI``
(set by ``fluxes start`` for the command it runs), else ``$FLUXES_REDIS_URL``.
The number of partitions is a fact of the instance, stored in Redis.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson

from fluxes.env import DEFAULT_NAMESPACE, ENV_REDIS_URL, ENV_URI
from fluxes.errors import FluxesError
from fluxes.store.connection import SCHEMES, connect, redact
from fluxes.store.keys import Keys
from fluxes.store.security import (
    DEFAULT_CREDENTIALS,
    ENV_CREDENTIALS,
    apply_credentials,
    strip_password,
)

if TYPE_CHECKING:  # neither is imported by a short command (fluxes submit: issue 26)
    import redis

    from fluxes.config import InstanceConfig



def _sha256(data: bytes) -> str:
    # hashlib here, not at import: the short commands never record resources
    import hashlib

    return hashlib.sha256(data).hexdigest()


class NoInstanceError(FluxesError):
    """No instance URI is known, or the instance does not answer."""


@dataclass(frozen=True)
class InstanceURI:
    """A parsed instance URI: where Redis is and which namespace the instance uses."""

    redis_url: str
    ns: str = DEFAULT_NAMESPACE

    @classmethod
    def parse(cls, uri: str) -> InstanceURI:
        """Parse ``uri``; ValueError if it is not a Redis URL."""
        parts = urlsplit(uri)
        if parts.scheme not in SCHEMES:
            raise ValueError(f"not a fluxes URI (want {', '.join(s + '://' for s in SCHEMES)}): "
                             f"{redact(uri)!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        ns = DEFAULT_NAMESPACE
        rest = []
        for key, value in query:
            if key == "ns":
                ns = value
            else:
                rest.append((key, value))
        # urlunsplit would drop the empty authority of unix:///path
        url = f"{parts.scheme}://{parts.netloc}{parts.path}"
        if rest:
            url += "?" + urlencode(rest, safe="/")
        return cls(url, ns)

    def __str__(self) -> str:
        sep = "&" if "?" in self.redis_url else "?"
        return f"{self.redis_url}{sep}ns={self.ns}"

    @classmethod
    def from_env(cls, uri: str | None = None) -> InstanceURI:
        """The instance named by ``uri``, $FLUXES_URI or $FLUXES_REDIS_URL."""
        text = uri or os.environ.get(ENV_URI) or os.environ.get(ENV_REDIS_URL)
        if not text:
            raise NoInstanceError(
                f"no fluxes instance: set {ENV_URI} (printed by 'fluxes start --detach'), "
                "or run the command under 'fluxes start -- COMMAND'")
        return cls.parse(text)


#: The instance hash's field holding the SHA-256 of its ``resources`` (a recorded graph
#: can be megabytes: readers that poll compare the digest, not the resources).
RESOURCES_DIGEST = "resources_digest"


def record_instance(client: redis.Redis, namespace: str, partitions: int,
                    config: InstanceConfig, resources: Mapping[str, Any],
                    owner: tuple[str, int], extra: Mapping[str, str | int] | None = None,
                    ) -> bool:
    """Record an instance in Redis: partitions, owner, configuration, resources.

    Workers read these before their first step, so this runs before any worker
    starts (``fluxes start`` and ``fluxes admin init``). The number of
    partitions can never change: jobs are already keyed by it, so a different
    number raises FluxesError and stores nothing. Returns True when the
    instance was new.
    """
    keys = Keys(namespace, partitions)
    existing = client.hget(keys.instance, "partitions")
    if existing is not None and int(existing) != partitions:
        raise FluxesError(f"this Redis already holds instance {namespace!r} with "
                          f"{int(existing)} partitions")
    recorded = orjson.dumps(dict(resources))
    fields: dict[str, str | int | bytes] = {
        "partitions": partitions, "owner": owner[0], "owner_uid": owner[1],
        "config": config.text, "resources": recorded,
        RESOURCES_DIGEST: _sha256(recorded),
        "started": repr(time.time()), **(extra or {})}
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.instance, mapping=fields)
    pipe.hsetnx(keys.instance, "created", repr(time.time()))
    pipe.execute()
    load_functions(client)
    return existing is None


def instance_created(client: Any, keys: Keys) -> str:
    """When the instance was first recorded (the ``repr`` of a UNIX time; "" if never):
    it tells one life of the instance's Redis from a new one."""
    created = client.hget(keys.instance, "created")
    return created.decode() if created else ""


def load_functions(client: redis.Redis) -> None:
    """Load this version's Redis functions (fluxes/store/scripts.py) as the instance owner.

    A child instance's identity may not load any (its parent's owner did, on the same
    Redis): that refusal is no error."""
    import redis  # here: fluxes submit and run never record an instance

    from fluxes.store import scripts

    try:
        scripts.load_all(client)
    except redis.exceptions.NoPermissionError:
        pass


def current_user() -> tuple[str, int]:
    """This process's user name and uid (the uid as the name when it has none)."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


class Instance:
    """A connection to a running instance: Redis client and its key names."""

    def __init__(self, uri: InstanceURI, client: redis.Redis | None = None,
                 client_name: str | None = None, user: str | None = None,
                 lite: bool = False) -> None:
        """Connect (or use ``client``) and read the instance's partitions. ``lite``: a
        short command's client (fluxes.store.lite) where the URL allows one."""
        self.uri = uri
        #: The fluxes user a credentials file names (None: the UNIX user).
        self.user = user
        self.redis = client if client is not None else _client(uri.redis_url, client_name,
                                                               lite)
        partitions = 1
        try:
            raw = self.redis.hget(Keys(uri.ns).instance, "partitions")
        except Exception as exc:
            import redis

            if isinstance(exc, redis.AuthenticationError):
                raise NoInstanceError(
                    f"the instance at {strip_password(uri.redis_url)} refused to let us in "
                    f"({exc}); credentials come from ${ENV_CREDENTIALS} or "
                    f"~/{DEFAULT_CREDENTIALS}") from None
            if isinstance(exc, redis.ConnectionError):
                raise NoInstanceError(f"cannot reach the instance at "
                                      f"{strip_password(uri.redis_url)}: {exc}") from None
            raise
        if raw:
            partitions = int(raw)
        self.keys = Keys(uri.ns, partitions)

    def config(self) -> InstanceConfig:
        """The instance configuration stored by ``fluxes start`` (defaults when none)."""
        from fluxes.config import InstanceConfig

        raw = self.redis.hget(self.keys.instance, "config")
        return InstanceConfig.from_toml(raw) if raw else InstanceConfig()

    def owner(self) -> tuple[str, int]:
        """The instance owner's user name and uid."""
        name, uid = self.redis.hmget(self.keys.instance, ["owner", "owner_uid"])
        if uid is None:
            return pwd.getpwuid(os.getuid()).pw_name, os.getuid()
        return (name.decode() if name else str(int(uid))), int(uid)

    @classmethod
    def connect(cls, uri: str | None = None, client_name: str | None = None,
                lite: bool = False) -> Instance:
        """Connect to the instance named by ``uri`` or the environment.

        A credentials file ($FLUXES_CREDENTIALS or ~/.config/fluxes/credentials.json,
        see :mod:`fluxes.store.security`) supplies the user name and password for its
        server, and the URI itself when none is given. ``lite``: see :class:`Instance`.
        """
        text = uri or os.environ.get(ENV_URI) or os.environ.get(ENV_REDIS_URL)
        text, user = apply_credentials(text)
        return cls(InstanceURI.from_env(text), client_name=client_name, user=user, lite=lite)


def _client(url: str, client_name: str | None, lite: bool) -> Any:
    """A client for ``url``: a :class:`~fluxes.store.lite.LiteRedis` when ``lite`` and the
    URL allows one (a short command: no redis-py import), else redis-py's."""
    if lite:
        from fluxes.store.lite import LiteRedis, lite_target

        target = lite_target(url)
        if target is not None:
            return LiteRedis(target, client_name)
    return connect(url, client_name=client_name)
