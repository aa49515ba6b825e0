"""Shared benchmark plumbing: a private redis-server, timers, and figure printing."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fluxes.proc.redis_server import RedisServer
from fluxes.store.errors import Client


@contextlib.contextmanager
def private_redis(appendfsync: str = "everysec") -> Iterator[tuple[RedisServer, Client]]:
    """A throw-away redis-server (AOF on, as an instance runs) and a client."""
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        server = RedisServer(Path(tmp) / "redis", appendonly=True, appendfsync=appendfsync)
        server.start()
        try:
            yield server, server.client()
        finally:
            server.stop()


class Stopwatch:
    """Elapsed seconds since creation (monotonic)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        """Seconds so far."""
        return time.perf_counter() - self.start


@contextlib.contextmanager
def private_instance(nodes: int, cores_per_node: int) -> Iterator[tuple[Any, str]]:
    """A private instance (``fluxes start``'s) in a temporary directory for one bench:
    its launcher and URI, stopped and removed afterwards."""
    from fluxes.proc.launcher import Launcher

    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=nodes, cores_per_node=cores_per_node)
        uri = launcher.start()
        try:
            yield launcher, str(uri)
        finally:
            launcher.stop()


def used_memory(client: Client) -> int:
    """Redis's used_memory in bytes."""
    return int(client.info("memory")["used_memory"])


def report(figures: dict[str, Any], as_json: bool) -> None:
    """Print the figures as one JSON object, or as aligned lines."""
    if as_json:
        import orjson

        print(orjson.dumps(figures).decode())
        return
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict)
                                                     for v in value.values()):
            # a table, e.g. the hand-offs: one line per row
            print(key)
            inner = max(len(str(k)) for k in value)
            for name, row in value.items():
                cells = "  ".join(f"{k}={v}" for k, v in row.items())
                print(f"  {name:<{inner}}  {cells}")
            continue
        if isinstance(value, float):
            text = f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
        else:
            text = str(value)
        print(f"{key:<{width}}  {text}")
