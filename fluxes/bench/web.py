"""``fluxes bench web``: page and JSON latency of ``fluxes web`` with a long history.

Synthesizes a journal of N jobs on a private redis-server: jobs submitted
evenly over the last ``hours`` up to now, each waiting a little, running one to
ten minutes on one of 16 nodes and ending (the ten events of a normal life,
with the journal extras), so that the newest are still running or pending.
Entries get stream ids from their timestamps, as a real journal's are (Redis'
clock when they were written): written directly with XADD, which is much
faster than through the job manager. The job-list read model is rebuilt from
it, and a sample of jobs get eventlogs and job hashes for their pages.

Then ``fluxes web`` serves it (uvicorn on a free port of 127.0.0.1, in this
process), and every page and JSON endpoint is requested over HTTP, one at a
time: p50 and p99 latency, with time-travel views of a moment an hour back
(folded from the time index's nearest snapshot) among them.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson

from fluxes.bench.common import Stopwatch, private_redis
from fluxes.domain.job import events as ev
from fluxes.formats import jobid as jobids
from fluxes.store.direct import Direct
from fluxes.store.eventstore import encode_context
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys

NS = "bench"
NODES = 16
CORES = 32
USERS = 20
#: Jobs that get an eventlog and a job hash (the job pages requested).
SAMPLED = 200
#: Commands per pipelined write.
WRITE_BLOCK = 5_000


def _fields(jobid: int, seq: int | None, event: ev.Event,
            extra: dict[str, Any] | None = None) -> list[bytes]:
    """A journal entry's fields in commit.lua's order: j, s, n, t, then c and x."""
    out = [b"j", str(jobid).encode()]
    if seq is not None:
        out += [b"s", str(seq).encode()]
    out += [b"n", event.event_name.encode(), b"t", repr(event.timestamp).encode()]
    ctx = encode_context(event.context())
    if ctx:
        out += [b"c", ctx]
    if extra:
        out += [b"x", orjson.dumps(extra)]
    return out


def _life(rng: random.Random, jobid: int, t: float, now: float
          ) -> list[tuple[float, list[bytes]]]:
    """One job's journal entries up to ``now``: the common life of a one-node job."""
    uid = 5000 + jobid % USERS
    rank = jobid % NODES
    ncores = rng.choice((1, 2, 4, 8, 16))
    wait = rng.uniform(0.01, 60.0)
    run = rng.uniform(60.0, 600.0)
    t_alloc = t + 0.002 + wait
    t_end = t_alloc + 0.01 + run
    events: list[tuple[ev.Event, dict[str, Any] | None]] = [
        (ev.Submit(timestamp=t, urgency=16, userid=uid),
         {"name": f"app{jobid % 7}", "ntasks": ncores, "nnodes": 1, "ncores": ncores,
          "duration": 900.0}),
        (ev.Validate(timestamp=t), None),
        (ev.Depend(timestamp=t + 0.001), None),
        (ev.Priority(timestamp=t + 0.002, priority=16), None),
        (ev.Alloc(timestamp=t_alloc), {"ranks": str(rank), "nodelist": f"node{rank}"}),
        (ev.Start(timestamp=t_alloc + 0.01), None),
        (ev.Finish(timestamp=t_end, status=0), None),
        (ev.Release(timestamp=t_end, ranks="all", final=True), None),
        (ev.Free(timestamp=t_end + 0.001), None),
        (ev.Clean(timestamp=t_end + 0.002), None),
    ]
    return [(e.timestamp, _fields(jobid, seq, e, x)) for seq, (e, x) in enumerate(events)
            if e.timestamp <= now]


def synthesize(client: Any, keys: Keys, jobs: int, hours: float, now: float,
               seed: int = 1) -> dict[str, Any]:
    """Write the journal (ids from the stamps) and the sampled jobs' keys; return the
    sampled job ids and how many entries were written."""
    rng = random.Random(seed)
    span = hours * 3600.0
    first_id = 10**15
    entries: list[tuple[float, int, list[bytes]]] = []
    ids: list[str] = []  # each entry's journal id
    for n in range(jobs):
        jobid = first_id + n
        t = now - span + span * n / jobs
        entries += [(stamp, jobid, fields) for stamp, fields in _life(rng, jobid, t, now)]
    entries.sort(key=lambda e: e[0])
    journal = keys.journal(0)
    direct = Direct.of(client, journal)
    commands: list[tuple[Any, ...]] = []
    last_ms, seq = -1, 0
    for stamp, _jobid, fields in entries:
        ms = int(stamp * 1000)
        if ms <= last_ms:
            ms, seq = last_ms, seq + 1
        else:
            seq = 0
        last_ms = ms
        ids.append(f"{ms}-{seq}")
        commands.append(("XADD", journal, ids[-1], *fields))
        if len(commands) >= WRITE_BLOCK:
            direct.execute(commands)
            commands = []
    direct.execute(commands)
    sampled = sorted(rng.sample(range(first_id, first_id + jobs), min(SAMPLED, jobs)))
    _write_sampled(client, keys, sampled, entries, ids)
    return {"entries": len(entries), "sampled": sampled}


