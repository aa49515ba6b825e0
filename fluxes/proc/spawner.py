"""The task spawner: a small long-lived process that is the parent of an exec worker's tasks.

Run as ``python -m fluxes.proc.spawner`` by the exec worker
(:mod:`fluxes.proc.spawner_client`), which hands it a listening unix socket
(``SOCK_SEQPACKET``, one message per request) as descriptor 3.  It serves
only its own user (``SO_PEERCRED``).  Requests (docs/exec.md, "The spawner"):

* ``L``: list the running tasks (``l`` chunks of pid, marker pairs, then ``L``);
  the connection then gets every task's end;
* ``S``: spawn a task: ``marker, status prefix, cwd, executable, target fds,
  cpus, argc, argv..., env...`` with the task's descriptors passed along
  (``SCM_RIGHTS``, in the order of the target fds).  It ``chdir``s and
  ``posix_spawn``s the command in its own session with every signal reset to
  default, and answers ``P<pid>`` or ``E`` with the shell's exit code for
  the failure (126 cannot change directory or execute, 127 not found) and
  the reason.

When a task ends the spawner reaps it, creates the status file
``<status prefix>.<code>`` exactly as the former ``sh`` wrapper did (the code
is a shell's ``$?``: exit status, or 128 + signal) and only then sends
``X<pid>, <wait status>, <marker>`` to every connected worker.  It outlives a
worker that dies (a restarted one reconnects and lists the running tasks) and
exits once it has no task and no connection.  A request it cannot decode is
answered with an error and the spawner goes on.

Only the standard library is imported: the process stays small and starts fast.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

#: Largest request taken (a task's argv and environment); larger ones fail to send.
MAX_MESSAGE = 1 << 20
#: Most descriptors passed with one request (stdin, stdout, stderr, the PMI socket).
MAX_FDS = 8
#: Descriptor numbers a task may be given.
MAX_TARGET_FD = 1 << 16
#: Running tasks per ``l`` message of a listing.
LIST_CHUNK = 512
#: How long a spawner nobody ever connected to waits for its worker.
START_GRACE_S = 10.0
#: Messages waiting for a slow worker before it is disconnected (it lists again).
MAX_QUEUED = 200_000
LISTEN_FD = 3
#: The signals the spawner ignores: reset to default in each task (a caught signal is
#: reset by execve itself, and at start the spawner resets every other one it inherited
#: ignored), rather than all 64 in every task's spawn.
_IGNORED = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ})
_CRED = struct.Struct("3i")
# plain ints, worked out once: flag enums combine slowly, on every request
_ANCILLARY = socket.CMSG_SPACE(MAX_FDS * 4)
_RECV_FLAGS = int(socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
_TRUNCATED = int(socket.MSG_TRUNC | socket.MSG_CTRUNC)


def encode(kind: bytes, fields: list[bytes]) -> bytes:
    """One message: a kind byte, then NUL-separated fields."""
    return kind + b"\0".join(fields)


def decode(data: bytes) -> tuple[bytes, list[bytes]]:
    """(kind, fields) of a message (no fields when it has only its kind)."""
    return data[:1], (data[1:].split(b"\0") if len(data) > 1 else [])


def shell_code(ws: int) -> int:
    """A shell's ``$?`` for wait status ``ws``: the exit code, or 128 + the signal."""
    if os.WIFEXITED(ws):
        return os.WEXITSTATUS(ws)
    if os.WIFSIGNALED(ws):
        return 128 + os.WTERMSIG(ws)
    return 255


class BadRequest(ValueError):
    """A request that is not one (answered with an error, never fatal)."""


class Task:
    """A running task: its marker and status file prefix."""

    __slots__ = ("marker", "prefix")

    def __init__(self, marker: bytes, prefix: bytes) -> None:
        self.marker = marker
        self.prefix = prefix


