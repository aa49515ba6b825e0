"""The scheduler's inventory: every execution target (broker rank) and what it holds.

A :class:`Target` is one rank: its hostname, core and gpu ids, properties,
memory in bytes (or None when unknown) and, optionally, how its cores are
grouped into sockets.  An :class:`Inventory` is the ordered set of targets.

Load one from flux-style TOML (``[[resource.config]]`` entries, plus our
``memory`` and ``sockets`` keys) with :meth:`Inventory.from_config` or
:meth:`Inventory.from_toml`, or from an RFC 20 R with
:meth:`Inventory.from_rset`.  Bad input raises
:class:`~fluxes.errors.ConfigError` naming the entry, e.g.
``resource.config[2].cores: invalid idset '0-': range '0-' has no end``.
See ``docs/scheduler-pool.md``.

Why one module: the two types and their two loaders (TOML, R) check the same fields with
the same messages, through parsing helpers private to them.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fluxes.errors import ConfigError
from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import MAX_ID, IDSet
from fluxes.formats.rset import MAX_RANKS, ResourceSet, check_property_name
from fluxes.formats.rset_values import decode_idset, parse_hostlist
from fluxes.formats.shown import shown as _show

__all__ = [
    "CONFIG_KEYS",
    "MAX_SOCKETS",
    "Inventory",
    "Target",
    "format_size",
    "parse_size",
]

#: Keys accepted in one ``[[resource.config]]`` entry.
CONFIG_KEYS: Final = ("hosts", "cores", "gpus", "properties", "memory", "sockets")

_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?", re.IGNORECASE)
# Binary multiples: memory is sized in powers of two (as Slurm and hwloc do).
_MULTIPLIER: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
                      "p": 1 << 50}
#: Largest memory size accepted (1 EiB), so that a typo cannot make a huge int.
MAX_SIZE: Final = 1 << 60
#: Most sockets one host may be split into: each is an IDSet, so a typo such
#: as ``sockets = 2147483647`` must not build billions of them.
MAX_SOCKETS: Final = 1024

_EMPTY = IDSet()


def parse_size(value: object, where: str = "size") -> int:
    """A memory size in bytes from an int or a string such as ``"256G"`` or ``"1.5T"``.

    Suffixes K, M, G, T and P (any case, optionally followed by ``B`` or
    ``iB``) are powers of 1024; a bare number is bytes.  ValueError naming
    *where* for anything else, for negative sizes and for sizes above 1 EiB.
    """
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a size, got bool")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{where}: invalid size {_show(value)} (expected bytes or a "
                             "number with a K/M/G/T suffix)")
        number, suffix, _ = match.groups()
        mult = _MULTIPLIER[suffix.lower()]
        if len(number) > 20:
            raise ValueError(f"{where}: size {_show(value)} is too large")
        size = int(float(number) * mult) if "." in number else int(number) * mult
    else:
        raise ValueError(f"{where}: expected a size (int or string), got {type(value).__name__}")
    if size < 0:
        raise ValueError(f"{where}: size {value} is negative")
    if size > MAX_SIZE:
        raise ValueError(f"{where}: size {_show(value)} is larger than 1 EiB")
    return size


def format_size(size: int) -> str:
    """Short form of a byte count for messages: ``256G``, ``1536M``, ``100``."""
    for suffix, mult in (("P", 1 << 50), ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20),
                         ("K", 1 << 10)):
        if size >= mult and size % mult == 0:
            return f"{size // mult}{suffix}"
    return str(size)


@dataclass(frozen=True, slots=True)
class Target:
    """One execution target (broker rank).

    ``cores`` and ``gpus`` are IDSets that must not be modified (the
    inventory shares them between identical targets).  ``memory`` is in
    bytes, None when unknown.  ``sockets``, when given, partitions ``cores``
    into one IDSet per socket, in socket order; None means the cores are not
    grouped (the pool then treats them as one socket).
    """

    rank: int
    hostname: str | None
    cores: IDSet
    gpus: IDSet
    properties: frozenset[str] = frozenset()
    memory: int | None = None
    sockets: tuple[IDSet, ...] | None = None

    __hash__ = None  # type: ignore[assignment]  # IDSets are mutable, so no hashing

    def socket_sets(self) -> tuple[IDSet, ...]:
        """The sockets' cores; one socket holding every core when sockets are unknown."""
        if self.sockets is not None:
            return self.sockets
        return (self.cores,) if self.cores else ()


