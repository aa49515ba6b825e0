"""``fluxes bench throughput``: flux's throughput test on a private instance.

N one-core jobs (simulated with ``exec.test.run_duration``, or real ``true``
processes with ``--exec``) are submitted in bulk to an instance started just
for the run; the figures are the submit rate and the end-to-end rate from
the first submission to the last ``clean`` event, which is counted by
reading the journal (blocking reads, no polling).

``hops`` is the latency of each hand-off on a job's critical path (exec ->
job manager -> scheduler -> job manager -> exec), p50 and p99 over the run:
every message entry carries its sender's clock, and the receiver counts the
time from it to its own commit of what the entry asked for (the exec
worker: to the job's start), in per-worker histograms
(:mod:`fluxes.proc.hops`) it publishes with its heartbeat; the bench adds
them up across workers, before and after the run, and takes the difference.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from fluxes.formats.jobspec import Jobspec
from fluxes.proc import hops
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance


def run(jobs: int = 1000, nodes: int = 1, cores_per_node: int = 2, runtime: str = "1ms",
        real: bool = False, timeout: float = 600.0, partitions: int = 1) -> dict[str, Any]:
    """Start an instance, push ``jobs`` through it, return the figures."""
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=nodes, cores_per_node=cores_per_node,
                            partitions=partitions)
        uri = launcher.start()
        try:
            inst = Instance.connect(str(uri))
            before = process_cpu(launcher)
            stats = command_stats(inst)
            figures = _measure(inst, jobs, runtime, real, timeout, nodes, cores_per_node)
            used = process_cpu(launcher)
            done = max(figures["completed"], 1)
            figures["redis_per_job"] = commands_per_job(stats, command_stats(inst), done)
            # CPU per job of each process kind: where a job's cost goes, independent
            # of the machine's load (the wall-clock rate is not)
            figures["cpu_us_per_job"] = {
                kind: round(1e6 * (used[kind] - before.get(kind, 0.0)) / done)
                for kind in sorted(used)}
            figures["cpu_us_per_job"]["total"] = sum(figures["cpu_us_per_job"].values())
            return figures
        finally:
            launcher.stop()


def process_cpu(launcher: Launcher, tasks: bool = False) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each kind of the instance's processes
    (exec workers summed; ``redis`` for the private redis-server), from /proc; with
    ``tasks``, also as ``tasks`` what the children they waited for used."""
    procs: list[tuple[str, int]] = [(_kind(spec.name), spec.proc.pid)
                                    for spec in launcher.workers if spec.proc is not None]
    if launcher.server is not None and launcher.server.proc is not None:
        procs.append(("redis", launcher.server.proc.pid))
    if tasks:
        # the exec workers' task spawners (docs/exec.md, "The spawner"): parents of the tasks
        procs += [("spawner", pid) for pid in _spawners({pid for kind, pid in procs
                                                         if kind == "exec"})]
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for kind, pid in procs:
        fields = _stat(pid)
        if not fields:
            continue  # not Linux, or the process is gone
        out[kind] = out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
        if tasks:
            out["tasks"] = out.get("tasks", 0.0) + (int(fields[13]) + int(fields[14])) / ticks
    return out


def command_stats(inst: Instance) -> dict[str, tuple[int, int]]:
    """Redis's count of calls and their microseconds so far, by command (INFO
    commandstats; a script's own commands are counted under their names too)."""
    out = {}
    for name, row in inst.redis.info("commandstats").items():
        if isinstance(row, dict):
            out[str(name).removeprefix("cmdstat_")] = (int(row.get("calls", 0)),
                                                        int(row.get("usec", 0)))
    return out


