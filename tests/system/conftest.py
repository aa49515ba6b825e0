"""System-test fixtures: a real instance (redis-server + worker processes) per module."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluxes.proc.launcher import Launcher
from fluxes.proc.redis_server import redis_server_binary


def need_redis() -> None:
    """Skip without redis-server, except under CI where it must be there."""
    import os

    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI is set")
        pytest.skip("redis-server is not installed")


@contextlib.contextmanager
def running_instance(**options: Any) -> Iterator[Launcher]:
    """A private instance (2 nodes x 4 cores unless ``options`` say otherwise, a 2 s
    kill grace), every worker a real process; stopped and removed afterwards."""
    need_redis()
    settings: dict[str, Any] = {"nodes": 2, "cores_per_node": 4,
                                "config_text": '[exec]\nkill-timeout = "2s"\n', **options}
    with tempfile.TemporaryDirectory(prefix="fluxes-sys-") as tmp:
        inst = Launcher(state_dir=Path(tmp), **settings)
        inst.start()
        try:
            yield inst
        finally:
            inst.stop()


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """A private instance: 2 nodes x 4 cores, every worker a real process."""
    with running_instance() as inst:
        yield inst


@pytest.fixture
def uri(launcher: Launcher) -> str:
    """The instance URI for ``fluxes --uri``."""
    return str(launcher.uri)