def _split_sockets(cores: IDSet, nsockets: int,
                   memo: dict[tuple[str, int], tuple[IDSet, ...]]) -> tuple[IDSet, ...]:
    """*cores* cut into *nsockets* equal runs in id order (caller checked divisibility)."""
    key = (cores.encode(), nsockets)
    made = memo.get(key)
    if made is None:
        # Cut the runs, never the expanded ids: "0-4294967293" is one run.
        size = len(cores) // nsockets
        parts: list[IDSet] = []
        current: list[tuple[int, int]] = []
        need = size
        for first, hi in cores.ranges():
            lo = first
            while lo <= hi:
                take = min(need, hi - lo + 1)
                current.append((lo, lo + take - 1))
                lo += take
                need -= take
                if need == 0:
                    parts.append(IDSet.from_ranges(current))
                    current, need = [], size
        made = tuple(parts)
        memo[key] = made
    return made


class Inventory:
    """The ordered set of execution targets a scheduler allocates from.

    ``Inventory(targets)`` checks the targets: ranks unique and valid, every
    target holds a core or gpu, hostnames known for all targets or none,
    legal property names, memory a non-negative int or None, sockets a
    partition of the cores.  Problems raise ConfigError.  An inventory is
    immutable.
    """

    __slots__ = ("_props", "_ranks", "_rset", "_targets")

    def __init__(self, targets: Iterable[Target]) -> None:
        """Check *targets* and index them by rank (see the class docstring)."""
        found: dict[int, Target] = {}
        with_hosts = 0
        for target in targets:
            if not isinstance(target, Target):
                raise ConfigError(f"inventory: expected a Target, got {type(target).__name__}")
            rank = target.rank
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_ID:
                raise ConfigError(f"inventory: invalid rank {_show(rank)}")
            if rank in found:
                raise ConfigError(f"inventory: duplicate rank {rank}")
            _check_target(target)
            found[rank] = target
            if target.hostname is not None:
                with_hosts += 1
            if len(found) > MAX_RANKS:
                raise ConfigError(f"inventory: more than {MAX_RANKS} ranks")
        if with_hosts not in (0, len(found)):
            missing = IDSet(r for r, t in found.items() if t.hostname is None)
            raise ConfigError(f"inventory: rank(s) {missing} have no hostname while others do")
        self._targets = {rank: found[rank] for rank in sorted(found)}
        self._ranks = IDSet(self._targets)
        props: dict[str, list[int]] = {}
        for rank, target in self._targets.items():
            for name in target.properties:
                props.setdefault(name, []).append(rank)
        self._props = {name: IDSet(props[name]) for name in sorted(props)}
        self._rset: ResourceSet | None = None

    # -- loading -------------------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str) -> Inventory:
        """Parse TOML text holding ``[[resource.config]]`` entries (see :meth:`from_config`)."""
        try:
            config = tomllib.loads(text)
        except ValueError as exc:
            # TOMLDecodeError, or plain ValueError for an integer of thousands of digits
            raise ConfigError(f"invalid TOML: {str(exc).splitlines()[0]}") from None
        except RecursionError:
            raise ConfigError("invalid TOML: nested too deeply") from None
        return cls.from_config(config)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Sequence[Any]) -> Inventory:
        """Build the inventory from parsed configuration, flux style.

        *config* is the whole configuration (a mapping with a ``resource``
        table holding the ``config`` array), or that array itself.  Each
        entry needs ``hosts`` (an RFC 29 hostlist) and may give ``cores``
        and ``gpus`` (RFC 22 idsets), ``properties`` (a list of names),
        ``memory`` (bytes, or a string such as ``"256G"``) and ``sockets``
        (how many sockets the cores split into, evenly and in id order).
        A host named by several entries is updated by each: properties
        accumulate, the other keys take the value of the latest entry that
        sets them.  Hosts become ranks 0, 1, ... in order of first appearance.
        """
        entries = _config_entries(config)
        order: dict[str, int] = {}
        first_entry: list[int] = []
        cores: list[IDSet | None] = []
        gpus: list[IDSet | None] = []
        props: list[set[str]] = []
        memory: list[int | None] = []
        sockets: list[tuple[int, str] | None] = []
        for i, entry in enumerate(entries):
            where = f"resource.config[{i}]"
            parsed = _parse_entry(entry, where)
            if len(order) + len(parsed.hosts) > MAX_RANKS:
                raise ConfigError(f"{where}.hosts: more than {MAX_RANKS} hosts in all")
            for host in parsed.hosts:
                rank = order.get(host)
                if rank is None:
                    rank = order[host] = len(order)
                    first_entry.append(i)
                    cores.append(None)
                    gpus.append(None)
                    props.append(set())
                    memory.append(None)
                    sockets.append(None)
                if parsed.cores is not None:
                    cores[rank] = parsed.cores
                if parsed.gpus is not None:
                    gpus[rank] = parsed.gpus
                if parsed.properties:
                    props[rank].update(parsed.properties)
                if parsed.memory is not None:
                    memory[rank] = parsed.memory
                if parsed.sockets is not None:
                    sockets[rank] = (parsed.sockets, f"{where}.sockets")
        targets: list[Target] = []
        frozen: dict[frozenset[str], frozenset[str]] = {}
        memo: dict[tuple[str, int], tuple[IDSet, ...]] = {}
        for host, rank in order.items():
            core_ids = cores[rank] or _EMPTY
            gpu_ids = gpus[rank] or _EMPTY
            if not core_ids and not gpu_ids:
                raise ConfigError(f"resource.config[{first_entry[rank]}]: host {host} has no "
                                  "cores or gpus")
            split: tuple[IDSet, ...] | None = None
            if sockets[rank] is not None:
                nsockets, where = sockets[rank]  # type: ignore[misc]  # checked just above
                if len(core_ids) == 0 or len(core_ids) % nsockets:
                    raise ConfigError(f"{where}: {nsockets} sockets do not divide the "
                                      f"{len(core_ids)} cores of {host} evenly")
                split = _split_sockets(core_ids, nsockets, memo)
            names = frozenset(props[rank])
            targets.append(Target(rank, host, core_ids, gpu_ids,
                                  frozen.setdefault(names, names), memory[rank], split))
        return cls(targets)

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> Inventory:
        """The inventory of a ``[resource]`` table: its ``path`` (an RFC 20 R file) when
        given, the hosts of its ``graph`` (:mod:`fluxes.domain.graph.table`), else its
        ``config`` entries. ConfigError names the key at fault."""
        # imported here: the graph package is built on this one, not the other way
        from fluxes.domain.graph.table import inventory_of_graph_table

        from_graph = inventory_of_graph_table(table)
        if from_graph is not None:
            return from_graph
        path = table.get("path")
        if path is None:
            return cls.from_config({"resource": dict(table)})
        if not isinstance(path, str) or not path:
            raise ConfigError("resource.path: must be the path of an R file")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ConfigError(f"resource.path: cannot read {path}: "
                              f"{exc.strerror or exc}") from None
        try:
            return cls.from_rset(data)
        except ConfigError as exc:
            raise ConfigError(f"resource.path: {path}: {exc}") from None

    @classmethod
    def from_rset(cls, R: ResourceSet | Mapping[str, Any] | str | bytes) -> Inventory:  # noqa: N803
        """The inventory described by an RFC 20 R (memory and sockets unknown)."""
        if not isinstance(R, ResourceSet):
            try:
                R = ResourceSet(R)  # noqa: N806
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        props: dict[int, set[str]] = {}
        for name, ranks in R.properties.items():
            for rank in ranks:
                props.setdefault(rank, set()).add(name)
        frozen: dict[frozenset[str], frozenset[str]] = {}
        targets = []
        hosts = R.has_hostnames
        for rank in R.ranks:
            names = frozenset(props.get(rank, ()))
            targets.append(Target(rank, R.hostname(rank) if hosts else None, R.cores(rank),
                                  R.gpus(rank), frozen.setdefault(names, names)))
        inv = cls(targets)
        return inv

    # -- saving --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form that :meth:`from_dict` reads back exactly.

        Targets with identical contents are grouped:
        ``{"version": 1, "targets": [{"ranks": "0-127", "hosts": "node[0-127]",
        "cores": "0-63", "gpus": "0-3", "properties": ["gpu"], "memory": 274877906944,
        "sockets": ["0-31", "32-63"]}]}`` (empty keys are left out).
        """
        groups: dict[tuple[Any, ...], tuple[list[int], list[str]]] = {}
        for rank, t in self._targets.items():
            key = (t.cores.encode(), t.gpus.encode(), tuple(sorted(t.properties)), t.memory,
                   None if t.sockets is None else tuple(s.encode() for s in t.sockets))
            ranks, hosts = groups.setdefault(key, ([], []))
            ranks.append(rank)
            if t.hostname is not None:
                hosts.append(t.hostname)
        out: list[dict[str, Any]] = []
        for (core_text, gpu_text, names, mem, socks), (ranks, hosts) in groups.items():
            item: dict[str, Any] = {"ranks": IDSet(ranks).encode()}
            if hosts:
                item["hosts"] = str(Hostlist(hosts))
            if core_text:
                item["cores"] = core_text
            if gpu_text:
                item["gpus"] = gpu_text
            if names:
                item["properties"] = list(names)
            if mem is not None:
                item["memory"] = mem
            if socks is not None:
                item["sockets"] = list(socks)
            out.append(item)
        return {"version": 1, "targets": out}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Inventory:
        """Read the form written by :meth:`to_dict`; ConfigError if malformed."""
        if not isinstance(obj, Mapping) or obj.get("version") != 1:
            raise ConfigError("inventory: expected an object with version 1")
        groups = obj.get("targets")
        if not isinstance(groups, list):
            raise ConfigError("inventory.targets: expected a list")
        targets: list[Target] = []
        for i, item in enumerate(groups):
            where = f"inventory.targets[{i}]"
            if not isinstance(item, Mapping):
                raise ConfigError(f"{where}: expected an object")
            ranks = _idset(item.get("ranks"), f"{where}.ranks")
            if len(ranks) > MAX_RANKS:
                raise ConfigError(f"{where}.ranks: more than {MAX_RANKS} ranks")
            core_ids = _idset(item.get("cores", ""), f"{where}.cores")
            gpu_ids = _idset(item.get("gpus", ""), f"{where}.gpus")
            names = frozenset(_properties(item.get("properties", []), f"{where}.properties"))
            mem = item.get("memory")
            if mem is not None:
                mem = _config_call(parse_size, mem, f"{where}.memory")
            socks = item.get("sockets")
            split = None
            if socks is not None:
                if not isinstance(socks, list):
                    raise ConfigError(f"{where}.sockets: expected a list of idsets")
                split = tuple(_idset(s, f"{where}.sockets[{j}]") for j, s in enumerate(socks))
            host_names: list[str | None] = [None] * len(ranks)
            if "hosts" in item:
                hl = _hostlist(item["hosts"], f"{where}.hosts")
                if len(hl) != len(ranks):
                    raise ConfigError(f"{where}.hosts: {len(hl)} hosts for {len(ranks)} ranks")
                host_names = list(hl)
            for rank, host in zip(ranks, host_names, strict=True):
                targets.append(Target(rank, host, core_ids, gpu_ids, names, mem, split))
        return cls(targets)

    # -- access --------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of targets."""
        return len(self._targets)

    def __iter__(self) -> Iterator[Target]:
        """Targets in ascending rank order."""
        return iter(self._targets.values())

    def __contains__(self, rank: object) -> bool:
        """True if *rank* is a target of this inventory."""
        return rank in self._targets

    def __getitem__(self, rank: int) -> Target:
        """The target of *rank*; KeyError if there is none."""
        return self._targets[rank]

    def __eq__(self, other: object) -> bool:
        """Same targets."""
        if not isinstance(other, Inventory):
            return NotImplemented
        return self._targets == other._targets

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """``<Inventory 128 targets, 8192 cores, 512 gpus>``."""
        return (f"<Inventory {len(self)} targets, {self.ncores} cores, "
                f"{self.ngpus} gpus>")

    @property
    def ranks(self) -> IDSet:
        """All ranks (a new IDSet)."""
        return self._ranks.copy()

    @property
    def ncores(self) -> int:
        """Total number of cores."""
        return sum(len(t.cores) for t in self._targets.values())

    @property
    def ngpus(self) -> int:
        """Total number of gpus."""
        return sum(len(t.gpus) for t in self._targets.values())

    @property
    def properties(self) -> dict[str, IDSet]:
        """Property name -> ranks having it (new IDSets, names sorted)."""
        return {name: ids.copy() for name, ids in self._props.items()}

    def without(self, ranks: IDSet) -> Inventory:
        """A new inventory without the targets of *ranks* (unknown ranks are ignored)."""
        return Inventory(t for r, t in self._targets.items() if r not in ranks)

    def property_ranks(self) -> Mapping[str, IDSet]:
        """Like :attr:`properties` without copying (callers must not modify the sets)."""
        return self._props

    def rset(self) -> ResourceSet:
        """The inventory as R, cached: callers must not modify it (see :meth:`to_rset`)."""
        if self._rset is None:
            hosts = None
            if self._targets and next(iter(self._targets.values())).hostname is not None:
                hosts = {r: t.hostname for r, t in self._targets.items()
                         if t.hostname is not None}
            try:
                self._rset = ResourceSet.from_ranks(
                    {r: (t.cores, t.gpus) for r, t in self._targets.items()},
                    hostnames=hosts, properties=self._props)
            except ValueError as exc:
                raise ConfigError(f"inventory: {exc}") from None
        return self._rset

    def to_rset(self) -> ResourceSet:
        """The inventory as an RFC 20 R (ranks, cores, gpus, hostnames, properties)."""
        return self.rset().copy()


