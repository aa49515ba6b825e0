"""A user's UNIX groups on this host, by name (RFC 33 ``allow-group``, at submission)."""

from __future__ import annotations

import functools
import grp
import os
import pwd


@functools.lru_cache(maxsize=4096)
def user_groups(user: str, uid: int) -> tuple[str, ...]:
    """The UNIX groups of ``user`` on this machine (for RFC 33 allow-group), by name.

    A user unknown here (an ACL-only user) has none: allow-group then
    cannot admit them, only allow-user can.
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return ()
    if entry.pw_uid != uid:
        return ()  # a different account with the same name: trust nothing
    names = []
    for gid in os.getgrouplist(user, entry.pw_gid):
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return tuple(names)
