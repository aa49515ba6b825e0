"""``fluxes bench memory``: Redis bytes per pending job, and where they go.

The test of the house issue: held jobs submitted with ``fluxes submit
--cc=1-N --urgency=hold true`` (the submitter's whole environment in every
jobspec, as a user's submission carries it) on a 16 x 32 instance started
for the run. ``redis_bytes_per_pending_job`` is Redis' ``used_memory`` after
minus before, divided by N, once every job is pending (its ``priority``
event written) and the read model has folded them all.

The table splits the growth by key kind (``MEMORY USAGE`` of every key,
before and after): job hashes, eventlogs, the journal, the read model, the
user's submit stream (the requests stay until retention trims them), the
job manager's ``jm:new`` stream, content-addressed blobs, the accounting
read model, the rest. What
``MEMORY USAGE`` does not see (the keyspace's own entries, allocator
rounding) is the ``unattributed`` row.

``MEMORY USAGE`` counts a stream's preallocated node in full (so the table adds
up to more than Redis holds). What each kind really costs is measured at the
end: the keys of each per-job kind are deleted, one kind after the other, and
the ``used_memory`` each deletion frees is ``bytes_per_job_freed_by_kind``
(:func:`freed_by_kind`; the instance is thrown away after the bench anyway).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from fluxes.bench.common import private_instance
from fluxes.store.errors import Client
from fluxes.store.groups import read_streams
from fluxes.store.instance import Instance

#: Key kinds, tried in order on the key name without its hash tag.
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("job hash", re.compile(r":job:\d+$")),
    ("eventlog", re.compile(r":job:\d+:eventlog$")),
    ("journal", re.compile(r":journal$")),
    ("read model", re.compile(r":jl:")),
    ("submit stream", re.compile(r":submit:")),
    ("jm:new", re.compile(r":jm:new$")),
    ("blobs", re.compile(r":blob:")),
    ("private", re.compile(r":private:\d+:\d+$")),
    ("checkpoint", re.compile(r":checkpoint$")),
    ("accounting", re.compile(r":acct:")),
)


def kind_of(key: str) -> str:
    """The kind of a key, for the table (``other`` when none matches)."""
    for name, pattern in KINDS:
        if pattern.search(key):
            return name
    return "other"


def usage_by_kind(client: Client) -> Counter[str]:
    """``MEMORY USAGE`` (every nested value counted) summed per key kind."""
    out: Counter[str] = Counter()
    keys = [k.decode() for k in client.scan_iter(count=2000)]
    for i in range(0, len(keys), 2000):
        chunk = keys[i:i + 2000]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.memory_usage(key, samples=0)
        for key, used in zip(chunk, pipe.execute(), strict=True):
            out[kind_of(key)] += int(used or 0)
    return out


#: Kinds whose keys the bench deletes at its end, one kind at a time, in this order:
#: what one pending job costs in each, keyspace entry and allocator rounding included.
FREED_KINDS = ("eventlog", "journal", "job hash", "private", "read model", "accounting",
               "blobs")


def freed_by_kind(client: Client, jobs: int) -> dict[str, float]:
    """Delete the keys of each of :data:`FREED_KINDS` in turn; the ``used_memory`` each
    kind's deletion frees, per job. Destructive: the last step of a bench."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in FREED_KINDS}
    for raw in client.scan_iter(count=2000):
        key = raw.decode()
        kind = kind_of(key)
        if kind in by_kind:
            by_kind[kind].append(key)
    out: dict[str, float] = {}
    for kind, names in by_kind.items():
        before = int(client.info("memory")["used_memory"])
        for i in range(0, len(names), 1000):
            client.delete(*names[i:i + 1000])
        after = int(client.info("memory")["used_memory"])
        out[kind] = round((before - after) / jobs, 1)
    return out


def run(jobs: int = 50_000, nodes: int = 16, cores_per_node: int = 32,
        timeout: float = 900.0) -> dict[str, Any]:
    """Start an instance, submit ``jobs`` held jobs with the CLI, return the figures."""
    if jobs < 1:
        raise ValueError("--jobs must be >= 1")
    with private_instance(nodes, cores_per_node) as (_launcher, uri):
        return _measure(Instance.connect(uri), uri, jobs, nodes, cores_per_node, timeout)


