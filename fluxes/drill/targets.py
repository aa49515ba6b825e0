"""What a drill kills: its own private instance, or one already running (``--uri``).

Both answer the same questions: which workers of a kind may be killed, how
to kill one, and what to do while waiting (the private instance's launcher
restarts what died; a running instance has its own supervisor: ``fluxes
start --detach``, systemd or Kubernetes).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import orjson

from fluxes.errors import FluxesError
from fluxes.proc.launcher import Launcher
from fluxes.store.instance import Instance

#: A heartbeat older than this means the worker is gone (workers beat every 2 s).
STALE_S = 10.0


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

    def problems(self, planned: Mapping[str, int]) -> list[str]:
        """Workers that are down or died more often than the drill killed them
        (``planned``: kills per worker name), one line each."""

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
        return self._restart_redis()

    def _restart_redis(self) -> Instance:
        assert self.launcher.server is not None
        self.launcher.server.start()
        self.inst = Instance.connect(str(self.launcher.uri))
        return self.inst

    def snapshot_aof(self) -> Path:
        """Copy the private Redis's AOF directory as it is now (what a machine crash
        under ``appendfsync everysec`` could leave on disk); where the copy is."""
        assert self.launcher.server is not None
        source = self.launcher.server.dir / "appendonlydir"
        copy = Path(self._tmp.name) / "aof-snapshot"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        return copy

    def kill_redis_losing(self, snapshot: Path) -> Instance:
        """SIGKILL redis-server and restart it on the AOF ``snapshot`` taken earlier: every
        write acknowledged since is gone, as after a crash inside the fsync window."""
        assert self.launcher.server is not None
        self.launcher.server.kill()
        target = self.launcher.server.dir / "appendonlydir"
        shutil.rmtree(target)
        shutil.copytree(snapshot, target)
        return self._restart_redis()

    def problems(self, planned: Mapping[str, int]) -> list[str]:
        """Launcher workers (and Redis) that are not running, or restarted more often than
        the drill killed them."""
        out = []
        server = self.launcher.server
        if server is not None and (server.proc is None or server.proc.poll() is not None):
            out.append("redis-server is not running")
        for spec in self.launcher.workers:
            code = spec.proc.poll() if spec.proc is not None else None
            unplanned = spec.restarts - planned.get(spec.name, 0)
            if spec.proc is None or code is not None:
                out.append(f"worker {spec.name} is not running (exit status {code}"
                           f"{self._last_words(spec.name)})")
            elif unplanned > 0:
                out.append(f"worker {spec.name} died {unplanned} time(s) besides the "
                           f"drill's kills{self._last_words(spec.name)}")
        return out

    def _last_words(self, name: str) -> str:
        """The last line of a worker's log, as ``; last log line: ...`` ("" if none): the
        drill removes the logs with its instance, so a report has to carry it."""
        try:
            with open(self.launcher.state_dir / "logs" / f"{name}.log", "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 4096))
                lines = log.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return f"; last log line: {lines[-1][-300:]}" if lines else ""

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

    def problems(self, planned: Mapping[str, int]) -> list[str]:
        """Registered workers whose heartbeat is stale (any host), and kinds with none."""
        now = time.time()
        out = []
        kinds = set()
        for name, rec in sorted(self._registry().items()):
            kind = rec.get("kind")
            beat = rec.get("heartbeat")
            if not isinstance(beat, int | float):
                continue
            if now - beat <= STALE_S:
                kinds.add(kind)
            else:
                out.append(f"worker {name} ({kind} on {rec.get('host')}, pid {rec.get('pid')}) "
                           f"sent no heartbeat for {now - beat:.0f} s")
        for kind in ("ingest", "job-manager", "scheduler", "job-list", "exec"):
            if kind not in kinds:
                out.append(f"no {kind} worker has a fresh heartbeat")
        return out

    def close(self) -> None:
        """Nothing to stop: the instance is not the drill's."""