class Server:
    """The spawner's loop (see the module's docstring)."""

    def __init__(self, listener: socket.socket, path: str | None = None) -> None:
        self.listener = listener
        self.path = path  # unlinked when the spawner exits
        self.uid = os.geteuid()
        self.conns: dict[int, socket.socket] = {}
        self.queued: dict[int, collections.deque[bytes]] = {}
        self.tasks: dict[int, Task] = {}
        self.buffer = bytearray(MAX_MESSAGE)
        self.view = memoryview(self.buffer)
        self.ever_connected = False
        self.started = time.monotonic()
        self.poller = select.poll()
        self.sig_r, sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(sig_w)
        for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
            with contextlib.suppress(OSError, ValueError):
                signal.signal(sig, signal.SIG_IGN if sig in _IGNORED else signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, lambda *_args: None)
        self.poller.register(self.sig_r, select.POLLIN)
        listener.setblocking(False)
        self.poller.register(listener.fileno(), select.POLLIN)

    def done(self) -> bool:
        """No task, no worker: time to go (after a grace for the first worker)."""
        if self.tasks or self.conns:
            return False
        return self.ever_connected or time.monotonic() - self.started > START_GRACE_S

    def run(self) -> None:
        """Serve until :meth:`done`."""
        while not self.done():
            timeout = -1 if self.ever_connected or self.tasks or self.conns else 1000
            for fd, event in self.poller.poll(timeout):
                if fd == self.sig_r:
                    with contextlib.suppress(OSError):
                        os.read(self.sig_r, 4096)
                    self.reap()
                elif fd == self.listener.fileno():
                    self.accept()
                elif event & select.POLLOUT:
                    self.flush(fd)
                else:
                    self.serve(fd)
            self.reap()
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        self.listener.close()

    # ------------------------------------------------------------ connections

    def accept(self) -> None:
        """Take a waiting connection if it is our own user's."""
        try:
            conn, _addr = self.listener.accept()
        except BlockingIOError:
            return
        except OSError:
            time.sleep(0.01)  # out of descriptors: the listener stays readable, never spin
            return
        try:
            _pid, uid, _gid = _CRED.unpack(conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        except OSError:
            uid = -1
        if uid != self.uid:
            conn.close()
            return
        conn.setblocking(False)
        self.conns[conn.fileno()] = conn
        self.ever_connected = True
        self.poller.register(conn.fileno(), select.POLLIN)

    def drop(self, fd: int) -> None:
        """Forget a connection (closed, broken or too slow)."""
        conn = self.conns.pop(fd, None)
        self.queued.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self.poller.unregister(fd)
        if conn is not None:
            conn.close()

    def send(self, fd: int, message: bytes) -> None:
        """Send ``message`` on connection ``fd``, queued behind what it has not read."""
        conn = self.conns.get(fd)
        if conn is None:
            return  # dropped meanwhile
        queue = self.queued.get(fd)
        if queue is None:
            try:
                conn.send(message)
                return
            except BlockingIOError:
                queue = self.queued[fd] = collections.deque()
                self.poller.modify(fd, select.POLLIN | select.POLLOUT)
            except OSError:
                self.drop(fd)
                return
        queue.append(message)
        if len(queue) > MAX_QUEUED:
            self.drop(fd)

    def flush(self, fd: int) -> None:
        """Send what was queued for connection ``fd`` while its buffer was full."""
        queue = self.queued.get(fd)
        conn = self.conns.get(fd)
        if conn is None or queue is None:
            self.serve(fd)
            return
        try:
            while queue:
                conn.send(queue[0])
                queue.popleft()
        except BlockingIOError:
            return
        except OSError:
            self.drop(fd)
            return
        del self.queued[fd]
        self.poller.modify(fd, select.POLLIN)

    def serve(self, fd: int) -> None:
        """Read one request from connection ``fd`` and answer it."""
        conn = self.conns.get(fd)
        if conn is None:
            return
        fds: list[int] = []
        try:
            # into a buffer kept: a fresh megabyte per message would be mapped and
            # unmapped each time (a TLB flush on every CPU)
            size, ancdata, flags, _addr = conn.recvmsg_into(
                [self.buffer], _ANCILLARY, _RECV_FLAGS)
            data = bytes(self.view[:size])
        except BlockingIOError:
            return
        except OSError:
            self.drop(fd)
            return
        try:
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
            if not data:
                self.drop(fd)
                return
            if flags & _TRUNCATED:
                raise BadRequest("message too long")
            self.request(fd, data, fds)
        except Exception as exc:
            reason = str(exc).encode(errors="replace").replace(b"\0", b" ")[:200]
            self.send(fd, encode(b"E", [b"126", reason]))
        finally:
            for passed in fds:
                with contextlib.suppress(OSError):
                    os.close(passed)

    def request(self, fd: int, data: bytes, fds: list[int]) -> None:
        """Act on one decoded request."""
        kind, fields = decode(data)
        if kind == b"L" and not fields:
            items = list(self.tasks.items())
            for at in range(0, len(items), LIST_CHUNK):
                chunk = items[at:at + LIST_CHUNK]
                self.send(fd, encode(b"l", [f for pid, task in chunk
                                            for f in (b"%d" % pid, task.marker)]))
            self.send(fd, b"L")
        elif kind == b"S":
            self.send(fd, self.spawn(fields, fds))
        else:
            raise BadRequest("unknown request")

    # ------------------------------------------------------------ tasks

    def spawn(self, fields: list[bytes], fds: list[int]) -> bytes:
        """Spawn the task a request describes; the answer (``P<pid>`` or ``E...``)."""
        if len(fields) < 7:
            raise BadRequest("short spawn request")
        marker, prefix, cwd, path, targets_raw, cpus_raw, argc_raw = fields[:7]
        targets = [int(t) for t in targets_raw.split(b",")] if targets_raw else []
        cpus = {int(c) for c in cpus_raw.split(b",")} if cpus_raw else set()
        argc = int(argc_raw)
        if len(targets) != len(fds) or len(set(targets)) != len(targets) or \
                any(not 0 <= t < MAX_TARGET_FD for t in targets) or \
                not 0 < argc <= len(fields) - 7 or not marker or not prefix:
            raise BadRequest("inconsistent spawn request")
        argv = fields[7:7 + argc]
        env: dict[bytes, bytes] = {}
        for item in fields[7 + argc:]:
            name, sep, value = item.partition(b"=")
            if not sep or not name:
                raise BadRequest("bad environment entry")
            env[name] = value
        try:
            os.chdir(cwd)
        except OSError as exc:
            return encode(b"E", [b"126", os.fsencode(
                f"cannot change directory to {os.fsdecode(cwd)!r}: {exc.strerror}")])
        actions = self._actions(targets, fds)
        saved = None
        if cpus:
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        try:
            pid = self._posix_spawn(path, argv, env, actions)
        except OSError as exc:
            code = b"127" if exc.errno == errno.ENOENT else b"126"
            return encode(b"E", [code, os.fsencode(
                f"cannot execute {os.fsdecode(path)!r}: {exc.strerror}")])
        finally:
            if saved is not None:
                os.sched_setaffinity(0, saved)
            # at once: the task's ends must be its own (a PMI socket's end of file
            # tells the worker the task left it)
            for passed in fds:
                with contextlib.suppress(OSError):
                    os.close(passed)
            fds.clear()
        self.tasks[pid] = Task(marker, prefix)
        return b"P%d" % pid

    @staticmethod
    def _actions(targets: list[int], fds: list[int]) -> list[tuple[object, ...]]:
        """File actions giving the task ``fds`` as ``targets`` (stdin /dev/null unless given).

        A passed descriptor whose number is another's target is moved out of the
        way first, so that no ``dup2`` overwrites one still to be copied.
        """
        wanted = set(targets)
        top = max(wanted, default=2) + 1
        for i, fd in enumerate(fds):
            if fd in wanted:
                fds[i] = fcntl_dupfd(fd, top)
                os.close(fd)
        actions: list[tuple[object, ...]] = []
        if 0 not in wanted:
            actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
        actions += [(os.POSIX_SPAWN_DUP2, fd, target)
                    for fd, target in zip(fds, targets, strict=True)]
        return actions

    @staticmethod
    def _posix_spawn(path: bytes, argv: list[bytes], env: dict[bytes, bytes],
                     actions: list[tuple[object, ...]]) -> int:
        """``posix_spawn`` in a new session, signals default; a script without ``#!``
        runs under ``/bin/sh``, as a shell (and execvp) would run it."""
        try:
            return os.posix_spawn(path, argv, env, file_actions=actions, setsid=True,
                                  setsigdef=_IGNORED, setsigmask=())
        except OSError as exc:
            if exc.errno != errno.ENOEXEC:
                raise
        return os.posix_spawn(b"/bin/sh", [b"sh", path, *argv[1:]], env, file_actions=actions,
                              setsid=True, setsigdef=_IGNORED, setsigmask=())

    def reap(self) -> None:
        """Reap every task that ended: status file first, then the workers are told."""
        while self.tasks:
            try:
                pid, ws = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            task = self.tasks.get(pid)
            if task is None:
                continue
            code = shell_code(ws)
            with contextlib.suppress(OSError):
                # the name holds the code: creating it is atomic, as the wrapper's was
                os.close(os.open(task.prefix + b".%d" % code,
                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666))
            del self.tasks[pid]
            message = encode(b"X", [b"%d" % pid, b"%d" % ws, task.marker])
            for fd in list(self.conns):
                self.send(fd, message)


def fcntl_dupfd(fd: int, lowest: int) -> int:
    """A close-on-exec copy of ``fd`` numbered ``lowest`` or above."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest)


def main(argv: list[str]) -> int:
    """Serve the listening socket given as descriptor 3 (``argv[1]``: its path, removed
    when the spawner exits)."""
    listener = socket.socket(fileno=LISTEN_FD)
    os.set_inheritable(LISTEN_FD, False)
    with contextlib.suppress(OSError):
        os.chdir("/")
    Server(listener, argv[1] if len(argv) > 1 else None).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
