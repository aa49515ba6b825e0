"""Tasks as processes: spawning them (by the spawner or under the wrapper), signalling,
and noticing their end.

A task run as the worker's user is started by the worker's spawner
(:mod:`fluxes.proc.spawner`), whose child it is, with no shell around it.
Otherwise (another user's job, or no spawner) each task runs as ``/bin/sh -c
WRAPPER <marker> <cwd> <status-prefix> <out> <err> CMD...``.  Either way it
is started in its own session (process group = its pid), stdin
``/dev/null``, signals reset to default; its stdout/stderr go to files
(docs/exec.md, "Real execution").  Wrappers run as the worker's user are
started with ``posix_spawn``.  A root worker runs other users' jobs as their owners
(:class:`Account`): ``posix_spawn`` cannot change the user, so those tasks
are started by :class:`subprocess.Popen` with ``user``/``group``/
``extra_groups``, whose child does ``setgroups``, ``setregid`` and
``setreuid`` in C between fork and exec (no Python runs there, no helper
program, no ``preexec_fn``); such a task's files are opened by the wrapper,
as the owner, never by root (docs/security.md, "Jobs run as their users").
Nothing of a task depends on the worker, so tasks outlive it.
:class:`Launcher` checks and spawns a job's share, :func:`signal_tasks`
signals their process groups, :class:`TaskWatcher` holds a ``pidfd`` per
running task so that an exit wakes the loop's ``poll()`` at once, and reaps
the worker's own children.

Why one module: the launcher and the watcher share the
process facts a start creates and an end consumes (the worker's children,
the pidfds, the spawner's link and its tasks); apart, each would reach into
the other's state.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import pwd
import resource
import select
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from fluxes.domain.exec.adoption import marker
from fluxes.domain.exec.jobs import STREAMS, ExecJob, RunPlan, TaskProc, wait_result
from fluxes.domain.exec.layout import (
    base_environment,
    environment_overlay,
    expand_template,
    find_command,
    job_cwd,
    job_environment,
    job_name,
    shell_option,
    task_command,
    task_environment,
)
from fluxes.domain.exec.pmi import STALE_VARIABLES, without_stale
from fluxes.proc.exec_files import TaskFiles, close_stream, high_fd
from fluxes.proc.spawner_client import SpawnerDown, SpawnerLink, SpawnError
from fluxes.proc.stdin import data_fd, task_stdin, with_input_file

if TYPE_CHECKING:
    from fluxes.proc.pmi_server import Served

SH = "/bin/sh"
#: The task wrapper: $1 cwd, $2 status file prefix, $3/$4 files the task's
#: stdout/stderr are appended to ("": as given), then the command.  Signals
#: the job may be killed with are caught (so the wrapper outlives the task and
#: records its status) and reset to default in the task; the subshell makes
#: even a shell builtin run as a separate process (dash execs the command in
#: it directly, so there is no extra fork), and opens the output files as the
#: task's user (a failure ends only the subshell, with status 2).  ``true``
#: (not the special builtin ``:``) creates the status file, so a failed
#: redirection cannot end the shell.
WRAPPER = (
    "trap : HUP INT QUIT TERM USR1 USR2 ALRM\n"
    "d=$1 f=$2 o=$3 e=$4\n"
    "shift 4\n"
    'if cd -- "$d"; then ( [ -z "$o" ] || exec >>"$o"; [ -z "$e" ] || exec 2>>"$e"; "$@" )'
    "; s=$?; else s=126; fi\n"
    'true 2>/dev/null >"$f.$s"\n'
    'exit "$s"\n'
)
#: Creates (truncating) the files named, as the job's user; prints the first it cannot.
TRUNCATE = 'for f do true 2>/dev/null >"$f" || { printf %s "$f"; exit 1; }; done'
#: How long a user account looked up is trusted.
ACCOUNT_CACHE_S = 2.0
#: Signals reset to their default action in the wrapper (and so in the task).
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
#: How long a command lookup (PATH search) is trusted.
COMMAND_CACHE_S = 2.0
#: After a task exit wakes the loop while other tasks of its job still run, how
#: long it waits for them to end too (one write, one report for the job).
EXIT_LINGER_MS = 2


class StartFailed(ValueError):
    """The job's command cannot be executed: the tasks end with exit ``code`` at once."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Account(NamedTuple):
    """The UNIX user a job's tasks run as (not the worker's): ids, groups, home."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str


def lookup_account(uid: int) -> Account:
    """``uid``'s account on this host; ValueError (the job's exec error) when it has none."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise ValueError(f"exec: uid {uid} has no account on this host") from None
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return Account(uid, entry.pw_gid, groups, entry.pw_name, entry.pw_dir)


