"""Redis ACL I/O: define, remove and list users, protect the default user, persist.

The rules themselves are built in :mod:`fluxes.store.security` (pure). ACLs are
per server and not replicated: against a Redis Cluster every command here is
sent to every node; with Sentinel only the primary is reached, so the site
must give replicas the same users (an ACL file they share).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import redis
from redis.cluster import RedisCluster

from fluxes.store.security import REDIS_DEFAULT_USER, owner_acl_rules

#: A single-server (or Sentinel primary) client, or a cluster client.
Client: TypeAlias = redis.Redis | RedisCluster


def _acl(client: Client, *args: str) -> Any:
    """Run ``ACL <args>`` on the server, or on every node of a cluster (one reply kept)."""
    if isinstance(client, RedisCluster):
        replies = client.execute_command("ACL", *args, target_nodes=RedisCluster.ALL_NODES)
        return next(iter(replies.values())) if isinstance(replies, dict) else replies
    return client.execute_command("ACL", *args)


def set_user(client: Client, name: str, rules: Sequence[str]) -> None:
    """``ACL SETUSER name rules...`` (creates the user or redefines it)."""
    _acl(client, "SETUSER", name, *rules)


def delete_user(client: Client, name: str) -> bool:
    """Remove ACL user ``name`` (Redis also drops its connections); True if it existed."""
    return bool(_acl(client, "DELUSER", name))


def users(client: Client) -> set[str]:
    """Every ACL user name on the server."""
    return {u.decode() if isinstance(u, bytes) else str(u) for u in _acl(client, "USERS")}


def default_user_is_open(client: Client) -> bool:
    """True when Redis's ``default`` user needs no password (anyone who connects is admin)."""
    info: Any = _acl(client, "GETUSER", REDIS_DEFAULT_USER)
    if isinstance(info, list):  # RESP2 replies come as a flat name/value list
        info = dict(zip(info[::2], info[1::2], strict=True))
    flags: Any = info.get(b"flags", info.get("flags", [])) if isinstance(info, dict) else []
    names = {f.decode() if isinstance(f, bytes) else str(f) for f in flags}
    return "nopass" in names and "on" in names


def manages_users(client: Client) -> bool:
    """True when this connection may define ACL users and Redis wants them: the default
    user needs a password. False on an open Redis (anyone who connects is an
    administrator: an identity would protect nothing), to a connection without ACL
    rights (a child instance's own workers), or to a Redis without ACLs."""
    try:
        return not default_user_is_open(client)
    except redis.ResponseError:  # NOPERM (a NoPermissionError), or no ACL command at all
        return False


def protect_default_user(client: Client, password: str) -> None:
    """Keep the default user's full access but require ``password`` from now on."""
    set_user(client, REDIS_DEFAULT_USER, owner_acl_rules(password))


def persist(client: Client) -> str | None:
    """Make ACL changes survive a Redis restart (``ACL SAVE``); a warning line if impossible.

    Only a server with an ACL file can save users. CONFIG REWRITE would keep
    them in the configuration file instead, but it also writes every other
    runtime setting into the site's file, which is not ours to decide.
    """
    try:
        _acl(client, "SAVE")
        return None
    except redis.ResponseError as exc:
        reason = str(exc).split(". ")[0].rstrip(".")  # Redis adds a paragraph of advice
        return (f"the ACL change is live but will not survive a Redis restart ({reason}); "
                "give the server an aclfile, or run CONFIG REWRITE")