# -- helpers ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One parsed ``[[resource.config]]`` entry."""

    hosts: Hostlist
    cores: IDSet | None
    gpus: IDSet | None
    properties: list[str]
    memory: int | None
    sockets: int | None


def _config_entries(config: Mapping[str, Any] | Sequence[Any]) -> Sequence[Any]:
    """The ``resource.config`` array of *config* (or *config* itself if it is the array)."""
    if isinstance(config, Sequence) and not isinstance(config, (str, bytes)):
        return config
    if not isinstance(config, Mapping):
        raise ConfigError(f"resource.config: expected a configuration table, "
                          f"got {type(config).__name__}")
    resource = config.get("resource")
    if resource is None:
        raise ConfigError("resource.config: is required")
    if not isinstance(resource, Mapping):
        raise ConfigError(f"resource: expected a table, got {type(resource).__name__}")
    entries = resource.get("config")
    if entries is None:
        raise ConfigError("resource.config: is required")
    if not isinstance(entries, Sequence) or isinstance(entries, (str, bytes)):
        raise ConfigError(f"resource.config: expected an array of tables, "
                          f"got {type(entries).__name__}")
    if not entries:
        raise ConfigError("resource.config: is empty")
    return entries


def _config_call(func: Any, value: object, where: str) -> Any:
    """``func(value, where)`` with ValueError turned into ConfigError."""
    try:
        return func(value, where)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _idset(value: object, where: str) -> IDSet:
    """An RFC 22 idset string found at *where* (R's own check, as a configuration error)."""
    try:
        return decode_idset(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _hostlist(value: object, where: str) -> Hostlist:
    """An RFC 29 hostlist string found at *where* (R's own check, as a configuration error)."""
    try:
        return parse_hostlist(value, where)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _properties(value: object, where: str) -> list[str]:
    """A list of legal property names found at *where*."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of names, got {type(value).__name__}")
    for j, name in enumerate(value):
        try:
            check_property_name(name, f"{where}[{j}]")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return list(value)


def _parse_entry(entry: object, where: str) -> _Entry:
    """Check one ``[[resource.config]]`` entry."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected a table, got {type(entry).__name__}")
    for key in entry:
        if key not in CONFIG_KEYS:
            raise ConfigError(f"{where}: unknown key {_show(key)} "
                              f"(expected one of {', '.join(CONFIG_KEYS)})")
    if "hosts" not in entry:
        raise ConfigError(f"{where}: hosts is required")
    hosts = _hostlist(entry["hosts"], f"{where}.hosts")
    if not hosts:
        raise ConfigError(f"{where}.hosts: is empty")
    core_ids = _idset(entry["cores"], f"{where}.cores") if "cores" in entry else None
    gpu_ids = _idset(entry["gpus"], f"{where}.gpus") if "gpus" in entry else None
    names = _properties(entry.get("properties", []), f"{where}.properties")
    mem = None
    if "memory" in entry:
        mem = _config_call(parse_size, entry["memory"], f"{where}.memory")
    nsockets = None
    if "sockets" in entry:
        nsockets = entry["sockets"]
        if isinstance(nsockets, bool) or not isinstance(nsockets, int) or nsockets < 1:
            raise ConfigError(f"{where}.sockets: expected a positive integer, "
                              f"got {_show(nsockets)}")
        if nsockets > MAX_SOCKETS:
            raise ConfigError(f"{where}.sockets: {_show(nsockets)} is more than "
                              f"{MAX_SOCKETS} sockets")
    return _Entry(hosts, core_ids, gpu_ids, names, mem, nsockets)