class Prepared(NamedTuple):
    """A job's command, working directory and environment, checked before spawning;
    ``account`` is the user its tasks run as (None: the worker's own)."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    account: Account | None = None
    #: task 0's stdin (fluxes/proc/stdin.py), None: /dev/null
    stdin: int | None = None
    #: the file ``argv[0]`` names (found on the task's PATH), which the spawner runs
    path: str | None = None


class Deferred(NamedTuple):
    """A job's one task whose spawn request was sent to the spawner and whose answer
    (its pid) is taken later (:meth:`Launcher.complete`); what the wrapper needs if
    the spawner goes away before answering, and the descriptors to close then."""

    job: ExecJob
    proc: TaskProc
    wrapper_argv: list[str]
    env: dict[str, str]
    fds: dict[int, int]
    cores: frozenset[int]
    pmi: Served | None
    files: OutputFiles
    stdin: int | None


def raise_fd_limit() -> None:
    """Every running task holds up to two open files in the worker: allow many."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


#: prctl(2) option: how late the kernel may end this thread's timed waits, in ns.
_PR_SET_TIMERSLACK = 29
#: The exec worker's timer slack (ns; Linux's default is 50,000).
TIMER_SLACK_NS = 1000


def tight_timers(slack_ns: int = TIMER_SLACK_NS) -> bool:
    """Ask Linux to end this process's timed waits within ``slack_ns`` of their due time
    (by default it may add up to 50 us to each, to group wake-ups): the exec worker's
    waits end simulated jobs and time limits, and each microsecond late is a core idle.
    False where it cannot (not Linux)."""
    try:
        import ctypes  # here: only the exec worker needs it, once
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_TIMERSLACK, slack_ns, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


#: select()'s limit: an fd at or above it cannot be waited on that way.
_FD_SETSIZE = 1024


def nap(seconds: float, fd: int) -> None:
    """Wait ``seconds`` (a fraction of a millisecond, which poll() cannot: it rounds up
    to whole ones), or less if ``fd`` becomes readable: a new request is taken at once,
    not after the nap. An fd select() cannot take: poll(), whole milliseconds."""
    if 0 <= fd < _FD_SETSIZE:
        select.select([fd], [], [], seconds)
    elif fd >= 0:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(math.ceil(seconds * 1000))
    else:
        time.sleep(seconds)


def signal_tasks(tasks: Iterable[TaskProc], sig: int) -> None:
    """Send ``sig`` to the process group of every task still running."""
    for task in tasks:
        if not task.ended and task.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(task.pid, sig)


class OutputFiles:
    """User output files of one job on this rank, each opened once.

    Tasks append (so tasks sharing a file do not overwrite each other); the
    job's first rank truncates when it opens the file.
    """

    def __init__(self, first_rank: bool) -> None:
        self.first_rank = first_rank
        self.fds: dict[str, int] = {}

    def open(self, path: str) -> None:
        """Open ``path`` for the tasks (once however many tasks write to it)."""
        if path in self.fds:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if self.first_rank:
            flags |= os.O_TRUNC
        self.fds[path] = high_fd(os.open(path, flags, 0o666))

    def close(self) -> None:
        """Close the worker's copies (the tasks keep theirs)."""
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


