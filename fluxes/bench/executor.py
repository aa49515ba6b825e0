"""``fluxes bench executor``: N real ``true`` jobs through ``FluxExecutor``.

flux's workload for its executor: each job submitted through the executor,
an event callback on its ``start``, and its result awaited; the figure is
jobs per second from the first submit to the last result, on a private
instance of 1 node x 2 cores (as flux's ``flux start -s1`` on this machine),
once one job went through it (flux's script, too, runs once the instance is
up: neither figure counts the instance's start-up).

``hops`` are the hand-off latencies on the turnover path, as ``fluxes bench
throughput`` reports them (p50 and p99 over the run).

The wall-clock rate depends on the machine's load; ``cpu_ms_per_job`` does
not much: the CPU the instance's processes (with the jobs' own processes,
which they wait for) and the client spent per job, comparable with the CPU
``time flux start -s1 python3 script.py`` reports (minus an empty run's).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from fluxes.bench.throughput import command_stats, commands_per_job, hop_counts, process_cpu
from fluxes.proc import hops
from fluxes.proc.launcher import Launcher
from fluxes.store.instance import Instance


def run(jobs: int = 1000, nodes: int = 1, cores_per_node: int = 2,
        timeout: float = 600.0) -> dict[str, Any]:
    """Start an instance, run ``jobs`` jobs through a FluxExecutor, return the figures."""
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=nodes, cores_per_node=cores_per_node)
        uri = launcher.start()
        try:
            # as flux's script runs once ``flux start`` has the instance up: one job
            # first, so that every worker is up and no start-up is counted
            warm_up(str(uri), timeout)
            inst = Instance.connect(str(uri))
            hops_before = hop_counts(inst)
            before = cpu_by_kind(launcher)
            commands_before = command_stats(inst)
            figures = measure(str(uri), jobs, timeout)
            after = cpu_by_kind(launcher)
            figures["redis_per_job"] = commands_per_job(
                commands_before, command_stats(inst), jobs)
            # the hand-offs of the turnover (a job's end to the next one's start)
            figures["hops"] = hops.summary(hops.subtract(
                hop_counts(inst, after=time.time()), hops_before))
            per_job = {kind: 1e6 * (after[kind] - before.get(kind, 0.0)) / max(jobs, 1)
                       for kind in sorted(after)}
            figures["cpu_ms_per_job"] = round(
                figures["client_cpu_ms_per_job"] + sum(per_job.values()) / 1000, 3)
            # where a job's CPU goes: each kind of process, the jobs' own processes
            # ("tasks": the children the workers waited for), the client
            figures["cpu_us_per_job"] = {
                **{kind: round(us) for kind, us in per_job.items()},
                "client": round(1000 * figures["client_cpu_ms_per_job"])}
            return figures
        finally:
            launcher.stop()


def instance_cpu(launcher: Launcher) -> float:
    """CPU seconds used so far by the instance's processes and the children they
    waited for (the jobs' tasks), from /proc (0 where it cannot be read)."""
    return sum(cpu_by_kind(launcher).values())


def cpu_by_kind(launcher: Launcher) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each kind of the instance's
    processes (``exec``, ``job-manager``: every one of that kind; ``redis``), and as
    ``tasks`` by the children they waited for (the jobs' task wrappers, with the
    processes those waited for), from /proc."""
    return process_cpu(launcher, tasks=True)


def _true_spec() -> Any:
    from fluxes.job import JobspecV1

    spec = JobspecV1.from_command(["true"])
    spec.environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    spec.cwd = os.getcwd()
    return spec


def warm_up(uri: str, timeout: float = 600.0) -> None:
    """Run one ``true`` job through a FluxExecutor and wait for its result (every
    worker is then up: what the job's path costs the first time is not measured)."""
    from fluxes.job import FluxExecutor

    with FluxExecutor(handle_kwargs={"uri": uri}) as executor:
        executor.submit(_true_spec()).result(timeout=timeout)


def measure(uri: str, jobs: int, timeout: float = 600.0) -> dict[str, Any]:
    """Push ``jobs`` ``true`` jobs through a FluxExecutor on the instance at ``uri``."""
    import concurrent.futures

    from fluxes.job import FluxExecutor

    spec = _true_spec()
    started = [0]

    def on_start(_future: Any, _event: Any) -> None:
        started[0] += 1

    cpu0 = time.process_time()
    with FluxExecutor(handle_kwargs={"uri": uri}) as executor:
        t0 = time.perf_counter()
        futures = [executor.submit(spec).add_event_callback("start", on_start)
                   for _ in range(jobs)]
        done, _ = concurrent.futures.wait(futures, timeout=timeout)
        elapsed = time.perf_counter() - t0
    codes = [f.result() for f in done if f.exception() is None]
    return {
        "jobs": jobs, "completed": len(done), "exit_0": codes.count(0),
        "start_callbacks": started[0], "seconds": round(elapsed, 3),
        "jobs_per_s": round(len(done) / elapsed, 1) if elapsed else 0.0,
        "client_cpu_ms_per_job": round(1000 * (time.process_time() - cpu0) / max(jobs, 1), 3),
    }
