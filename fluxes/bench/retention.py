"""``fluxes bench retention``: Redis memory per finished job with retention on.

An instance is started for the run with ``[job-manager] inactive-age-limit``
short (2 s by default) and the journal archived into its state directory.
Simulated one-core jobs (1 ms) go through it in batches; at each checkpoint
(10%, 50% and 100% of ``--jobs``, e.g. 10,000, 50,000 and 100,000) the bench
waits until retention has caught up (every finished job purged, the journal
and the message streams trimmed) and reads Redis' ``used_memory``.
``redis_bytes_per_finished_job`` is ``used_memory`` at the end minus before
the first batch, over the jobs: what each job leaves in Redis for good. With
``--age-limit=off`` nothing is purged: the figure is what a job costs
without retention.

The bench counts finished jobs through a consumer group of its own on the
journal, so the journal trim (which waits for every group) never removes an
entry before the bench has read it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.errors import Client as RedisConn
from fluxes.store.errors import ResponseError
from fluxes.store.instance import Instance
from fluxes.store.retention import (
    JOURNAL_EVERY_S,
    STREAMS_EVERY_S,
    STREAMS_KEEP_S,
    global_streams,
    internal_streams,
    positional_streams,
)

#: The consumer group the bench reads the journal through.
GROUP = "bench-retention"
#: Jobs per submission batch.
BATCH = 10_000


def run(jobs: int = 100_000, age_limit: str = "2s", nodes: int = 16, cores_per_node: int = 32,
        timeout: float = 1800.0) -> dict[str, Any]:
    """Start an instance, run ``jobs`` simulated jobs through it, return the figures."""
    if jobs < 1:
        raise ValueError("--jobs must be >= 1")
    retention = age_limit.lower() != "off"
    config = f'[job-manager]\ninactive-age-limit = "{age_limit}"\n' if retention else ""
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=nodes, cores_per_node=cores_per_node,
                            config_text=config)
        uri = launcher.start()
        try:
            inst = Instance.connect(str(uri))
            figures = _measure(inst, jobs, retention, timeout, Path(tmp) / "archive")
            figures.update(nodes=nodes, cores_per_node=cores_per_node,
                           age_limit=age_limit if retention else "off")
            return figures
        finally:
            launcher.stop()


def _measure(inst: Instance, jobs: int, retention: bool, timeout: float,
             archive: Path) -> dict[str, Any]:
    client = inst.redis
    deadline = time.monotonic() + timeout
    attributes = {"system": {"exec": {"test": {"run_duration": "1ms"}}}}
    spec = Jobspec.from_command(["true"], attributes=attributes, cwd="/tmp").to_dict()
    submitter = Client(inst)
    journals = [inst.keys.journal(p) for p in range(inst.keys.partitions)]
    for key in journals:
        client.xgroup_create(key, GROUP, id="$", mkstream=True)
    try:
        # warm up: every worker, stream and group in place before the first reading
        _run_batch(inst, submitter, spec, 1, deadline)
        _settle(inst, retention, deadline)
        before = _used(client)
        checkpoints = sorted({max(jobs // 10, 1), max(jobs // 2, 1), jobs})
        done = 0
        started = time.monotonic()
        table: dict[str, dict[str, Any]] = {}
        for mark in checkpoints:
            while done < mark:
                n = min(BATCH, mark - done)
                _run_batch(inst, submitter, spec, n, deadline)
                done += n
            settled = _settle(inst, retention, deadline)
            used = _used(client)
            table[str(mark)] = {
                "used_memory": used,
                # the keys alone (used_memory also counts client buffers, which vary)
                "dataset_bytes": int(client.memory_stats()["dataset.bytes"]),
                "bytes_per_finished_job": round((used - before) / mark, 1),
                "journal_entries": sum(int(client.xlen(k)) for k in journals),
                "keys": int(client.dbsize()),
                "settle_s": round(settled, 1),
            }
        elapsed = time.monotonic() - started
    finally:
        for key in journals:
            try:
                client.xgroup_destroy(key, GROUP)
            except ResponseError:
                pass
    after = _used(client)
    archived = sum(f.stat().st_size for f in archive.rglob("*.gz")) if archive.exists() else 0
    return {
        "jobs": jobs, "elapsed_s": round(elapsed, 1),
        "used_memory_before": before, "used_memory_after": after,
        "redis_bytes_per_finished_job": round((after - before) / jobs, 1),
        "archive_bytes_per_job": round(archived / jobs, 1),
        "checkpoints": table,
    }


def _used(client: RedisConn) -> int:
    return int(client.info("memory")["used_memory"])


def _run_batch(inst: Instance, submitter: Client, spec: dict[str, Any], n: int,
               deadline: float) -> None:
    """Submit ``n`` jobs and wait until each is cleaned (read through the bench's group)."""
    results = submitter.submit([{"jobspec": spec}] * n, timeout=max(deadline - time.monotonic(),
                                                                    1.0))
    want = sum(1 for r in results if isinstance(r, int))
    seen = 0
    streams = {inst.keys.journal(p): ">" for p in range(inst.keys.partitions)}
    while seen < want:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{want - seen} of {want} jobs not finished in time")
        reply = inst.redis.xreadgroup(GROUP, "bench", streams, count=10_000, block=1000)
        for stream, entries in reply or []:
            seen += sum(1 for _sid, f in entries if f.get(b"n") == b"clean")
            inst.redis.xack(stream, GROUP, *(sid for sid, _f in entries))


def _settle(inst: Instance, retention: bool, deadline: float) -> float:
    """Wait until retention caught up: no inactive job left, every message stream and
    the journal trimmed as far as they go. Returns the seconds it took."""
    started = time.monotonic()
    keys = inst.keys
    if not retention:
        # the message streams are trimmed all the same
        time.sleep(STREAMS_KEEP_S + STREAMS_EVERY_S)
        return time.monotonic() - started
    owner, _uid = inst.owner()
    streams = [s for p in range(keys.partitions)
               for s in internal_streams(keys, p) + positional_streams(keys, p)]
    streams += global_streams(keys, [owner], [])
    # at most this long: a purge, then the journal and stream trims that follow it
    limit = time.monotonic() + JOURNAL_EVERY_S * 3 + STREAMS_KEEP_S + STREAMS_EVERY_S * 2
    journals = {keys.journal(p): ">" for p in range(keys.partitions)}
    while time.monotonic() < min(limit, deadline):
        # read (and acknowledge) what the journal got since: the purge entries, which
        # the trim keeps until every group has read them, this one too
        for stream, entries in inst.redis.xreadgroup(GROUP, "bench", journals,
                                                     count=10_000) or []:
            inst.redis.xack(stream, GROUP, *(sid for sid, _f in entries))
        pipe = inst.redis.pipeline(transaction=False)
        for p in range(keys.partitions):
            pipe.zcard(keys.joblist_inactive(p))
            pipe.xlen(keys.journal(p))
        for stream in streams:
            pipe.xlen(stream)
        replies = pipe.execute()
        inactive = sum(replies[0:2 * keys.partitions:2])
        journal = sum(replies[1:2 * keys.partitions:2])
        left = sum(replies[2 * keys.partitions:])
        # the journal keeps at most the purge entries written since its last trim
        if inactive == 0 and left == 0 and journal < 1000:
            break
        time.sleep(0.5)
    return time.monotonic() - started
