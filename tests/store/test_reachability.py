"""Which Redis errors are a stall (waited out, never the input's fault) and how each is
told (fluxes/store/reachability.py)."""

from __future__ import annotations

import pytest
import redis

from fluxes.cli.util import _describe
from fluxes.store.reachability import explain, is_stall, reply_text

PIPELINE = ("Command # 1 (XADD {fx}:submit:root * d {\"t\":\"submit\") of pipeline caused "
            "error: ")


@pytest.mark.parametrize("reply", [
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "MISCONF Errors writing to the AOF file: No space left on device",
    "LOADING Redis is loading the dataset in memory"])
def test_stall_replies_are_a_stall_alone_or_in_a_pipeline(reply: str) -> None:
    assert is_stall(redis.ResponseError(reply))
    assert is_stall(redis.ResponseError(PIPELINE + reply))
    assert reply_text(redis.ResponseError(PIPELINE + reply)) == reply


def test_other_errors_are_not() -> None:
    assert not is_stall(redis.ResponseError("WRONGTYPE Operation against a key"))
    assert not is_stall(redis.ResponseError(PIPELINE + "NOSCRIPT No matching script"))
    assert not is_stall(ValueError("BUSY"))
    assert is_stall(redis.ConnectionError("Connection refused"))
    assert is_stall(redis.AuthenticationError("WRONGPASS invalid username-password pair"))


def test_each_is_told_in_one_line() -> None:
    assert "another password" in explain(redis.AuthenticationError(
        "WRONGPASS invalid username-password pair or user is disabled."))
    oom = _describe(redis.ResponseError(
        PIPELINE + "OOM command not allowed when used memory > 'maxmemory'."))
    assert oom.startswith("Redis is full (maxmemory reached)") and "\n" not in oom
    assert "nothing was written" in oom
    assert "disk" in explain(redis.ResponseError("MISCONF Errors writing to the AOF file"))


def test_what_redis_py_names_by_class_is_known_by_its_code() -> None:
    """redis-py turns some codes into classes and drops them from the text (OOM)."""
    from redis.exceptions import OutOfMemoryError

    oom = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
    assert is_stall(oom)
    assert explain(oom).startswith("Redis is full")
