"""Which Redis errors are a stall (waited out, never the input's fault) and how each is
told (fluxes/store/reachability.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

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
    "LOADING Redis is loading the dataset in memory",
    "NOAUTH Authentication required."])
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


def test_a_runaway_script_is_killed_and_a_function_is_not(real_redis: redis.Redis) -> None:
    """SCRIPT KILL ends an EVAL that wrote nothing (never ours); a function keeps running
    (ours, or the instance owner's own)."""
    import threading

    from fluxes.drill.faults import stall
    from fluxes.store.reachability import kill_runaway

    assert not kill_runaway(real_redis)  # nothing runs
    before = real_redis.config_get("busy-reply-threshold")["busy-reply-threshold"]
    real_redis.config_set("busy-reply-threshold", "100")
    other = redis.Redis(connection_pool=real_redis.connection_pool)
    outcome: list[str] = []

    def run(call: Callable[[], object]) -> threading.Thread:
        def target() -> None:
            try:
                call()
                outcome.append("ended")
            except redis.ResponseError as exc:
                outcome.append(str(exc))
        thread = threading.Thread(target=target)
        thread.start()
        return thread

    def busy() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                other.ping()
            except redis.ResponseError as exc:
                assert is_stall(exc)
                return
            time.sleep(0.05)
        raise AssertionError("Redis never answered BUSY")

    try:
        thread = run(lambda: real_redis.eval("while true do end", 0))
        busy()
        assert kill_runaway(other)
        thread.join(5)
        assert outcome and "killed" in outcome[0].lower(), outcome
        outcome.clear()
        thread = run(lambda: stall(real_redis, 1.0))
        busy()
        assert not kill_runaway(other)
        thread.join(5)
        assert outcome == ["ended"]
    finally:
        other.config_set("busy-reply-threshold", before)
        other.execute_command("FUNCTION", "DELETE", "fluxes_drill_stall")


def test_every_script_loads_as_a_function_of_its_own(real_redis: redis.Redis) -> None:
    from fluxes.store import scripts

    names = scripts.script_names()
    assert "commit" in names and "lease" in names
    scripts.load_all(real_redis)
    scripts.load_all(real_redis)  # again: the same code, nothing changes
    libraries = {lib[b"library_name"].decode()
                 for lib in real_redis.execute_command("FUNCTION", "LIST")}
    for name in names:
        assert scripts.function_name(scripts.lua_source(name)) in libraries, name
