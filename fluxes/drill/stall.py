"""``fluxes drill --stall SECONDS [--fault KIND]``: stall Redis (or make it refuse writes
or passwords: :mod:`fluxes.drill.faults`) under load and check that no job was lost or
killed (docs/operations.md, "When Redis stalls or refuses").

On a private instance the drill starts real jobs (one ``sleep`` per node, outliving
the fault) and a workload of short simulated jobs, then stalls Redis for SECONDS
with a busy function run on the instance owner's connection (what a runaway step,
a slow disk or a huge ``KEYS`` does to everyone else; other ``--fault`` kinds make
it refuse writes or passwords instead) while it keeps submitting. Redis answers
BUSY to every other client once the function passes ``busy-reply-threshold``;
before that they just wait. Afterwards every job must
end exactly once, COMPLETED with status 0: none lost, none killed; no worker may
have died; the job list must equal a rebuild; no core may have been held twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.faults import KINDS, Fault
from fluxes.drill.invariants import (
    Violation,
    check_exclusive,
    check_jobs,
    check_read_model,
)
from fluxes.drill.runner import simulated_job
from fluxes.drill.targets import OwnInstance
from fluxes.formats.jobspec import Jobspec
from fluxes.messages import SubmitItem, SubmitJobs
from fluxes.store import reachability
from fluxes.store.client import Client
from fluxes.store.errors import StoreError

#: Jobs per submission request.
BATCH = 20
#: Slack after the stall for the real jobs' ``sleep``.
REAL_SLACK_S = 4


@dataclass
class StallResult:
    """What a stall drill did and found."""

    stall_s: float = 0.0
    fault: str = "stall"
    jobs: int = 0
    real_jobs: int = 0
    lost: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    #: submissions refused while Redis was stalled (and sent again after it)
    refused_while_stalled: int = 0
    refusal: str = ""
    elapsed: float = 0.0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no job was lost or killed and every invariant held."""
        return not (self.lost or self.killed or self.violations)

    def figures(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {"ok": self.ok, "fault": self.fault, "stall_s": self.stall_s, "jobs": self.jobs,
                "real_jobs": self.real_jobs, "lost": len(self.lost),
                "killed": len(self.killed), "lost_ids": self.lost[:20],
                "killed_ids": self.killed[:20],
                "refused_while_stalled": self.refused_while_stalled,
                "refusal": self.refusal, "elapsed_s": round(self.elapsed, 2),
                "violations": [str(v) for v in self.violations[:50]]}


class StallDrill:
    """One fault of Redis (``fault``, default a stall: :mod:`fluxes.drill.faults`) lasting
    ``stall`` seconds while ``jobs`` jobs run on a private instance."""

    def __init__(self, stall: float, jobs: int = 200, nodes: int = 2, cores_per_node: int = 4,
                 timeout: float = 300.0, appendfsync: str = "always",
                 fault: str = "stall") -> None:
        if fault not in KINDS:
            raise ValueError(f"--fault must be one of {', '.join(KINDS)}, got {fault!r}")
        if not 0 < stall <= 300:
            raise ValueError(f"--stall must be > 0 and <= 300 seconds, got {stall:g}")
        if jobs < 1:
            raise ValueError("--jobs must be >= 1")
        if not timeout > stall:
            raise ValueError(f"--timeout must be longer than the stall, got {timeout:g}")
        self.stall = stall
        self.fault = fault
        self.njobs = jobs
        self.nodes = nodes
        self.cores = cores_per_node
        self.timeout = timeout
        self.appendfsync = appendfsync
        self.result = StallResult(stall_s=stall, fault=fault)
        self.deadline = float("inf")

    def run(self) -> StallResult:
        """Start the instance, run the workload through the stall, check, stop."""
        started = time.monotonic()
        self.deadline = started + self.timeout
        target = OwnInstance(self.nodes, self.cores, self.appendfsync)
        try:
            self._drive(target)
        finally:
            target.close()
        self.result.elapsed = time.monotonic() - started
        return self.result

    def _left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def _drive(self, target: OwnInstance) -> None:
        sleep = str(int(self.stall) + REAL_SLACK_S)
        real = [{"jobspec": Jobspec.from_command(["sleep", sleep], cwd="/tmp").to_dict()}
                for _ in range(self.nodes)]
        ids = self._submit(target, real)
        self.result.real_jobs = len(ids)
        self._wait_started(target, ids)
        first = self.njobs // 2
        ids += self._submit(target, self._workload(first))
        assert target.launcher.server is not None
        owner = target.launcher.server.client()
        try:
            fault = Fault(self.fault, self.stall, owner, target.launcher.server.dir)
            fault.begin()
            ender = threading.Thread(target=self._end, args=(fault, time.monotonic()),
                                     name="drill-fault-end", daemon=True)
            ender.start()
            ids += self._submit(target, self._workload(self.njobs - first))
            ender.join(self._left())
        finally:
            owner.close()
        self.result.jobs = len(ids)
        self._wait(target, ids)
        self._check(target, ids)

    def _workload(self, count: int) -> list[dict[str, Any]]:
        return [{"jobspec": simulated_job(f"{50 + (i * 37) % 450}ms")} for i in range(count)]

    def _end(self, fault: Fault, began: float) -> None:
        """End the fault ``stall`` seconds after it ``began`` (a stall ends by itself)."""
        if fault.kind != "stall":
            time.sleep(max(0.0, min(began + self.stall - time.monotonic(), self._left())))
        fault.end(self._left())

    def _submit(self, target: OwnInstance, specs: list[dict[str, Any]]) -> list[int]:
        """Submit in requests of BATCH jobs; a request Redis refused (stalled) is sent again,
        one XADD each, so a refused one was never written. The accepted ids."""
        client = Client(target.inst)
        out: list[int] = []
        for i in range(0, len(specs), BATCH):
            request = SubmitJobs(req=f"stall-drill-{time.time_ns()}", jobs=[
                SubmitItem(jobspec=s["jobspec"]) for s in specs[i:i + BATCH]])
            key = self._post(client, request)
            answer = self._answer(client, key)
            if answer.jobs is None:
                self.result.violations.append(Violation(
                    "every submission is accepted", (), str(answer.errors)))
                continue
            for job in answer.jobs:
                if job.id is None:
                    self.result.violations.append(Violation(
                        "every submission is accepted", (), str(job.error)))
                else:
                    out.append(job.id)
        return out

    def _post(self, client: Client, request: SubmitJobs) -> str:
        while True:
            try:
                [key] = client._post([request])
                return key
            except StoreError as exc:
                self._refused(exc)

    def _answer(self, client: Client, key: str) -> Any:
        while True:
            try:
                return client._answers(key, max(self._left(), 0.1))[0]
            except StoreError as exc:
                self._refused(exc)

    def _refused(self, exc: StoreError) -> None:
        if not reachability.is_stall(exc) or self._left() == 0:
            raise exc
        self.result.refused_while_stalled += 1
        self.result.refusal = self.result.refusal or reachability.reply_text(exc).splitlines()[0]
        time.sleep(0.2)

    def _wait_started(self, target: OwnInstance, ids: list[int]) -> None:
        while self._left() > 0:
            logs = collect.read_eventlogs(target.inst, ids).logs
            if all(any(e.event_name == "start" for e in logs.get(j, [])) for j in ids):
                return
            time.sleep(0.1)

    def _wait(self, target: OwnInstance, ids: list[int]) -> None:
        """Until every job ended (or the deadline), then until the job list caught up."""
        inst = target.inst
        while self._left() > 0:
            try:
                logs = collect.read_eventlogs(inst, ids).logs
            except StoreError:
                time.sleep(0.2)
                continue
            if all(log and log[-1].event_name == "clean" for log in logs.values()):
                break
            time.sleep(0.2)
        while self._left() > 0 and not collect.joblist_caught_up(inst):
            time.sleep(0.2)

    def _check(self, target: OwnInstance, ids: list[int]) -> None:
        inst = target.inst
        got = collect.read_eventlogs(inst, ids)
        logs = got.logs
        self.result.lost = sorted(j for j, log in logs.items() if not log)
        present = {j: log for j, log in logs.items() if log}
        jobs, report = check_jobs(present, dict.fromkeys(present, JobResult.COMPLETED),
                                  got.broken)
        self.result.killed = sorted(
            j for j, job in jobs.items() if job.fatal is not None
            or (job.wait_status is not None and job.wait_status != 0))
        self.result.violations += report.violations
        rsets, bad_r = collect.read_rsets(inst, list(present))
        self.result.violations += [Violation("replays cleanly", (j,), why)
                                   for j, why in bad_r.items()]
        self.result.violations += check_exclusive(present, rsets)
        fresh, stored = collect.read_models(inst)
        self.result.violations += check_read_model(fresh, stored)
        self.result.violations += [Violation("no worker dies of a stall", (), line)
                                   for line in target.problems({})]

