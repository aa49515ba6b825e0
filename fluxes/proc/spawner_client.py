"""The exec worker's side of the task spawner (:mod:`fluxes.proc.spawner`).

:class:`SpawnerLink` finds the worker's spawner by its socket in the
worker's state directory, or starts one (handing it the listening socket,
so the first request is queued rather than refused while it starts), lists
the tasks it runs, asks it to spawn tasks and collects the ends it reports.
The spawner must be our own user's (``SO_PEERCRED``).  Anything going wrong
with it (it cannot start, it does not answer, it died) makes the link
*down*: the worker then spawns through the ``sh`` wrapper as before, and the
tasks the dead spawner ran are settled from their status files (docs/exec.md,
"The spawner").
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Iterable, Mapping

from fluxes.proc.spawner import LISTEN_FD, decode

#: How long a request may wait for the spawner's answer before the link is given up.
ANSWER_TIMEOUT_S = 10.0
#: The largest message the spawner sends (a chunk of its listing).
ANSWER_SIZE = 1 << 16
#: After the link went down, how long before a new spawner is tried.
RETRY_S = 5.0
_CRED = struct.Struct("3i")
#: Set to 0, the worker runs every task under the ``sh`` wrapper (no spawner).
ENV_SPAWNER = "FLUXES_EXEC_SPAWNER"
#: The socket's name in the state directory.
SOCKET_NAME = "spawner.sock"
#: Ends reported and not yet taken kept at most: the oldest beyond are dropped (the
#: spawner made each one's status file before telling it, and that file settles it).
MAX_ENDED = 65536


class SpawnError(OSError):
    """The spawner could not start a task: ``code`` is the shell's exit code for it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(errno.ENOEXEC if code == 126 else errno.ENOENT, message)
        self.code = code


class SpawnerDown(OSError):
    """The spawner is not there (the caller falls back to the wrapper)."""


