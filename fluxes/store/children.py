"""Retention of child instances: purging a batch/alloc job takes its child's keys with it.

A job that ran a child instance (``fluxes batch``, ``fluxes alloc``) is named in
the parent's ``{ns}:children`` hash (job id -> child namespace). Every key of the
child carries the child's hash tag, ``{<child>}`` (a child has one partition;
``{<child>:p<k>}`` should it have several), and the keys of the instances the
child ran in turn carry ``{<child>.<job id>...}``, deeper levels alike
(:func:`fluxes.domain.nested.child_namespace`). So the keys of a child and of all
its descendants are exactly those whose hash tag's namespace is the child's or
starts with the child's and a dot.

Purging a job (:func:`fluxes.store.retention.purge`) moves its child's namespace
from ``{ns}:children`` to ``{ns}:children:purged`` (:func:`doom_children`);
:class:`ChildSweeper` then deletes the keys of the namespaces in that set a
bounded slice at a time: one ``SCAN`` of ``SCAN_COUNT`` keys per call, over the
keys of every child of this instance (``MATCH {<ns>.[0-9]*``), unlinking those
of a doomed namespace. A namespace leaves the set once a whole pass over the
keyspace that started after it was doomed has found nothing more of it, so
keys created while a pass ran are found by the next. Never ``KEYS``: a
keyspace of millions of keys is walked in many small steps, each a few
milliseconds of Redis time. The job-list worker sweeps with its housekeeping,
``fluxes job purge`` to the end before it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from redis.cluster import RedisCluster

from fluxes.domain.nested import CHILD_SEP
from fluxes.store.direct import Direct
from fluxes.store.keys import Keys
from fluxes.store.security import glob_escape

#: Keys looked at per SCAN call (Redis' COUNT hint).
SCAN_COUNT = 1000
#: SCAN calls one sweep step makes at most.
SCANS_PER_STEP = 4


def doom_children(client: Any, keys: Keys, jobids: Iterable[int]) -> list[str]:
    """Hand the child instances of ``jobids`` (those that ran one) over to the sweeper:
    their namespaces go from ``{ns}:children`` to ``{ns}:children:purged``, in one
    MULTI/EXEC (both keys are in the global slot). The namespaces doomed."""
    ids = [str(j) for j in dict.fromkeys(jobids)]
    if not ids:
        return []
    found = client.hmget(keys.children, ids)
    named = [(jobid, ns.decode()) for jobid, ns in zip(ids, found, strict=True) if ns]
    if not named:
        return []
    Direct.of(client, keys.children).transaction([
        ("SADD", keys.children_purged, *(ns for _j, ns in named)),
        ("HDEL", keys.children, *(jobid for jobid, _ns in named))])
    return [ns for _j, ns in named]


def _namespace_of(key: bytes) -> str | None:
    """The namespace in a key's hash tag (``{fx.12:p3}:journal`` -> ``fx.12``)."""
    if not key.startswith(b"{"):
        return None
    end = key.find(b"}")
    if end < 0:
        return None
    return key[1:end].decode("utf-8", "replace").split(":", 1)[0]


def doomed_by(ns: str, doomed: frozenset[str]) -> bool:
    """True when namespace ``ns`` is one of ``doomed`` or a descendant of one."""
    while True:
        if ns in doomed:
            return True
        head, sep, _tail = ns.rpartition(CHILD_SEP)
        if not sep:
            return False
        ns = head


class ChildSweeper:
    """Deletes the keys of purged jobs' child instances, a bounded step at a time.

    ``step`` makes at most ``scans`` SCAN calls (``SCAN_COUNT`` keys each) and
    returns how many keys it unlinked; ``done`` says whether nothing is left to
    sweep. State is in memory: a sweeper created again (a restarted worker)
    starts its pass over, which deletes nothing twice and misses nothing.
    """

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self.pattern = "{" + glob_escape(keys.ns + CHILD_SEP) + "[0-9]*"
        self._doomed: frozenset[str] = frozenset()
        self._cursor: Iterator[list[bytes]] | None = None
        self.deleted = 0

    def _scan(self) -> Iterator[list[bytes]]:
        """One pass over the instance's child keys, one SCAN reply at a time."""
        if isinstance(self.client, RedisCluster):
            # a cluster client walks every primary in turn; its iterator keeps the cursors
            batch: list[bytes] = []
            for key in self.client.scan_iter(match=self.pattern, count=SCAN_COUNT):
                batch.append(key)
                if len(batch) >= SCAN_COUNT:
                    yield batch
                    batch = []
            yield batch
            return
        cursor = 0
        while True:
            cursor, found = self.client.scan(cursor, match=self.pattern, count=SCAN_COUNT)
            yield list(found)
            if not cursor:
                return

    def step(self, scans: int = SCANS_PER_STEP) -> int:
        """Sweep on for at most ``scans`` SCAN calls; the number of keys unlinked."""
        if self._cursor is None:
            members = self.client.smembers(self.keys.children_purged)
            if not members:
                return 0
            self._doomed = frozenset(m.decode() for m in members)
            self._cursor = self._scan()
        removed = 0
        for _ in range(scans):
            found = next(self._cursor, None)
            if found is None:
                # a whole pass found every key of these namespaces: they are gone
                self.client.srem(self.keys.children_purged, *self._doomed)
                self._cursor = None
                break
            doomed = [k for k in found
                      if (ns := _namespace_of(k)) is not None and doomed_by(ns, self._doomed)]
            if doomed:
                removed += self._unlink(doomed)
        self.deleted += removed
        return removed

    def _unlink(self, doomed: list[bytes]) -> int:
        """UNLINK ``doomed`` (one call per key on a cluster, where they span slots)."""
        if isinstance(self.client, RedisCluster):
            return sum(int(self.client.unlink(k)) for k in doomed)
        return int(self.client.unlink(*doomed))

    @property
    def sweeping(self) -> bool:
        """True while a pass is under way."""
        return self._cursor is not None

    @property
    def done(self) -> bool:
        """True when no pass is under way and no namespace waits to be swept."""
        return self._cursor is None and not self.client.scard(self.keys.children_purged)

    def run(self) -> int:
        """Sweep until nothing is left (``fluxes job purge``); the keys unlinked."""
        total = 0
        while True:
            total += self.step()
            if self.done:
                return total


__all__ = ["SCAN_COUNT", "ChildSweeper", "doom_children", "doomed_by"]
