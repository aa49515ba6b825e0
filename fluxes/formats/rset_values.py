"""The values inside an RFC 20 R document, checked and decoded one by one.

The pieces :class:`fluxes.formats.rset.ResourceSet` is made of when it reads an R
document or a caller's arguments: idsets, ranks, times, hostnames and hostlists,
property names, the ``execution`` header and one ``R_lite`` entry's children.
Each raises ValueError naming where in the document the bad value sits, on
one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeAlias

import orjson

from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import MAX_ID, IDSet
from fluxes.formats.shown import shown as show

#: Characters RFC 20 forbids in property names.
PROPERTY_ILLEGAL_CHARS = "!&'\"^`|()"

#: A rank's (cores, gpus).
Pair: TypeAlias = tuple[IDSet, IDSet]
#: A time in seconds since the epoch (R's starttime, expiration).
Seconds: TypeAlias = "int | float"
#: Ids as a caller may give them: an IDSet or its RFC 22 text.
IDsLike: TypeAlias = "IDSet | str"

# Shared empty set for ranks without gpus.  Pairs are never mutated in place
# (every operation builds new IDSets), so sharing is safe.
NO_IDS = IDSet()


def decode_idset(value: object, where: str) -> IDSet:
    """Decode an RFC 22 string found at *where* in an R document."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected an idset string, got {type(value).__name__}")
    try:
        return IDSet(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def as_idset(value: object, where: str) -> IDSet:
    """Accept an IDSet (copied) or an RFC 22 string from a programmatic caller."""
    if isinstance(value, IDSet):
        return value.copy()
    return decode_idset(value, where)


def check_time(value: object, where: str) -> Seconds:
    """Return *value* if it is a finite number of seconds, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    return value


def check_rank(value: object, where: str) -> int:
    """Return *value* if it is a valid rank (int in ``0..MAX_ID``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: rank must be an integer, got {type(value).__name__}")
    if not 0 <= value <= MAX_ID:
        raise ValueError(f"{where}: rank {value} is out of range 0-{MAX_ID}")
    return value


def check_hostnames_valid(names: list[str], where: str) -> None:
    """ValueError unless every name can stand as one host in an RFC 29 hostlist."""
    try:
        Hostlist(names)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check_hostname(value: object, where: str) -> str:
    """Return *value* if it is a string naming a single valid host."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: hostname must be a string, got {type(value).__name__}")
    check_hostnames_valid([value], where)
    return value


def check_property_name(name: object, where: str = "property") -> str:
    """Return *name* if it is a legal RFC 20 property name, else raise ValueError.

    A name is a non-empty string of valid UTF-8 without any of
    ``! & ' " ^ ` | ( )``.  ``@`` is allowed (RFC 20 reserves it for
    scheduler-specific suffixes such as ``amd-mi50@gpu``).
    """
    if not isinstance(name, str):
        raise ValueError(f"{where}: property name must be a string, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{where}: property name is empty")
    for char in name:
        if char in PROPERTY_ILLEGAL_CHARS:
            raise ValueError(f"{where}: invalid character {char!r} in property name {show(name)}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where}: property name {show(name)} is not valid UTF-8") from None
    return name


def parse_hostlist(text: object, where: str) -> Hostlist:
    """Decode an RFC 29 hostlist string, naming *where* on error."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected a hostlist string, got {type(text).__name__}")
    try:
        return Hostlist(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def bracketed(ids: IDSet) -> str:
    """``0`` or ``[0-3]``, the way flux writes ids after a resource name."""
    return ids.encode(brackets=True)


def execution_of(R: object) -> Mapping[str, Any]:  # noqa: N803
    """The ``execution`` object of an R document (JSON text or decoded), its header checked."""
    obj: object = R
    if isinstance(R, (str, bytes, bytearray, memoryview)):
        try:
            obj = orjson.loads(R)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"R: invalid JSON: {exc}") from None
    if not isinstance(obj, Mapping):
        raise ValueError(f"R: expected a JSON object, got {type(obj).__name__}")
    if "version" not in obj:
        raise ValueError("R: missing 'version'")
    version = obj["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != 1:
        raise ValueError(f"R: unsupported version {show(version)} (only 1 is supported)")
    if "execution" not in obj:
        raise ValueError("R: missing 'execution'")
    execution = obj["execution"]
    if not isinstance(execution, Mapping):
        raise ValueError(f"R: execution must be an object, got {type(execution).__name__}")
    if "R_lite" not in execution:
        raise ValueError("R: missing 'execution.R_lite'")
    entries = execution["R_lite"]
    if not isinstance(entries, list):
        raise ValueError(f"R: execution.R_lite must be a list, got {type(entries).__name__}")
    return execution


def decode_children(children: object, ranks: IDSet, where: str) -> Pair:
    """The (cores, gpus) of one R_lite entry's ``children``."""
    if not isinstance(children, Mapping):
        raise ValueError(f"{where}.children: expected an object, "
                         f"got {type(children).__name__}")
    for key in children:
        if key not in ("core", "gpu"):
            raise ValueError(f"{where}.children: unsupported resource type "
                             f"{show(key)} (only core and gpu)")
    if "core" not in children:
        raise ValueError(f"{where}.children: missing 'core'")
    cores = decode_idset(children["core"], f"{where}.children.core")
    gpus = NO_IDS
    if "gpu" in children:
        gpus = decode_idset(children["gpu"], f"{where}.children.gpu") or NO_IDS
    if not cores and not gpus:
        raise ValueError(f"{where}: rank(s) {ranks} have no cores or gpus")
    return (cores, gpus)