class TaskWatcher:
    """The loop's ``poll()`` set: a pidfd per running task, plus the fds the loop adds.

    ``children`` (the worker's own wrappers) and ``reaped`` (their statuses)
    outlive :meth:`reset`, which a reload of the worker's state calls; the
    pidfds do not.  ``woken`` collects the (rank, job) keys whose tasks
    exited since the loop last looked.
    """

    def __init__(self, fds: Iterable[int] = ()) -> None:
        self.children: set[int] = set()
        self.reaped: dict[int, tuple[int, int | None]] = {}
        # Tasks started by Popen (as other users): kept until we reap them, since a
        # Popen dropped while its child runs would have subprocess reap it for us.
        self.popens: dict[int, subprocess.Popen[bytes]] = {}
        self._fixed = list(fds)
        #: the spawner, parent of the tasks run as the worker's user (None: the wrapper)
        self.spawner: SpawnerLink | None = None
        self._spawner_fd = -1
        self.pidfds: dict[int, tuple[tuple[int, int], TaskProc]] = {}
        # pid -> the spawner's task watched (its end comes as a message from the spawner)
        self.spawned: dict[int, tuple[tuple[int, int], TaskProc]] = {}
        # the spawner's tasks whose end only its message will tell (no pidfd, or the
        # zombie was reaped before we looked): the spawner's socket is polled for them
        self.awaiting: set[int] = set()
        # job id -> its tasks watched (on every rank served here): whether an exit
        # leaves others of its job running
        self.watched: dict[int, int] = {}
        self.woken: set[tuple[int, int]] = set()
        #: wall time the first task exit not yet reported woke the loop (0: none)
        self.exit_woke = 0.0
        self.poller = select.poll()
        self.reset()

    def reset(self) -> None:
        """Close every pidfd and start a new poll set holding only the fixed fds."""
        for fd in self.pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pidfds = {}
        self.spawned = {}
        self.awaiting = set()
        self.watched = {}
        self.woken = set()
        self.poller = select.poll()
        for fd in self._fixed:
            self.poller.register(fd, select.POLLIN)
        self._spawner_fd = -1
        self.sync_spawner()

    def connect_spawner(self) -> bool:
        """Connect to the spawner (starting it if needed); whether it is up."""
        if self.spawner is None:
            return False
        up = self.spawner.connect()
        self.sync_spawner()
        return up

    def sync_spawner(self) -> None:
        """Poll the spawner's socket while a task's end or an answer is awaited from it.

        Otherwise its messages (ends the pidfds told already) are read when the
        loop wakes anyway: each would cost a wake-up of its own.
        """
        link = self.spawner
        fd = link.fileno() if link is not None and (self.awaiting or link.awaited) else -1
        if fd != self._spawner_fd:
            if self._spawner_fd >= 0:
                with contextlib.suppress(KeyError, ValueError):
                    self.poller.unregister(self._spawner_fd)
            if fd >= 0:
                self.poller.register(fd, select.POLLIN)
            self._spawner_fd = fd

    def add(self, fd: int) -> None:
        """Also wake on ``fd`` becoming readable (until :meth:`reset`)."""
        self.poller.register(fd, select.POLLIN)

    def remove(self, fd: int) -> None:
        """Stop waking on ``fd`` (added with :meth:`add`)."""
        with contextlib.suppress(KeyError, ValueError):
            self.poller.unregister(fd)

    def watch(self, key: tuple[int, int], task: TaskProc) -> None:
        """Get a pidfd for ``task`` so its exit wakes the loop (Linux >= 5.3).

        A task already gone is marked exited and its key woken; without
        pidfds the task is polled with the output files instead.  A task of
        the spawner is watched through the spawner's messages instead.
        """
        if task.spawned:
            # The spawner's message says it ended; its pidfd wakes us sooner (its
            # status then read from the zombie, see fluxes/proc/adopt.py).
            self.spawned[task.pid] = (key, task)
            self.watched[key[1]] = self.watched.get(key[1], 0) + 1
            link = self.spawner
            if link is None or task.pid in link.ended or task.pid not in link.running:
                task.exited = True  # ended already (or unknown now): look at once
                self.woken.add(key)
                return
        try:
            fd = os.pidfd_open(task.pid)
        except ProcessLookupError:
            task.exited = True  # already gone: look at once
            self.woken.add(key)
            return
        except (OSError, AttributeError):
            if task.spawned:
                self.awaiting.add(task.pid)
            return
        task.pidfd = fd
        self.pidfds[fd] = (key, task)
        if not task.spawned:
            self.watched[key[1]] = self.watched.get(key[1], 0) + 1
        self.poller.register(fd, select.POLLIN)

    def unwatch(self, task: TaskProc) -> None:
        """Stop watching ``task`` and close its pidfd."""
        if task.spawned and self.spawned.get(task.pid, (None, None))[1] is task:
            self._unwatched(self.spawned.pop(task.pid)[0][1])
            self.awaiting.discard(task.pid)
        if task.pidfd is not None:
            watched = self.pidfds.pop(task.pidfd, None)
            if watched is not None and not task.spawned:
                self._unwatched(watched[0][1])
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(task.pidfd)
            with contextlib.suppress(OSError):
                os.close(task.pidfd)
            task.pidfd = None

    def _unwatched(self, jobid: int) -> None:
        left = self.watched.get(jobid, 1) - 1
        if left > 0:
            self.watched[jobid] = left
        else:
            self.watched.pop(jobid, None)

    def wait(self, timeout_ms: int) -> list[int]:
        """Wait up to ``timeout_ms`` (-1: until something happens); the other fds ready.

        Exited tasks are marked and their keys added to :attr:`woken`.  Tasks
        of a job tend to end together: when only exits woke the wait and a
        job they belong to still has tasks running (on any rank served here),
        a moment more, waiting on the tasks still running, lets one iteration
        (one write, one report) take them all.  A job whose tasks all ended is
        reported at once: its end is what the next job on its cores waits for.
        """
        link = self.spawner
        # the spawner's messages so far (one read; also notices a spawner gone)
        ended = link.drain() if link is not None else []
        self.sync_spawner()
        # (spawn answers read ahead are news too: the loop takes them at once)
        events = self.poller.poll(0 if ended or (link is not None and link.answers)
                                  else timeout_ms)
        pidfds = self.pidfds
        ended += self._spawner_ends(events)
        if (events or ended) and (pidfds or self.spawned) and \
                self._siblings_running(events, ended):
            # the exits seen stay readable: out of the poll set for the linger
            for fd, _event in events:
                if fd != self._spawner_fd:
                    with contextlib.suppress(KeyError, ValueError):
                        self.poller.unregister(fd)
            more = self.poller.poll(EXIT_LINGER_MS)
            ended += self._spawner_ends(more)
            events += more
        ready = []
        for fd, _event in events:
            if fd == self._spawner_fd:
                continue
            watched = pidfds.get(fd)
            if watched is None:
                ready.append(fd)
                continue
            self._exited(*watched)
        for pid in ended:
            watched = self.spawned.get(pid)
            if watched is not None:
                self._exited(*watched)
        self.sync_spawner()
        return ready

    def _exited(self, key: tuple[int, int], task: TaskProc) -> None:
        if not self.exit_woke:
            self.exit_woke = time.time()
        task.exited = True
        self.woken.add(key)
        if task.spawned and task.pidfd is not None:
            # its pidfd stays readable: stop polling it, but the spawner's message
            # still wakes us if the zombie was reaped before we looked
            self.pidfds.pop(task.pidfd, None)
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(task.pidfd)
            with contextlib.suppress(OSError):
                os.close(task.pidfd)
            task.pidfd = None
            self.awaiting.add(task.pid)
            return
        self.unwatch(task)  # a pidfd stays readable: stop polling it

    def _spawner_ends(self, events: list[tuple[int, int]]) -> list[int]:
        """The pids the spawner said ended (when its socket is among ``events``, or
        ends were read meanwhile)."""
        link = self.spawner
        if link is None or not (link.fresh or any(fd == self._spawner_fd for fd, _e in events)):
            return []
        return link.drain()

    def _siblings_running(self, events: list[tuple[int, int]], pids: list[int]) -> bool:
        """True when only task exits are in ``events`` (and the spawner's ``pids``) and
        some exited task's job has other tasks still running (worth waiting a moment
        for)."""
        pidfds = self.pidfds
        ended: dict[int, int] = {}
        for fd, _event in events:
            if fd == self._spawner_fd:
                continue
            watched = pidfds.get(fd)
            if watched is None:
                return False
            jobid = watched[0][1]
            ended[jobid] = ended.get(jobid, 0) + 1
        for pid in pids:
            got = self.spawned.get(pid)
            if got is not None:
                ended[got[0][1]] = ended.get(got[0][1], 0) + 1
        return any(self.watched.get(jobid, 0) > n for jobid, n in ended.items())

    def reap(self, task: TaskProc) -> bool | None:
        """``waitpid`` one of our own wrappers: True if it ended (status set), False
        if it still runs, None if it is not our child after all (reaped elsewhere)."""
        try:
            pid, ws = os.waitpid(task.pid, os.WNOHANG)
        except ChildProcessError:
            task.own = False
            self.children.discard(task.pid)
            self.popens.pop(task.pid, None)
            return None
        if pid == 0:
            task.exited = False
            return False
        self.children.discard(task.pid)
        self._reaped_popen(task.pid, ws)
        task.status, task.code = wait_result(ws)
        self.reaped[task.pid] = (task.status, task.code)
        return True

    def _reaped_popen(self, pid: int, ws: int) -> None:
        popen = self.popens.pop(pid, None)
        if popen is not None:
            popen.returncode = ws  # reaped by us: it has nothing left to wait for

    def reap_strays(self, claimed: Iterable[int]) -> None:
        """Reap our children that no job claims (their status files stay)."""
        for pid in list(self.children - set(claimed)):
            try:
                done, ws = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, ws = pid, 0
            if done:
                self.children.discard(pid)
                self._reaped_popen(pid, ws)

    def close(self) -> None:
        """Close the pidfds and the link to the spawner (which goes on with its tasks)."""
        for fd in self.pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pidfds = {}
        self.spawned = {}
        self.watched = {}
        if self.spawner is not None:
            self.spawner.close()
            self.sync_spawner()


