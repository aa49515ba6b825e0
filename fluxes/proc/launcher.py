"""``fluxes start``: a private instance on this machine, supervised.

The launcher brings up (unless given an existing Redis) its own
redis-server on a unix socket with AOF on, records the instance facts and
configuration in Redis, and runs every worker as a child process: ingest,
one job manager per partition, the scheduler, the job list, and one exec
worker per simulated node. A worker that dies is restarted (like systemd's
``Restart=always``); recovery is the workers' business, not the launcher's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluxes.config import InstanceConfig
from fluxes.domain.graph.table import recorded_table
from fluxes.domain.sched.inventory import Inventory
from fluxes.env import DEFAULT_NAMESPACE
from fluxes.errors import ConfigError, FluxesError
from fluxes.proc.lifetime import die_with_parent
from fluxes.proc.redis_server import RedisServer
from fluxes.proc.state_dir import fast_exec_dir, web_secret_file
from fluxes.store import acl
from fluxes.store.connection import connect
from fluxes.store.errors import Client
from fluxes.store.instance import InstanceURI, current_user, record_instance
from fluxes.store.keys import Keys
from fluxes.store.security import (
    ENV_CREDENTIALS,
    REDIS_DEFAULT_USER,
    Credentials,
    apply_credentials,
    generate_password,
    load_credentials,
    strip_password,
    url_credentials,
    with_userinfo,
    without_default_user,
    write_credentials,
)

#: Seconds a crashed worker waits before it is started again.
RESTART_DELAY = 0.5
#: Longest wait for a new instance to be usable before its command runs.
READY_TIMEOUT_S = 30.0


@dataclass
class WorkerSpec:
    """One supervised worker process."""

    name: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    down_since: float | None = None


@dataclass
class Launcher:
    """Starts, supervises and stops the processes of one instance."""

    state_dir: Path
    nodes: int = 1
    cores_per_node: int = 4
    gpus_per_node: int = 0
    config_text: str = ""
    redis_url: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    partitions: int = 1
    appendfsync: str = "everysec"
    workers: list[WorkerSpec] = field(default_factory=list)
    server: RedisServer | None = None
    uri: InstanceURI | None = None
    #: Password-protect the private redis-server and open its socket to other users.
    require_auth: bool = False
    #: The owner's credentials file, when Redis needs a password (see start()).
    credentials: Path | None = None
    #: Also run ``fluxes web`` on 127.0.0.1:web_port (``fluxes start --web``).
    web_port: int | None = None
    #: The ``[resource]`` table to use instead of the configuration's (a child instance: its R).
    resource_table: dict[str, Any] | None = None
    #: The exec workers this launcher runs (None: every rank); a child instance runs its
    #: other ranks' exec workers on their own nodes (fluxes/proc/nested.py).
    exec_ranks: list[int] | None = None
    #: Run (and record) the instance's services, not only exec workers.
    services: bool = True
    #: More instance facts to record (a child instance: its parent).
    facts: dict[str, str | int] = field(default_factory=dict)
    #: Also run a hot standby scheduler (``scheduler-standby``), which takes over the
    #: moment the leading one dies (docs/operations.md, "Hot standby scheduler").
    standby_scheduler: bool = False
    #: The exec workers' task-file directory (:meth:`task_dir`: by default on tmpfs when
    #: the state directory is on a disk, else ``STATE/exec``).
    exec_dir: Path | None = None
    #: exec_dir was chosen on tmpfs by this launcher: it goes when the instance stops.
    _fast_exec: bool = field(default=False, init=False, repr=False)

    def resources(self, config: InstanceConfig) -> dict[str, Any]:
        """The ``[resource]`` table: given, from the configuration, else N simulated nodes."""
        if self.resource_table is not None:
            return dict(self.resource_table)
        if config.resource:
            table = dict(config.resource)
            path = table.get("path")
            if isinstance(path, str) and path:
                # recorded for workers that may run in another directory
                table["path"] = os.path.abspath(path)
            # a graph is recorded itself (JGF), not its file: every worker sees it
            return recorded_table(table)
        if self.nodes < 1 or self.cores_per_node < 1 or self.gpus_per_node < 0:
            raise FluxesError("--nodes and --cores-per-node must be >= 1, --gpus-per-node >= 0")
        entry: dict[str, Any] = {"hosts": f"node[0-{self.nodes - 1}]" if self.nodes > 1
                                 else "node0", "cores": f"0-{self.cores_per_node - 1}"}
        if self.gpus_per_node:
            entry["gpus"] = f"0-{self.gpus_per_node - 1}"
        return {"config": [entry]}

    def nranks(self, resources: dict[str, Any]) -> int:
        """How many execution targets the inventory has (one exec worker each)."""
        return len(Inventory.from_table(resources))

    # ------------------------------------------------------------ bring-up

    def start(self) -> InstanceURI:
        """Start Redis (unless given) and every worker; return the instance URI."""
        config = InstanceConfig.from_toml(self.config_text)
        # exec workers alone (a child's other nodes) need not know the inventory
        resources = self.resources(config) if self.services else {}
        nranks = self.nranks(resources) if self.services else 0
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.redis_url is None:
            url = self._start_server()
        else:
            # the owner's credentials file may hold the shared Redis's password
            url = apply_credentials(self.redis_url)[0] or self.redis_url
        self.uri = InstanceURI(self._owner_credentials(url), self.namespace)
        if self.services:
            client = connect(url)
            try:
                self._record(client, config, resources)
            finally:
                client.close()
        self._define_workers(nranks)
        for spec in self.workers:
            self._spawn(spec)
        if self.services:
            self._wait_ready(url, nranks)
        return self.uri

    def _wait_ready(self, url: str, nranks: int, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the instance is usable: the scheduler has published its view of
        the resources and every exec worker has registered (as ``flux start`` runs
        its command only once the broker's modules are loaded). A worker that dies
        meanwhile, or the timeout, ends the wait: the supervisor and the command
        then see the instance as it is."""
        keys = Keys(self.namespace, self.partitions)
        client = connect(url)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if any(w.proc is not None and w.proc.poll() is not None for w in self.workers):
                    return
                pipe = client.pipeline(transaction=False)
                pipe.exists(keys.sched_status)
                pipe.hlen(keys.exec_registry)
                published, registered = pipe.execute()
                if published and registered >= nranks:
                    return
                time.sleep(0.05)
        finally:
            client.close()

    def _start_server(self) -> str:
        """Start the private redis-server; with ``require_auth``, protect it. Its URL."""
        redis_dir = self.state_dir / "redis"
        extra: list[str] = []
        if self.require_auth:
            acl_file = self._private_dirs(redis_dir) / "users.acl"
            # Users added earlier stay; the default user's line goes, so Redis
            # starts it without a password until we set one again below.
            old = acl_file.read_text() if acl_file.exists() else ""
            acl_file.write_text(without_default_user(old))
            acl_file.chmod(0o600)
            extra = ["--aclfile", str(acl_file)]
        self.server = RedisServer(redis_dir, appendonly=True, appendfsync=self.appendfsync,
                                  extra=extra)
        # Redis creates its data files with our umask: keep them owner-only
        # when other users can reach the directory (to get at the socket).
        mask = os.umask(0o077) if self.require_auth else None
        try:
            self.server.start()
        finally:
            if mask is not None:
                os.umask(mask)
        url = self.server.url
        if not self.require_auth:
            return url
        password = self._owner_password()
        client = connect(url)  # the socket is still owner-only (mode 0700)
        try:
            acl.protect_default_user(client, password)
            warning = acl.persist(client)
        finally:
            client.close()
        if warning:
            raise FluxesError(warning)
        # only now may others reach the socket: every connection must authenticate
        self.server.socket.chmod(0o777)
        return with_userinfo(url, REDIS_DEFAULT_USER, password)

    def _private_dirs(self, redis_dir: Path) -> Path:
        """Directories others may pass through (to the socket) but not list or read."""
        self.state_dir.chmod(0o711)
        redis_dir.mkdir(exist_ok=True)
        redis_dir.chmod(0o711)
        for name in ("logs", "exec"):
            (self.state_dir / name).mkdir(mode=0o700, exist_ok=True)
            (self.state_dir / name).chmod(0o700)
        return redis_dir

    def _owner_password(self) -> str:
        """The password of the owner's credentials file from an earlier start, else a new one."""
        path = self.state_dir / "credentials.json"
        try:
            password = url_credentials(load_credentials(path).uri)[1]
        except (ConfigError, ValueError):
            password = None
        return password or generate_password()

    def _owner_credentials(self, url: str) -> str:
        """Keep a password out of command lines: write it to the owner's credentials file.

        Workers get the URL without the password on their command line (which
        every local user can read) and the file through $FLUXES_CREDENTIALS.
        Returns the URL to show.
        """
        if url_credentials(url)[1] is None:
            return url
        self.credentials = self.state_dir / "credentials.json"
        write_credentials(self.credentials, Credentials(str(InstanceURI(url, self.namespace))))
        return strip_password(url)

    def _record(self, client: Client, config: InstanceConfig,
                resources: dict[str, Any]) -> None:
        record_instance(client, self.namespace, self.partitions, config, resources,
                        current_user(), {"supervisor_pid": os.getpid(),
                                         "supervisor_host": os.uname().nodename,
                                         "state_dir": str(self.state_dir), **self.facts})

    def _define_workers(self, nranks: int) -> None:
        uri = str(self.uri)
        base = [sys.executable, "-m", "workers"]
        specs: list[WorkerSpec] = []
        if self.services:
            specs += [WorkerSpec("ingest", [*base, "ingest", "--uri", uri]),
                      WorkerSpec("scheduler", [*base, "scheduler", "--uri", uri]),
                      WorkerSpec("job-list", [*base, "job-list", "--uri", uri]),
                      WorkerSpec("accounting", [*base, "accounting", "--uri", uri])]
            if self.standby_scheduler:
                specs.append(WorkerSpec("scheduler-standby", [*base, "scheduler", "--uri", uri]))
        for p in range(self.partitions if self.services else 0):
            specs.append(WorkerSpec(f"job-manager-{p}", [*base, "job-manager", "--uri", uri,
                                                         "--partition", str(p)]))
        exec_dir = self.task_dir()
        for rank in range(nranks) if self.exec_ranks is None else self.exec_ranks:
            specs.append(WorkerSpec(f"exec-{rank}", [*base, "exec", "--uri", uri,
                                                     "--ranks", str(rank),
                                                     "--state-dir", str(exec_dir)]))
        if self.web_port is not None and self.services:
            specs.append(self._web_spec(uri))
        self.workers = specs

    def task_dir(self) -> Path:
        """The exec workers' task-file directory: ``exec_dir`` if given; else, unless
        jobs run as their users (``require_auth``: their directories' permissions are
        the state directory's business), a private directory on tmpfs when the state
        directory is on a disk (:func:`fluxes.proc.state_dir.fast_exec_dir`), removed
        when the instance stops (its tasks are killed then); else ``STATE/exec``."""
        if self.exec_dir is None:
            fast = None if self.require_auth else fast_exec_dir(self.state_dir)
            self._fast_exec = fast is not None
            self.exec_dir = fast if fast is not None else self.state_dir / "exec"
        return self.exec_dir

    def _web_spec(self, uri: str) -> WorkerSpec:
        """``fluxes web`` on 127.0.0.1:``web_port``; without a secret in the configuration,
        with one made for (and kept in) the state directory."""
        args = [sys.executable, "-m", "fluxes.cli.main", "--uri", uri, "web",
                "--listen", f"127.0.0.1:{self.web_port}"]
        web = InstanceConfig.from_toml(self.config_text).web
        if not (web.secret or web.secret_file):
            path = web_secret_file(self.state_dir, generate_password())
            args += ["--secret-file", str(path)]
        return WorkerSpec("web", args)

    def _spawn(self, spec: WorkerSpec) -> None:
        # A stable name per slot lets a restarted leader take its own lease back
        # at once instead of waiting for it to expire.
        if "--name" not in spec.args:
            spec.args = [*spec.args, "--name", f"{spec.name}@{os.uname().nodename}"]
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{spec.name}.log", "ab") as log:
            env = dict(os.environ, FLUXES_LOG_FORMAT="json")
            if spec.name.startswith("exec-"):
                env["FLUXES_EXEC_KILL_ON_STOP"] = "1"  # a private instance ends with its jobs
            if self.credentials is not None:
                env[ENV_CREDENTIALS] = str(self.credentials)
            # A worker stops (SIGTERM, cleanly) when its supervisor dies: nobody
            # would restart it, and `fluxes stop` could not find it.
            spec.proc = subprocess.Popen(spec.args, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, env=env, start_new_session=True,
                                         preexec_fn=die_with_parent())  # noqa: PLW1509
        spec.down_since = None

    # ------------------------------------------------------------ supervision

    def supervise_once(self) -> None:
        """Restart workers that exited (after a short delay)."""
        now = time.monotonic()
        for spec in self.workers:
            if spec.proc is None or spec.proc.poll() is None:
                continue
            if spec.down_since is None:
                spec.down_since = now
            elif now - spec.down_since >= RESTART_DELAY:
                spec.restarts += 1
                self._spawn(spec)

    def worker(self, name: str) -> WorkerSpec:
        """The supervised worker called ``name`` (e.g. ``scheduler``, ``exec-3``)."""
        for spec in self.workers:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every worker (SIGTERM, then SIGKILL) and the private Redis."""
        for spec in self.workers:
            if spec.proc is not None and spec.proc.poll() is None:
                spec.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for spec in self.workers:
            if spec.proc is None:
                continue
            try:
                spec.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                spec.proc.kill()
                spec.proc.wait()
        if self.server is not None:
            self.server.stop()
        if self._fast_exec and self.exec_dir is not None:
            shutil.rmtree(self.exec_dir, ignore_errors=True)


def _exit_code(returncode: int) -> int:
    """A shell's convention: 128 + N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_command(launcher: Launcher, command: Sequence[str]) -> int:
    """Run ``command`` inside the started instance; supervise until it exits."""
    assert launcher.uri is not None
    env = dict(os.environ, FLUXES_URI=str(launcher.uri))
    if launcher.credentials is not None:
        env[ENV_CREDENTIALS] = str(launcher.credentials)
    # Commands inside the instance find this fluxes first, as under flux start.
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bindir, *[p for p in env.get("PATH", "").split(os.pathsep)
                                              if p and p != bindir]])
    proc = subprocess.Popen(list(command), env=env)
    try:
        while True:
            try:
                return _exit_code(proc.wait(timeout=0.2))
            except subprocess.TimeoutExpired:
                launcher.supervise_once()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return _exit_code(proc.wait())