class SpawnerLink:
    """A connection to the spawner of the tasks of one worker.

    ``running`` maps the pids it runs to their markers (from its listing and
    the spawns since); ``ended`` (pid -> marker, wait status) the ends it
    reported, kept until the worker takes them; ``fresh`` the pids that ended
    since the loop last looked.
    """

    def __init__(self, directory: str, enabled: bool = True) -> None:
        self.directory = directory
        self.path = os.path.join(directory, SOCKET_NAME)
        self.enabled = enabled
        self.sock: socket.socket | None = None
        self.child: int | None = None  # the spawner we started (reaped once it ends)
        self.running: dict[int, str] = {}
        self.ended: dict[int, tuple[str, int]] = {}
        self.fresh: list[int] = []
        # answers and ends are short (a listing comes in chunks): a buffer kept
        self._buffer = bytearray(ANSWER_SIZE)
        self._view = memoryview(self._buffer)
        self.retry_at = 0.0
        #: pids of tasks the link ran when it went down (their ends are unknown; their
        #: status files settle them), the newest MAX_ENDED kept
        self.orphans: dict[int, None] = {}
        # pid -> the status file to remove once the spawner made it (None: not yet
        # asked) of tasks whose end the worker took from the zombie, before the
        # spawner's message (see :meth:`taken`)
        self.early: dict[int, str | None] = {}
        #: markers of the requests sent with :meth:`request` whose answers were not taken
        #: (:meth:`answer`), oldest first; ``answers`` holds the answers read ahead of
        #: their taking, in the same order (``D``: the link went down before it came)
        self.asked: collections.deque[str] = collections.deque()
        self.answers: collections.deque[tuple[bytes, list[bytes]]] = collections.deque()

    # ------------------------------------------------------------ connection

    @property
    def up(self) -> bool:
        """Whether the spawner is connected."""
        return self.sock is not None

    def fileno(self) -> int:
        """The socket the loop polls (-1 when down)."""
        return self.sock.fileno() if self.sock is not None else -1

    def connect(self) -> bool:
        """Connect to the spawner (starting one if none listens) and list its tasks;
        False (the link down) when that fails."""
        if self.sock is not None:
            return True
        if not self.enabled or time.monotonic() < self.retry_at:
            return False
        self._reap_child()
        try:
            sock = self._open()
            self.sock = sock
            self._list()
        except (OSError, ValueError) as exc:
            self.down(f"{exc}")
            return False
        return True

    def _address(self) -> tuple[str, int | None]:
        """The socket's address: its path, or through ``/proc/self/fd`` when that is
        too long for a unix socket address (the directory fd is then returned)."""
        if len(os.fsencode(self.path)) < 100:
            return self.path, None
        dirfd = os.open(self.directory, os.O_PATH | os.O_CLOEXEC)
        return f"/proc/self/fd/{dirfd}/{SOCKET_NAME}", dirfd

    def _open(self) -> socket.socket:
        address, dirfd = self._address()
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            try:
                sock.connect(address)
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                sock = self._start(address)
        finally:
            if dirfd is not None:
                os.close(dirfd)
        _pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                       _CRED.size))
        if uid != os.geteuid():
            sock.close()
            raise ValueError(f"the spawner socket {self.path!r} is uid {uid}'s")
        return sock

    def _start(self, address: str) -> socket.socket:
        """Start a spawner on a new listening socket; our connection to it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead spawner's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            old = os.umask(0o077)
            try:
                listener.bind(address)
            finally:
                os.umask(old)
            listener.listen(64)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
            sock.connect(address)  # queued until the spawner serves it
            self.child = os.posix_spawn(
                sys.executable, [sys.executable, "-m", "fluxes.proc.spawner", self.path],
                dict(os.environ),
                file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                              (os.POSIX_SPAWN_DUP2, listener.fileno(), LISTEN_FD)],
                setsid=True, setsigmask=())
        finally:
            listener.close()
        return sock

    def down(self, why: str = "") -> None:
        """Give the link up: the tasks it ran become orphans (settled by their files)."""
        del why
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._orphaned(self.running)
        # requests whose answers will never come: answered "down" (the caller falls back)
        self.answers.extend((b"D", []) for _ in range(len(self.asked) - len(self.answers)))
        for path in self.early.values():
            if path is not None:  # no message will come: the file is made or never will be
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self.early.clear()
        self.fresh.extend(self.running)
        self.running = {}
        self.retry_at = time.monotonic() + RETRY_S
        self._reap_child()

    def _orphaned(self, pids: Iterable[int]) -> None:
        orphans = self.orphans
        orphans.update(dict.fromkeys(pids))
        while len(orphans) > MAX_ENDED:  # a spawner that keeps failing: nothing grows
            del orphans[next(iter(orphans))]

    def close(self) -> None:
        """Disconnect (the spawner goes on while it has tasks)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._reap_child()

    def _reap_child(self) -> None:
        if self.child is not None:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self.child, os.WNOHANG)[0] == 0:
                    return
            self.child = None

    # ------------------------------------------------------------ messages

    def _receive(self, block: bool) -> tuple[bytes, list[bytes]] | None:
        """The next message (None: nothing waiting, when not ``block``); an end is
        recorded and the next one read.  OSError when the spawner is gone or silent."""
        sock = self.sock
        if sock is None:
            raise SpawnerDown(errno.EPIPE, "the spawner is down")
        while True:
            if block and not _readable(sock, ANSWER_TIMEOUT_S):
                raise SpawnerDown(errno.ETIMEDOUT, "the spawner does not answer")
            try:
                size = sock.recv_into(self._buffer, 0, 0 if block else socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            data = bytes(self._view[:size])
            if not data:
                raise SpawnerDown(errno.EPIPE, "the spawner is gone")
            kind, fields = decode(data)
            if kind != b"X":
                return kind, fields
            self._ended(fields)

    def _ended(self, fields: list[bytes]) -> None:
        if len(fields) != 3:
            return
        pid, ws = int(fields[0]), int(fields[1])
        mark = fields[2].decode(errors="replace")
        if self.running.get(pid) == mark:
            del self.running[pid]
        if pid in self.early:
            path = self.early.pop(pid)
            if path is not None:  # the worker is done with it: so is its status file
                with contextlib.suppress(OSError):
                    os.unlink(path)
            return
        self.ended[pid] = (mark, ws)
        if len(self.ended) > MAX_ENDED:  # ends no task of the worker's ever took
            del self.ended[next(iter(self.ended))]
        self.fresh.append(pid)

    def taken(self, pid: int) -> None:
        """The worker took ``pid``'s end from its zombie: the spawner's message to come
        is no news (but see :meth:`forget`)."""
        self.running.pop(pid, None)
        self.early[pid] = None

    def forget(self, pid: int, status_file: str) -> None:
        """The worker recorded ``pid``'s end and removed ``status_file``: if the
        spawner has not made that file yet, remove it once it has."""
        if pid in self.early:
            self.early[pid] = status_file

    def _list(self) -> None:
        """Ask for the running tasks (the connection then hears of every end)."""
        assert self.sock is not None
        self.sock.send(b"L")
        running: dict[int, str] = {}
        while True:
            got = self._receive(block=True)
            assert got is not None
            kind, fields = got
            if kind == b"L":
                break
            if kind != b"l" or len(fields) % 2:
                raise ValueError("the spawner's listing is garbled")
            for at in range(0, len(fields), 2):
                running[int(fields[at])] = fields[at + 1].decode(errors="replace")
        self.running = running

    def read(self) -> None:
        """Read what the spawner sent (its ends go to :attr:`ended` and :attr:`fresh`)."""
        if self.sock is not None:
            try:
                while (got := self._receive(block=False)) is not None:
                    if self.asked and len(self.answers) < len(self.asked):
                        self.answers.append(got)  # a request's answer, read ahead
            except (OSError, ValueError) as exc:
                self.down(f"{exc}")

    def drain(self) -> list[int]:
        """:meth:`read`; the pids that ended since last asked (the loop's wake-ups: only
        the watcher takes them)."""
        self.read()
        fresh, self.fresh = self.fresh, []
        return fresh

    def spawn(self, *, marker: str, prefix: str, cwd: str, path: str, argv: list[str],
              env: Mapping[str, str], fds: Mapping[int, int], cpus: Iterable[int] = ()) -> int:
        """Have the spawner start a task; its pid.  :class:`SpawnError` when the command
        cannot run (nothing was started), :class:`SpawnerDown` when the spawner cannot
        be used (maybe after a start it could not report: never retried here)."""
        self.request(marker=marker, prefix=prefix, cwd=cwd, path=path, argv=argv, env=env,
                     fds=fds, cpus=cpus)
        return self.answer()

    @property
    def awaited(self) -> bool:
        """Whether a request's answer is still to come (not read yet)."""
        return len(self.answers) < len(self.asked)

    def request(self, *, marker: str, prefix: str, cwd: str, path: str, argv: list[str],
                env: Mapping[str, str], fds: Mapping[int, int],
                cpus: Iterable[int] = ()) -> None:
        """Send the request of :meth:`spawn` without waiting: its answer is taken with
        :meth:`answer`, answers in the order of the requests (the descriptors ``fds``
        are the spawner's copies once this returns).  :class:`SpawnerDown` when the
        request cannot be sent."""
        if not self.connect():
            raise SpawnerDown(errno.EPIPE, "no spawner")
        assert self.sock is not None
        targets = list(fds)
        # joined as text and encoded once (as os.fsencode would each field): a task's
        # environment is dozens of fields
        message = b"S" + os.fsencode("\0".join([
            marker, prefix, cwd, path, ",".join(map(str, targets)), ",".join(map(str, cpus)),
            str(len(argv)), *argv, *[f"{k}={v}" for k, v in env.items()]]))
        try:
            socket.send_fds(self.sock, [message], [fds[t] for t in targets])
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:  # a huge environment: the wrapper takes it
                raise SpawnerDown(exc.errno, "request too large") from None
            self.down(f"{exc}")
            raise SpawnerDown(errno.EPIPE, f"{exc}") from None
        self.asked.append(marker)

    def answer(self) -> int:
        """The answer to the oldest request not answered yet (waiting for it if need be):
        the task's pid, or :class:`SpawnError` / :class:`SpawnerDown` as :meth:`spawn`."""
        marker = self.asked[0]
        if self.answers:
            got: tuple[bytes, list[bytes]] | None = self.answers.popleft()
        else:
            try:
                got = self._receive(block=True)
            except (OSError, ValueError) as exc:
                self.down(f"{exc}")
                got = self.answers.popleft()  # "D": down() answered it
        self.asked.popleft()
        assert got is not None
        kind, answer = got
        if kind == b"D":
            raise SpawnerDown(errno.EPIPE, "the spawner went away")
        if kind == b"P" and len(answer) == 1 and answer[0].isdigit():
            pid = int(answer[0])
            ended = self.ended.get(pid)
            if self.sock is None:  # answered before the link went down: nobody reports
                self._orphaned([pid])  # its end
            elif ended is None or ended[0] != marker:  # (its end may be read already)
                self.running[pid] = marker
            return pid
        if kind == b"E" and len(answer) == 2 and answer[0].isdigit():
            raise SpawnError(int(answer[0]), answer[1].decode(errors="replace"))
        self.down("garbled answer")
        raise SpawnerDown(errno.EPROTO, "the spawner's answer is garbled")


def _readable(sock: socket.socket, timeout_s: float) -> bool:
    """Whether ``sock`` becomes readable (or hung up) within ``timeout_s``.  poll, not
    select: a worker running many tasks holds more than select's 1,024 descriptors,
    and select refuses any numbered above them."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))
