"""Stream entries in tests: raw messages in (dicts, on or off the protocol), dicts out.

The workers only speak typed messages (:mod:`fluxes.messages`); tests that
play a worker's peer write plain dicts, forged or odd ones included, and look
at what was sent as dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
import orjson

from fluxes import messages as proto


def entry(msgs: Iterable[Mapping[str, Any]], epoch: int = 0) -> dict[bytes, bytes]:
    """The fields of a stream entry carrying ``msgs`` exactly as given."""
    # json, not orjson: a test may well hold an int past 64 bits
    return {proto.FIELD: json.dumps({"e": epoch, "m": list(msgs)}).encode()}


def messages(fields: Mapping[bytes, bytes]) -> list[dict[str, Any]]:
    """The messages of an entry as sent (fields equal to their default left out)."""
    out = orjson.loads(fields[proto.FIELD])["m"]
    assert isinstance(out, list)
    return out


def epoch_of(fields: Mapping[bytes, bytes]) -> int:
    """The epoch an entry carries."""
    return int(orjson.loads(fields[proto.FIELD]).get("e", 0))


def full(channel: proto.Channel[Any], fields: Mapping[bytes, bytes]) -> list[dict[str, Any]]:
    """The messages of an entry of ``channel``, decoded as its reader does, as dicts
    with every field (defaults included) and the type in ``t``."""
    _epoch, msgs = proto.decode_entry(channel, fields)
    return [{"t": type(m).__struct_config__.tag, **msgspec.structs.asdict(m)} for m in msgs]
