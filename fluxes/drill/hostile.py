"""``fluxes drill --hostile``: poison and forged entries on every stream, mixed into the load.

Each round writes, on every stream a user or a worker can write, entries no
reader can take (not JSON, nested deeper than the stream's bound, of the
wrong types, and once per drill one byte over the stream's size bound), and
entries that decode but lie:

* ``jm:new``: a new job that does not exist, and one replaying a finished job;
* ``jm:ctl``: a cancel of a running job whose reply names a key of another
  type, and one whose reply key is outside the reply lists;
* ``sched:req``: ``prioritize`` with ``["x","y"]``, an ``alloc`` with a
  string ``t_submit``, an ``alloc`` replaying a finished job (its R must
  not change);
* ``sched:resp``: ``hello``, ``ready`` and ``error`` with the current and
  an older scheduler epoch (scheduling must heal from a suspension);
* ``exec:events``, ``exec:rank:<r>``, ``resource:events``: malformed and
  deep entries;
* the user's submit stream: the regression entries of the ingest crash loop
  (a job item nested 300 levels, a ``t`` nested 1,000), and a request sent
  twice with the same request id (the drill's runner checks both answers
  name the same jobs).

What it wrote is checked at the end (:meth:`Hostile.check`), besides every
usual invariant: each poison entry was dead-lettered, no input is left
pending in the job manager's or the ingest's groups, and no finished job's
R changed. The oversized entries are deleted again when the drill ends.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes import messages as proto
from fluxes.drill.invariants import Violation
from fluxes.store import jobhash
from fluxes.store.instance import Instance
from fluxes.store.jobhash import JobHashes
from fluxes.store.keys import GROUP_INGEST, GROUP_JM

#: Nesting of the deep entries: deeper than every stream's bound (at most 72).
DEEP = 200


def deep(levels: int) -> bytes:
    """An object nested ``levels`` deep."""
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


def envelope(*msgs: Mapping[str, Any], epoch: int = 0) -> dict[str, bytes]:
    """A message stream entry holding ``msgs``."""
    return {"d": orjson.dumps({"e": epoch, "m": list(msgs)})}


@dataclass
class Written:
    """A hostile entry the drill wrote, and whether a dead letter must name it."""

    stream: str
    id: str
    what: str
    refused: bool
    oversized: bool = False

    @property
    def at(self) -> float:
        """When Redis added it (UNIX time, from its stream id)."""
        return int(self.id.partition("-")[0]) / 1000


@dataclass
class Hostile:
    """Writes the hostile entries of a drill and checks what became of them."""

    inst: Instance
    user: str
    ranks: int
    rng: random.Random
    written: list[Written] = field(default_factory=list)
    #: the stored R of finished jobs whose alloc request was replayed
    r_before: dict[int, bytes | None] = field(default_factory=dict)
    rounds: int = 0

    # ------------------------------------------------------------ writing

    def _add(self, stream: str, fields: Mapping[str, Any], what: str, refused: bool,
             oversized: bool = False) -> None:
        sid = self.inst.redis.xadd(stream, dict(fields))
        sid_text = sid.decode() if isinstance(sid, bytes) else str(sid)
        self.written.append(Written(stream, sid_text, what, refused, oversized))

    def _epochs(self, partition: int) -> int:
        raw = self.inst.redis.get(self.inst.keys.sched_fence(partition))
        try:
            return int(raw) if raw else 0
        except ValueError:
            return 0

    def round(self, finished: Sequence[int], running: Sequence[int]) -> None:
        """Write one round of hostile entries; ``finished`` and ``running`` are drill jobs
        (the first round also writes the oversized ones)."""
        keys = self.inst.keys
        first = self.rounds == 0
        self.rounds += 1
        submit = keys.submit(self.user)
        self._malformed(submit, "request", depth_limit=proto.REQUEST_DEPTH)
        self._add(submit, {"d": b'{"t": "submit", "req": "h-deep", "jobs": [' + deep(300)
                           + b"]}"}, "submit item nested 300 levels", True)
        self._add(submit, {"d": b'{"t": ' + b"[" * 1000 + b"]" * 1000 + b', "req": "h-t"}'},
                  "request type nested 1000 levels", True)
        self._add(submit, {"d": b'{"t": "submit", "req": "h-u", "jobs": [{"urgency": '
                           + b"[" * 60 + b"]" * 60 + b"}]}"}, "urgency of the wrong type", True)
        if first:
            self._oversized(submit, max(proto.MAX_REQUEST_BYTES,
                                        4 * self.inst.config().ingest.max_jobspec_bytes))
        for p in range(keys.partitions):
            self._partition(p, finished, running, first)
        for rank in range(self.ranks):
            stream = keys.exec_rank(rank)
            self._malformed(stream, "exec request", depth_limit=proto.EXEC_REQUESTS.max_depth)
            if first:
                self._oversized(stream, proto.EXEC_REQUESTS.max_bytes)
        events = keys.resource_events
        self._add(events, {"d": b'{"t": "drain", "ranks": ' + deep(DEEP) + b"}"},
                  "drain nested too deep", True)
        self._add(events, {"d": b'{"t": "melt", "ranks": "0"}'}, "unknown resource event", True)
        self._add(events, {"d": b'{"t": "drain", "ranks": "x"}'}, "drain of no ranks", True)

    def _partition(self, p: int, finished: Sequence[int], running: Sequence[int],
                   first: bool) -> None:
        keys = self.inst.keys
        mine_done = [j for j in finished if keys.partition_of(j) == p]
        mine_running = [j for j in running if keys.partition_of(j) == p]
        epoch = self._epochs(p)
        # jm:new: a job that does not exist, a finished one replayed
        new = keys.jm_new(p)
        self._malformed(new, "new job", depth_limit=proto.NEW_JOBS.max_depth)
        ghost = self._ghost(p)
        self._add(new, envelope({"t": "new", "id": ghost, "userid": 0, "urgency": 16,
                                 "flags": 0, "t_submit": 1.0}),
                  "new job that does not exist", True)
        if mine_done:
            done = self.rng.choice(mine_done)
            self._add(new, envelope({"t": "new", "id": done, "userid": 0, "urgency": 16,
                                     "flags": 0, "t_submit": 1.0}),
                      "new job replaying a finished one", True)
        # jm:ctl: replies to keys of another type, or outside the reply lists
        ctl = keys.jm_ctl(p)
        self._malformed(ctl, "control request", depth_limit=proto.CONTROL.max_depth)
        wrong_type = keys.reply(self.user, f"hostile-{p}")
        self.inst.redis.set(wrong_type, "not a list")
        victims = mine_running[:1] or [ghost]
        self._add(ctl, envelope({"t": "cancel-request", "ids": victims, "userid": 0,
                                 "note": "hostile", "reply": wrong_type}),
                  "cancel whose reply key holds a string", True)
        self._add(ctl, envelope({"t": "cancel-request", "ids": victims, "userid": 0,
                                 "note": "hostile", "reply": keys.journal(p)}),
                  "cancel whose reply key is the journal", True)
        # sched:req (the scheduler's input)
        req = keys.sched_req(p)
        self._malformed(req, "scheduler request", depth_limit=proto.SCHED_REQUESTS.max_depth)
        self._add(req, envelope({"t": "prioritize", "jobs": [["x", "y"]]}, epoch=epoch),
                  "prioritize with strings", True)
        self._add(req, envelope({"t": "alloc", "id": ghost, "priority": 1, "userid": 0,
                                 "t_submit": "yesterday"}, epoch=epoch),
                  "alloc with a string t_submit", True)
        if mine_done:
            done = self.rng.choice(mine_done)
            self.r_before.setdefault(done, JobHashes(self.inst.redis, keys).field(
                [done], jobhash.R)[0])
            # the scheduler dead-letters it once its allocation is refused
            self._add(req, envelope({"t": "alloc", "id": done, "priority": 16, "userid": 0,
                                     "t_submit": 1.0}, epoch=epoch),
                      "alloc replaying a finished job", False)
        # sched:resp (the job manager's input): forged session messages
        resp = keys.sched_resp(p)
        self._malformed(resp, "scheduler response", depth_limit=proto.SCHED_RESPONSES.max_depth)
        forged: list[tuple[dict[str, Any], int]] = [
            ({"t": "hello"}, epoch - 1), ({"t": "hello"}, epoch),
            ({"t": "ready", "mode": "single", "limit": 1}, epoch - 1),
            ({"t": "ready", "mode": "single", "limit": 1}, epoch),
            ({"t": "error", "note": "forged"}, epoch - 1),
            ({"t": "error", "note": "forged"}, epoch)]
        for msg, e in self.rng.sample(forged, len(forged)):
            self._add(resp, envelope(msg, epoch=e), f"forged {msg['t']} of epoch {e}", False)
        # exec:events (the job manager's input)
        events = keys.exec_events(p)
        self._malformed(events, "exec report", depth_limit=proto.EXEC_EVENTS.max_depth)
        self._add(events, envelope({"t": "exec", "id": ghost, "rank": 0, "started": True,
                                    "status": 0, "released": True}),
                  "exec report of a job that does not exist", False)
        if first:
            for stream, channel in ((new, proto.NEW_JOBS), (ctl, proto.CONTROL),
                                    (req, proto.SCHED_REQUESTS), (resp, proto.SCHED_RESPONSES),
                                    (events, proto.EXEC_EVENTS)):
                self._oversized(stream, channel.max_bytes)

    def _ghost(self, partition: int) -> int:
        """A job id of ``partition`` that no job has."""
        parts = self.inst.keys.partitions
        base = self.rng.randrange(1 << 40, 1 << 50)
        return base - base % parts + partition

    def _malformed(self, stream: str, what: str, depth_limit: int) -> None:
        """Entries no reader of ``stream`` can take: no field, not JSON, too deep."""
        self._add(stream, {"x": "no d field"}, f"{what} without its field", True)
        self._add(stream, {"d": b"{not json"}, f"{what} that is not JSON", True)
        self._add(stream, {"d": b'{"e": 0, "m": [' + deep(max(DEEP, depth_limit + 8)) + b"]}"},
                  f"{what} nested too deep", True)

    def _oversized(self, stream: str, limit: int) -> None:
        """One entry a byte over ``stream``'s size bound."""
        pad = limit + 1 - len(b'{"e": 0, "m": [{"t": "x", "pad": ""}]}')
        raw = b'{"e": 0, "m": [{"t": "x", "pad": "' + b"y" * pad + b'"}]}'
        self._add(stream, {"d": raw}, f"entry of {len(raw)} bytes", True, oversized=True)

    # ------------------------------------------------------------ checking

    def check(self, restarts: Sequence[float] = ()) -> list[Violation]:
        """What must hold of the hostile entries once the workload is done.

        ``restarts`` are the times the drill killed a scheduler, a job manager
        or Redis: each starts a new scheduler session, which reads the request
        stream from its end, so a request entry written before one need not
        have been read at all.
        """
        out: list[Violation] = []
        inst = self.inst
        lettered: set[tuple[str, str]] = set()
        for _sid, fields in inst.redis.xrange(inst.keys.dead_letters):
            lettered.add((fields.get(b"stream", b"").decode("utf-8", "replace"),
                          fields.get(b"id", b"").decode("utf-8", "replace")))
        requests = {inst.keys.sched_req(p) for p in range(inst.keys.partitions)}
        for entry in self.written:
            if entry.stream in requests and any(t >= entry.at - 1.0 for t in restarts):
                continue  # maybe never read: a new session skipped it
            if entry.refused and (entry.stream, entry.id) not in lettered:
                out.append(Violation("every poison entry is dead-lettered", (),
                                     f"{entry.what} ({entry.stream} {entry.id}) has no "
                                     "dead letter"))
        keys = inst.keys
        groups = [(keys.submit(self.user), GROUP_INGEST)]
        for p in range(keys.partitions):
            groups += [(keys.jm_new(p), GROUP_JM), (keys.jm_ctl(p), GROUP_JM),
                       (keys.sched_resp(p), GROUP_JM), (keys.exec_events(p), GROUP_JM)]
        for stream, group in groups:
            pending = inst.redis.xpending(stream, group)
            if pending and pending.get("pending"):
                out.append(Violation("no input left pending", (),
                                     f"{pending['pending']} entries of {stream} are pending "
                                     f"in group {group}"))
        if self.r_before:
            ids = sorted(self.r_before)
            now = JobHashes(inst.redis, keys).field(ids, jobhash.R)
            for jobid, r in zip(ids, now, strict=True):
                if r != self.r_before[jobid]:
                    out.append(Violation("a replayed alloc writes no R", (jobid,),
                                         "the finished job's stored R changed"))
        return out

    def cleanup(self) -> None:
        """Delete the oversized entries (megabytes each) and the wrong-typed reply keys."""
        keys = self.inst.keys
        for entry in self.written:
            if entry.oversized:
                self.inst.redis.xdel(entry.stream, entry.id)
        for p in range(keys.partitions):
            self.inst.redis.delete(keys.reply(self.user, f"hostile-{p}"))
