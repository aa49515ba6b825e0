"""The sockets of the PMI servers an exec worker runs for its jobs' tasks.

Each task of a job with PMI (the shell option ``pmi``, ``simple`` by default)
gets one end of a ``socketpair`` as ``PMI_FD``; the worker keeps the other,
polls it with the task pidfds, and feeds what it reads to the job's
:class:`~fluxes.domain.exec.pmi.PmiShare` (the protocol, pure). What the
share asks for is done here: answers written back, barrier rounds entered
and the KVS fetched through :class:`~fluxes.store.pmi_kvs.PmiKvs` (jobs on
several ranks only), failures handed to the worker, which fails the job
(docs/exec.md, "PMI and MPI").

The sockets live in the worker process: a worker that restarts loses them,
and the tasks of a job still using PMI then fail at their next PMI call.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fluxes.domain.exec.layout import JobLayout, RankShare
from fluxes.domain.exec.pmi import PmiShare, pmi_environment
from fluxes.formats import taskmap
from fluxes.store.errors import StoreError
from fluxes.store.pmi_kvs import PmiKvs

#: Bytes read from a task's socket at once.
READ_SIZE = 65536

#: Layouts whose ``PMI_process_mapping`` is remembered.
MAPPINGS_KEPT = 64

Key = tuple[int, int]  # (exec rank, job id), as the worker's tables name a job


@dataclass
class Served:
    """One job's PMI server on one rank: the protocol state and the sockets."""

    key: Key
    owner: int
    ranks: Sequence[int]  # every exec rank of the job, in order
    share: PmiShare
    socks: dict[int, socket.socket] = field(default_factory=dict)  # task rank -> our end
    child: dict[int, socket.socket] = field(default_factory=dict)  # task rank -> its end
    local_ids: dict[int, int] = field(default_factory=dict)

    def env(self, task_rank: int) -> dict[str, str]:
        """``PMI_FD`` and the rest of the environment of task ``task_rank``."""
        return pmi_environment(task_rank, self.share.size, self.local_ids[task_rank],
                               len(self.local_ids), self.child[task_rank].fileno())

    def inherit(self, task_rank: int) -> int:
        """The descriptor task ``task_rank`` inherits (made inheritable until
        :meth:`spawned`: the worker spawns one task at a time)."""
        fd = self.child[task_rank].fileno()
        os.set_inheritable(fd, True)
        return fd

    def spawned(self, task_rank: int) -> None:
        """Task ``task_rank`` holds its end now: close ours of it."""
        sock = self.child.pop(task_rank, None)
        if sock is not None:
            sock.close()


def process_mapping(layout: JobLayout) -> str:
    """``PMI_process_mapping`` of ``layout`` (node ids: the ranks' order in the job),
    empty when it would not fit a KVS value (RFC 13: the mapping is then unknown)."""
    node_of: dict[int, int] = {}
    for share in layout.shares:
        for task in share.tasks():
            node_of[task.rank] = share.node_rank
    text = taskmap.pmi(taskmap.from_nodes([node_of[t] for t in range(layout.size)]))
    return text if len(text) < 1024 else ""


