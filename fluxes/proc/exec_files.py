"""The exec worker's state directory: tasks' output and status files, read and removed.

Each served rank has a directory ``<state_dir>/rank<r>/`` holding, per task,
``<job>.<task>.out`` / ``.err`` (its output when forwarded to the output
stream) and ``<job>.<task>.st.<code>`` (created by the wrapper when the task
ended: the name carries the exit code).  The worker reads the output files
with ``pread`` at the offsets it has forwarded (recorded with each write),
so nothing is lost or repeated across restarts, and removes a job's files
once its end is recorded.  What the bytes become is
:mod:`fluxes.domain.exec.output`'s business.
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


def default_state_dir() -> str:
    """Where task files live when none is given: per user, on tmpfs when there is one.

    The name is predictable and its parent shared, so :meth:`TaskFiles.make_dirs`
    refuses a directory of that name that another user made or can write to.
    """
    shared = ("/dev/shm", "/tmp")  # noqa: S108 (checked private before use: make_dirs)
    for base in (os.environ.get("XDG_RUNTIME_DIR"), shared[0]):
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
                add_lines(box.lines(job.id), job, task.rank, stream.name, got)
                got_any = True
    return got_any


class TaskFiles:
    """The per-rank state directories of one exec worker."""

    def __init__(self, state_dir: str, ranks: Iterable[int]) -> None:
        self.state_dir = state_dir
        self.rank_dirs = {r: os.path.join(state_dir, f"rank{r}") for r in ranks}
        self._listings: dict[int, dict[tuple[int, int], int]] = {}

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

    def path(self, rank: int, jobid: int, task: int, suffix: str) -> str:
        """The path of a task's file: ``<job>.<task>.<suffix>`` in the rank's directory."""
        return os.path.join(self.rank_dirs[rank], f"{jobid}.{task}.{suffix}")

    def forget_listings(self) -> None:
        """Drop the cached directory listings (once per loop iteration)."""
        self._listings.clear()

    def listing(self, rank: int, fresh: bool = False) -> dict[tuple[int, int], int]:
        """(job, task) -> exit code of every status file of ``rank`` (cached per iteration)."""
        listing = None if fresh else self._listings.get(rank)
        if listing is None:
            listing = {}
            for name in self._names(rank):
                parsed = parse_status_name(name)
                if parsed is not None:
                    listing[(parsed[0], parsed[1])] = parsed[2]
            self._listings[rank] = listing
        return listing

    def status_code(self, rank: int, jobid: int, task: int) -> int | None:
        """The exit code a wrapper recorded, if its file exists (re-listed on a miss)."""
        code = self.listing(rank).get((jobid, task))
        if code is None:
            code = self.listing(rank, fresh=True).get((jobid, task))
        return code

    def has_files(self, rank: int, jobid: int) -> bool:
        """Whether any file of ``jobid`` exists in ``rank``'s directory."""
        prefix = f"{jobid}."
        return any(n.startswith(prefix) for n in self._names(rank))

    def sweep(self, rank: int, finished: Container[int]) -> None:
        """Remove the files of the ``finished`` jobs of ``rank``.

        Files of jobs the worker does not know stay: they belong to a start
        whose effect was never recorded, still pending, which will adopt them.
        """
        for name in self._names(rank):
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) in finished:
                unlink(os.path.join(self.rank_dirs[rank], name))

    def attach(self, job: ExecJob, task: TaskProc, offsets: Mapping[str, int]) -> None:
        """Reopen a task's forwarded output files at the recorded offsets (stream name ->)."""
        for flag, name, suffix, _fd in STREAMS:
            if flag not in job.forward:
                continue
            path = self.path(job.rank, job.id, task.rank, suffix)
            try:
                fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = None
            stream = Stream(name, path, fd, int(offsets.get(name, 0)))
            stream.done = fd is None  # nothing to forward if the file is gone
            task.streams.append(stream)

    def create(self, job: ExecJob, task: TaskProc, name: str, suffix: str) -> int:
        """Create a task's forwarded output file; its fd (the task's copy is dup2'ed from it)."""
        path = self.path(job.rank, job.id, task.rank, suffix)
        fd = high_fd(os.open(path, _O_OUT, 0o600))
        # The task writes through its copy; we read with pread at our own
        # offset, so the shared file position does not matter.
        task.streams.append(Stream(name, path, fd))
        return fd

    def remove(self, job: ExecJob) -> None:
        """Remove a finished job's files (its end is recorded)."""
        for task in job.tasks:
            for stream in task.streams:
                unlink(stream.path)
            if task.code is not None:
                unlink(self.path(job.rank, job.id, task.rank, f"st.{task.code}"))

    def _names(self, rank: int) -> list[str]:
        try:
            return os.listdir(self.rank_dirs[rank])
        except OSError:
            return []
