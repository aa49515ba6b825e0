"""The exec worker's state directory: tasks' output and status files, read and removed.

Each served rank has a directory ``<state_dir>/rank<r>/`` holding, per task,
``<job>.<task>.out`` / ``.err`` (its output when forwarded to the output
stream) and ``<job>.<task>.st.<code>`` (created by the wrapper when the task
ended: the name carries the exit code).  The worker reads the output files
with ``pread`` at the offsets it has forwarded (recorded with each write),
so nothing is lost or repeated across restarts, and removes a job's files
once its end is recorded.  What the bytes become is
:mod:`fluxes.domain.exec.output`'s business.

The files of a job whose tasks run as its owner (a root worker) are in
``rank<r>/u<uid>/``, a directory of that user (mode 0700) where the wrapper,
running as the user, creates the status files; no other user can enter it.
The worker creates the forwarded output files there itself, never following
a link and never reusing a name the user could have put there, and gives
them to the user; the rank directories are then 0711 (the users reach their
own directory, nobody lists anything).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Container, Iterable, Mapping

from fluxes.domain.exec.adoption import parse_status_name
from fluxes.domain.exec.jobs import STREAMS, ExecJob, Stream, TaskProc
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.output import Budget, add_lines, pump, within_limit

#: How a forwarded output file is created for a task (it writes, we pread).
_O_OUT = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
#: The same in a user's directory: a new file, never through a link the user made.
_O_OUT_USER = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Prefix of the per-user directories in a rank directory (``u<uid>``).
USER_DIR_PREFIX = "u"


def default_state_dir() -> str:
    """Where task files live when none is given: per user, on tmpfs when there is one.

    The name is predictable and its parent shared, so :meth:`TaskFiles.make_dirs`
    refuses a directory of that name that another user made or can write to.
    Its parents must let other users through when the worker is root (their
    jobs' status files are made by them, in their directory there).
    """
    shared = ("/dev/shm", "/tmp")  # noqa: S108 (checked private before use: make_dirs)
    # root runs jobs as their owners, who must reach their directory in it: not in
    # root's own runtime directory (0700)
    runtime = os.environ.get("XDG_RUNTIME_DIR") if os.geteuid() != 0 else None
    for base in (runtime, shared[0]):
        if base and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            return os.path.join(base, f"fluxes-exec-{os.getuid()}")
    return os.path.join(shared[1], f"fluxes-exec-{os.getuid()}")


def check_private(path: str) -> None:
    """ValueError unless ``path`` is a directory (not a link) of this user that no one
    else may write to: otherwise another user could swap the task files the worker
    creates (and truncates) for links to files of the worker's user."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or \
            info.st_mode & 0o022:
        raise ValueError(f"exec state directory {path!r} must be a directory of this user "
                         "that no one else can write to")


def _shared(path: str) -> bool:
    """Whether others than its owner may create names in directory ``path``."""
    return bool(os.stat(path).st_mode & 0o022)


def high_fd(fd: int) -> int:
    """``fd`` moved above the standard descriptors (a worker started with them closed
    would otherwise hand a task fd 1 as "its stdout file" and dup2 would be a no-op)."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def unlink(path: str) -> None:
    """Remove ``path`` if it is there."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_at(stream: Stream, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes of ``stream``'s file at ``offset`` (b"" when gone or at its end)."""
    if stream.fd is None:
        return b""
    try:
        return os.pread(stream.fd, size, offset)
    except OSError:
        return b""


def close_stream(stream: Stream) -> None:
    """Close the file (the forwarding position stays)."""
    if stream.fd is not None:
        with contextlib.suppress(OSError):
            os.close(stream.fd)
        stream.fd = None


def close_streams(job: ExecJob) -> None:
    """Close every output file of ``job``'s tasks."""
    for task in job.tasks:
        for stream in task.streams:
            close_stream(stream)


def _close_if_done(stream: Stream) -> None:
    if stream.done:
        close_stream(stream)


def forward_output(job: ExecJob, budget: Budget, limit: int, box: Outbox) -> bool:
    """Read ``job``'s tasks' new output into ``box``'s output entries; True if any.

    ``limit`` is the output limit in bytes per job and rank (0: none).
    """
    got_any = False
    for task in job.tasks:
        for stream in task.streams:
            if stream.done or not budget.left():
                continue
            got = pump(stream, read_at, task.ended, budget)
            _close_if_done(stream)
            if got and limit:
                got = within_limit(job, got, limit)
            if got:
                add_lines(box.lines(job), job, task.rank, stream.name, got)
                got_any = True
    return got_any


class TaskFiles:
    """The per-rank state directories of one exec worker."""

    def __init__(self, state_dir: str, ranks: Iterable[int]) -> None:
        self.state_dir = state_dir
        self.rank_dirs = {r: os.path.join(state_dir, f"rank{r}") for r in ranks}
        self._listings: dict[tuple[int, int | None], dict[tuple[int, int], int]] = {}
        self._user_dirs: set[tuple[int, int]] = set()  # (rank, uid) checked since setup

    def make_dirs(self) -> None:
        """Create the rank directories, private to the worker's user; ValueError when
        one that exists is not (see :func:`check_private`).

        The state directory itself must be private too when it sits in a shared
        place (``/tmp``, ``/dev/shm``: the default); elsewhere it is the site's
        choice (a pod's own volume may be writable by all).
        """
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        if _shared(os.path.dirname(os.path.abspath(self.state_dir))):
            check_private(self.state_dir)
        for path in self.rank_dirs.values():
            os.makedirs(path, mode=0o700, exist_ok=True)
            check_private(path)
        self._user_dirs.clear()
        if os.geteuid() == 0:
            # jobs run as their owners, whose wrappers must reach their own directory
            # (search, not read: nobody lists anything)
            for path in (self.state_dir, *self.rank_dirs.values()):
                os.chmod(path, os.stat(path).st_mode & 0o7777 | 0o011)  # noqa: S103

    @staticmethod
    def owner_of(job: ExecJob) -> int | None:
        """The uid whose directory holds ``job``'s files (None: the rank's directory)."""
        return job.owner if job.as_user else None

    def directory(self, rank: int, uid: int | None = None) -> str:
        """The rank's directory, or ``uid``'s directory in it."""
        base = self.rank_dirs[rank]
        return base if uid is None else os.path.join(base, f"{USER_DIR_PREFIX}{uid}")

    def user_dir(self, rank: int, uid: int) -> str:
        """``uid``'s directory on ``rank``, created 0700 and given to the user if missing;
        ValueError when it is not a directory of that user (a link, someone else's)."""
        path = self.directory(rank, uid)
        if (rank, uid) in self._user_dirs:
            return path
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
            os.chown(path, uid, -1)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            raise ValueError(f"exec: {path!r} must be a directory of uid {uid}")
        self._user_dirs.add((rank, uid))
        return path

    def path(self, rank: int, jobid: int, task: int, suffix: str,
             uid: int | None = None) -> str:
        """The path of a task's file: ``<job>.<task>.<suffix>`` in the rank's directory,
        or (``uid``) in that user's directory there."""
        base = self.rank_dirs[rank] if uid is None else self.user_dir(rank, uid)
        return os.path.join(base, f"{jobid}.{task}.{suffix}")

    def forget_listings(self) -> None:
        """Drop the cached directory listings (once per loop iteration)."""
        self._listings.clear()

    def listing(self, rank: int, fresh: bool = False,
                uid: int | None = None) -> dict[tuple[int, int], int]:
        """(job, task) -> exit code of every status file in ``rank``'s directory, or in
        ``uid``'s there (cached per iteration).  A user's directory speaks only for
        that user's jobs: a name made there never settles another user's task."""
        key = (rank, uid)
        listing = None if fresh else self._listings.get(key)
        if listing is None:
            listing = {}
            for name in self._list(self.directory(rank, uid)):
                parsed = parse_status_name(name)
                if parsed is not None:
                    listing[(parsed[0], parsed[1])] = parsed[2]
            self._listings[key] = listing
        return listing

    def status_code(self, rank: int, jobid: int, task: int,
                    uid: int | None = None) -> int | None:
        """The exit code a wrapper recorded, if its file exists (re-listed on a miss)."""
        code = self.listing(rank, uid=uid).get((jobid, task))
        if code is None:
            code = self.listing(rank, fresh=True, uid=uid).get((jobid, task))
        return code

    def has_files(self, rank: int, jobid: int, uid: int | None = None) -> bool:
        """Whether any file of ``jobid`` exists in ``rank``'s directory (or ``uid``'s)."""
        prefix = f"{jobid}."
        return any(n.startswith(prefix) for n in self._list(self.directory(rank, uid)))

    def sweep(self, rank: int, finished: Container[int]) -> None:
        """Remove the files of the ``finished`` jobs of ``rank``.

        Files of jobs the worker does not know stay: they belong to a start
        whose effect was never recorded, still pending, which will adopt them.
        """
        for directory, name in self._names(rank):
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) in finished:
                unlink(os.path.join(directory, name))

    def attach(self, job: ExecJob, task: TaskProc, offsets: Mapping[str, int]) -> None:
        """Reopen a task's forwarded output files at the recorded offsets (stream name ->)."""
        uid = self.owner_of(job)
        for flag, name, suffix, _fd in STREAMS:
            if flag not in job.forward:
                continue
            path = os.path.join(self.directory(job.rank, uid), f"{job.id}.{task.rank}.{suffix}")
            fd = _open_task_file(path, uid)
            stream = Stream(name, path, fd, int(offsets.get(name, 0)))
            stream.done = fd is None  # nothing to forward if the file is gone
            task.streams.append(stream)

    def create(self, job: ExecJob, task: TaskProc, name: str, suffix: str) -> int:
        """Create a task's forwarded output file; its fd (the task's copy is dup2'ed from it)."""
        uid = self.owner_of(job)
        path = self.path(job.rank, job.id, task.rank, suffix, uid)
        if uid is None:
            fd = high_fd(os.open(path, _O_OUT, 0o600))
        else:
            # the user's directory: a name of theirs goes, a link is never followed
            unlink(path)
            fd = high_fd(os.open(path, _O_OUT_USER, 0o600))
            try:
                os.fchown(fd, uid, -1)
            except OSError:
                os.close(fd)
                raise
        # The task writes through its copy; we read with pread at our own
        # offset, so the shared file position does not matter.
        task.streams.append(Stream(name, path, fd))
        return fd

    def remove(self, job: ExecJob) -> list[tuple[int, str]]:
        """Remove a finished job's files (its end is recorded); (pid, path) of the status
        files removed of the spawner's tasks (it may make one only now)."""
        spawned = []
        for task in job.tasks:
            for stream in task.streams:
                unlink(stream.path)
            if task.code is not None:
                path = os.path.join(self.directory(job.rank, self.owner_of(job)),
                                    f"{job.id}.{task.rank}.st.{task.code}")
                unlink(path)
                if task.spawned:
                    spawned.append((task.pid, path))
        return spawned

    @staticmethod
    def _list(directory: str) -> list[str]:
        try:
            return os.listdir(directory)
        except OSError:
            return []

    def _names(self, rank: int) -> list[tuple[str, str]]:
        """(directory, name) of every file of ``rank``: its directory's and its users'."""
        base = self.rank_dirs[rank]
        out = []
        for name in self._list(base):
            if name.startswith(USER_DIR_PREFIX) and name[1:].isdigit():
                user_dir = os.path.join(base, name)
                out += [(user_dir, n) for n in self._list(user_dir)]
            else:
                out.append((base, name))
        return out


def _open_task_file(path: str, uid: int | None) -> int | None:
    """Reopen a task's forwarded output file (None when it is gone).  In a user's
    directory only the regular file the worker made is taken: not a link, and not a
    file of anyone but that user (the user could have swapped the name)."""
    if uid is None:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_nlink != 1:
        os.close(fd)
        return None
    return fd