def _write_sampled(client: Any, keys: Keys, sampled: list[int],
                   entries: list[tuple[float, int, list[bytes]]], ids: list[str]) -> None:
    """Eventlogs (indexes of their journal entries, ``ids``) and public job hashes
    (owner, R) of the sampled jobs."""
    wanted = set(sampled)
    pipe = client.pipeline(transaction=False)
    for (_stamp, jobid, fields), sid in zip(entries, ids, strict=True):
        if jobid not in wanted or b"s" not in fields[2:3]:
            continue
        pairs = dict(zip(fields[::2], fields[1::2], strict=True))
        pipe.append(keys.eventlog(jobid), sid + " ")
        if pairs[b"n"] == b"submit":
            ctx = orjson.loads(pairs[b"c"])
            pipe.hset(keys.job(jobid), mapping={"owner": ctx["userid"], "urgency": 16})
        if pairs[b"n"] == b"alloc":
            rank = orjson.loads(pairs[b"x"])["ranks"]
            r = {"version": 1, "execution": {"R_lite": [{"rank": rank,
                                                          "children": {"core": "0-3"}}],
                                              "nodelist": [f"node{rank}"]}}
            pipe.hset(keys.job(jobid), "R", orjson.dumps(r))
    pipe.execute()


def _record_instance(client: Any, keys: Keys) -> None:
    from fluxes.config import InstanceConfig
    from fluxes.store.instance import record_instance

    resources = {"config": [{"hosts": f"node[0-{NODES - 1}]", "cores": f"0-{CORES - 1}"}]}
    record_instance(client, NS, 1, InstanceConfig(), resources, ("bench", 0))


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50, p99


class _Server:
    """``fluxes web`` on a free port of 127.0.0.1, served from a thread of this process."""

    def __init__(self, instance: Instance) -> None:
        import uvicorn

        from fluxes.web.app import create_app

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.app = create_app(instance, "bench-secret-" + "x" * 32, freeze=True)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="on", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def get(self, path: str) -> tuple[int, int]:
        """GET ``path``: status and body size."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, len(response.read())
        finally:
            conn.close()


def run(jobs: int = 100_000, hours: float = 6.0, requests: int = 50) -> dict[str, Any]:
    """Measure and return the figures."""
    from fluxes.store.joblist_rebuild import rebuild

    figures: dict[str, Any] = {"jobs": jobs, "hours": hours}
    now = time.time()
    with private_redis() as (_server, client):
        keys = Keys(NS)
        _record_instance(client, keys)
        watch = Stopwatch()
        made = synthesize(client, keys, jobs, hours, now)
        figures["journal_entries"] = made["entries"]
        figures["synthesize_s"] = watch.elapsed
        watch = Stopwatch()
        rebuild(client, keys)
        figures["readmodel_rebuild_s"] = watch.elapsed
        instance = Instance(InstanceURI("redis://unused", NS), client=client)
        with _Server(instance) as server:
            web = server.app.state.web
            web.index.wait_ready()
            figures["time_index_build_s"] = web.index.build_s
            figures["time_index_snapshots"] = sum(len(f.snapshots) for f in web.index.folds)
            sample = [jobids.encode(j, "f58") for j in made["sampled"]]
            back = repr(now - 3600.0)
            targets: dict[str, Callable[[int], str]] = {
                "page_machine": lambda i: "/",
                "page_queues": lambda i: "/queues",
                "page_jobs": lambda i: "/jobs",
                "page_jobs_all": lambda i: "/jobs?all=1",
                "page_job": lambda i: "/jobs/" + quote(sample[i % len(sample)]),
                "page_gantt": lambda i: "/gantt",
                "api_jobs": lambda i: "/api/jobs",
                "api_jobs_all": lambda i: "/api/jobs?all=1",
                "api_job": lambda i: "/api/jobs/" + quote(sample[i % len(sample)]),
                "api_resources": lambda i: "/api/resources",
                "api_queues": lambda i: "/api/queues",
                "api_jobs_hour_back": lambda i: f"/api/jobs?all=1&at={back}",
                "api_resources_hour_back": lambda i: f"/api/resources?at={back}",
                "page_machine_hour_back": lambda i: f"/?at={back}",
                "page_jobs_hour_back": lambda i: f"/jobs?at={back}",
            }
            for name, path in targets.items():
                server.get(path(0))  # warm up (first fold, caches)
                samples = []
                for i in range(requests):
                    started = time.perf_counter()
                    status, _size = server.get(path(i))
                    samples.append(time.perf_counter() - started)
                    if status != 200:
                        raise RuntimeError(f"{path(i)}: HTTP {status}")
                p50, p99 = _percentiles(samples)
                figures[f"{name}_p50_ms"] = p50 * 1000
                figures[f"{name}_p99_ms"] = p99 * 1000
    return figures
