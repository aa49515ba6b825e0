"""What a drill kills: its own private instance, or one already running (``--uri``).

Both answer the same questions: which workers of a kind may be killed, how
to kill one, and what to do while waiting (the private instance's launcher
restarts what died; a running instance has its own supervisor: ``fluxes
start --detach``, systemd or Kubernetes).
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Protocol

import orjson

from fluxes.errors import FluxesError
from fluxes.instance import Instance
from fluxes.launcher import Launcher


def _prefix(kind: str) -> str:
    return "exec-" if kind == "exec" else kind


class Target(Protocol):
    """An instance a drill runs on."""

    inst: Instance
    #: True when the drill may kill and restart redis-server.
    owns_redis: bool

    def supervise(self) -> None:
        """Restart what died, where the drill is the supervisor (else nothing)."""

    def killable(self, kind: str) -> list[str]:
        """Names of the live workers of ``kind`` the drill can SIGKILL."""

    def kill_worker(self, name: str) -> None:
        """SIGKILL one worker (named by :meth:`killable`)."""

    def kill_redis(self, down: float) -> Instance:
        """SIGKILL redis-server, restart it after ``down`` seconds; a new connection."""

    def close(self) -> None:
        """Stop what the drill started."""


class OwnInstance:
    """A private instance the drill starts, supervises and stops."""

    owns_redis = True

    def __init__(self, nodes: int, cores_per_node: int, appendfsync: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="fluxes-drill-")
        self.launcher = Launcher(state_dir=Path(self._tmp.name), nodes=nodes,
                                 cores_per_node=cores_per_node, appendfsync=appendfsync)
        try:
            uri = self.launcher.start()
        except BaseException:
            self._tmp.cleanup()
            raise
        self.inst = Instance.connect(str(uri))

    def supervise(self) -> None:
        """Restart exited workers (the launcher's one supervision pass)."""
        self.launcher.supervise_once()

    def killable(self, kind: str) -> list[str]:
        """The launcher's workers of ``kind`` that are running."""
        return [w.name for w in self.launcher.workers if w.name.startswith(_prefix(kind))
                and w.proc is not None and w.proc.poll() is None]

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker and reap it, so the next pass restarts it."""
        proc = self.launcher.worker(name).proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill_redis(self, down: float) -> Instance:
        """SIGKILL the private redis-server and start it again on its AOF."""
        assert self.launcher.server is not None
        self.launcher.server.kill()
        time.sleep(down)
        self.launcher.server.start()
        self.inst = Instance.connect(str(self.launcher.uri))
        return self.inst

    def close(self) -> None:
        """Stop the instance and remove its directory."""
        try:
            self.launcher.stop()
        finally:
            self._tmp.cleanup()


class RunningInstance:
    """An instance started elsewhere: workers found in its registry, restarted by its own
    supervisor. Only workers on this host can be killed (by pid), never Redis."""

    owns_redis = False

    def __init__(self, uri: str) -> None:
        self.inst = Instance.connect(uri)
        self.host = socket.gethostname()

    def _registry(self) -> dict[str, dict[str, object]]:
        out = {}
        for name, raw in self.inst.redis.hgetall(self.inst.keys.workers).items():
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out[name.decode()] = rec
        return out

    def supervise(self) -> None:
        """Nothing: the instance's own supervisor restarts killed workers."""

    def killable(self, kind: str) -> list[str]:
        """Registered workers of ``kind`` running on this host."""
        names = []
        for name, rec in self._registry().items():
            pid = rec.get("pid")
            if rec.get("kind") != kind or rec.get("host") != self.host \
                    or not isinstance(pid, int):
                continue
            try:
                os.kill(pid, 0)
            except (ProcessLookupError, PermissionError):
                continue  # gone (a stale entry), or not ours to kill
            names.append(name)
        return sorted(names)

    def kill_worker(self, name: str) -> None:
        """SIGKILL the registered pid (if it is still running)."""
        pid = self._registry().get(name, {}).get("pid")
        if isinstance(pid, int):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_redis(self, down: float) -> Instance:
        """Refused: the drill did not start this Redis and could not restart it."""
        raise FluxesError("--kill redis needs the drill's own instance (drop --uri)")

    def close(self) -> None:
        """Nothing to stop: the instance is not the drill's."""
