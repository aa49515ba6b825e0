"""``fluxes drill``: kill workers with SIGKILL under load, then check the invariants.

The drill runs a workload of simulated jobs on an instance it starts itself
(so it can kill and restart any process, Redis included) or on a running one
(``--uri``: it kills that instance's workers on this host, and the
instance's own supervisor restarts them), kills the chosen worker kind at
random moments, and in the end checks what must always hold:

* every submitted job reaches INACTIVE exactly once, with the right result;
* no core or GPU was held by two jobs at any instant (eventlogs + R);
* every eventlog replays cleanly, and the job-list read model equals a
  fresh rebuild from the journal;
* nothing is left allocated: the scheduler's pool equals what the stored R
  of jobs still holding resources says (none, once all jobs are done);
* recovery time per kill (from the kill to the next allocation).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes.client import Client
from fluxes.drill import collect
from fluxes.drill.invariants import (
    Violation,
    allocation_intervals,
    check_jobs,
    check_no_double_allocation,
)
from fluxes.drill.targets import OwnInstance, RunningInstance, Target
from fluxes.errors import FluxesError
from fluxes.instance import Instance
from fluxes.job.states import JobResult
from fluxes.joblist.model import ReadModel
from fluxes.joblist.store import JobListStore
from fluxes.jobspec import Jobspec
from fluxes.store.eventstore import EventStore
from fluxes.store.groups import read_streams

KINDS = ("scheduler", "job-manager", "exec", "ingest", "job-list", "redis")


@dataclass
class DrillResult:
    """What a drill did and found."""

    jobs: int = 0
    kills: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    lost_submissions: int = 0
    elapsed: float = 0.0
    #: Checks that were skipped, and why.
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every invariant held."""
        return not self.violations

    def figures(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        recov = [k["recovery_s"] for k in self.kills if k.get("recovery_s") is not None]
        return {
            "ok": self.ok, "jobs": self.jobs, "kills": len(self.kills),
            "kills_by_kind": {k: sum(1 for x in self.kills if x["kind"] == k)
                              for k in sorted({x["kind"] for x in self.kills})},
            "recovery_median_s": statistics.median(recov) if recov else None,
            "recovery_max_s": max(recov) if recov else None,
            "lost_submissions": self.lost_submissions,
            "elapsed_s": round(self.elapsed, 2),
            "violations": [str(v) for v in self.violations[:50]],
            "notes": self.notes,
        }


class Drill:
    """One drill on a private instance, or on the running instance at ``uri``."""

    def __init__(self, jobs: int = 500, kill: str = "any", rounds: int = 5, seed: int = 1,
                 nodes: int = 2, cores_per_node: int = 4, appendfsync: str = "always",
                 timeout: float = 300.0, uri: str | None = None) -> None:
        if kill != "any" and kill not in KINDS:
            raise ValueError(f"--kill must be one of {', '.join(('any', *KINDS))}")
        if jobs < 1 or rounds < 0:
            raise ValueError("--jobs must be >= 1 and --rounds >= 0")
        if uri is not None and kill == "redis":
            raise ValueError("--kill redis needs the drill's own instance (drop --uri)")
        self.uri = uri
        self.njobs = jobs
        self.kill = kill
        self.rounds = rounds
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.cores = cores_per_node
        self.appendfsync = appendfsync
        self.timeout = timeout
        self.result = DrillResult()

    # ------------------------------------------------------------ running

    def run(self) -> DrillResult:
        """Run the workload with kills on the instance, check, stop what the drill started."""
        started = time.monotonic()
        target: Target = (RunningInstance(self.uri) if self.uri is not None
                          else OwnInstance(self.nodes, self.cores, self.appendfsync))
        try:
            self._drive(target)
        finally:
            target.close()
        self.result.elapsed = time.monotonic() - started
        return self.result

    def _drive(self, target: Target) -> None:
        client = Client(target.inst)
        ids: list[int] = []
        batches = max(self.rounds, 1) * 2
        per_batch = max(1, self.njobs // batches)
        kills_at = set(self.rng.sample(range(batches), min(self.rounds, batches)))
        for batch in range(batches):
            count = per_batch if batch < batches - 1 else self.njobs - per_batch * (batches - 1)
            if count > 0:
                ids += self._submit(client, count)
            self._supervise(target, self.rng.uniform(0.05, 0.4))
            if batch in kills_at:
                self._kill_one(target)
                client = Client(target.inst)
        self.result.jobs = len(ids)
        self._wait(target, ids)
        self._check(target, ids)

    def _submit(self, client: Client, count: int) -> list[int]:
        specs = []
        for _ in range(count):
            runtime = f"{self.rng.randint(5, 60)}ms"
            specs.append({"jobspec": Jobspec.from_command(["true"], cwd="/tmp", attributes={
                "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()})
        for attempt in range(50):
            try:
                return [int(i) for i in client.submit(specs, timeout=60) if isinstance(i, int)]
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        return []

    def _supervise(self, target: Target, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            target.supervise()
            time.sleep(0.02)

    def _kill_one(self, target: Target) -> None:
        kinds = KINDS if target.owns_redis else tuple(k for k in KINDS if k != "redis")
        kind = self.kill if self.kill != "any" else self.rng.choice(kinds)
        record: dict[str, Any] = {"kind": kind}
        if kind == "redis":
            killed_at = time.time()
            target.kill_redis(self.rng.uniform(0.05, 0.3))
        else:
            names = target.killable(kind)
            if not names:
                raise FluxesError(f"no {kind} worker of this instance runs on this host")
            name = self.rng.choice(names)
            record["worker"] = name
            killed_at = time.time()
            target.kill_worker(name)
        record["at"] = killed_at
        record["recovery_s"] = self._recovery(target, killed_at,
                                              None if kind == "redis" else kind)
        self.result.kills.append(record)

    def _replacement_started(self, inst: Instance, kind: str, since: float) -> float | None:
        """When the restarted worker of ``kind`` started (from the worker registry)."""
        for raw in inst.redis.hvals(inst.keys.workers):
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if rec.get("kind") == kind and float(rec.get("started", 0)) >= since:
                return float(rec["started"])
        return None

    def _recovery(self, target: Target, since: float, kind: str | None,
                  limit: float = 60.0) -> float | None:
        """Seconds from the kill to the first allocation made after the worker's replacement
        started (after Redis came back, for a Redis kill); when no job waits, until the
        replacement started."""
        inst = target.inst
        deadline = time.monotonic() + limit
        replaced = since
        while kind is not None and time.monotonic() < deadline:
            target.supervise()
            started = self._replacement_started(inst, kind, since)
            if started is not None:
                replaced = started
                break
            time.sleep(0.02)
        pos = {inst.keys.journal(p): f"{int(replaced * 1000)}-0"
               for p in range(inst.keys.partitions)}
        while time.monotonic() < deadline:
            target.supervise()
            try:
                reply = read_streams(inst.redis, pos, 1000, 100)
            except Exception:
                time.sleep(0.05)
                continue
            for stream, entries in reply or []:
                pos[stream.decode()] = entries[-1][0].decode()
                for sid, fields in entries:
                    if fields.get(b"n") == b"alloc":
                        return int(sid.split(b"-")[0]) / 1000 - since
            if not self._anything_pending(inst):
                # nothing to allocate: the replacement being up is the recovery
                return replaced - since if kind is not None else None
        return None

    def _anything_pending(self, inst: Instance) -> bool:
        try:
            counts = JobListStore(inst.redis, inst.keys).counters()
        except Exception:
            return True
        return any(counts.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))

    def _wait(self, target: Target, ids: list[int]) -> None:
        inst = target.inst
        deadline = time.monotonic() + self.timeout
        left = set(ids)
        while left and time.monotonic() < deadline:
            target.supervise()
            batch = sorted(left)[:5000]
            pipe = inst.redis.pipeline(transaction=False)
            for jobid in batch:
                pipe.hget(inst.keys.job(jobid), "result")
            for jobid, result in zip(batch, pipe.execute(), strict=True):
                if result:
                    left.discard(jobid)
            time.sleep(0.1)
        # let the job list catch up with the journal before comparing
        while time.monotonic() < deadline and not self._joblist_caught_up(inst):
            self._supervise(target, 0.2)

    def _joblist_caught_up(self, inst: Instance) -> bool:
        """True when the job list has read and acknowledged every journal entry."""
        from fluxes.store.keys import GROUP_JOBLIST

        for p in range(inst.keys.partitions):
            key = inst.keys.journal(p)
            last = inst.redis.xrevrange(key, count=1)
            groups = {g["name"]: g for g in inst.redis.xinfo_groups(key)}
            group = groups.get(GROUP_JOBLIST.encode()) or groups.get(GROUP_JOBLIST)
            if group is None or group["pending"]:
                return False
            if last and group["last-delivered-id"] != last[0][0]:
                return False
        return True

    # ------------------------------------------------------------ checks

    def _check(self, target: Target, ids: list[int]) -> None:
        inst = target.inst
        logs = collect.eventlogs(inst, ids)
        missing = [j for j, log in logs.items() if not log]
        if missing and self.appendfsync != "always":
            # the documented loss window of appendfsync everysec: count, do not fail
            self.result.lost_submissions = len(missing)
            for jobid in missing:
                del logs[jobid]
        _jobs, report = check_jobs(logs, dict.fromkeys(logs, JobResult.COMPLETED))
        self.result.violations += report.violations
        self.result.violations += check_no_double_allocation(
            allocation_intervals(logs), collect.rsets(inst, list(logs)))
        self.result.violations += self._check_read_model(inst)
        if target.owns_redis or not self._others_active(inst):
            self.result.violations += self._check_pool(inst)
        else:
            self.result.notes.append("pool check skipped: other jobs are active on the "
                                     "instance, so its pool is not expected to be empty")

    def _check_read_model(self, inst: Instance) -> list[Violation]:
        store = EventStore(inst.redis, inst.keys)
        fresh = ReadModel()
        for p in range(inst.keys.partitions):
            for block in store.iter_journal(p):
                fresh.feed((e.jobid, e.event(), e.extra_dict()) for e in block)
        jl = JobListStore(inst.redis, inst.keys)
        stored = ReadModel(jl.all_summaries(), jl.counters())
        out = []
        for jobid in set(fresh.summaries) | set(stored.summaries):
            if fresh.summaries.get(jobid) != stored.summaries.get(jobid):
                out.append(Violation("read model equals a rebuild", (jobid,),
                                     "the job-list summary differs from the journal's"))
        if +fresh.counters != +stored.counters:
            out.append(Violation("read model equals a rebuild", (),
                                 f"counters differ: {dict(+stored.counters)} vs "
                                 f"{dict(+fresh.counters)}"))
        return out

    def _others_active(self, inst: Instance) -> bool:
        counts = JobListStore(inst.redis, inst.keys).counters()
        return any(counts.get(f"state:{s}", 0) for s in ("RUN", "CLEANUP"))

    def _check_pool(self, inst: Instance) -> list[Violation]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            raw = inst.redis.get(inst.keys.sched_status)
            status = orjson.loads(raw) if raw else None
            if status and status["allocated"]["ncores"] == 0 and status["pending"] == 0:
                return []
            time.sleep(0.5)
        return [Violation("pool equals stored R", (),
                          f"scheduler still reports {status['allocated'] if status else '?'} "
                          "allocated after every job ended")]