def _check_target(t: Target) -> None:
    """ConfigError unless *t* is a well-formed target."""
    where = f"inventory: rank {t.rank}"
    if t.hostname is not None and not isinstance(t.hostname, str):
        raise ConfigError(f"{where}: hostname must be a string")
    if not isinstance(t.cores, IDSet) or not isinstance(t.gpus, IDSet):
        raise ConfigError(f"{where}: cores and gpus must be IDSets")
    if not t.cores and not t.gpus:
        raise ConfigError(f"{where}: has no cores or gpus")
    if not isinstance(t.properties, frozenset):
        raise ConfigError(f"{where}: properties must be a frozenset")
    for name in t.properties:
        try:
            check_property_name(name, where)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if t.memory is not None and (isinstance(t.memory, bool) or not isinstance(t.memory, int)
                                 or t.memory < 0):
        raise ConfigError(f"{where}: memory must be a non-negative number of bytes")
    if t.sockets is not None:
        if not isinstance(t.sockets, tuple) or not all(isinstance(s, IDSet) and s
                                                       for s in t.sockets):
            raise ConfigError(f"{where}: sockets must be a tuple of non-empty IDSets")
        union = IDSet()
        total = 0
        for s in t.sockets:
            union |= s
            total += len(s)
        if total != len(union) or union != t.cores:
            raise ConfigError(f"{where}: sockets do not partition the cores {t.cores}")
