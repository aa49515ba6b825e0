"""Tasks as processes: spawning them under the wrapper, signalling, and noticing their end.

Each task runs as ``/bin/sh -c WRAPPER <marker> <cwd> <status-prefix> CMD...``
started with ``posix_spawn`` in its own session (process group = its pid),
stdin ``/dev/null``, signals reset to default; its stdout/stderr go to files
(docs/exec.md, "Real execution").  Nothing of a task depends on the worker,
so tasks outlive it.  :class:`Launcher` checks and spawns a job's share,
:func:`signal_tasks` signals their process groups, :class:`TaskWatcher`
holds a ``pidfd`` per running task so that an exit wakes the loop's
``poll()`` at once, and reaps the worker's own children.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import select
import signal
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from fluxes.domain.exec.adoption import marker
from fluxes.domain.exec.jobs import STREAMS, ExecJob, RunPlan, TaskProc, wait_result
from fluxes.domain.exec.layout import (
    base_environment,
    command_error,
    environment_overlay,
    expand_template,
    job_cwd,
    job_environment,
    job_name,
    shell_option,
    task_command,
    task_environment,
)
from fluxes.proc.exec_files import TaskFiles, close_stream, high_fd

SH = "/bin/sh"
#: The task wrapper: $1 cwd, $2 status file prefix, then the command.  Signals
#: the job may be killed with are caught (so the wrapper outlives the task and
#: records its status) and reset to default in the task; the subshell makes
#: even a shell builtin run as a separate process (dash execs the command in
#: it directly, so there is no extra fork).  ``true`` (not the special builtin
#: ``:``) creates the status file, so a failed redirection cannot end the shell.
WRAPPER = (
    "trap : HUP INT QUIT TERM USR1 USR2 ALRM\n"
    "d=$1 f=$2\n"
    "shift 2\n"
    'if cd -- "$d"; then ( "$@" ); s=$?; else s=126; fi\n'
    'true 2>/dev/null >"$f.$s"\n'
    'exit "$s"\n'
)
#: Signals reset to their default action in the wrapper (and so in the task).
_SIGDEF = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
#: How long a command lookup (PATH search) is trusted.
COMMAND_CACHE_S = 2.0
#: After a task exit wakes the loop, how long it waits for other exits to batch them.
EXIT_LINGER_MS = 2


class StartFailed(ValueError):
    """The job's command cannot be executed: the tasks end with exit ``code`` at once."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Prepared(NamedTuple):
    """A job's command, working directory and environment, checked before spawning."""

    argv: list[str]
    cwd: str
    env: dict[str, str]


