"""``fluxes bench recovery``: kill -9 of the scheduler with N jobs running, on a real instance.

A private instance of 16 nodes with room for N one-core jobs runs N
simulated jobs that last an hour. Once every one is running, the scheduler
is SIGKILLed and a probe job is submitted; the supervisor restarts the
scheduler, which says hello, reads back every allocation's R and says
ready, and the probe is allocated. Figures:

* ``recovery_s``: the new scheduler's own hello -> ready time (reading back
  and adopting the N allocations), from its heartbeat;
* ``kill_to_alloc_s``: SIGKILL to the probe's alloc event, which includes
  the supervisor's restart delay (0.5 s) and the Python start-up;
* ``recovered``: cores the new scheduler reports allocated (should be N).

With ``standby``, a hot standby scheduler runs too (``scheduler-standby``);
once its warm pool holds every running job's allocation, the scheduler
holding the leases is SIGKILLed and the standby takes them over the moment
Redis drops the dead one's connection (docs/operations.md, "Hot standby
scheduler"): ``kill_to_alloc_s`` then has no restart delay and no start-up.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance

NODES = 16


def run(jobs: int = 10_000, timeout: float = 600.0, standby: bool = False) -> dict[str, Any]:
    """Start an instance, fill it with ``jobs`` running jobs, kill -9 its scheduler (the
    leading one, with a hot standby running when ``standby``)."""
    cores = math.ceil((jobs + 1) / NODES)
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=NODES, cores_per_node=cores,
                            standby_scheduler=standby)
        launcher.start()
        try:
            return _measure(launcher, jobs, cores, time.monotonic() + timeout, standby)
        finally:
            launcher.stop()


def _spec(runtime: str) -> dict[str, Any]:
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()


def _measure(launcher: Launcher, jobs: int, cores: int, deadline: float,
             standby: bool = False) -> dict[str, Any]:
    inst = Instance.connect(str(launcher.uri))
    client = Client(inst)
    journals = {inst.keys.journal(p): "0-0" for p in range(inst.keys.partitions)}
    ids = client.submit([{"jobspec": _spec("1h")}] * jobs, timeout=deadline - time.monotonic())
    wanted = {i for i in ids if isinstance(i, int)}
    _wait_allocs(inst, journals, set(wanted), deadline)
    old = launcher.worker(_leader(inst, launcher) if standby else "scheduler")
    if standby:
        _wait_warm(inst, len(wanted), deadline)
    assert old.proc is not None
    old_pid = old.proc.pid
    os.kill(old_pid, signal.SIGKILL)
    killed = time.time()
    old.proc.wait()
    [probe] = client.submit([{"jobspec": _spec("1ms")}], timeout=deadline - time.monotonic())
    if not isinstance(probe, int):
        raise RuntimeError(f"probe job refused: {probe}")
    if not standby:
        _restart(launcher, old, deadline)
    # the alloc event's own time: the kill and the event both on this host's clock
    allocated = _wait_allocs(inst, journals, {probe}, deadline)
    if standby:
        _restart(launcher, old, deadline)  # a standby again, as fluxes start's would be
    allocated_at = time.time()
    recovery_s = None
    # the new scheduler was ready before the probe's alloc: its first heartbeat
    # after that carries the recovery time (earlier ones say 0)
    while recovery_s is None and time.monotonic() < deadline:
        for raw in inst.redis.hvals(inst.keys.workers):
            record = orjson.loads(raw)
            if record.get("kind") == "scheduler" and record.get("pid") != old_pid \
                    and record.get("leader") \
                    and float(record.get("heartbeat", 0)) >= allocated_at:
                recovery_s = float(record.get("recovery_s", 0.0))
        time.sleep(0.1)
    status = orjson.loads(inst.redis.get(inst.keys.sched_status) or b"{}")
    return {"running": len(wanted), "nodes": NODES, "cores_per_node": cores, "standby": standby,
            "recovery_s": recovery_s, "kill_to_alloc_s": round(allocated - killed, 3),
            "recovered": (status.get("allocated") or {}).get("ncores")}


def _restart(launcher: Launcher, spec: Any, deadline: float) -> None:
    """Restart the killed worker as fluxes start's supervisor does (after its delay)."""
    while spec.proc.poll() is not None and time.monotonic() < deadline:
        launcher.supervise_once()
        time.sleep(0.02)


def _wait_allocs(inst: Instance, journals: dict[str, str], wanted: set[int],
                 deadline: float) -> float:
    """Read the journals on from ``journals`` until every job of ``wanted`` has its alloc;
    the time of the last alloc event."""
    last = 0.0
    while wanted:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(wanted)} jobs not allocated in time")
        for stream, entries in read_streams(inst.redis, journals, 10_000, 1000):
            journals[stream.decode()] = entries[-1][0].decode()
            for _sid, fields in entries:
                if fields.get(b"n") == b"alloc" and int(fields[b"j"]) in wanted:
                    wanted.discard(int(fields[b"j"]))
                    last = max(last, float(fields.get(b"t", 0)))
    return last


def _leader(inst: Instance, launcher: Launcher) -> str:
    """The supervised scheduler (``scheduler`` or ``scheduler-standby``) that leads now."""
    holder = (inst.redis.get(inst.keys.sched_lease(0)) or b"").decode()
    for name in ("scheduler", "scheduler-standby"):
        if holder.startswith(name + "@"):
            return name
    raise RuntimeError(f"no supervised scheduler leads (lease holder {holder!r})")


def _wait_warm(inst: Instance, jobs: int, deadline: float) -> None:
    """Until the standby's heartbeat says its warm pool holds ``jobs`` allocations."""
    while time.monotonic() < deadline:
        for raw in inst.redis.hvals(inst.keys.workers):
            record = orjson.loads(raw)
            if record.get("kind") == "scheduler" and not record.get("leader") \
                    and int(record.get("warm", 0)) >= jobs:
                return
        time.sleep(0.2)
    raise RuntimeError("the standby scheduler's pool did not warm up in time")
