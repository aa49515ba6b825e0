"""``fluxes drill``: kill workers with SIGKILL under load, then check the invariants.

The drill runs a workload of simulated jobs on an instance it starts itself
(so it can kill and restart any process, Redis included) or on a running one
(``--uri``: it kills that instance's workers on this host, and the
instance's own supervisor restarts them), kills the chosen worker kind at
random moments, and in the end checks what must always hold:

* every submission is accepted, and every submitted job reaches INACTIVE
  exactly once, with the right result;
* no core or GPU was held by two jobs at any instant (eventlogs + R);
* every eventlog decodes and replays cleanly, and the job-list read model
  equals a fresh fold of the journal;
* the scheduler's pool equals the stored R: with jobs holding resources,
  the scheduler is SIGKILLed once more and what its replacement recovered
  and publishes must equal the stored R of those jobs; and nothing is left
  allocated once every job ended;
* recovery time per kill (from the kill to the next allocation).

With ``hostile`` (``--hostile``) every round also writes poison and forged
entries on every stream (:mod:`fluxes.drill.hostile`) and sends one request
twice with the same request id; besides the invariants above, each poison
entry must have been dead-lettered, no input may be left pending, no
finished job's R may change, no worker may have died besides the drill's
kills, and both answers to the repeated request must name the same jobs.

Every wait is bounded by the drill's deadline (``--timeout``); a drill that
cannot finish in time ends with a violation naming the workers that are down
or died besides the planned kills, instead of hanging.

Why one module: :class:`Drill` is one sequential script (start, load, kill, wait, check)
whose steps share the run's state; the invariant checks are in
:mod:`fluxes.drill.invariants`, the hostile writes in :mod:`fluxes.drill.hostile` and
the reading of results in :mod:`fluxes.drill.collect`.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from fluxes import messages as proto
from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.hostile import Hostile
from fluxes.drill.invariants import (
    Violation,
    check_exclusive,
    check_jobs,
    check_pool,
    check_read_model,
    check_submissions,
    holding,
    pool_summary,
)
from fluxes.drill.targets import OwnInstance, RunningInstance, Target
from fluxes.errors import FluxesError
from fluxes.formats.jobspec import Jobspec
from fluxes.store import jobfacts, jobhash
from fluxes.store.client import Client, RequestTimeout
from fluxes.store.errors import (
    BusyLoadingError,
    StoreConnectionError,
    StoreError,
    StoreTimeoutError,
)
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance
from fluxes.store.jobhash import JobHashes
from fluxes.store.joblist import JobListStore

KINDS = ("scheduler", "job-manager", "exec", "ingest", "job-list", "redis")
#: Transient Redis errors a submission is retried after (Redis restarting).
_TRANSIENT = (StoreConnectionError, StoreTimeoutError, BusyLoadingError)
#: Jobs that hold resources during the pool check; long enough never to end by themselves.
HOLD_DURATION = "1h"

#: Publications of the scheduler's pool, in a row and alike, after which a pool
#: that differs from the stored R is reported without waiting longer.
SETTLED = 3


class DrillTimeout(FluxesError):
    """The drill could not finish before its deadline (``--timeout``)."""


@dataclass
class DrillResult:
    """What a drill did and found."""

    jobs: int = 0
    kills: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    lost_submissions: int = 0
    rejected_submissions: int = 0
    elapsed: float = 0.0
    #: how the scheduler's pool was compared with the stored R
    pool_check: str = "not run"
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
            "rejected_submissions": self.rejected_submissions,
            "pool_check": self.pool_check,
            "elapsed_s": round(self.elapsed, 2),
            "violations": [str(v) for v in self.violations[:50]],
            "notes": self.notes,
        }


class Drill:
    """One drill on a private instance, or on the running instance at ``uri``."""

    def __init__(self, jobs: int = 500, kill: str = "any", rounds: int = 5, seed: int = 1,
                 nodes: int = 2, cores_per_node: int = 4, appendfsync: str = "always",
                 timeout: float = 300.0, uri: str | None = None,
                 lose_writes: float | None = None, hostile: bool = False) -> None:
        if kill != "any" and kill not in KINDS:
            raise ValueError(f"--kill must be one of {', '.join(('any', *KINDS))}")
        if jobs < 1 or rounds < 0:
            raise ValueError("--jobs must be >= 1 and --rounds >= 0")
        if not timeout > 0:
            raise ValueError(f"--timeout must be > 0 seconds, got {timeout:g}")
        if uri is not None and kill == "redis":
            raise ValueError("--kill redis needs the drill's own instance (drop --uri)")
        if lose_writes is not None:
            if kill != "redis" or appendfsync != "everysec":
                raise ValueError("--lose-writes needs --kill redis --appendfsync everysec")
            if not 0 < lose_writes <= 5:
                raise ValueError(f"--lose-writes must be > 0 and <= 5 seconds, "
                                 f"got {lose_writes:g}")
            if hostile:
                raise ValueError("--hostile cannot be checked with --lose-writes (the lost "
                                 "writes take hostile entries with them)")
        self.uri = uri
        self.njobs = jobs
        self.kill = kill
        self.rounds = rounds
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.cores = cores_per_node
        self.appendfsync = appendfsync
        self.timeout = timeout
        self.lose_writes = lose_writes
        self.hostile = hostile
        self.result = DrillResult()
        self.deadline = float("inf")
        #: planned kills per worker name, to tell them from unplanned deaths
        self.planned: Counter[str] = Counter()
        #: jobs submitted inside a simulated loss window (--lose-writes), and those of
        #: them whose submission was acknowledged and then lost with Redis's writes
        self.window_ids: list[int] = []
        self.lost_ids: set[int] = set()
        #: why the instance refused submissions, one line per refused job
        self.rejections: list[str] = []

    # ------------------------------------------------------------ running

    def run(self) -> DrillResult:
        """Run the workload with kills on the instance, check, stop what the drill started."""
        started = time.monotonic()
        self.deadline = started + self.timeout
        target: Target = (RunningInstance(self.uri) if self.uri is not None
                          else OwnInstance(self.nodes, self.cores, self.appendfsync))
        try:
            self._drive(target)
        except DrillTimeout as exc:
            self.result.violations.append(Violation("finishes within --timeout", (), str(exc)))
        finally:
            target.close()
        self.result.elapsed = time.monotonic() - started
        return self.result

    def _left(self, limit: float = float("inf")) -> float:
        """Seconds to wait at most: ``limit``, or less when the deadline is nearer."""
        return max(0.0, min(limit, self.deadline - time.monotonic()))

    def _why(self, target: Target) -> str:
        """What is wrong with the instance's workers, for a timeout message."""
        try:
            found = target.problems(self.planned)
        except StoreError as exc:
            found = [f"Redis does not answer ({exc})"]
        return "; ".join(found) if found else "every worker is running"

    def _timeout(self, target: Target, what: str) -> DrillTimeout:
        return DrillTimeout(f"{what} within --timeout {self.timeout:g} s: {self._why(target)}")

    def _drive(self, target: Target) -> None:
        ids: list[int] = []
        batches = max(self.rounds, 1) * 2
        per_batch = max(1, self.njobs // batches)
        kills_at = set(self.rng.sample(range(batches), min(self.rounds, batches)))
        hostile = None
        if self.hostile:
            inst = target.inst
            ranks = sum(1 for r in inst.redis.hkeys(inst.keys.exec_registry) if r.isdigit())
            hostile = Hostile(inst, Client(inst).user, max(ranks, self.nodes), self.rng)
        try:
            for batch in range(batches):
                count = per_batch if batch < batches - 1 \
                    else self.njobs - per_batch * (batches - 1)
                if count > 0:
                    ids += self._submit(target, self._workload(count))
                if hostile is not None:
                    ids += self._hostile_round(target, hostile, ids)
                self._supervise(target, self.rng.uniform(0.05, 0.4))
                if batch in kills_at:
                    self._kill_one(target)
            ids += self.window_ids
            self.result.jobs = len(ids)
            self._wait(target, ids)
            expected = dict.fromkeys(ids, JobResult.COMPLETED)
            expected.update(self._pool_check(target, ids))
            self._check(target, expected)
            if hostile is not None:
                restarts = [k["at"] for k in self.result.kills
                            if k["kind"] in ("scheduler", "job-manager", "redis")]
                hostile.inst = target.inst  # a Redis kill reconnects
                self.result.violations += hostile.check(restarts)
                # every consumer survives every message: nothing died but what was killed
                self.result.violations += [
                    Violation("no worker dies of a message", (), line)
                    for line in target.problems(self.planned) if "besides the drill" in line]
                self.result.notes.append(
                    f"hostile: {len(hostile.written)} poison or forged entries in "
                    f"{hostile.rounds} rounds, {sum(w.refused for w in hostile.written)} of "
                    "them to be dead-lettered")
        finally:
            if hostile is not None:
                try:
                    hostile.inst = target.inst
                    hostile.cleanup()
                except StoreError:
                    pass  # the instance is going away with the drill, or is down

    def _hostile_round(self, target: Target, hostile: Hostile, ids: list[int]) -> list[int]:
        """One round of hostile entries among the drill's jobs, and one request sent twice
        with the same request id; the jobs of that request."""
        inst = target.inst
        recent = ids[-200:]
        results = JobHashes(inst.redis, inst.keys).field(recent, jobhash.RESULT)
        finished = [j for j, r in zip(recent, results, strict=True) if r]
        running = [j for j, r in zip(recent, results, strict=True) if not r]
        hostile.inst = inst
        hostile.round(finished, running)
        return self._submit_twice(target)

    def _submit_twice(self, target: Target) -> list[int]:
        """Send one submission twice with the same request id (a client retrying after a
        timeout); both answers must name the same jobs, created once."""
        request = proto.SubmitJobs(req=uuid.uuid4().hex, jobs=[
            proto.SubmitItem(jobspec=simulated_job("10ms")) for _ in range(2)])

        def send() -> list[proto.Reply]:
            client = Client(target.inst)
            [key, _same] = client._post([request, request])
            return client._answers(key, max(self._left(), 0.1), count=2)

        while True:
            box = self._in_background(target, send, "no answer to a request sent twice")
            error = box.get("error")
            if error is None:
                break
            if isinstance(error, RequestTimeout):
                raise self._timeout(target, "no answer to a request sent twice")
            if not isinstance(error, _TRANSIENT):
                raise error
            if self._left() == 0:
                raise self._timeout(target, f"Redis did not come back ({error})")
            time.sleep(0.2)  # Redis restarts: sending it again is what idempotence allows
        answers: list[proto.Reply] = box["answers"]
        got = [[r.id if r.id is not None else r.error for r in (a.jobs or [])] for a in answers]
        if got[0] != got[1] or len(got[0]) != 2:
            self.result.violations.append(Violation(
                "a request sent twice creates its jobs once", (),
                f"the two answers differ: {got[0]} and {got[1]}"))
        return [j for j in set(got[0]) | set(got[1]) if isinstance(j, int)]

    def _workload(self, count: int) -> list[dict[str, Any]]:
        return [{"jobspec": simulated_job(f"{self.rng.randint(5, 60)}ms")} for _ in range(count)]

    def _submit(self, target: Target, specs: list[dict[str, Any]]) -> list[int]:
        """Submit ``specs`` once, supervising meanwhile; the ids of the accepted ones.

        The request is not sent again after a timeout (the ingest answers it when
        it is back; sending it twice would submit the jobs twice), only after a
        Redis error while Redis restarts. Refusals are counted and reported.
        """
        while True:
            box = self._submit_once(target, specs)
            error = box.get("error")
            if error is None:
                break
            if isinstance(error, RequestTimeout):
                raise self._timeout(target, f"no answer to a submission of {len(specs)} jobs")
            if not isinstance(error, _TRANSIENT):
                raise error
            if self._left() == 0:
                raise self._timeout(target, f"Redis did not come back ({error})")
            time.sleep(0.2)
        answers = box["answers"]
        self.rejections += [str(a) for a in answers if not isinstance(a, int)]
        self.result.rejected_submissions = len(self.rejections)
        return [a for a in answers if isinstance(a, int)]

    def _submit_once(self, target: Target, specs: list[dict[str, Any]]) -> dict[str, Any]:
        """One submission, waited for in a thread so that the drill keeps supervising (a
        dead ingest is restarted meanwhile); ``{"answers": ...}`` or ``{"error": ...}``."""
        return self._in_background(
            target, lambda: Client(target.inst).submit(specs, timeout=max(self._left(), 0.1)),
            f"no answer to a submission of {len(specs)} jobs")

    def _in_background(self, target: Target, work: Callable[[], Any],
                       what: str) -> dict[str, Any]:
        """Run ``work`` in a thread while the drill keeps supervising; ``{"answers": its
        result}`` or ``{"error": what it raised}`` (a DrillTimeout at the deadline)."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["answers"] = work()
            except Exception as exc:  # handed over to the drill's thread
                box["error"] = exc

        sender = threading.Thread(target=run, name="drill-submit", daemon=True)
        sender.start()
        while sender.is_alive():
            if self._left() == 0:
                raise self._timeout(target, what)
            target.supervise()
            sender.join(0.05)
        return box

    def _supervise(self, target: Target, seconds: float) -> None:
        end = time.monotonic() + self._left(seconds)
        while time.monotonic() < end:
            target.supervise()
            time.sleep(0.02)

    def _killable(self, target: Target, kind: str) -> list[str]:
        """Live workers of ``kind``; waits (supervising) for one while none runs."""
        wait_until = time.monotonic() + self._left(10.0)
        while True:
            names = target.killable(kind)
            if names or time.monotonic() >= wait_until:
                break
            target.supervise()
            time.sleep(0.05)
        if not names and isinstance(target, RunningInstance):
            raise FluxesError(f"no {kind} worker of this instance runs on this host")
        if not names:
            raise self._timeout(target, f"no {kind} worker running to kill")
        return names

    def _kill_one(self, target: Target) -> None:
        kinds = KINDS if target.owns_redis else tuple(k for k in KINDS if k != "redis")
        kind = self.kill if self.kill != "any" else self.rng.choice(kinds)
        record: dict[str, Any] = {"kind": kind}
        if kind == "redis":
            if self.lose_writes is not None:
                killed_at, lost = self._kill_redis_losing(target)
                record["lost_ids"] = lost
            else:
                killed_at = time.time()
                target.kill_redis(self.rng.uniform(0.05, 0.3))
        else:
            name = self.rng.choice(self._killable(target, kind))
            record["worker"] = name
            killed_at = time.time()
            target.kill_worker(name)
            self.planned[name] += 1
        record["at"] = killed_at
        record["recovery_s"] = self._recovery(target, killed_at,
                                              None if kind == "redis" else kind)
        self.result.kills.append(record)

    def _kill_redis_losing(self, target: Target) -> tuple[float, list[int]]:
        """Simulate a crash inside ``appendfsync everysec``'s window: copy the AOF, let
        ``lose_writes`` seconds of work be acknowledged (submissions among it), then kill
        Redis and restart it on the copy. When Redis was killed, and the ids of the
        submissions that were acknowledged and are gone."""
        assert isinstance(target, OwnInstance) and self.lose_writes is not None
        # Redis write()s each command to the AOF before it replies, so a copy of the
        # files is a prefix of what was acknowledged (a command cut in the middle
        # is dropped when Redis loads it, as after a crash).
        snapshot = target.snapshot_aof()
        end = time.monotonic() + self.lose_writes
        acknowledged: list[int] = []
        while time.monotonic() < end:
            acknowledged += self._submit(target, self._workload(3))
            self._supervise(target, 0.05)
        killed_at = time.time()
        inst = target.kill_redis_losing(snapshot)
        # submissions acknowledged while the copy was being made may be in it
        there = jobfacts.which_exist(inst.redis, inst.keys, acknowledged)
        lost = [j for j, found in zip(acknowledged, there, strict=True) if not found]
        self.window_ids += acknowledged
        self.lost_ids.update(lost)
        return killed_at, lost

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
        deadline = time.monotonic() + self._left(limit)
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
            except StoreError:
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
        except StoreError:
            return True
        return any(counts.get(f"state:{s}", 0) for s in ("DEPEND", "PRIORITY", "SCHED"))

    def _wait_results(self, target: Target, ids: list[int], limit: float) -> set[int]:
        """Supervise until every job of ``ids`` has a result (or ``limit`` / the deadline);
        the jobs still without one."""
        inst = target.inst
        deadline = time.monotonic() + self._left(limit)
        left = set(ids)
        while left:
            target.supervise()
            batch = sorted(left)[:5000]
            results = JobHashes(inst.redis, inst.keys).field(batch, jobhash.RESULT)
            for jobid, result in zip(batch, results, strict=True):
                if result:
                    left.discard(jobid)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        return left

    def _wait(self, target: Target, ids: list[int]) -> None:
        known = [j for j in ids if j not in self.lost_ids]
        left = self._wait_results(target, known, float("inf"))
        if left:
            self.result.violations.append(Violation(
                "finishes within --timeout", tuple(sorted(left)[:10]),
                f"{len(left)} job(s) still active when the time was up: {self._why(target)}"))
        self._joblist_catch_up(target)

    def _joblist_catch_up(self, target: Target) -> None:
        """Let the job list fold every journal entry before comparing it with a rebuild."""
        while not collect.joblist_caught_up(target.inst):
            if self._left() == 0:
                self.result.violations.append(Violation(
                    "finishes within --timeout", (),
                    f"the job list did not catch up with the journal: {self._why(target)}"))
                return
            self._supervise(target, 0.2)

    # ------------------------------------------------------------ the pool check

    def _pool_check(self, target: Target, ids: list[int]) -> dict[int, JobResult]:
        """Compare the scheduler's recovered pool with the stored R while jobs hold resources.

        Submits jobs that hold resources until canceled, SIGKILLs the scheduler
        (when the drill can: on a running instance only when it runs on this
        host), and waits until the replacement publishes a pool equal to the
        stored R of every job holding resources; then cancels them. Returns the
        results those jobs must end with.
        """
        inst = target.inst
        if not target.owns_redis and self._others_active(inst):
            self.result.pool_check = "skipped: other jobs are active on the instance"
            return {}
        holders = self._submit(target, [{"jobspec": simulated_job(HOLD_DURATION)}
                                        for _ in range(self.nodes + 1)])
        deadline = time.monotonic() + self._left(60.0)
        while time.monotonic() < deadline:
            target.supervise()
            logs = collect.read_eventlogs(inst, holders)
            if all(any(e.event_name == "start" for e in logs.logs.get(j, []))
                   for j in holders):
                break
            time.sleep(0.1)
        # nothing is allocated any more but to these, and to jobs holding resources now
        candidates = holding(collect.read_eventlogs(inst, ids + holders).logs)
        since = time.time()
        # a running instance's scheduler may run on another host: compare without a restart
        schedulers = target.killable("scheduler") if isinstance(target, RunningInstance) \
            else self._killable(target, "scheduler")
        if schedulers:
            name = schedulers[0]
            target.kill_worker(name)
            self.planned[name] += 1
            how = f"after a scheduler restart, {len(holders)} jobs holding resources"
        else:
            how = (f"without a restart (no scheduler on this host), {len(holders)} jobs "
                   "holding resources")
        violations = self._compare_pool(target, candidates, since)
        self.result.violations += violations
        self.result.pool_check = ("differs " if violations else "equal ") + how
        Client(inst).cancel(holders, note="drill pool check done")
        left = self._wait_results(target, holders, 60.0)
        if left:
            self.result.violations.append(Violation(
                "finishes within --timeout", tuple(sorted(left)),
                f"canceled jobs still active: {self._why(target)}"))
        return dict.fromkeys(holders, JobResult.CANCELED)

    def _compare_pool(self, target: Target, ids: list[int], since: float) -> list[Violation]:
        """Poll the pool the scheduler publishes (after ``since``) until it equals the stored
        R of the jobs of ``ids`` holding resources; the difference when it never does."""
        inst = target.inst
        deadline = time.monotonic() + self._left(30.0)
        found: list[Violation] = [Violation("pool equals stored R", (),
                                            "the scheduler published no pool after its restart")]
        # the scheduler publishes its pool every second; the same differing pool
        # in SETTLED publications in a row will not become right by waiting
        seen: list[tuple[float, Any]] = []
        while True:
            target.supervise()
            status = collect.published_pool(inst)
            if status is not None and float(status.get("time", 0)) > since:
                logs = collect.read_eventlogs(inst, ids)
                rsets, broken = collect.read_rsets(inst, holding(logs.logs))
                allocated = status.get("allocated") or {}
                found = check_pool(allocated, rsets)
                found += [Violation("pool equals stored R", (j,), why)
                          for j, why in broken.items()]
                if not found:
                    return []
                stamp = float(status.get("time", 0))
                if not seen or seen[-1][0] != stamp:
                    seen.append((stamp, allocated))
                if len(seen) >= SETTLED and all(a == allocated for _t, a in seen[-SETTLED:]):
                    return found
            if time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    # ------------------------------------------------------------ checks

    def _check(self, target: Target, expected: dict[int, JobResult]) -> None:
        inst = target.inst
        ids = sorted(expected)
        self.result.violations += check_submissions(self.rejections)
        got = collect.read_eventlogs(inst, ids)
        logs, broken = got.logs, got.broken
        missing = [j for j, log in logs.items() if not log]
        if missing and self.appendfsync != "always":
            # the documented loss window of appendfsync everysec: count, do not fail
            self.result.lost_submissions = len(missing)
            for jobid in missing:
                del logs[jobid]
        if self.lose_writes is not None:
            self.result.notes.append(
                f"{len(self.window_ids)} submissions were acknowledged inside the simulated "
                f"loss windows; {len(self.lost_ids)} of them were gone after Redis restarted")
            unexpected = sorted(set(missing) - self.lost_ids)
            if unexpected:
                self.result.violations.append(Violation(
                    "nothing lost outside the window", tuple(unexpected[:10]),
                    f"{len(unexpected)} jobs acknowledged outside the loss windows are gone"))
            self.result.violations += self._check_lost(inst, sorted(self.lost_ids))
            self.result.violations += self._check_reported(inst, sorted(self.lost_ids))
        _jobs, report = check_jobs(logs, expected, broken)
        self.result.violations += report.violations
        rsets, bad_r = collect.read_rsets(inst, list(logs))
        self.result.violations += [Violation("replays cleanly", (j,), why)
                                   for j, why in bad_r.items()]
        self.result.violations += check_exclusive(logs, rsets)
        fresh, stored = collect.read_models(inst)
        self.result.violations += check_read_model(fresh, stored)
        if target.owns_redis or not self._others_active(inst):
            self.result.violations += self._check_nothing_allocated(target)
        else:
            self.result.notes.append("empty-pool check skipped: other jobs are active on the "
                                     "instance, so its pool is not expected to be empty")

    def _check_lost(self, inst: Instance, lost: list[int]) -> list[Violation]:
        """Jobs lost with Redis's writes stay unknown everywhere: no eventlog, job hash or
        job-list entry (a client asking about them is told the job is unknown)."""
        out = []
        jl = JobListStore(inst.redis, inst.keys)
        hashes = JobHashes(inst.redis, inst.keys).exists(lost)
        for jobid, summary, hashed in zip(lost, jl.get_many(lost), hashes, strict=True):
            left = [what for what, there in (
                ("eventlog", jobfacts.has_eventlog(inst.redis, inst.keys, jobid)),
                ("job hash", hashed),
                ("job-list entry", summary is not None)) if there]
            if left:
                out.append(Violation("lost jobs are unknown", (jobid,),
                                     f"lost with Redis's writes, yet its {', '.join(left)} "
                                     "came back"))
        return out

    def _check_reported(self, inst: Instance, lost: list[int]) -> list[Violation]:
        """Every job lost with Redis's writes is reported by id (the ingest's
        acknowledgement log, ``fluxes admin lost-jobs``), once the ingest reconnected."""
        from fluxes.store.acklog import lost_jobs

        deadline = time.monotonic() + self._left(10.0)
        while True:
            missing = sorted(set(lost) - set(lost_jobs(inst.redis, inst.keys)))
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        self.result.notes.append(f"{len(lost) - len(missing)} of the {len(lost)} lost "
                                 "submissions are reported by id (fluxes admin lost-jobs)")
        if not missing:
            return []
        return [Violation("every lost job is reported", tuple(missing[:10]),
                          f"{len(missing)} acknowledged jobs lost with Redis's writes are not "
                          "listed by fluxes admin lost-jobs")]

    def _others_active(self, inst: Instance) -> bool:
        counts = JobListStore(inst.redis, inst.keys).counters()
        return any(counts.get(f"state:{s}", 0) for s in ("RUN", "CLEANUP"))

    def _check_nothing_allocated(self, target: Target) -> list[Violation]:
        deadline = time.monotonic() + self._left(10.0)
        status = None
        while True:
            target.supervise()
            status = collect.published_pool(target.inst) or {}
            allocated = status.get("allocated") or {}
            if allocated.get("ncores") == 0 and status.get("pending") == 0:
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        return [Violation("pool equals stored R", (),
                          f"scheduler still reports {allocated or '?'} allocated after every "
                          f"job ended (stored R: {pool_summary([])})")]


def simulated_job(runtime: str) -> dict[str, Any]:
    """A simulated one-core job of ``runtime``."""
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()
