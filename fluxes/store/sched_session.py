"""The scheduler's writes and reads of its RFC 27 session (what the worker applies).

The pure session (:mod:`fluxes.domain.sched.session`) decides; these methods
write what it decided: a hello or an error fenced by the partition's epoch,
R and responses in one fenced commit (each R fenced on its job waiting for
it), resource events and the job manager's raise requests, the liveness
verdict with the published resource summary.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import redis

from fluxes import messages as proto
from fluxes.store import jobhash
from fluxes.store.direct import stream_entries
from fluxes.store.eventstore import Batch, EventStore, commit_then
from fluxes.store.keys import Keys
from fluxes.store.resources import resource_event

__all__ = ["MESSAGES_PER_ENTRY", "SessionStreams"]

#: Responses per entry of a response stream at most.
MESSAGES_PER_ENTRY = 1000


class SessionStreams:
    """One scheduler's session streams: requests read by position, responses fenced."""

    def __init__(self, client: redis.Redis, keys: Keys, store: EventStore) -> None:
        self.redis = client
        self.keys = keys
        self.store = store

    def last_request(self, partition: int) -> str:
        """The id of the newest request on the partition's stream ("0-0": none): a new
        epoch reads after it."""
        last = self.redis.xrevrange(self.keys.sched_req(partition), count=1)
        return str(last[0][0].decode()) if last else "0-0"

    def say(self, partition: int, epoch: int, msgs: Sequence[proto.SchedResponse]) -> None:
        """One entry of responses (hello, an error) fenced by ``epoch``; FencedError when a
        newer scheduler leads the partition."""
        keys = self.keys
        batch = self.store.batch(partition, fence=keys.sched_fence(partition))
        batch.xadd(keys.sched_resp(partition), proto.encode_entry(list(msgs), epoch))
        self.store.commit(batch, str(epoch))

    def answer(self, partition: int, epoch: int, rs: Mapping[int, bytes],
               msgs: Sequence[proto.SchedResponse]) -> None:
        """R of allocated jobs and the responses, atomically, fenced by ``epoch`` and each
        R on its job waiting for one: FencedError (a newer scheduler), NotWaitingError
        (naming the jobs that wait for none; nothing written)."""
        self.store.commit(self._answer_batch(partition, epoch, rs, msgs), str(epoch))

    def _answer_batch(self, partition: int, epoch: int, rs: Mapping[int, bytes],
                      msgs: Sequence[proto.SchedResponse]) -> Batch:
        keys = self.keys
        batch = self.store.batch(partition, fence=keys.sched_fence(partition))
        for jobid, data in rs.items():
            # jobhash.set_r's write, fenced on the job (commit.lua, op R)
            batch.set_if_waiting(keys.job(jobid), keys.eventlog(jobid), jobid, jobhash.R, data)
        for entry in proto.encode_chunks(list(msgs), epoch, MESSAGES_PER_ENTRY,
                                         proto.SCHED_RESPONSES.max_bytes, time.time()):
            batch.xadd(keys.sched_resp(partition), entry)
        return batch

    def answer_then_read(self, partition: int, epoch: int, rs: Mapping[int, bytes],
                         msgs: Sequence[proto.SchedResponse], streams: Mapping[str, str],
                         count: int, block: int | None) -> list[Any]:
        """:meth:`answer`, then XREAD of ``streams`` (blocking up to ``block`` ms), sent in
        one write: one round trip for both; every stream must share the answer's slot.

        Raises as :meth:`answer` does, and then the entries read are dropped: the
        scheduler reads by position, which has not moved, so it reads them again.
        """
        batch = self._answer_batch(partition, epoch, rs, msgs)
        keys, args = batch.script_args(str(epoch))
        read: list[Any] = ["XREAD", "COUNT", count]
        if block is not None:
            read += ["BLOCK", block]
        read += ["STREAMS", *streams.keys(), *streams.values()]
        _result, got = commit_then(self.redis, self.store.commit_source, keys, args, read)
        if isinstance(got, redis.ResponseError):
            raise got
        return stream_entries(got)

    def report(self, events: Iterable[tuple[str, str, str, bool]],
               raises: Mapping[int, Sequence[proto.RaiseRequest]]) -> None:
        """Drain/undrain events (kind, ranks, reason, auto) and raise requests for the
        job managers, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for partition, msgs in raises.items():
            for msg in msgs:
                pipe.xadd(self.keys.jm_ctl(partition), proto.encode_entry([msg]))
        for kind, ranks, reason, auto in events:
            pipe.xadd(self.keys.resource_events,
                      {"d": resource_event(kind, ranks, reason, auto=auto)})
        pipe.execute()

    def report_liveness(self, lost: str, back: str, summary: Mapping[str, Any]) -> None:
        """Drain the ranks of silent exec workers (telling each job manager), undrain
        those back, and publish the resource summary, in one round trip."""
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        if lost:
            pipe.xadd(keys.resource_events, {"d": resource_event(
                "drain", lost, "exec worker not responding", auto=True)})
            for p in range(keys.partitions):
                pipe.xadd(keys.jm_ctl(p), proto.encode_entry([proto.LostRanks(ranks=lost)]))
        if back:
            pipe.xadd(keys.resource_events, {"d": resource_event("undrain", back, auto=True)})
        pipe.set(keys.sched_status, orjson.dumps(summary))
        pipe.execute()
