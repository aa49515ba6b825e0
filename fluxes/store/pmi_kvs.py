"""A job's PMI exchange between its ranks, in Redis (docs/exec.md, "PMI and MPI").

Each job that runs on several ranks and speaks PMI has one hash,
``{ns}:pmi:<owner>:<id>`` (:meth:`~fluxes.store.keys.Keys.pmi`: the owner's
uid in the name lets ACLs keep it private, as the job's output): the KVS and
the barrier rounds. A rank's exec worker enters a round once all its tasks
have, in one atomic step (``fluxes/store/lua/pmi.lua``) that stores its
puts and counts it; the step of the last rank sends a ``pmi`` message on every
rank's request stream, which wakes their workers' blocking reads at once (no
polling). A worker fetches the KVS (one ``HGETALL``) when a task next asks
for a key. When a rank's tasks have all ended, it leaves: an unclean leave (a
task gone before ``PMI_Finalize``) breaks the job, and the ranks waiting in a
round are woken with the reason; the last rank to leave deletes the hash, and
a purge deletes whatever is left (``fluxes/store/retention.py``).

Every key is in the global slot, with the request streams, so one step
touches them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from fluxes.store.direct import Direct
from fluxes.store.keys import Keys
from fluxes.store.scripts import lua_source

PMI_LUA = lua_source("pmi")
_PMI_SHA = hashlib.sha1(PMI_LUA.encode()).hexdigest()

#: Prefix of the KVS fields in the job's hash.
KVS_PREFIX = b"k:"


class Entered(NamedTuple):
    """What entering a barrier round gave: ``state`` "done" (this rank completed the
    round), "wait" (others have not entered yet) or "broken" (``reason`` says why)."""

    state: str
    reason: str = ""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class PmiKvs:
    """The PMI hashes of jobs, and the request streams a completed round wakes."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.keys = keys
        self.direct = Direct.of(client, keys.exec_registry)  # the global slot

    def _keys(self, owner: int, jobid: int, ranks: Iterable[int]) -> list[str]:
        return [self.keys.pmi(owner, jobid), *(self.keys.exec_rank(r) for r in ranks)]

    def enter(self, owner: int, jobid: int, ranks: Sequence[int], node: int, round_: int,
              puts: Mapping[str, str]) -> Entered:
        """Enter barrier round ``round_`` for node ``node`` of the job on ``ranks``,
        storing its ``puts``."""
        args: list[Any] = ["enter", jobid, node, len(ranks), round_]
        for key, value in puts.items():
            args += (key, value)
        reply = self.direct.evalsha(_PMI_SHA, PMI_LUA, self._keys(owner, jobid, ranks), args)
        state = _text(reply[0])
        return Entered(state, _text(reply[1]) if state == "broken" else "")

    def leave(self, owner: int, jobid: int, ranks: Sequence[int], node: int, clean: bool,
              reason: str) -> None:
        """Node ``node``'s tasks all ended (``clean``: all of them finalized)."""
        self.direct.evalsha(_PMI_SHA, PMI_LUA, self._keys(owner, jobid, ranks),
                            ["leave", jobid, node, len(ranks), "1" if clean else "0",
                             reason])

    def fetch(self, owner: int, jobid: int) -> dict[str, str]:
        """The job's KVS as it stands."""
        raw = self.direct.call("HGETALL", self.keys.pmi(owner, jobid))
        flat = raw if isinstance(raw, list) else [x for kv in dict(raw).items() for x in kv]
        out = {}
        for i in range(0, len(flat) - 1, 2):
            name = flat[i]
            if isinstance(name, bytes) and name.startswith(KVS_PREFIX):
                out[name[2:].decode("ascii", "replace")] = _text(flat[i + 1])
        return out
