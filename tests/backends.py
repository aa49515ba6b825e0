"""The two backends every store contract runs on: one abstract test class, two subclasses.

A store test module defines ``class SomethingContract`` with tests taking a
``client`` fixture, then ``class TestFakeRedis(SomethingContract, OnFakeRedis)``
and ``class TestRealRedis(SomethingContract, OnRealRedis)``.
"""

from __future__ import annotations

import pytest
import redis


class OnFakeRedis:
    """Runs the contract's tests against fakeredis (with Lua)."""

    @pytest.fixture
    def client(self, fake_redis: redis.Redis) -> redis.Redis:
        return fake_redis


class OnRealRedis:
    """Runs the contract's tests against a private redis-server."""

    @pytest.fixture
    def client(self, real_redis: redis.Redis) -> redis.Redis:
        return real_redis