class PmiServer:
    """Every PMI server of the worker: sockets by descriptor, shares by job."""

    def __init__(self, kvs: PmiKvs, add_fd: Callable[[int], None],
                 remove_fd: Callable[[int], None]) -> None:
        self.kvs = kvs
        self.add_fd = add_fd
        self.remove_fd = remove_fd
        self.served: dict[Key, Served] = {}
        # process_mapping of recent layouts: the starts of jobs submitted alike share
        # theirs (fluxes.domain.exec.jobs.Planner), and working it out was a third of a
        # server's opening
        self._mappings: dict[JobLayout, str] = {}
        self.by_fd: dict[int, tuple[Key, int]] = {}
        #: jobs whose exchange step failed (Redis unreachable): tried again by :meth:`service`
        self.retry: set[Key] = set()

    def open(self, key: Key, owner: int, layout: JobLayout, share: RankShare) -> Served:
        """A server for the tasks of ``share`` (one socket pair each; their ends are
        handed over at spawn)."""
        self.close(key, leave=False)
        tasks = share.tasks()
        pmi = PmiShare(jobid=key[1], size=layout.size, nnodes=layout.nnodes,
                       node_rank=share.node_rank, tasks=[t.rank for t in tasks],
                       mapping=self._mapping(layout))
        served = Served(key, owner, [s.rank for s in layout.shares], pmi)
        try:
            for task in tasks:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                ours.setblocking(False)
                served.socks[task.rank] = ours
                served.child[task.rank] = theirs
                served.local_ids[task.rank] = task.local_id
        except OSError:
            self._close_served(served)
            raise
        self.served[key] = served
        for rank, sock in served.socks.items():
            self.by_fd[sock.fileno()] = (key, rank)
            self.add_fd(sock.fileno())
        return served

    def _mapping(self, layout: JobLayout) -> str:
        """:func:`process_mapping` of ``layout``, remembered for the last
        :data:`MAPPINGS_KEPT` layouts."""
        text = self._mappings.get(layout)
        if text is None:
            text = process_mapping(layout)
            if len(self._mappings) >= MAPPINGS_KEPT:
                del self._mappings[next(iter(self._mappings))]
            self._mappings[layout] = text
        return text

    def reregister(self) -> None:
        """Poll every socket again (the worker's poll set was rebuilt)."""
        for fd in self.by_fd:
            self.add_fd(fd)

    def handle(self, ready: Iterable[int]) -> set[Key]:
        """Read the sockets ``ready`` names; the jobs whose share got something."""
        touched: set[Key] = set()
        for fd in ready:
            found = self.by_fd.get(fd)
            if found is None:
                continue
            key, rank = found
            if self._receive(self.served[key], rank, fd) is None:
                continue
            touched.add(key)
        return touched

    def _receive(self, served: Served, rank: int, fd: int, flags: int = 0) -> bytes | None:
        """One read of task ``rank``'s socket, fed to its share (b"": its end, and its fd
        forgotten); None when nothing was waiting."""
        try:
            data = served.socks[rank].recv(READ_SIZE, flags)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:
            self._forget_fd(fd)
        served.share.feed(rank, data)
        return data

    def _read_rest(self, served: Served) -> None:
        """Take what the tasks' sockets still hold (their last requests, their end)
        before the share's state is read: a task's end can be seen before its
        socket's end of file (its spawner tells it, or its pidfd, in the same
        wake-up), and whether it left before PMI_Finalize must not depend on that."""
        for rank, sock in list(served.socks.items()):
            fd = sock.fileno()
            if fd not in self.by_fd:
                continue  # its end already read
            while self._receive(served, rank, fd, socket.MSG_DONTWAIT):
                pass  # until nothing waits (None) or its end (b"")

    def _forget_fd(self, fd: int) -> None:
        self.by_fd.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.remove_fd(fd)

    def service(self, keys: Iterable[Key]) -> dict[Key, str]:
        """Carry out what the shares of ``keys`` (and of :attr:`retry`) ask for: answers,
        rounds, fetches; the failures that end their jobs, by job.  A Redis error
        propagates (the worker's outage handling) after the job is put in
        :attr:`retry`, so that nothing a task waits for is forgotten."""
        failed: dict[Key, str] = {}
        todo = set(keys) | self.retry
        self.retry = set()
        for key in todo:
            served = self.served.get(key)
            if served is None:
                continue
            try:
                self._exchange(key, served)
            except BaseException:
                self.retry.add(key)
                self.retry.update(todo)
                raise
            self._send(served)
            if served.share.failure is not None:
                failed[key] = served.share.failure
        return failed

    def _exchange(self, key: Key, served: Served) -> None:
        """The round to enter and the KVS to fetch, if the share asks for them."""
        share = served.share
        taken = share.take_round()
        if taken is not None:
            round_, puts = taken
            try:
                got = self.kvs.enter(served.owner, key[1], served.ranks, share.node_rank,
                                     round_, puts)
            except BaseException:
                share.untake(round_, puts)
                raise
            if got.state == "done":
                share.complete(round_)
            elif got.state == "broken":
                share.broken(got.reason)
        if share.want_fetch and share.waiting_gets:
            share.loaded(self.kvs.fetch(served.owner, key[1]))

    def _send(self, served: Served) -> None:
        for rank, line in served.share.drain():
            sock = served.socks.get(rank)
            if sock is None:
                continue
            # lock-step protocol: the task waits for this answer, its buffer is empty
            with contextlib.suppress(OSError):
                sock.send(line)

    def wake(self, key: Key, round_: int, error: str | None) -> dict[Key, str]:
        """A ``pmi`` message: round ``round_`` of the job completed (or broke)."""
        served = self.served.get(key)
        if served is None:
            return {}
        if error:
            served.share.broken(error)
        else:
            served.share.complete(round_)
        return self.service([key])

    def close(self, key: Key, leave: bool = True, killed: bool = False) -> None:
        """The job's tasks on this rank all ended: leave the exchange (jobs on several
        ranks), close the sockets.  Tasks ``killed`` (the job was canceled or failed
        elsewhere) leave cleanly: their unfinished PMI is no news to the others."""
        served = self.served.pop(key, None)
        if served is None:
            return
        share = served.share
        if leave and share.nnodes > 1:
            self._read_rest(served)
        try:
            if leave and share.nnodes > 1:
                clean = killed or share.clean()
                reason = share.failure or (
                    f"PMI: task {share.unfinished[0]} exited before PMI_Finalize"
                    if share.unfinished else "PMI: a rank left before PMI_Finalize")
                self.kvs.leave(served.owner, key[1], served.ranks, share.node_rank, clean,
                               reason)
        except StoreError:
            # Redis is away: the hash goes with the job's purge; the worker notices the
            # outage on its next call and rebuilds
            pass
        finally:
            self._close_served(served)

    def _close_served(self, served: Served) -> None:
        for sock in served.socks.values():
            self._forget_fd(sock.fileno())
            sock.close()
        for sock in served.child.values():
            sock.close()
        served.socks.clear()
        served.child.clear()

    def close_all(self) -> None:
        """Close every socket (the worker stops); nothing is left in Redis' exchange."""
        for key in list(self.served):
            served = self.served.pop(key)
            self._close_served(served)