class Launcher:
    """Spawns jobs' tasks: the checks a shell would make first, then one wrapper per task."""

    def __init__(self, uri: str, files: TaskFiles, watcher: TaskWatcher, ns: str) -> None:
        self.uri = uri
        self.files = files
        self.watcher = watcher
        self.ns = ns
        self.base_env = base_environment(os.environ)
        home = os.path.expanduser("~")
        # only the tasks' working directory when the user has no home: nothing is created there
        self.default_cwd = home if os.path.isdir(home) else "/tmp"  # noqa: S108
        self.cpus = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else frozenset()
        self._commands: dict[tuple[str, str | None, str], tuple[float, str]] = {}
        self._accounts: dict[int, tuple[float, Account]] = {}
        #: jobs whose one task's spawn answer is still to be taken, by (rank, job id)
        self.deferred: dict[tuple[int, int], Deferred] = {}

    def account(self, uid: int) -> Account:
        """:func:`lookup_account`, remembered for a moment (it reads the user databases)."""
        now = time.monotonic()
        hit = self._accounts.get(uid)
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._accounts) > 1024:
            self._accounts.clear()
        found = lookup_account(uid)
        self._accounts[uid] = (now + ACCOUNT_CACHE_S, found)
        return found

    def _find_command(self, argv0: str, path: str | None, cwd: str) -> str:
        """:func:`find_command`, remembered for a moment (a PATH search costs ~10 stats)."""
        key = (argv0, path, cwd)
        now = time.monotonic()
        hit = self._commands.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._commands) > 1024:
            self._commands.clear()
        found = find_command(argv0, path, cwd)
        self._commands[key] = (now + COMMAND_CACHE_S, found)
        return found

    def prepare(self, spec: Mapping[str, Any], user: int | None = None) -> Prepared:
        """The job's command, cwd and environment; ValueError (or :class:`StartFailed`)
        when a shell could not run it: a missing working directory, command not found.

        ``user`` is the uid the tasks run as when not the worker's (a root worker
        running another user's job): their home is the default working directory
        and ``HOME``, ``USER`` and ``LOGNAME`` are theirs (the worker's are not
        handed to them); what they may access is checked as them when they run.
        """
        argv = task_command(spec)
        run_argv = with_input_file(spec, argv)
        account = None if user is None else self.account(user)
        base = self.base_env
        default_cwd = self.default_cwd
        if account is not None:
            base = {**base, "HOME": account.home, "USER": account.name,
                    "LOGNAME": account.name}
            default_cwd = account.home if os.path.isdir(account.home) else "/"
        cwd = job_cwd(spec) or default_cwd
        if not os.path.isdir(cwd):
            raise ValueError(f"cannot change directory to {cwd!r}: "
                             f"{os.strerror(errno.ENOENT)}")
        env = job_environment(base, environment_overlay(spec))
        found = self._find_command(argv[0], env.get("PATH"), cwd)
        if not found.startswith("/"):
            # as a shell (and flux's job shell) would: 127 not found, 126 not executable
            raise StartFailed(found, 127 if found.endswith(os.strerror(errno.ENOENT)) else 126)
        return Prepared(run_argv, cwd, env, account,
                        path=found if run_argv is argv else run_argv[0])

    def launch(self, job: ExecJob, plan: RunPlan, prepared: Prepared,
               pmi: Served | None = None) -> None:
        """Spawn ``job``'s tasks on its rank (appended to ``job.tasks`` and watched).

        ``pmi``, the job's PMI server on this rank, hands each task its socket
        (``PMI_FD`` and the rest of its environment, :mod:`fluxes.proc.pmi_server`).

        ValueError when a user output file cannot be opened (nothing runs);
        a failed spawn is the job's error, the tasks already started killed.
        A job run as another user opens its output files as that user: the
        first rank creates (truncates) them before any task starts, and each
        task's wrapper appends to them.
        """
        files = OutputFiles(first_rank=plan.first_rank)
        name = job_name(plan.spec)
        paths: dict[tuple[int, int], str] = {}
        templates = (plan.outputs.stdout, plan.outputs.stderr)
        for task in plan.share.tasks():
            for (_flag, _name, _suffix, fd_no), template in zip(STREAMS, templates,
                                                                 strict=True):
                if template is not None:
                    paths[(task.rank, fd_no)] = os.path.join(prepared.cwd, expand_template(
                        template, jobid=job.id, name=name, taskid=task.rank, rank=job.rank))
        if prepared.account is not None:
            if plan.first_rank and paths:
                truncate_as(prepared.account, sorted(set(paths.values())))
        else:
            try:
                for path in paths.values():
                    files.open(path)
            except OSError as exc:
                files.close()
                raise ValueError(f"cannot open output file {exc.filename!r}: "
                                 f"{exc.strerror}") from None
        if any(name in prepared.env for name in STALE_VARIABLES):
            # submitted from inside another job: its PMI descriptors mean nothing here
            prepared = prepared._replace(env=without_stale(prepared.env))
        if prepared.account is None:
            # (re)connected (or started) here, before any task's PMI socket is made
            # inheritable: a spawner started later would hold a copy of it
            self.watcher.connect_spawner()
        stdin = data_fd(plan.spec) if 0 in plan.share.task_ranks else None
        if stdin is not None:
            prepared = prepared._replace(stdin=stdin)
        try:
            self._spawn_all(job, plan, prepared, files, paths, pmi)
        finally:
            if job.key not in self.deferred:  # else closed once the answer is taken
                files.close()
                if stdin is not None:
                    os.close(stdin)

    def _spawn_all(self, job: ExecJob, plan: RunPlan, prepared: Prepared,
                   files: OutputFiles, paths: Mapping[tuple[int, int], str],
                   pmi: Served | None = None) -> None:
        """Spawn every task; on failure kill what was started and record the error."""
        spec, share = plan.spec, plan.share
        gpu_affinity = shell_option(spec, "gpu-affinity")
        cpu_affinity = shell_option(spec, "cpu-affinity")
        saved = self.cpus if cpu_affinity in ("on", "per-task") and self.cpus else None
        try:
            for task in share.tasks():
                proc = TaskProc(task.rank, 0, True)
                fds, appends = self._task_fds(job, proc, prepared, files, paths)
                task_env = task_environment(prepared.env, jobid=job.id, layout=plan.layout,
                                            share=share, task=task, cwd=prepared.cwd,
                                            uri=self.uri, gpu_affinity=gpu_affinity)
                pass_fds: tuple[int, ...] = ()
                if pmi is not None:
                    task_env.update(pmi.env(task.rank))
                    pass_fds = (pmi.inherit(task.rank),)
                status_prefix = self.files.path(job.rank, job.id, task.rank, "st",
                                                self.files.owner_of(job))
                wrapper_argv = ["sh", "-c", WRAPPER, marker(self.ns, job.rank, job.id, task.rank),
                                prepared.cwd, status_prefix, *appends, *prepared.argv]
                cores = self._cores(task.cores if cpu_affinity == "per-task" else share.cores,
                                    saved is not None, prepared.account is not None)
                if share.ntasks == 1 and self._request(
                        Deferred(job, proc, wrapper_argv, task_env, fds, cores, pmi, files,
                                 prepared.stdin), prepared, pass_fds, status_prefix):
                    return  # the job's only task: its pid is taken later (complete())
                try:
                    # The command is the job's own, run without a shell parsing it
                    # (the wrapper passes it on as "$@"), as the worker's user or,
                    # from a root worker, as the job's owner.
                    if prepared.account is None:
                        if not self._by_spawner(proc, prepared, task_env, fds, pass_fds,
                                                wrapper_argv[3], status_prefix, cores):
                            proc.pid = _spawn_wrapper(wrapper_argv, task_env, fds, cores)
                    else:
                        proc.pid = self._spawn_as(prepared.account, wrapper_argv, task_env,
                                                  fds, pass_fds)
                except OSError:
                    for stream in proc.streams:
                        close_stream(stream)
                    raise
                finally:
                    if pmi is not None:
                        pmi.spawned(task.rank)
                if not proc.spawned:
                    self.watcher.children.add(proc.pid)
                self.watcher.watch(job.key, proc)
                job.tasks.append(proc)
        except SpawnError as exc:
            if not job.tasks:  # nothing started: the job ends as the shell would have
                raise StartFailed(exc.strerror or str(exc), exc.code) from None
            self._not_started(job, exc)
        except (OSError, subprocess.SubprocessError) as exc:
            self._not_started(job, exc)
        finally:
            if saved is not None:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, saved)

    def _cores(self, wanted: Iterable[int], bind: bool, as_user: bool) -> frozenset[int]:
        """The CPUs a task is bound to (none unless ``bind``); a task run as another user
        is bound through the worker's own affinity (restored by the caller)."""
        if not bind:
            return frozenset()
        cores = self.cpus & set(wanted)
        if cores and as_user:
            os.sched_setaffinity(0, cores)
        return cores

    def _task_fds(self, job: ExecJob, proc: TaskProc, prepared: Prepared, files: OutputFiles,
                  paths: Mapping[tuple[int, int], str]) -> tuple[dict[int, int], list[str]]:
        """Task fd -> the worker's fd it is a copy of; the files its wrapper opens as the
        task's user (stdout, stderr; "": none)."""
        fds: dict[int, int] = task_stdin(prepared.stdin, proc.rank)
        appends = ["", ""]
        for flag, sname, suffix, fd_no in STREAMS:
            user_path = paths.get((proc.rank, fd_no))
            if user_path is not None:
                if prepared.account is None:
                    fds[fd_no] = files.fds[user_path]
                else:
                    appends[fd_no - 1] = user_path
            elif flag in job.forward:
                fds[fd_no] = self.files.create(job, proc, sname, suffix)
        return fds, appends

    @staticmethod
    def _not_started(job: ExecJob, exc: BaseException) -> None:
        """A task could not be spawned: the job's error; the tasks started are killed."""
        job.error = f"exec: cannot start task: {getattr(exc, 'strerror', None) or exc}"
        job.started = False
        signal_tasks(job.tasks, signal.SIGKILL)
        job.escalated = True

    def _by_spawner(self, proc: TaskProc, prepared: Prepared, env: Mapping[str, str],
                    fds: Mapping[int, int], pass_fds: tuple[int, ...], mark: str,
                    prefix: str, cores: Iterable[int]) -> bool:
        """Have the spawner start the task (its child: no wrapper); False when the
        spawner cannot be used (the wrapper starts it instead).  SpawnError when
        the command cannot run."""
        link = self.watcher.spawner
        if link is None or prepared.path is None or not link.up:
            return False
        try:
            _ask(link, prepared.path, prepared, env, fds, pass_fds, mark, prefix, cores)
            proc.pid = link.answer()
        except SpawnerDown:
            return False
        proc.spawned = True
        proc.own = False
        return True

    def _request(self, deferred: Deferred, prepared: Prepared, pass_fds: tuple[int, ...],
                 prefix: str) -> bool:
        """Send the spawner the request of a job's only task without waiting for its
        answer, the job then in :attr:`deferred`; False when the spawner cannot be used
        that way (the task is then spawned at once, as before).

        The worker does not wait meanwhile: the spawner's ``posix_spawn`` returns only
        once the task has been scheduled and executed its command, which on busy cores
        takes far longer than the request's own work."""
        link = self.watcher.spawner
        if prepared.account is not None or link is None or prepared.path is None or \
                not link.up:
            return False
        try:
            _ask(link, prepared.path, prepared, deferred.env, deferred.fds, pass_fds,
                 deferred.wrapper_argv[3], prefix, deferred.cores)
        except SpawnerDown:
            self.watcher.sync_spawner()  # (as in complete())
            return False
        for fd in pass_fds:
            # the spawner has its copy: no process the worker starts meanwhile inherits it
            os.set_inheritable(fd, False)
        self.watcher.sync_spawner()  # its answer wakes the loop
        deferred.proc.spawned = True
        deferred.proc.own = False
        self.deferred[deferred.job.key] = deferred
        return True

    def complete(self, key: tuple[int, int]) -> ExecJob:
        """Take the spawner's answer to the request of the deferred job ``key`` (waiting
        for it if need be) and finish its launch as :meth:`launch` would have: the
        task watched and in ``job.tasks``, or :class:`StartFailed` when the command
        cannot run, or the job's error when it could not be spawned at all.  A spawner
        gone before answering: the task is spawned under the wrapper instead."""
        deferred = self.deferred.pop(key)
        job, proc = deferred.job, deferred.proc
        link = self.watcher.spawner
        try:
            try:
                if link is None:
                    raise SpawnerDown(errno.EPIPE, "no spawner")
                try:
                    proc.pid = link.answer()
                finally:
                    # before a descriptor made now can take the number of a socket the
                    # link closed (going down): that one's poll registration goes
                    self.watcher.sync_spawner()
            except SpawnerDown:
                proc.spawned, proc.own = False, True
                proc.pid = self._fallback(deferred)
            except SpawnError as exc:
                for stream in proc.streams:
                    close_stream(stream)
                raise StartFailed(exc.strerror or str(exc), exc.code) from None
            if not proc.spawned:
                self.watcher.children.add(proc.pid)
            self.watcher.watch(job.key, proc)
            job.tasks.append(proc)
        except (OSError, subprocess.SubprocessError) as exc:  # (the wrapper's spawn)
            for stream in proc.streams:
                close_stream(stream)
            self._not_started(job, exc)
        finally:
            self.watcher.sync_spawner()
            if deferred.pmi is not None:
                deferred.pmi.spawned(proc.rank)
            deferred.files.close()
            if deferred.stdin is not None:
                with contextlib.suppress(OSError):
                    os.close(deferred.stdin)
        return job

    def _fallback(self, deferred: Deferred) -> int:
        """The wrapper's spawn of a deferred task (bound to its cores, if any)."""
        saved = self.cpus if deferred.cores else None
        if deferred.pmi is not None:  # the wrapper (and so the task) inherits it
            deferred.pmi.inherit(deferred.proc.rank)
        try:
            return _spawn_wrapper(deferred.wrapper_argv, deferred.env, deferred.fds,
                                  deferred.cores)
        finally:
            if saved is not None:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, saved)

    def _spawn_as(self, account: Account, argv: list[str], env: Mapping[str, str],
                  fds: Mapping[int, int], pass_fds: tuple[int, ...] = ()) -> int:
        """Start the wrapper as ``account`` (see the module's docstring); its pid."""
        popen = subprocess.Popen(  # noqa: S603 (the wrapper; the job's command is "$@")
            argv, executable=SH, stdin=fds.get(0, subprocess.DEVNULL),
            stdout=fds.get(1, subprocess.DEVNULL), stderr=fds.get(2, subprocess.DEVNULL),
            env=env, cwd="/", close_fds=True, pass_fds=pass_fds, start_new_session=True,
            restore_signals=True,
            user=account.uid, group=account.gid, extra_groups=list(account.groups))
        self.watcher.popens[popen.pid] = popen
        return popen.pid