def raise_fd_limit() -> None:
    """Every running task holds up to two open files in the worker: allow many."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass


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
        self._fixed = list(fds)
        self.pidfds: dict[int, tuple[tuple[int, int], TaskProc]] = {}
        self.woken: set[tuple[int, int]] = set()
        self.poller = select.poll()
        self.reset()

    def reset(self) -> None:
        """Close every pidfd and start a new poll set holding only the fixed fds."""
        for fd in self.pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pidfds = {}
        self.woken = set()
        self.poller = select.poll()
        for fd in self._fixed:
            self.poller.register(fd, select.POLLIN)

    def add(self, fd: int) -> None:
        """Also wake on ``fd`` becoming readable (until :meth:`reset`)."""
        self.poller.register(fd, select.POLLIN)

    def watch(self, key: tuple[int, int], task: TaskProc) -> None:
        """Get a pidfd for ``task`` so its exit wakes the loop (Linux >= 5.3).

        A task already gone is marked exited and its key woken; without
        pidfds the task is polled with the output files instead.
        """
        try:
            fd = os.pidfd_open(task.pid)
        except ProcessLookupError:
            task.exited = True  # already gone: look at once
            self.woken.add(key)
            return
        except (OSError, AttributeError):
            return
        task.pidfd = fd
        self.pidfds[fd] = (key, task)
        self.poller.register(fd, select.POLLIN)

    def unwatch(self, task: TaskProc) -> None:
        """Stop watching ``task`` and close its pidfd."""
        if task.pidfd is not None:
            self.pidfds.pop(task.pidfd, None)
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(task.pidfd)
            with contextlib.suppress(OSError):
                os.close(task.pidfd)
            task.pidfd = None

    def wait(self, timeout_ms: int) -> list[int]:
        """Wait up to ``timeout_ms`` (-1: until something happens); the other fds ready.

        Exited tasks are marked and their keys added to :attr:`woken`.  Tasks
        of a job tend to end together: when only exits woke the wait, a
        moment more lets one iteration (one write, one report) take them all.
        """
        events = self.poller.poll(timeout_ms)
        pidfds = self.pidfds
        if events and pidfds and all(fd in pidfds for fd, _e in events):
            events += self.poller.poll(EXIT_LINGER_MS)
        ready = []
        for fd, _event in events:
            watched = pidfds.get(fd)
            if watched is None:
                ready.append(fd)
                continue
            key, task = watched
            task.exited = True
            self.woken.add(key)
            self.unwatch(task)  # it stays readable: stop polling it
        return ready

    def reap(self, task: TaskProc) -> bool | None:
        """``waitpid`` one of our own wrappers: True if it ended (status set), False
        if it still runs, None if it is not our child after all (reaped elsewhere)."""
        try:
            pid, ws = os.waitpid(task.pid, os.WNOHANG)
        except ChildProcessError:
            task.own = False
            self.children.discard(task.pid)
            return None
        if pid == 0:
            task.exited = False
            return False
        self.children.discard(task.pid)
        task.status, task.code = wait_result(ws)
        self.reaped[task.pid] = (task.status, task.code)
        return True

    def reap_strays(self, claimed: Iterable[int]) -> None:
        """Reap our children that no job claims (their status files stay)."""
        for pid in list(self.children - set(claimed)):
            try:
                done, _ws = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)

    def close(self) -> None:
        """Close the pidfds."""
        for fd in self.pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pidfds = {}


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
        self._commands: dict[tuple[str, str | None, str], tuple[float, str | None]] = {}

    def _command_error(self, argv0: str, path: str | None, cwd: str) -> str | None:
        """:func:`command_error`, remembered for a moment (a PATH search costs ~10 stats)."""
        key = (argv0, path, cwd)
        now = time.monotonic()
        hit = self._commands.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if len(self._commands) > 1024:
            self._commands.clear()
        problem = command_error(argv0, path, cwd)
        self._commands[key] = (now + COMMAND_CACHE_S, problem)
        return problem

    def prepare(self, spec: Mapping[str, Any]) -> Prepared:
        """The job's command, cwd and environment; ValueError (or :class:`StartFailed`)
        when a shell could not run it: a missing working directory, command not found."""
        argv = task_command(spec)
        cwd = job_cwd(spec) or self.default_cwd
        if not os.path.isdir(cwd):
            raise ValueError(f"cannot change directory to {cwd!r}: "
                             f"{os.strerror(errno.ENOENT)}")
        env = job_environment(self.base_env, environment_overlay(spec))
        problem = self._command_error(argv[0], env.get("PATH"), cwd)
        if problem:
            # as a shell (and flux's job shell) would: 127 not found, 126 not executable
            raise StartFailed(problem, 127 if problem.endswith(os.strerror(errno.ENOENT))
                              else 126)
        return Prepared(argv, cwd, env)

    def launch(self, job: ExecJob, plan: RunPlan, prepared: Prepared) -> None:
        """Spawn ``job``'s tasks on its rank (appended to ``job.tasks`` and watched).

        ValueError when a user output file cannot be opened (nothing runs);
        a failed spawn is the job's error, the tasks already started killed.
        """
        files = OutputFiles(first_rank=plan.first_rank)
        name = job_name(plan.spec)
        paths: dict[tuple[int, int], str] = {}
        templates = (plan.outputs.stdout, plan.outputs.stderr)
        try:
            for task in plan.share.tasks():
                for (_flag, _name, _suffix, fd_no), template in zip(STREAMS, templates,
                                                                     strict=True):
                    if template is not None:
                        path = os.path.join(prepared.cwd, expand_template(
                            template, jobid=job.id, name=name, taskid=task.rank,
                            rank=job.rank))
                        paths[(task.rank, fd_no)] = path
                        files.open(path)
        except OSError as exc:
            files.close()
            raise ValueError(f"cannot open output file {exc.filename!r}: "
                             f"{exc.strerror}") from None
        try:
            self._spawn_all(job, plan, prepared, files, paths)
        finally:
            files.close()

    def _spawn_all(self, job: ExecJob, plan: RunPlan, prepared: Prepared,
                   files: OutputFiles, paths: Mapping[tuple[int, int], str]) -> None:
        """Spawn every task; on failure kill what was started and record the error."""
        spec, share = plan.spec, plan.share
        gpu_affinity = shell_option(spec, "gpu-affinity")
        cpu_affinity = shell_option(spec, "cpu-affinity")
        saved = self.cpus if cpu_affinity in ("on", "per-task") and self.cpus else None
        try:
            for task in share.tasks():
                actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull,
                                                   os.O_RDONLY, 0)]
                proc = TaskProc(task.rank, 0, True)
                for flag, sname, suffix, fd_no in STREAMS:
                    user_path = paths.get((task.rank, fd_no))
                    if user_path is not None:
                        actions.append((os.POSIX_SPAWN_DUP2, files.fds[user_path], fd_no))
                    elif flag in job.forward:
                        fd = self.files.create(job, proc, sname, suffix)
                        actions.append((os.POSIX_SPAWN_DUP2, fd, fd_no))
                task_env = task_environment(prepared.env, jobid=job.id, layout=plan.layout,
                                            share=share, task=task, cwd=prepared.cwd,
                                            uri=self.uri, gpu_affinity=gpu_affinity)
                status_prefix = self.files.path(job.rank, job.id, task.rank, "st")
                wrapper_argv = ["sh", "-c", WRAPPER, marker(self.ns, job.rank, job.id, task.rank),
                                prepared.cwd, status_prefix, *prepared.argv]
                if saved is not None:
                    cores = self.cpus & set(task.cores if cpu_affinity == "per-task"
                                            else share.cores)
                    if cores:
                        os.sched_setaffinity(0, cores)
                try:
                    # The command is the job's own, run as the worker's user (a
                    # root worker refuses other users' jobs), without a shell
                    # parsing it: the wrapper passes it on as "$@".
                    proc.pid = os.posix_spawn(SH, wrapper_argv, task_env,
                                              file_actions=actions, setsid=True,
                                              setsigdef=_SIGDEF, setsigmask=())
                except OSError:
                    for stream in proc.streams:
                        close_stream(stream)
                    raise
                self.watcher.children.add(proc.pid)
                self.watcher.watch(job.key, proc)
                job.tasks.append(proc)
        except OSError as exc:
            job.error = f"exec: cannot start task: {exc.strerror or exc}"
            job.started = False
            signal_tasks(job.tasks, signal.SIGKILL)
            job.escalated = True
        finally:
            if saved is not None:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, saved)