def _cli(uri: str, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``fluxes ARGS`` as a user would, with this process's environment."""
    env = dict(os.environ, FLUXES_URI=uri)
    return subprocess.run([sys.executable, "-m", "fluxes.cli.main", *args], env=env,
                          capture_output=True, timeout=timeout, check=True)


def _measure(inst: Instance, uri: str, jobs: int, nodes: int, cores: int,
             timeout: float) -> dict[str, Any]:
    client = inst.redis
    deadline = time.monotonic() + timeout
    # warm up: one held job through every worker, so that the streams, groups and
    # read model exist before the first measurement
    _cli(uri, "submit", "--urgency=hold", "true", timeout=120)
    _wait_pending(inst, {inst.keys.journal(p): "0-0" for p in range(inst.keys.partitions)},
                  1, deadline)
    _wait_folded(inst, deadline)
    journals = {}
    for p in range(inst.keys.partitions):
        last = client.xrevrange(inst.keys.journal(p), count=1)
        journals[inst.keys.journal(p)] = last[0][0].decode() if last else "0-0"
    time.sleep(0.5)
    before = int(client.info("memory")["used_memory"])
    kinds_before = usage_by_kind(client)
    started = time.monotonic()
    _cli(uri, "submit", f"--cc=1-{jobs}", "--urgency=hold", "true", timeout=timeout)
    submitted = time.monotonic() - started
    seen = _wait_pending(inst, journals, jobs, deadline)
    _wait_folded(inst, deadline)
    time.sleep(0.5)
    untrimmed = int(client.info("memory")["used_memory"])
    # the steady state: the job-list worker's housekeeping trims the acknowledged
    # entries of the message streams a little later (fluxes/store/retention.py)
    trimmed = _wait_trimmed(inst, min(deadline, time.monotonic() + TRIM_WAIT_S))
    after = int(client.info("memory")["used_memory"])
    kinds_after = usage_by_kind(client)
    grown = {k: kinds_after[k] - kinds_before[k] for k in set(kinds_after) | set(kinds_before)}
    table = {k: round(v / jobs, 1) for k, v in sorted(grown.items(), key=lambda kv: -kv[1])
             if v}
    table["unattributed"] = round((after - before - sum(grown.values())) / jobs, 1)
    env_bytes = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in os.environ.items())
    return {
        "jobs": jobs, "nodes": nodes, "cores_per_node": cores, "pending": seen,
        "environment_bytes": env_bytes,
        "submit_s": round(submitted, 2),
        "used_memory_before": before, "used_memory_after": after,
        "redis_bytes_per_pending_job": round((after - before) / jobs, 1),
        # before the acknowledged submit and jm:new entries were trimmed
        "redis_bytes_per_pending_job_untrimmed": round((untrimmed - before) / jobs, 1),
        "streams_trimmed": trimmed,
        # entries every consumer acknowledged that are still there
        "bytes_per_job_in_acknowledged_streams": round(
            table.get("submit stream", 0.0) + table.get("jm:new", 0.0), 1),
        "bytes_per_job_by_kind": table,
        "bytes_per_job_freed_by_kind": freed_by_kind(client, jobs),
    }


#: How long the bench waits for the housekeeping to trim the message streams.
TRIM_WAIT_S = 60.0


def _wait_trimmed(inst: Instance, deadline: float) -> bool:
    """Until the user submit streams and ``jm:new`` hold (almost) nothing: True, or False
    when the deadline passed first."""
    client = inst.redis
    while time.monotonic() < deadline:
        keys = [k.decode() for k in client.scan_iter(match=f"*{inst.keys.ns}*:submit:*")]
        keys += [inst.keys.jm_new(p) for p in range(inst.keys.partitions)]
        if sum(int(client.xlen(k)) for k in keys) <= len(keys):
            return True
        time.sleep(0.5)
    return False


def _wait_pending(inst: Instance, journals: dict[str, str], want: int,
                  deadline: float) -> int:
    """Count ``priority`` journal entries after the given positions until ``want`` are seen."""
    seen = 0
    while seen < want and time.monotonic() < deadline:
        reply = read_streams(inst.redis, journals, 10000, 1000)
        for stream, entries in reply or []:
            journals[stream.decode()] = entries[-1][0].decode()
            for _sid, fields in entries:
                if fields.get(b"n") == b"priority":
                    seen += 1
    return seen


def _wait_folded(inst: Instance, deadline: float) -> None:
    """Until the read model has folded every journal to its end."""
    client = inst.redis
    while time.monotonic() < deadline:
        behind = False
        for p in range(inst.keys.partitions):
            key = inst.keys.journal(p)
            last = client.xrevrange(key, count=1)
            groups = {g["name"].decode() if isinstance(g["name"], bytes) else g["name"]: g
                      for g in client.xinfo_groups(key)}
            group = groups.get("joblist")
            done = group["last-delivered-id"] if group else b"0-0"
            done = done.decode() if isinstance(done, bytes) else str(done)
            if last and done != last[0][0].decode():
                behind = True
        if not behind:
            return
        time.sleep(0.05)
