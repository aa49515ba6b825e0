"""Loads the Lua scripts shipped in ``fluxes/store/lua`` (each starts with a KEYS/ARGV header)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def lua_source(name: str) -> str:
    """The text of the Lua script ``name`` (without the ``.lua`` suffix)."""
    return resources.files("fluxes.store").joinpath("lua", f"{name}.lua").read_text()
