"""Users by name and uid, as the command line and the web both look them up."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fluxes.store.instance import Instance


@cache
def username(uid: int) -> str:
    """The user name of ``uid`` on this machine (the number itself when unknown)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError, ValueError):
        return str(uid)


def current_user() -> str:
    """The name of the user running this process (the uid when it has none)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def local_uid(name: str) -> int | None:
    """``name``'s uid in this machine's password database (a number is itself)."""
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def uid_of(insts: Iterable[Instance], name: str) -> int:
    """The uid of a user given by name or uid: the users table of the first of
    ``insts`` that may read it, else this machine's; ValueError when unknown."""
    from fluxes.store.users import UserTable

    name = name.strip()
    if name.isdigit():
        return int(name)
    for inst in insts:
        found = UserTable(inst.redis, inst.keys).uid(name)
        if found is not None:
            return found
    uid = local_uid(name)
    if uid is None:
        raise ValueError(f"unknown user {name!r}")
    return uid


def names_of(inst: Instance, uids: Iterable[int],
             known: dict[int, str] | None = None) -> dict[int, str]:
    """uid -> user name: ``known`` first (an accounting association's), then the
    instance's users table, then this machine."""
    from fluxes.store.users import UserTable

    table = {uid: name for name, uid in UserTable(inst.redis, inst.keys).entries().items()}
    known = known or {}
    return {uid: known.get(uid) or table.get(uid) or username(uid) for uid in uids}