def _ask(link: SpawnerLink, path: str, prepared: Prepared, env: Mapping[str, str],
         fds: Mapping[int, int], pass_fds: tuple[int, ...], mark: str, prefix: str,
         cores: Iterable[int]) -> None:
    """Send the spawner the request to start the task of ``path`` (``fds``: task fd ->
    the worker's; ``pass_fds`` passed as they are); its answer is the link's to take."""
    given = dict(fds)
    given.update((fd, fd) for fd in pass_fds)
    link.request(marker=mark, prefix=prefix, cwd=os.path.abspath(prepared.cwd),
                 path=path, argv=prepared.argv, env=env, fds=given, cpus=cores)


def _spawn_wrapper(argv: list[str], env: Mapping[str, str], fds: Mapping[int, int],
                   cores: frozenset[int]) -> int:
    """Start a task's wrapper as the worker's user, given ``fds`` (task fd -> the
    worker's; stdin /dev/null unless given) and bound to ``cores`` if any; its pid."""
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd_no) for fd_no, fd in fds.items()]
    if cores:
        os.sched_setaffinity(0, cores)  # restored by the caller
    return os.posix_spawn(SH, argv, env, file_actions=actions, setsid=True,
                          setsigdef=_SIGDEF, setsigmask=())


def truncate_as(account: Account, paths: list[str]) -> None:
    """Create or truncate ``paths`` as ``account`` (a job's output files, opened by its
    user, never by root); ValueError naming the first that cannot be, as the job's error."""
    try:
        done = subprocess.run(  # noqa: S603 (a fixed script; the paths are arguments)
            [SH, "-c", TRUNCATE, "sh", *paths], stdin=subprocess.DEVNULL,
            capture_output=True, cwd="/", close_fds=True, check=False,
            user=account.uid, group=account.gid, extra_groups=list(account.groups))
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError(f"exec: cannot open the output files as {account.name}: {exc}") \
            from None
    if done.returncode:
        failed = done.stdout.decode("utf-8", "replace") or paths[0]
        raise ValueError(f"cannot open output file {failed!r} as user {account.name}")
