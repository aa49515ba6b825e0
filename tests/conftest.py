"""Shared fixtures: a private redis-server on a unix socket, and fakeredis.

A missing redis-server skips the tests that need it, except under CI
(the CI variable is set), where it fails them: CI must test the real thing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
import redis

from fluxes.domain.liveness import AnswerClock
from fluxes.proc.redis_server import RedisServer, redis_server_binary
from fluxes.store import reachability


@pytest.fixture(autouse=True)
def _fresh_answer_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own record of when Redis answered this process (a worker process
    keeps one for its life; in-process workers of one test must not see the waits and
    stalls of earlier tests as their own: fluxes/domain/liveness.py)."""
    monkeypatch.setattr(reachability, "CLOCK", AnswerClock())


def _need_redis_server() -> None:
    if redis_server_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed, and CI is set")
        pytest.skip("redis-server is not installed")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session, in a temp dir, on a unix socket."""
    _need_redis_server()
    with tempfile.TemporaryDirectory(prefix="fluxes-test-") as tmp:
        server = RedisServer(tmp, appendonly=False)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def real_redis(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session redis-server, flushed before each test."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def fake_redis() -> Iterator[redis.Redis]:
    """A fakeredis client (with Lua), fresh for each test."""
    import fakeredis

    client = fakeredis.FakeRedis()
    yield client
    client.close()
