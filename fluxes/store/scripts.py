"""Our Lua steps (``fluxes/store/lua``, each with a KEYS/ARGV header) as Redis functions.

Nobody runs Lua of their own: ``EVAL``, ``EVALSHA`` and ``SCRIPT`` are denied to
every identity a user can obtain (docs/security.md), so a user cannot stall Redis
with a busy loop. Our steps are Redis functions instead, called with ``FCALL``:
each script is one library, named after the SHA-1 of its text
(``fx_<sha1>``, one function of the same name), loaded with ``FUNCTION LOAD`` by
the instance owner at start (:func:`load_all`) or, after an upgrade, by the first
worker that calls a function the server does not know yet. Libraries of
different versions live side by side, so old and new workers can run together
during an upgrade; a library is only ever replaced by its own code. Functions persist with the
data (AOF, RDB) and reach replicas.

A child instance's identity may ``FCALL`` them (its workers run our steps on
its keys, with its own ACL key permissions applied to every command inside
them) but may not load or delete any.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import redis


def script_names() -> list[str]:
    """Every script of ``fluxes/store/lua`` (a new one is a function without more ado)."""
    folder = resources.files("fluxes.store").joinpath("lua")
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".lua"))


@functools.cache
def lua_source(name: str) -> str:
    """The text of the Lua script ``name`` (without the ``.lua`` suffix)."""
    return resources.files("fluxes.store").joinpath("lua", f"{name}.lua").read_text()


@functools.lru_cache(maxsize=64)
def function_name(source: str | bytes) -> str:
    """The function (and library) name of a script's text: ``fx_<sha1>`` (kept: the hot
    path calls every commit by name, and hashing commit.lua's text each time cost ~10 us)."""
    raw = source.encode() if isinstance(source, str) else source
    return f"fx_{hashlib.sha1(raw).hexdigest()}"


#: A line of a script ending what runs once, when its library loads (constants and
#: helpers, built once rather than on every call); the lines after it are the function.
PER_CALL = "-- per call --"


def library_code(source: str | bytes) -> str:
    """The ``FUNCTION LOAD`` text of a script: one library holding it as one function,
    whose KEYS and ARGV are the function's arguments (the lines after a
    :data:`PER_CALL` line, those before it running once at load)."""
    text = source.decode() if isinstance(source, bytes) else source
    name = function_name(source)
    head, mark, body = text.partition(f"\n{PER_CALL}\n")
    if not mark:
        head, body = "", text
    return (f"#!lua name={name}\n{head}\n"
            f"redis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n")


def is_missing(exc: BaseException) -> bool:
    """True for the error of an FCALL of a function the server does not have."""
    return isinstance(exc, redis.ResponseError) and "Function not found" in str(exc)


def load(client: redis.Redis, source: str | bytes) -> None:
    """Load a script's library (the same again when the server has it already)."""
    load_via(client.execute_command, source)


def load_via(call: Callable[..., Any], source: str | bytes) -> None:
    """:func:`load` through ``call`` (a client's or a connection's command function).

    REPLACE: a library's name is the digest of its code, so replacing one is loading
    the same code again, and a cluster client sends it to every primary, some of
    which may have it already."""
    call("FUNCTION", "LOAD", "REPLACE", library_code(source))


def load_all(client: redis.Redis) -> None:
    """Load every library of this version (the instance owner, at start or upgrade)."""
    for name in script_names():
        load(client, lua_source(name))


def fcall_command(source: str | bytes, keys: Sequence[Any], args: Sequence[Any]
                  ) -> tuple[Any, ...]:
    """The FCALL of a script's function with ``keys`` and ``args``."""
    return ("FCALL", function_name(source), len(keys), *keys, *args)


class Function:
    """A script of ours called as a function; the library loaded when the server lacks it."""

    def __init__(self, client: redis.Redis, name: str) -> None:
        self.client = client
        self.source = lua_source(name)
        self.name = function_name(self.source)

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """FCALL the function with ``keys`` and ``args``."""
        command = fcall_command(self.source, keys, args)
        try:
            return self.client.execute_command(*command)
        except redis.ResponseError as exc:
            if not is_missing(exc):
                raise
        load(self.client, self.source)
        return self.client.execute_command(*command)
