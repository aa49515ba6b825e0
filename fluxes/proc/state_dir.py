"""What a private instance keeps in its state directory that other commands look for.

``fluxes start`` runs its redis-server at ``STATE/redis/redis.sock``; a command
inside the instance (its owner's) finds the state directory from the URI, so
that ``fluxes web`` there uses the session secret ``fluxes start --web`` made.
"""

from __future__ import annotations

import hashlib
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


#: Prefix of an instance's task-file directory on tmpfs (one per state directory).
FAST_EXEC_PREFIX = "i-"


def mount_type(path: str | os.PathLike[str]) -> str | None:
    """The file system type of the mount holding ``path`` (``/proc/self/mounts``), None
    when it cannot be told (not Linux)."""
    real = os.path.realpath(path)
    best, kind = "", None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                # mount points escape spaces as \040
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return None
    return kind


def fast_exec_dir(state_dir: Path) -> Path | None:
    """Where a private instance's exec workers keep their task files when ``state_dir``
    is not on tmpfs: ``<base>/fluxes-exec-<uid>/i-<digest of state_dir>`` on the
    runtime directory or ``/dev/shm`` (each task creates, and the worker reads and
    removes, three small files: on a disk file system that costs the worker and the
    task ~0.2 ms of CPU a job).  None when ``state_dir`` already is on tmpfs, or no
    tmpfs base is usable; the per-user directory must be this user's and private
    (created so), as the exec worker demands of a state directory in a shared place.
    """
    from fluxes.proc.exec_files import check_private

    if mount_type(state_dir) == "tmpfs":
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    for base in (runtime, "/dev/shm"):
        if not base or not os.path.isdir(base) or not os.access(base, os.W_OK | os.X_OK) \
                or mount_type(base) != "tmpfs":
            continue
        parent = os.path.join(base, f"fluxes-exec-{os.getuid()}")
        try:
            try:
                os.mkdir(parent, 0o700)
            except FileExistsError:
                pass
            check_private(parent)
        except (OSError, ValueError):
            continue
        digest = hashlib.sha256(os.fsencode(os.path.realpath(state_dir))).hexdigest()[:16]
        return Path(parent) / f"{FAST_EXEC_PREFIX}{digest}"
    return None
