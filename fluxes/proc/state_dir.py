"""What a private instance keeps in its state directory that other commands look for.

``fluxes start`` runs its redis-server at ``STATE/redis/redis.sock``; a command
inside the instance (its owner's) finds the state directory from the URI, so
that ``fluxes web`` there uses the session secret ``fluxes start --web`` made.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

#: The web session secret ``fluxes start`` makes when the configuration names none.
WEB_SECRET_FILE = "web-secret"


def private_state_dir(redis_url: str) -> Path | None:
    """The state directory of a private instance that this user owns, from its Redis URL.

    None unless the URL is the socket ``fluxes start`` makes (``STATE/redis/redis.sock``)
    and STATE is owned by this user and writable by no one else: a directory
    others can write to could hold a secret they planted.
    """
    parts = urlsplit(redis_url)
    if parts.scheme != "unix":
        return None
    sock = Path(parts.path)
    if sock.name != "redis.sock" or sock.parent.name != "redis":
        return None
    state = sock.parent.parent
    try:
        info = os.stat(state)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    return state


def web_secret_file(state_dir: Path, make_secret: str) -> Path:
    """The web session secret file of ``state_dir``, written with ``make_secret`` if absent.

    Created exclusively with mode 0600, so two commands racing to make it keep
    the first one's secret and nobody else can read it.
    """
    path = state_dir / WEB_SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as f:
        f.write(make_secret)
    return path
