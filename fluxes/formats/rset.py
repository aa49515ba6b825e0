"""RFC 20 resource sets ("R"): which cores and gpus on which broker ranks.

:class:`ResourceSet` reads and writes version 1 R documents and does the set
algebra the scheduler needs (union, difference, intersection, subsets by
rank).  Each rank maps to a ``(cores, gpus)`` pair of :class:`IDSet`; ranks
that share identical children share the same pair object, so an inventory of
thousands of identical nodes costs one pair, and encoding groups them back
into a single ``R_lite`` entry.  See ``docs/formats/R.md``.  The checks of the
values inside a document (idsets, ranks, times, hostnames, property names) are
in :mod:`fluxes.formats.rset_values`.

Why one module: it is the one RFC 20 type; decoding, encoding and the set algebra share
the private rank -> (cores, gpus) map and its sharing of identical pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson

from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import MAX_ID, IDSet
from fluxes.formats.rset_values import (
    NO_IDS,
    PROPERTY_ILLEGAL_CHARS,
    IDsLike,
    Pair,
    Seconds,
    as_idset,
    bracketed,
    check_hostname,
    check_property_name,
    check_rank,
    check_time,
    decode_children,
    decode_idset,
    execution_of,
    parse_hostlist,
)
from fluxes.formats.shown import shown as show

__all__ = [
    "MAX_RANKS",
    "PROPERTY_ILLEGAL_CHARS",
    "ResourceSet",
    "check_property_name",
]

#: Most ranks one R may hold.  Ranks are expanded into a dict, so an idset
#: like ``0-4294967294`` must be refused rather than exhaust memory.
MAX_RANKS = 1 << 20


class ResourceSet:
    """An RFC 20 version 1 resource set: cores and gpus per broker rank.

    ``ResourceSet()`` is empty; ``ResourceSet(R)`` decodes an R document given
    as a dict, JSON text (``str``) or JSON bytes.  Malformed input raises
    ValueError with a one-line message naming the offending key.

    Every rank holds at least one core or gpu.  Hostnames are either known
    for every rank or for none (``nodelist`` maps all ranks or is absent).
    Properties map names to sets of ranks that are all in the set.

    The set is mutable through :meth:`add_rank`, :meth:`set_property` and the
    ``starttime``/``expiration`` setters; the set operations return new
    objects.  Instances are not hashable.
    """

    __slots__ = (
        "_cache_ranks",
        "_counts",
        "_expiration",
        "_host_index",
        "_hostlist",
        "_hosts",
        "_nodes",
        "_props",
        "_starttime",
    )

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, R: Mapping[str, Any] | str | bytes | None = None) -> None:  # noqa: N803
        """Decode an R document (dict, JSON str or bytes); None gives an empty set."""
        self._nodes: dict[int, Pair] = {}
        self._hosts: dict[int, str] = {}
        self._props: dict[str, IDSet] = {}
        self._starttime: Seconds | None = None
        self._expiration: Seconds | None = None
        self._cache_ranks: IDSet | None = None
        self._counts: tuple[int, int] | None = None
        self._host_index: dict[str, list[int]] | None = None
        self._hostlist: Hostlist | None = None
        if R is not None:
            self._decode(R)

    # -- construction ----------------------------------------------------------

    @classmethod
    def _build(
        cls,
        nodes: dict[int, Pair],
        hosts: dict[int, str],
        props: dict[str, IDSet],
        starttime: Seconds | None,
        expiration: Seconds | None,
    ) -> ResourceSet:
        """Wrap already-validated parts (taken over, not copied) in a new set."""
        obj = cls.__new__(cls)
        obj._nodes = nodes
        obj._hosts = hosts
        obj._props = props
        obj._starttime = starttime
        obj._expiration = expiration
        obj._cache_ranks = None
        obj._counts = None
        obj._host_index = None
        obj._hostlist = None
        return obj

    @classmethod
    def of_parts(cls, nodes: Mapping[int, tuple[IDSet, IDSet]],
                 hostnames: Mapping[int, str] | None = None,
                 properties: Mapping[str, IDSet] | None = None) -> ResourceSet:
        """A set from parts its caller checked already (a scheduler's pool placing on
        its inventory): ``{rank: (cores, gpus)}`` with some cores or gpus on every rank,
        ``hostnames`` for every rank (or None), ``properties``' ranks all in the set.
        What :meth:`from_ranks` builds, without its checks and copies: the IDSets are
        shared (the set never changes them, and its accessors return copies), so the
        caller must not change them either; ranks given one pair object share it."""
        memo: dict[tuple[int, int], Pair] = {}
        built: dict[int, Pair] = {}
        for rank, (cores, gpus) in nodes.items():
            key = (id(cores), id(gpus))
            pair = memo.get(key)
            if pair is None:
                pair = memo[key] = (cores, gpus if gpus else NO_IDS)
            built[rank] = pair
        return cls._build(built, dict(hostnames) if hostnames is not None else {},
                          dict(properties) if properties is not None else {}, None, None)

    @classmethod
    def from_ranks(
        cls,
        ranks: Mapping[int, tuple[IDsLike, IDsLike | None]],
        hostnames: Mapping[int, str] | Iterable[str] | None = None,
        properties: Mapping[str, IDsLike] | None = None,
        starttime: Seconds | None = None,
        expiration: Seconds | None = None,
    ) -> ResourceSet:
        """Build a set from ``{rank: (cores, gpus)}``; ids are IDSets or idset strings.

        *gpus* may be None.  *hostnames* is either ``{rank: hostname}`` covering
        every rank, or hostnames in ascending rank order (a list or a
        Hostlist).  *properties* maps names to the ranks that have them.
        Inputs are copied, so later changes to the caller's IDSets do not leak
        in.  Bad input raises ValueError.
        """
        if not isinstance(ranks, Mapping):
            raise ValueError(f"from_ranks: ranks must be a mapping, got {type(ranks).__name__}")
        if len(ranks) > MAX_RANKS:
            raise ValueError(f"from_ranks: {len(ranks)} ranks exceed the limit of {MAX_RANKS}")
        nodes: dict[int, Pair] = {}
        # Callers often pass one (cores, gpus) object for many ranks: convert
        # it once.  Equal children are interned so that ranks share one pair,
        # which keeps memory small and lets encode() group ranks by identity.
        memo: dict[tuple[int, int], Pair] = {}
        interned: dict[tuple[str, str], Pair] = {}
        keep: list[object] = []  # keeps the objects behind memo's ids alive
        for rank, pair in ranks.items():
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= MAX_ID:
                check_rank(rank, "from_ranks")
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(f"from_ranks: rank {rank}: expected a (cores, gpus) pair, "
                                 f"got {show(pair)}")
            key = (id(pair[0]), id(pair[1]))
            made = memo.get(key)
            if made is None:
                where = f"from_ranks: rank {rank}"
                cores = as_idset(pair[0], f"{where} cores")
                gpus = NO_IDS if pair[1] is None else as_idset(pair[1], f"{where} gpus")
                if not gpus:
                    gpus = NO_IDS
                if not cores and not gpus:
                    raise ValueError(f"{where}: has no cores or gpus")
                made = interned.setdefault((cores.encode(), gpus.encode()), (cores, gpus))
                memo[key] = made
                keep.append(pair)
            nodes[rank] = made
        obj = cls._build(nodes, {}, {}, None, None)
        if hostnames is not None:
            obj._set_hostnames(hostnames)
        if properties is not None:
            if not isinstance(properties, Mapping):
                raise ValueError("from_ranks: properties must be a mapping of name to ranks")
            for name, targets in properties.items():
                obj.set_property(name, targets)
        if starttime is not None:
            obj.starttime = starttime
        if expiration is not None:
            obj.expiration = expiration
        return obj

    def _set_hostnames(self, hostnames: Mapping[int, str] | Iterable[str]) -> None:
        """Validate and install hostnames for every rank; see :meth:`from_ranks`."""
        hosts: dict[int, str] = {}
        if isinstance(hostnames, Mapping):
            for rank, name in hostnames.items():
                if rank not in self._nodes:
                    raise ValueError(f"hostnames: rank {show(rank)} is not in the set")
                if not isinstance(name, str):
                    raise ValueError(f"hostnames: rank {rank}: hostname must be a string, "
                                     f"got {type(name).__name__}")
                hosts[rank] = name
        else:
            if isinstance(hostnames, str):
                raise ValueError("hostnames: expected a list of hostnames or a mapping, got str")
            try:
                names = iter(hostnames)
            except TypeError:
                raise ValueError("hostnames: expected a list of hostnames or a mapping, "
                                 f"got {type(hostnames).__name__}") from None
            ranks = iter(self._rank_set())
            for i, name in enumerate(names):
                rank = next(ranks, None)
                if rank is None:
                    raise ValueError(f"hostnames: more hostnames than the {len(self._nodes)} "
                                     "ranks")
                if not isinstance(name, str):
                    raise ValueError(f"hostnames[{i}]: hostname must be a string, "
                                     f"got {type(name).__name__}")
                hosts[rank] = name
        if len(hosts) != len(self._nodes):
            missing = self._rank_set() - IDSet(hosts)
            raise ValueError(f"hostnames: no hostname for rank(s) {missing}")
        # Building the rank-ordered Hostlist validates every name at once, and
        # keeping it saves rebuilding it for encode().
        ordered = [hosts[r] for r in self._rank_set()]
        try:
            hostlist = Hostlist(ordered)
        except ValueError as exc:
            raise ValueError(f"hostnames: {exc}") from None
        self._hosts = hosts
        self._hostlist = hostlist

    def _decode(self, R: Mapping[str, Any] | str | bytes) -> None:  # noqa: N803
        """Fill this (empty) set from an R document; see the class docstring."""
        execution = execution_of(R)
        entries = execution["R_lite"]
        nodes: dict[int, Pair] = {}
        seen = IDSet()
        ncores = ngpus = 0
        for i, entry in enumerate(entries):
            where = f"R: R_lite[{i}]"
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where}: expected an object, got {type(entry).__name__}")
            if "rank" not in entry:
                raise ValueError(f"{where}: missing 'rank'")
            if "children" not in entry:
                raise ValueError(f"{where}: missing 'children'")
            ranks = decode_idset(entry["rank"], f"{where}.rank")
            if not ranks:
                raise ValueError(f"{where}.rank: is empty")
            if seen.intersects(ranks):
                raise ValueError(f"{where}: rank(s) {seen & ranks} listed more than once")
            seen |= ranks
            if len(seen) > MAX_RANKS:
                raise ValueError(f"{where}: more than {MAX_RANKS} ranks")
            pair = decode_children(entry["children"], ranks, where)
            for rank in ranks:
                nodes[rank] = pair
            ncores += len(ranks) * len(pair[0])
            ngpus += len(ranks) * len(pair[1])
        self._nodes = nodes
        self._cache_ranks = seen
        self._counts = (ncores, ngpus)

        if "nodelist" in execution:
            self._hosts = self._decode_nodelist(execution["nodelist"])
        if "properties" in execution:
            self._decode_properties(execution["properties"])
        self._decode_times(execution)

    def _decode_properties(self, props: object) -> None:
        """Set the properties of an R document's ``execution.properties``."""
        if not isinstance(props, Mapping):
            raise ValueError("R: execution.properties must be an object, "
                             f"got {type(props).__name__}")
        for name, targets in props.items():
            where = f"R: execution.properties[{show(name)}]"
            check_property_name(name, where)
            self._set_property(name, decode_idset(targets, where), where)

    def _decode_times(self, execution: Mapping[str, Any]) -> None:
        """Set starttime and expiration from an R document's ``execution``."""
        self._starttime, self._expiration = decode_times(execution)

    def _decode_nodelist(self, nodelist: object) -> dict[int, str]:
        """Map the ranks, in ascending order, to the hosts listed in *nodelist*."""
        if not isinstance(nodelist, list):
            raise ValueError("R: execution.nodelist must be a list of hostlist strings, "
                             f"got {type(nodelist).__name__}")
        lists = [parse_hostlist(text, f"R: execution.nodelist[{i}]")
                 for i, text in enumerate(nodelist)]
        # Count before expanding: a short string can name billions of hosts.
        total = sum(len(hl) for hl in lists)
        if total != len(self._nodes):
            raise ValueError(f"R: execution.nodelist names {total} host(s) but R_lite has "
                             f"{len(self._nodes)} rank(s)")
        whole = lists[0] if len(lists) == 1 else Hostlist()
        if len(lists) > 1:
            for hl in lists:
                whole.append(hl)
        self._hostlist = whole
        return dict(zip(self._rank_set(), whole, strict=True))

    def copy(self) -> ResourceSet:
        """An independent copy (later changes to either do not affect the other)."""
        result = self._build(dict(self._nodes), dict(self._hosts),
                             {k: v.copy() for k, v in self._props.items()},
                             self._starttime, self._expiration)
        # Cached values are replaced, never changed in place, so they can be shared.
        result._cache_ranks = self._cache_ranks
        result._counts = self._counts
        result._hostlist = self._hostlist
        return result

    # -- mutation ----------------------------------------------------------------

    def _changed(self) -> None:
        """Drop cached derived data after the ranks changed."""
        self._cache_ranks = None
        self._counts = None
        self._host_index = None
        self._hostlist = None

    def add_rank(
        self,
        rank: int,
        cores: IDsLike,
        gpus: IDsLike | None = None,
        hostname: str | None = None,
        properties: Iterable[str] = (),
    ) -> None:
        """Add a rank that is not yet in the set, with its cores, gpus and hostname.

        ValueError if the rank is present, has neither cores nor gpus, or if
        giving (or omitting) *hostname* would leave some ranks with a
        hostname and others without.
        """
        rank = check_rank(rank, "add_rank")
        if rank in self._nodes:
            raise ValueError(f"add_rank: rank {rank} is already in the set")
        if len(self._nodes) >= MAX_RANKS:
            raise ValueError(f"add_rank: the set already holds {MAX_RANKS} ranks")
        core_ids = as_idset(cores, f"add_rank: rank {rank} cores")
        gpu_ids = NO_IDS if gpus is None else (as_idset(gpus, f"add_rank: rank {rank} gpus")
                                              or NO_IDS)
        if not core_ids and not gpu_ids:
            raise ValueError(f"add_rank: rank {rank} has no cores or gpus")
        if self._nodes and (hostname is None) != (not self._hosts):
            if hostname is None:
                raise ValueError(f"add_rank: rank {rank} needs a hostname (the others have one)")
            raise ValueError(f"add_rank: rank {rank} has a hostname but the others do not")
        if isinstance(properties, str) or not isinstance(properties, Iterable):
            raise ValueError("add_rank: properties must be a list of names, "
                             f"got {type(properties).__name__}")
        names = [check_property_name(p, f"add_rank: rank {rank}") for p in properties]
        if hostname is not None:
            self._hosts[rank] = check_hostname(hostname, f"add_rank: rank {rank}")
        self._nodes[rank] = (core_ids, gpu_ids)
        self._changed()
        for name in names:
            ids = self._props.get(name)
            if ids is None:
                self._props[name] = IDSet.from_range(rank, rank)
            else:
                ids.add(rank)

    def set_property(self, name: str, ranks: IDsLike | None = None) -> None:
        """Give property *name* to *ranks* (all ranks if None), adding to any it had.

        ValueError for an illegal name or ranks not in the set.
        """
        where = f"set_property {show(name)}"
        check_property_name(name, where)
        ids = self._rank_set().copy() if ranks is None else as_idset(ranks, where)
        self._set_property(name, ids, where)

    def _set_property(self, name: str, ids: IDSet, where: str) -> None:
        """Merge *ids* into property *name* after checking they are ranks of the set."""
        extra = ids - self._rank_set()
        if extra:
            raise ValueError(f"{where}: rank(s) {extra} not in the resource set")
        if not ids:
            return
        old = self._props.get(name)
        self._props[name] = ids if old is None else old | ids

    # -- accessors ---------------------------------------------------------------

    def _rank_set(self) -> IDSet:
        """The ranks as a cached IDSet (internal: callers must not mutate it)."""
        if self._cache_ranks is None:
            self._cache_ranks = IDSet(self._nodes)
        return self._cache_ranks

    @property
    def ranks(self) -> IDSet:
        """The execution target ranks (a new IDSet)."""
        return self._rank_set().copy()

    def per_rank(self) -> Iterator[tuple[int, IDSet, IDSet]]:
        """(rank, cores, gpus) of every rank: the sets themselves, not copies, for readers
        on a hot path (the scheduler's staged starts); callers must not change them."""
        for rank, (cores, gpus) in self._nodes.items():
            yield rank, cores, gpus

    @property
    def nnodes(self) -> int:
        """Number of ranks."""
        return len(self._nodes)

    def _count(self) -> tuple[int, int]:
        """(cores, gpus) totals, cached."""
        if self._counts is None:
            ncores = ngpus = 0
            for cores, gpus in self._nodes.values():
                ncores += len(cores)
                ngpus += len(gpus)
            self._counts = (ncores, ngpus)
        return self._counts

    @property
    def ncores(self) -> int:
        """Total number of cores over all ranks."""
        return self._count()[0]

    @property
    def ngpus(self) -> int:
        """Total number of gpus over all ranks."""
        return self._count()[1]

    def _pair(self, rank: int) -> Pair:
        """The (cores, gpus) of *rank*, ValueError if it is not in the set."""
        pair = self._nodes.get(rank) if isinstance(rank, int) else None
        if pair is None:
            raise ValueError(f"rank {show(rank)} is not in the resource set")
        return pair

    def cores(self, rank: int) -> IDSet:
        """The core ids of *rank* (a new IDSet); ValueError if the rank is absent."""
        return self._pair(rank)[0].copy()

    def gpus(self, rank: int) -> IDSet:
        """The gpu ids of *rank* (a new IDSet); ValueError if the rank is absent."""
        return self._pair(rank)[1].copy()

    def hostname(self, rank: int) -> str | None:
        """The hostname of *rank*, None if the set has no hostnames.

        ValueError if the rank is absent.
        """
        self._pair(rank)
        return self._hosts.get(rank)

    @property
    def has_hostnames(self) -> bool:
        """True if every rank has a hostname (False for an empty set)."""
        return bool(self._hosts)

    @property
    def hostlist(self) -> Hostlist:
        """Hostnames in ascending rank order (empty if the set has none)."""
        return Hostlist(self._ordered_hosts())

    def _ordered_hosts(self) -> Hostlist:
        """The cached hostlist in rank order (internal: callers must not mutate it)."""
        if self._hostlist is None:
            hosts = self._hosts
            self._hostlist = Hostlist([hosts[r] for r in self._rank_set()] if hosts else [])
        return self._hostlist

    def _index(self) -> dict[str, list[int]]:
        """hostname -> ascending ranks, built on first use."""
        if self._host_index is None:
            index: dict[str, list[int]] = {}
            for rank in self._rank_set() if self._hosts else ():
                index.setdefault(self._hosts[rank], []).append(rank)
            self._host_index = index
        return self._host_index

    def rank_of(self, hostname: str) -> int:
        """The lowest rank on *hostname*; ValueError if no rank has that hostname.

        Several ranks may share a hostname (more than one broker per node);
        :meth:`ranks_for_hosts` returns all of them.
        """
        ranks = self._index().get(hostname) if isinstance(hostname, str) else None
        if not ranks:
            raise ValueError(f"unknown host {show(hostname)}")
        return ranks[0]

    def ranks_for_hosts(self, hosts: str | Hostlist, *, ignore_unknown: bool = False) -> IDSet:
        """The ranks on the hosts of an RFC 29 hostlist (text or Hostlist).

        Raises ValueError naming the hosts the set does not hold, unless
        *ignore_unknown* is true, in which case they are skipped.
        """
        hl = hosts if isinstance(hosts, Hostlist) else parse_hostlist(hosts, "hostlist")
        index = self._index()
        found: list[int] = []
        if len(hl) > 4 * len(index) + 64:
            # The query is much larger than the set: look up our hosts in it
            # instead of expanding it (it may name billions of hosts).
            if not ignore_unknown:
                raise ValueError(f"unknown hosts in {show(str(hl), 60)}: the hostlist names "
                                 f"{len(hl)} hosts, more than the {len(index)} known")
            for name, on_host in index.items():
                if name in hl:
                    found.extend(on_host)
            return IDSet(found)
        missing: list[str] = []
        for name in hl:
            ranks = index.get(name)
            if ranks is None:
                missing.append(name)
            else:
                found.extend(ranks)
        if missing and not ignore_unknown:
            raise ValueError(f"unknown host(s) {Hostlist(missing)}")
        return IDSet(found)

    @property
    def properties(self) -> dict[str, IDSet]:
        """Property name -> ranks having it (new IDSets, names sorted)."""
        return {name: self._props[name].copy() for name in sorted(self._props)}

    def ranks_with_property(self, name: str) -> IDSet:
        """Ranks having property *name* (empty if no rank has it)."""
        ids = self._props.get(name)
        return IDSet() if ids is None else ids.copy()

    def _property_ranks(self, name: str) -> IDSet:
        """Like :meth:`ranks_with_property` without the copy (internal, read-only)."""
        return self._props.get(name, NO_IDS)

    @property
    def starttime(self) -> Seconds | None:
        """Seconds since the epoch from which the set is valid, or None."""
        return self._starttime

    @starttime.setter
    def starttime(self, value: Seconds | None) -> None:
        if value is not None:
            value = check_time(value, "starttime")
            if self._expiration is not None and self._expiration < value:
                raise ValueError(f"starttime {value} is after expiration {self._expiration}")
        self._starttime = value

    @property
    def expiration(self) -> Seconds | None:
        """Seconds since the epoch at which the set expires, or None."""
        return self._expiration

    @expiration.setter
    def expiration(self, value: Seconds | None) -> None:
        if value is not None:
            value = check_time(value, "expiration")
            if self._starttime is not None and value < self._starttime:
                raise ValueError(f"expiration {value} is before starttime {self._starttime}")
        self._expiration = value

    def is_empty(self) -> bool:
        """True if the set holds no ranks."""
        return not self._nodes

    def __eq__(self, other: object) -> bool:
        """Same resources per rank, hostnames, properties, starttime and expiration."""
        if not isinstance(other, ResourceSet):
            return NotImplemented
        return (self._nodes == other._nodes and self._hosts == other._hosts
                and self._props == other._props and self._starttime == other._starttime
                and self._expiration == other._expiration)

    # -- encoding ----------------------------------------------------------------

    def _groups(self) -> list[tuple[IDSet, IDSet, IDSet]]:
        """(ranks, cores, gpus) for each distinct children, ordered by lowest rank."""
        keys: dict[int, tuple[str, str]] = {}  # id(pair) -> encoded children
        groups: dict[tuple[str, str], tuple[Pair, list[int]]] = {}
        nodes = self._nodes
        for rank in self._rank_set():
            pair = nodes[rank]
            key = keys.get(id(pair))
            if key is None:
                key = (pair[0].encode(), pair[1].encode())
                keys[id(pair)] = key
            group = groups.get(key)
            if group is None:
                groups[key] = (pair, [rank])
            else:
                group[1].append(rank)
        return [(IDSet(ranks), pair[0], pair[1]) for pair, ranks in groups.values()]

    def encode(self) -> dict[str, Any]:
        """The RFC 20 version 1 R document as a dict.

        ``R_lite`` has one entry per distinct (cores, gpus), ``nodelist`` one
        compressed hostlist in rank order (if hostnames are known),
        ``properties`` idsets (if any), and ``starttime``/``expiration`` if set.
        """
        rlite: list[dict[str, Any]] = []
        for ranks, cores, gpus in self._groups():
            children = {"core": cores.encode()}
            if gpus:
                children["gpu"] = gpus.encode()
            rlite.append({"rank": ranks.encode(), "children": children})
        execution: dict[str, Any] = {"R_lite": rlite}
        if self._hosts:
            execution["nodelist"] = [str(self._ordered_hosts())]
        if self._props:
            execution["properties"] = {name: self._props[name].encode()
                                       for name in sorted(self._props)}
        if self._starttime is not None:
            execution["starttime"] = self._starttime
        if self._expiration is not None:
            execution["expiration"] = self._expiration
        return {"version": 1, "execution": execution}

    def dumps(self) -> str:
        """:meth:`encode` as compact JSON text."""
        return orjson.dumps(self.encode()).decode()

    def summary(self) -> str:
        """Short form like flux: ``rank[0-1]/core[0-3] rank2/core[0-1],gpu0``."""
        parts = []
        for ranks, cores, gpus in self._groups():
            children = []
            if cores:
                children.append("core" + bracketed(cores))
            if gpus:
                children.append("gpu" + bracketed(gpus))
            parts.append(f"rank{bracketed(ranks)}/{','.join(children)}")
        return " ".join(parts)

    def __str__(self) -> str:
        """Same as :meth:`summary`."""
        return self.summary()

    def __repr__(self) -> str:
        """``ResourceSet('rank[0-1]/core[0-3]')``."""
        return f"ResourceSet({self.summary()!r})"

    # -- set operations ----------------------------------------------------------

    def _restricted(self, nodes: dict[int, Pair], removed: list[int] | None = None,
                    counts: tuple[int, int] | None = None) -> ResourceSet:
        """A set of *nodes* (a subset of ours) with our hostnames, properties, times.

        When the caller knows which ranks were *removed* (typically a few out
        of thousands), our tables are edited rather than rebuilt.
        """
        if removed is not None:
            gone = IDSet(removed)
            hosts = dict(self._hosts)
            for rank in removed:
                hosts.pop(rank, None)
            props: dict[str, IDSet] = {}
            for name, ids in self._props.items():
                kept = ids - gone
                if kept:
                    props[name] = kept
            result = self._build(nodes, hosts, props, self._starttime, self._expiration)
            result._cache_ranks = self._rank_set() - gone
            if not removed:
                # Same ranks, same hosts: share the (never mutated) cached list.
                result._hostlist = self._hostlist
        else:
            hosts = {r: self._hosts[r] for r in nodes} if self._hosts else {}
            props = properties_on(self._props, IDSet(nodes)) if self._props else {}
            result = self._build(nodes, hosts, props, self._starttime, self._expiration)
        result._counts = counts
        return result

    def _common(self, other: ResourceSet) -> Iterable[tuple[int, Pair]]:
        """(rank, other's pair) for ranks in both sets, looping over the smaller one."""
        theirs = other._nodes
        if len(theirs) <= len(self._nodes):
            return theirs.items()
        return ((r, theirs[r]) for r in self._nodes if r in theirs)

    def union(self, other: ResourceSet) -> ResourceSet:
        """Resources in either set; hostnames and properties of both are merged.

        starttime and expiration come from this (left) set.  ValueError if the
        two sets give one rank different hostnames, or if only some ranks of
        the result would have hostnames.
        """
        _check_operand(other, "union")
        nodes = dict(self._nodes)
        memo: dict[tuple[int, int], Pair] = {}
        added_cores = added_gpus = 0
        for rank, theirs in other._nodes.items():
            ours = nodes.get(rank)
            if ours is None:
                nodes[rank] = theirs
                added_cores += len(theirs[0])
                added_gpus += len(theirs[1])
            elif ours is not theirs:
                key = (id(ours), id(theirs))
                merged = memo.get(key)
                if merged is None:
                    merged = (ours[0] | theirs[0], ours[1] | theirs[1] or NO_IDS)
                    if merged == ours:
                        merged = ours
                    memo[key] = merged
                nodes[rank] = merged
                added_cores += len(merged[0]) - len(ours[0])
                added_gpus += len(merged[1]) - len(ours[1])
        hosts: dict[int, str] = {}
        if self._hosts or other._hosts:
            hosts = dict(self._hosts)
            for rank, name in other._hosts.items():
                mine = hosts.setdefault(rank, name)
                if mine != name:
                    raise ValueError(f"union: rank {rank} is {mine!r} in one set and "
                                     f"{name!r} in the other")
            if len(hosts) != len(nodes):
                missing = IDSet(r for r in nodes if r not in hosts)
                raise ValueError(f"union: rank(s) {missing} have no hostname while others do")
        props = {k: v.copy() for k, v in self._props.items()}
        for name, ids in other._props.items():
            old = props.get(name)
            props[name] = ids.copy() if old is None else old | ids
        result = self._build(nodes, hosts, props, self._starttime, self._expiration)
        result._cache_ranks = self._rank_set() | other._rank_set()
        if self._counts is not None:
            result._counts = (self._counts[0] + added_cores, self._counts[1] + added_gpus)
        return result

    def difference(self, other: ResourceSet) -> ResourceSet:
        """Resources of this set not in *other*; ranks left with nothing are dropped.

        Hostnames, properties and times come from this set.
        """
        _check_operand(other, "difference")
        nodes = dict(self._nodes)
        memo: dict[tuple[int, int], Pair | None] = {}
        removed: list[int] = []
        lost_cores = lost_gpus = 0
        for rank, theirs in self._common(other):
            ours = nodes.get(rank)
            if ours is None:
                continue
            if ours is theirs:
                left = None
            else:
                key = (id(ours), id(theirs))
                if key in memo:
                    left = memo[key]
                else:
                    cores = ours[0] - theirs[0]
                    gpus = ours[1] - theirs[1] or NO_IDS
                    if not cores and not gpus:
                        left = None
                    elif cores == ours[0] and gpus == ours[1]:
                        left = ours
                    else:
                        left = (cores, gpus)
                    memo[key] = left
            if left is None:
                del nodes[rank]
                removed.append(rank)
                lost_cores += len(ours[0])
                lost_gpus += len(ours[1])
            elif left is not ours:
                nodes[rank] = left
                lost_cores += len(ours[0]) - len(left[0])
                lost_gpus += len(ours[1]) - len(left[1])
        counts = None
        if self._counts is not None:
            counts = (self._counts[0] - lost_cores, self._counts[1] - lost_gpus)
        return self._restricted(nodes, removed, counts)

    def intersection(self, other: ResourceSet) -> ResourceSet:
        """Resources in both sets; ranks left with nothing are dropped.

        Hostnames, properties and times come from this set.
        """
        _check_operand(other, "intersection")
        small, large = ((self._nodes, other._nodes) if len(self._nodes) <= len(other._nodes)
                        else (other._nodes, self._nodes))
        nodes: dict[int, Pair] = {}
        memo: dict[tuple[int, int], Pair | None] = {}
        for rank in small:
            theirs = large.get(rank)
            if theirs is None:
                continue
            ours = self._nodes[rank]
            theirs = other._nodes[rank]
            if ours is theirs:
                nodes[rank] = ours
                continue
            key = (id(ours), id(theirs))
            if key in memo:
                both = memo[key]
            else:
                cores = ours[0] & theirs[0]
                gpus = ours[1] & theirs[1] or NO_IDS
                if not cores and not gpus:
                    both = None
                elif cores == ours[0] and gpus == ours[1]:
                    both = ours
                else:
                    both = (cores, gpus)
                memo[key] = both
            if both is not None:
                nodes[rank] = both
        return self._restricted(nodes)

    def copy_ranks(self, ranks: IDSet | str | Iterable[int]) -> ResourceSet:
        """The subset on *ranks* (ranks not in the set are ignored).

        Hostnames and properties are restricted to those ranks; times are kept.
        """
        if isinstance(ranks, str):
            want = decode_idset(ranks, "copy_ranks")
        elif isinstance(ranks, IDSet):
            want = ranks
        else:
            try:
                want = IDSet(ranks)
            except ValueError as exc:
                raise ValueError(f"copy_ranks: {exc}") from None
        nodes = self._nodes
        if len(want) <= len(nodes):
            picked = {r: nodes[r] for r in want if r in nodes}
        else:
            picked = {r: p for r, p in nodes.items() if r in want}
        return self._restricted(picked)

    def issubset(self, other: ResourceSet) -> bool:
        """True if every core and gpu of this set is also in *other* (metadata ignored)."""
        _check_operand(other, "issubset")
        theirs_all = other._nodes
        for rank, ours in self._nodes.items():
            theirs = theirs_all.get(rank)
            if theirs is None:
                return False
            if ours is not theirs and not (ours[0].issubset(theirs[0])
                                           and ours[1].issubset(theirs[1])):
                return False
        return True

    def __or__(self, other: ResourceSet) -> ResourceSet:
        """Same as :meth:`union`."""
        if not isinstance(other, ResourceSet):
            return NotImplemented
        return self.union(other)

    def __sub__(self, other: ResourceSet) -> ResourceSet:
        """Same as :meth:`difference`."""
        if not isinstance(other, ResourceSet):
            return NotImplemented
        return self.difference(other)

    def __and__(self, other: ResourceSet) -> ResourceSet:
        """Same as :meth:`intersection`."""
        if not isinstance(other, ResourceSet):
            return NotImplemented
        return self.intersection(other)

    def __le__(self, other: ResourceSet) -> bool:
        """Same as :meth:`issubset`."""
        if not isinstance(other, ResourceSet):
            return NotImplemented
        return self.issubset(other)


def properties_on(props: Mapping[str, IDSet], ranks: IDSet) -> dict[str, IDSet]:
    """Each property's ranks among ``ranks``; properties on none of them left out."""
    return {name: ids & ranks for name, ids in props.items() if ids.intersects(ranks)}


def _check_operand(other: object, op: str) -> None:
    """ValueError unless *other* is a ResourceSet."""
    if not isinstance(other, ResourceSet):
        raise ValueError(f"{op}: expected a ResourceSet, got {type(other).__name__}")


def decode_times(execution: Mapping[str, Any]) -> tuple[Seconds | None, Seconds | None]:
    """An R document's ``execution`` start time and expiration, checked (ValueError)."""
    start = exp = None
    if "starttime" in execution:
        start = check_time(execution["starttime"], "R: execution.starttime")
    if "expiration" in execution:
        exp = check_time(execution["expiration"], "R: execution.expiration")
    if start is not None and exp is not None and exp < start:
        raise ValueError(f"R: execution.expiration {exp} is before starttime {start}")
    return start, exp