def commands_per_job(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                     jobs: int, top: int = 8) -> dict[str, Any]:
    """What the run asked of Redis per job: the calls in all, and calls and microseconds
    of the ``top`` commands by time. A script's commands are counted under their own
    names as well as in its ``fcall``'s time, so the rows overlap (Redis's CPU in all
    is ``cpu_us_per_job["redis"]``)."""
    jobs = max(jobs, 1)
    rows = {}
    for name, (calls, us) in after.items():
        calls0, us0 = before.get(name, (0, 0))
        if calls > calls0:
            rows[name] = (calls - calls0, us - us0)
    ranked = sorted(rows.items(), key=lambda item: -item[1][1])[:top]
    return {
        "calls": round(sum(calls for calls, _us in rows.values()) / jobs, 2),
        "by_command": {name: {"calls": round(calls / jobs, 2), "us": round(us / jobs, 1)}
                       for name, (calls, us) in ranked},
    }


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name ([] when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _spawners(parents: set[int]) -> list[int]:
    """The task spawners (``python -m fluxes.proc.spawner``) whose parent is in ``parents``."""
    found = []
    for entry in os.listdir("/proc") if parents else ():
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields and int(fields[1]) in parents:
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if b"fluxes.proc.spawner" in f.read():
                            found.append(int(entry))
                except OSError:
                    continue
    return found


def _kind(name: str) -> str:
    """A worker's kind from its launcher name (``exec-3`` -> ``exec``)."""
    for kind in ("exec", "job-manager"):
        if name.startswith(kind + "-"):
            return kind
    return name


def _measure(inst: Instance, jobs: int, runtime: str, real: bool, timeout: float,
             nodes: int, cores: int) -> dict[str, Any]:
    attributes = None if real else {"system": {"exec": {"test": {"run_duration": runtime}}}}
    spec = Jobspec.from_command(["true"], attributes=attributes, cwd="/tmp").to_dict()
    client = Client(inst)
    # warm up: the first job waits for every worker to be up and the scheduler ready
    [warm] = client.submit([{"jobspec": spec}], timeout=120)
    journals = {inst.keys.journal(p): "$" for p in range(inst.keys.partitions)}
    _wait_cleans(inst, {inst.keys.journal(p): "0-0" for p in range(inst.keys.partitions)},
                 1, time.monotonic() + 120)
    for key in journals:
        last = inst.redis.xrevrange(key, count=1)
        journals[key] = last[0][0].decode() if last else "0-0"
    hops_before = hop_counts(inst)
    start, wall_start = time.monotonic(), time.time()
    results = client.submit([{"jobspec": spec}] * jobs, timeout=timeout)
    submitted = time.monotonic()
    failed = [r for r in results if not isinstance(r, int)]
    counts = _wait_cleans(inst, journals, jobs - len(failed), start + timeout)
    done = counts["clean"]
    end = time.monotonic()
    wall_end = time.time()
    del warm
    hop_figures = hops.summary(hops.subtract(hop_counts(inst, after=wall_end), hops_before))
    return {
        "jobs": jobs, "nodes": nodes, "cores_per_node": cores,
        "mode": "real" if real else f"simulated {runtime}",
        "submit_errors": len(failed),
        "submit_jobs_per_s": jobs / max(submitted - start, 1e-9),
        "jobs_per_s": done / max(end - start, 1e-9),
        "completed": done, "elapsed_s": end - start,
        # allocated before their cores freed (docs/scheduling-policies.md, "Staged starts")
        "staged": counts["staged"],
        # from the submission to the first job's start (its start event's time)
        "first_start_s": max(0.0, counts["first_start"] - wall_start)
        if counts["first_start"] else None,
        "hops": hop_figures,
    }


def hop_counts(inst: Instance, after: float | None = None,
                wait_s: float = 6.0) -> dict[str, dict[int, int]]:
    """Every worker's hand-off histograms added up; with ``after``, once every worker's
    heartbeat is newer than that (they publish them with it, every ~2 s)."""
    deadline = time.monotonic() + wait_s
    while after is not None and time.monotonic() < deadline:
        beats = []
        for raw in inst.redis.hvals(inst.keys.workers):
            try:
                beats.append(float(orjson.loads(raw).get("heartbeat", 0)))
            except (ValueError, AttributeError, TypeError):
                continue
        if beats and min(beats) > after:
            break
        time.sleep(0.2)
    snaps = []
    for raw in inst.redis.hvals(inst.keys.hops):
        try:
            snaps.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
    return hops.merge(snaps)


def _wait_cleans(inst: Instance, journals: dict[str, str], want: int, deadline: float
                 ) -> dict[str, Any]:
    """Count ``clean`` journal entries after the given positions until ``want`` are seen;
    with them, the ``staged`` allocations (alloc entries whose extras say so) and the
    time of the first ``start`` (0.0: none seen)."""
    seen = staged = 0
    first_start = 0.0
    while seen < want and time.monotonic() < deadline:
        reply = read_streams(inst.redis, journals, 10000, 1000)
        if sum(len(entries) for _s, entries in reply or []) < 100:
            # Let entries gather (at most 10 ms late): one wake-up per job
            # would take CPU from the instance being measured.
            time.sleep(0.01)
        for stream, entries in reply or []:
            journals[stream.decode()] = entries[-1][0].decode()
            for _sid, fields in entries:
                name = fields.get(b"n")
                if name == b"clean":
                    seen += 1
                elif name == b"alloc" and b'"staged":true' in fields.get(b"x", b""):
                    staged += 1
                elif name == b"start" and not first_start:
                    with contextlib.suppress(ValueError):
                        first_start = float(fields.get(b"t", b""))
    return {"clean": seen, "staged": staged, "first_start": first_start}
