"""Running a private redis-server (for ``fluxes start`` and the tests).

The server listens on a unix socket inside its own directory (no TCP port
unless asked), keeps its data there, and is stopped with SHUTDOWN so the
append-only file is flushed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from fluxes.errors import FluxesError
from fluxes.proc.lifetime import die_with_parent
from fluxes.store.connection import no_retry


class RedisServerError(FluxesError):
    """redis-server is missing or would not start."""


def redis_server_binary() -> str | None:
    """Path of the redis-server executable, or None when it is not installed."""
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.path.exists(p)),
        None,
    )


class RedisServer:
    """A redis-server child process serving a unix socket in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], *, appendonly: bool = True,
                 appendfsync: str = "everysec", port: int = 0,
                 extra: list[str] | None = None) -> None:
        self.dir = Path(directory)
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.port = port
        self.extra = list(extra or [])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        """The unix socket path."""
        return self.dir / "redis.sock"

    @property
    def url(self) -> str:
        """A URL clients can connect with."""
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        binary = redis_server_binary()
        if binary is None:
            raise RedisServerError("redis-server is not installed "
                                   "(apt-get install redis-server)")
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--unixsocket", str(self.socket), "--unixsocketperm", "700",
            "--dir", str(self.dir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", str(self.dir / "redis.log"), "--protected-mode", "yes",
            # Small stream nodes: Redis preallocates a node's listpack to this
            # size, and most job eventlogs hold only ten short events
            # (measured: 5.1 KB per job at the default 4096, 1.7 KB at 512; held jobs: 2,171
            # bytes of Redis each at 512, 1,966 at 256, fluxes bench memory --jobs 20000).
            "--stream-node-max-bytes", "256",
            # Blocked clients time out only at the server's hz; at the default
            # 10 a BLOCK 20 returns after ~100 ms, which delays worker timers.
            "--hz", "100",
            # Our steps are short functions: after this long Redis answers others BUSY,
            # and workers SCRIPT KILL a runaway script (never ours) that wrote nothing.
            "--busy-reply-threshold", "5000",
            *self.extra,
        ]
        # SIGTERM when its starter dies: redis-server then shuts down cleanly
        # (an AOF is fsynced), rather than lingering as an orphan.
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=die_with_parent())  # noqa: PLW1509
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RedisServerError(f"redis-server exited at start; see {self.dir}/redis.log")
            if self.socket.exists():
                try:
                    if redis.Redis(unix_socket_path=str(self.socket)).ping():
                        return self
                except redis.ConnectionError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise RedisServerError(f"redis-server did not answer within {timeout}s")

    def client(self) -> redis.Redis:
        """A new client of this server (bytes responses)."""
        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=None,
                           retry=no_retry())

    def kill(self) -> None:
        """SIGKILL the server (recovery drills)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down cleanly (flushing the AOF), then make sure it is gone."""
        if not self.proc or self.proc.poll() is not None:
            return
        # SIGTERM makes redis-server shut down cleanly (AOF flushed and fsynced),
        # without a client that would retry its dropped connection.
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
