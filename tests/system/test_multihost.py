"""Multi-host, tested here: an instance spread over network namespaces, talking TCP.

Six namespaces on a private bridge (``tests/system/netns.py``) stand in for
machines: ``db`` runs redis-server on its own address, ``ctl`` the ingest,
job manager, scheduler and job list, and ``node0``..``node2`` one exec
worker each (ranks 0-2, four cores each). Every worker reaches Redis over
TCP at ``redis://<db address>:6379?ns=fx`` with a password from a
credentials file, as a real deployment does (``docs/multihost.md`` is the
same recipe by hand). The test itself watches from the root namespace
through Redis's unix socket, which is a file and so crosses namespaces.

The tests share one instance and run in order:

1. a job spanning the three hosts, whose tasks prove (by the network
   namespace they ran in) that each ran on its own host, and a batch of
   simulated jobs;
2. node1's exec worker SIGKILLed under load and restarted;
3. the control host's job manager and scheduler SIGKILLed and restarted;
4. node2's cable pulled for longer than the exec heartbeat timeout: its
   rank is drained, its jobs fail with ``node-failure``, the other hosts
   keep working; cable back: the rank is undrained and runs jobs again.

After each phase every job must be INACTIVE exactly once with the
expected result, no core may have been held by two jobs at once
(``fluxes.drill.invariants``), and no worker may have parked a message as
a dead letter. A last test checks that the cut-off host, once back, kills
the tasks of a job that ran only there and failed while it was away (run
alone, it cuts node2 off itself first).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes.config import InstanceConfig
from fluxes.domain.job import events as ev
from fluxes.domain.job.states import JobResult
from fluxes.drill import collect
from fluxes.drill.invariants import (
    check_exclusive,
    check_jobs,
)
from fluxes.formats.jobid import parse as parse_jobid
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.requires import parse_requires
from fluxes.formats.rset import ResourceSet
from fluxes.proc.redis_server import RedisServer, redis_server_binary
from fluxes.store import acl, instance
from fluxes.store.client import Client
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.security import Credentials, write_credentials
from tests.system import netns
from tests.system.conftest import need_redis

#: [sched] exec-timeout of this instance: the partition must outlast it, and an exec
#: worker's restart must not (killed, 1.5 s down, then a Python start-up that took
#: over 2.5 s on a loaded machine: with 4 s its rank was declared lost and the jobs
#: failed).
LOST_AFTER_S = 8.0

pytestmark = pytest.mark.system

NS = "fx"
PORT = 6379  # the namespace is private, so the standard port is free
NODES = 3
CORES = 4
CONFIG = f"""\
[exec]
kill-timeout = "1s"

[sched]
exec-timeout = "{LOST_AFTER_S:g}s"

[[resource.config]]
hosts = "node[0-{NODES - 1}]"
cores = "0-{CORES - 1}"
"""
RESOURCES = {"config": [{"hosts": f"node[0-{NODES - 1}]", "cores": f"0-{CORES - 1}"}]}
#: A task prints its task rank, exec rank and the network namespace it runs in.
WHERE = 'echo "$FLUXES_TASK_RANK $FLUXES_EXEC_RANK $(readlink /proc/self/ns/net)"'
CONTROL = ("ingest", "job-manager", "scheduler", "job-list")


def sim(duration: str, requires: Sequence[str] = ()) -> dict[str, Any]:
    """A simulated one-core job (a timer in the exec worker, no process)."""
    return Jobspec.from_command(
        ["true"], cwd="/tmp",
        constraints=parse_requires(requires) if requires else None,
        attributes={"system": {"exec": {"test": {"run_duration": duration}}}}).to_dict()


def real(command: str, nnodes: int = 1, ntasks: int = 1,
         requires: Sequence[str] = ()) -> dict[str, Any]:
    """A job running ``sh -c command`` as real processes on the hosts."""
    return Jobspec.from_command(
        ["sh", "-c", command], nnodes=nnodes, ntasks=ntasks, cwd="/tmp",
        environment={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        constraints=parse_requires(requires) if requires else None).to_dict()


@dataclass
class Worker:
    """One worker process on one host, restartable under the same name."""

    name: str
    host: netns.Host
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class Cluster:
    """The instance across the namespaces, and the test's view of it."""

    net: netns.Network
    tmp: Path
    db: netns.Host
    ctl: netns.Host
    nodes: list[netns.Host]
    server: RedisServer
    uri: str
    env: dict[str, str]
    inst: Instance
    workers: dict[str, Worker] = field(default_factory=dict)
    #: Every job of every phase with the result it must end with.
    expected: dict[int, JobResult] = field(default_factory=dict)
    #: The partition test's job that ran on node2 alone.
    partitioned: int | None = None

    # ------------------------------------------------------------ processes

    def add_worker(self, name: str, host: netns.Host, kind: str, *args: str) -> None:
        """Define and start ``python -m workers KIND`` on ``host``."""
        # the test network's Redis has no password: --insecure (a private netns)
        argv = [sys.executable, "-m", "workers", kind, "--insecure", "--uri", self.uri, "--name",
                f"{name}@{host.name}", *args]
        self.workers[name] = Worker(name, host, argv)
        self.start(name)

    def start(self, name: str) -> None:
        """(Re)start worker ``name``; a stable name lets a leader retake its own lease."""
        worker = self.workers[name]
        worker.proc = self.net.spawn(worker.host, worker.argv, self.tmp / f"{name}.log",
                                     self.env)

    def kill(self, name: str) -> None:
        """SIGKILL worker ``name`` (its job tasks, in sessions of their own, live on)."""
        proc = self.workers[name].proc
        assert proc is not None and proc.poll() is None, f"{name} is not running"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def logs(self, names: Sequence[str] | None = None, lines: int = 15) -> str:
        """The last lines of the workers' logs, for failure messages."""
        out = []
        for name in names or list(self.workers):
            path = self.tmp / f"{name}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] \
                if path.exists() else []
            out.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(out)

    # ------------------------------------------------------------ jobs

    def cli(self, *args: str) -> str:
        """Run the fluxes CLI on the control host (over TCP); its stdout."""
        exe = os.path.join(os.path.dirname(sys.executable), "fluxes")
        proc = self.net.run(self.ctl, [exe, "--uri", self.uri, *args], env=self.env)
        assert proc.returncode == 0, f"fluxes {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def submit(self, jobspecs: Sequence[Mapping[str, Any]]) -> list[int]:
        """Submit from the root namespace (unix socket); every job must be accepted."""
        ids = Client(self.inst).submit([{"jobspec": j} for j in jobspecs])
        assert all(isinstance(i, int) for i in ids), ids
        return [int(i) for i in ids]

    def expect(self, ids: Sequence[int], result: JobResult) -> None:
        """Record the result ``ids`` must end with."""
        self.expected.update(dict.fromkeys(ids, result))

    def events(self, jobid: int) -> list[ev.Event]:
        """The job's eventlog."""
        return collect.eventlogs(self.inst, [jobid])[jobid]

    def wait(self, what: str, ready: Callable[[], bool], timeout: float,
             logs: Sequence[str] | None = None) -> float:
        """Poll ``ready`` until it holds; seconds waited. Fails with worker logs after ``timeout``."""
        started = time.monotonic()
        while not ready():
            if time.monotonic() - started > timeout:
                pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n"
                            f"{self.logs(logs)}")
            time.sleep(0.05)
        return time.monotonic() - started

    def inactive(self, ids: Sequence[int]) -> bool:
        """True when every job in ``ids`` has a result (is INACTIVE)."""
        pipe = self.inst.redis.pipeline(transaction=False)
        for jobid in ids:
            pipe.hexists(self.inst.keys.job(jobid), "result")
        return all(pipe.execute())

    def wait_inactive(self, ids: Sequence[int], timeout: float = 30.0) -> float:
        """Wait until every job in ``ids`` is INACTIVE."""
        return self.wait(f"{len(ids)} jobs to end", lambda: self.inactive(ids), timeout)

    def wait_event(self, jobid: int, name: str, timeout: float = 20.0) -> float:
        """Wait until the job's eventlog holds event ``name``."""
        return self.wait(f"event {name} of job {jobid}",
                         lambda: any(e.event_name == name for e in self.events(jobid)),
                         timeout)

    def output(self, jobid: int) -> dict[int, str]:
        """The job's stdout, per task rank."""
        out: dict[int, str] = {}
        owner = int(self.inst.redis.hget(self.inst.keys.job(jobid), "owner") or -1)
        for _sid, fields in self.inst.redis.xrange(self.inst.keys.output(owner, jobid)):
            if b"data" in fields and fields.get(b"stream") == b"stdout":
                rank = int(fields[b"rank"])
                out[rank] = out.get(rank, "") + fields[b"data"].decode()
        return out

    def ranks_of(self, jobid: int) -> set[int]:
        """The exec ranks in the job's R."""
        return set(ResourceSet(self.inst.redis.hget(self.inst.keys.job(jobid), "R")).ranks)

    def check(self) -> None:
        """The drill invariants over every job so far, with their expected results."""
        ids = sorted(self.expected)
        logs = collect.eventlogs(self.inst, ids)
        _jobs, report = check_jobs(logs, self.expected)
        assert report.ok, [str(v) for v in report.violations[:5]]
        double = check_exclusive(logs, collect.rsets(self.inst, ids))
        assert not double, [str(v) for v in double[:5]]
        # no worker met a message it could not handle (e.g. a late exec report)
        letters = self.inst.redis.xrange(self.inst.keys.dead_letters)
        assert not letters, letters[:3]

    # ------------------------------------------------------------ resources

    def drained(self) -> set[int]:
        """The ranks the scheduler's published status shows drained."""
        raw = self.inst.redis.get(self.inst.keys.sched_status)
        return {int(r) for r in orjson.loads(raw)["drained"]} if raw else set()

    def heartbeats(self) -> dict[int, float]:
        """rank -> the last heartbeat its exec worker recorded."""
        raw = self.inst.redis.hgetall(self.inst.keys.exec_registry)
        return {int(r): float(orjson.loads(v)["heartbeat"]) for r, v in raw.items()}

    def task_jobs(self, host: netns.Host) -> set[int]:
        """The jobs with a task process on ``host``.

        A task's wrapper carries ``fluxes-task:NS:RANK:JOB:TASK`` in its command
        line; a task of the spawner (no wrapper) has ``FLUXES_JOB_ID_DEC`` in its
        environment.
        """
        found = set()
        for pid in self.net.pids(host):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue  # ended meanwhile
            for arg in argv:
                parts = arg.decode(errors="replace").split(":")
                if len(parts) == 5 and parts[:2] == ["fluxes-task", NS]:
                    found.add(int(parts[3]))
            for var in env:
                name, _sep, value = var.partition(b"=")
                if name == b"FLUXES_JOB_ID_DEC" and value.isdigit():
                    found.add(int(value))
        return found


def record_instance(client: redis.Redis) -> None:
    """What ``fluxes admin init`` records before the first worker starts."""
    instance.record_instance(client, NS, 1, InstanceConfig.from_toml(CONFIG), RESOURCES,
                             ("root", os.getuid()))


def start_redis(net: netns.Network, host: netns.Host, directory: Path,
                password: str) -> RedisServer:
    """RedisServer, run inside ``host`` and listening on its address.

    RedisServer starts the ``redis-server`` it finds on PATH; a wrapper of
    that name found first runs the real one under ``ip netns exec`` (which
    execs, so the server's pid is the real server's and stop() works).
    ``--bind`` given again in ``extra`` replaces the default 127.0.0.1.
    """
    real_binary = redis_server_binary()
    assert real_binary is not None
    bindir = directory / "bin"
    bindir.mkdir(parents=True)
    wrapper = bindir / "redis-server"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.join(net.argv(host, [real_binary]))} "$@"\n')
    wrapper.chmod(0o755)
    server = RedisServer(directory / "redis", appendonly=True, port=PORT,
                         extra=["--bind", host.address])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
        server.start()
    # start() checks the server with a PING that carries no password, so the
    # password comes after, as fluxes start does it (protected mode keeps
    # other hosts out until then); nothing restarts this server, so the ACL
    # change needs no saving.
    client = server.client()
    try:
        acl.protect_default_user(client, password)
    finally:
        client.close()
    return server


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The instance on six namespaces; everything torn down afterwards, also on failure."""
    need_redis()
    netns.require()
    net = netns.Network.new()
    tmp = Path(tempfile.mkdtemp(prefix="fluxes-multihost-"))
    built: Cluster | None = None
    server: RedisServer | None = None
    try:
        net.create()
        db, ctl = net.add_host("db"), net.add_host("ctl")
        nodes = [net.add_host(f"node{r}") for r in range(NODES)]
        password = secrets.token_hex(16)
        server = start_redis(net, db, tmp, password)
        observer = redis.Redis(unix_socket_path=str(server.socket), password=password)
        record_instance(observer)
        uri = f"redis://{db.address}:{PORT}?ns={NS}"
        # The password reaches workers through a credentials file, not argv.
        creds = tmp / "credentials.json"
        write_credentials(creds, Credentials(f"redis://default:{password}@{db.address}:{PORT}"
                                             f"?ns={NS}"))
        env = dict(os.environ, FLUXES_CREDENTIALS=str(creds), FLUXES_LOG_FORMAT="json")
        built = Cluster(net, tmp, db, ctl, nodes, server, uri, env,
                        Instance(InstanceURI(f"unix://{server.socket}", NS), client=observer))
        for kind in CONTROL:
            built.add_worker(kind, ctl, kind)
        for rank, node in enumerate(nodes):
            built.add_worker(f"exec-{rank}", node, "exec", "--ranks", str(rank),
                             "--state-dir", str(tmp / f"exec-{node.name}"))
        ready = built
        ready.wait("every exec worker's heartbeat",
                   lambda: set(ready.heartbeats()) == set(range(NODES)), 30)
        ready.wait("the scheduler's resource status",
                   lambda: ready.inst.redis.exists(ready.inst.keys.sched_status) == 1, 30)
        yield built
    finally:
        # Every process in the namespaces dies with them (tasks included).
        net.destroy()
        if built is not None:
            for worker in built.workers.values():
                if worker.proc is not None:
                    worker.proc.wait()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_job_spans_three_hosts(cluster: Cluster) -> None:
    # submitted with the CLI on the control host: the client path over TCP too
    out = cluster.cli("submit", "-N3", "-n3", "sh", "-c", WHERE)
    jobid = parse_jobid(out.strip().splitlines()[-1])
    batch = cluster.submit([sim("300ms")] * 48)
    cluster.expect([jobid, *batch], JobResult.COMPLETED)
    cluster.wait_inactive([jobid, *batch])
    lines = cluster.output(jobid)
    assert sorted(lines) == [0, 1, 2], lines
    for task, text in lines.items():
        # -N3 -n3: task r runs on rank r, which is host node<r>
        assert text.split() == [str(task), str(task), cluster.nodes[task].netns_id()], text
    assert cluster.ranks_of(jobid) == {0, 1, 2}
    assert set().union(*(cluster.ranks_of(j) for j in batch)) == {0, 1, 2}
    cluster.check()


def test_exec_host_killed_and_restarted(cluster: Cluster) -> None:
    spanning = cluster.submit([real(f"sleep 3; {WHERE}", nnodes=3, ntasks=3)])[0]
    cluster.wait_event(spanning, "start")
    batch = cluster.submit([sim("1s")] * 30)
    cluster.expect([spanning, *batch], JobResult.COMPLETED)
    node1 = cluster.nodes[1]
    cluster.wait("the spanning job's task on node1", lambda: spanning in cluster.task_jobs(node1),
                 10, logs=["exec-1"])
    cluster.kill("exec-1")
    # the host's simulated jobs (1 s each) reach their end while nobody watches
    ends = [e.timestamp + 1.0 for j in batch if cluster.inst.redis.hexists(
        cluster.inst.keys.job(j), "R") and 1 in cluster.ranks_of(j)
        for e in cluster.events(j) if e.event_name == "start"]
    cluster.wait("node1's simulated jobs to reach their end", lambda: time.time() > max(
        ends, default=0.0) + 0.2, 10)
    assert spanning in cluster.task_jobs(node1), "tasks must outlive their exec worker"
    cluster.start("exec-1")
    took = cluster.wait_inactive([spanning, *batch])
    print(f"exec restart: all jobs done {took:.2f}s after the restart")
    lines = cluster.output(spanning)
    assert {t: text.split()[2] for t, text in lines.items()} == \
        {r: n.netns_id() for r, n in enumerate(cluster.nodes)}, lines
    assert spanning not in cluster.task_jobs(node1)
    cluster.check()


def test_control_host_killed_and_restarted(cluster: Cluster) -> None:
    spanning = cluster.submit([real(f"sleep 2; {WHERE}", nnodes=3, ntasks=3)])[0]
    cluster.wait_event(spanning, "start")
    batch = cluster.submit([sim("200ms")] * 60)
    cluster.expect([spanning, *batch], JobResult.COMPLETED)
    # killed under load: the batch is running
    cluster.wait("the batch to start", lambda: any(e.event_name == "start"
                                                   for e in cluster.events(batch[0])), 10)
    cluster.kill("job-manager")
    cluster.kill("scheduler")
    more = cluster.submit([sim("200ms")] * 20)  # the ingest still takes them (ids returned)
    cluster.expect(more, JobResult.COMPLETED)
    cluster.start("job-manager")
    cluster.start("scheduler")
    took = cluster.wait_inactive([spanning, *batch, *more])
    print(f"control restart: all jobs done {took:.2f}s after the restart")
    assert sorted(cluster.output(spanning)) == [0, 1, 2]
    cluster.check()


def test_network_partition_drains_and_undrains(cluster: Cluster) -> None:
    node2 = cluster.nodes[2]
    doomed = cluster.submit([real("sleep 300", requires=["host:node2"]),
                             real("sleep 300", nnodes=2, ntasks=2,
                                  requires=["host:node[1-2]"]),
                             sim("60s", requires=["host:node2"])])
    bystander = cluster.submit([sim("3s", requires=["host:node0"])])
    for jobid in doomed:
        cluster.wait_event(jobid, "start")
    cluster.expect(doomed, JobResult.FAILED)
    cluster.expect(bystander, JobResult.COMPLETED)
    pulled = time.monotonic()
    cluster.net.set_cable(node2, plugged=False)
    try:
        drained = cluster.wait("rank 2 drained", lambda: 2 in cluster.drained(),
                               LOST_AFTER_S + 10, logs=["scheduler"])
        print(f"partition: rank 2 drained {drained:.1f}s after the cable was pulled")
        assert drained >= LOST_AFTER_S - 2  # not before its heartbeat went stale
        cluster.wait_inactive(doomed, timeout=10)
        for jobid in doomed:
            exceptions = [e for e in cluster.events(jobid) if isinstance(e, ev.JobException)]
            assert [e.type for e in exceptions] == ["node-failure"], exceptions
        # the other hosts keep working, without node2
        during = cluster.submit([sim("200ms")] * 12)
        cluster.expect(during, JobResult.COMPLETED)
        cluster.wait_inactive([*bystander, *during])
        assert all(2 not in cluster.ranks_of(j) for j in during)
    finally:
        cluster.net.set_cable(node2, plugged=True)
    partition = time.monotonic() - pulled
    back = cluster.wait("rank 2 undrained", lambda: 2 not in cluster.drained(), 30,
                        logs=["scheduler", "exec-2"])
    print(f"partition: cable out {partition:.1f}s, rank 2 undrained {back:.1f}s after it "
          "was plugged back")
    after = cluster.submit([sim("200ms", requires=["host:node2"])] * 4)
    cluster.expect(after, JobResult.COMPLETED)
    cluster.wait_inactive(after)
    cluster.check()
    # Once back, the host's exec worker reads the kill the job manager sent
    # for the job that also ran on node1, and stops its task there.
    single, spanning, _sim = doomed
    cluster.wait("the two-host job's task on node2 to be killed",
                 lambda: spanning not in cluster.task_jobs(node2), 10,
                 logs=["exec-2", "job-manager"])
    cluster.partitioned = single


def cut_off_node2_job(cluster: Cluster) -> int:
    """What the partition test leaves behind, for this test run alone: a job that ran
    only on node2 and failed while node2's cable was out; node2 back, undrained, and
    running jobs again."""
    node2 = cluster.nodes[2]
    [single] = cluster.submit([real("sleep 300", requires=["host:node2"])])
    cluster.wait_event(single, "start")
    cluster.expect([single], JobResult.FAILED)
    cluster.net.set_cable(node2, plugged=False)
    try:
        cluster.wait("rank 2 drained", lambda: 2 in cluster.drained(), LOST_AFTER_S + 10,
                     logs=["scheduler"])
        cluster.wait_inactive([single], timeout=10)
    finally:
        cluster.net.set_cable(node2, plugged=True)
    cluster.wait("rank 2 undrained", lambda: 2 not in cluster.drained(), 30,
                 logs=["scheduler", "exec-2"])
    after = cluster.submit([sim("200ms", requires=["host:node2"])] * 4)
    cluster.expect(after, JobResult.COMPLETED)
    cluster.wait_inactive(after)
    return single


def test_returning_host_stops_tasks_of_jobs_failed_meanwhile(cluster: Cluster) -> None:
    # the node2-only job of the partition test (or, run alone, of its own partition):
    # failed and freed, but still running?
    if cluster.partitioned is None:
        cluster.partitioned = cut_off_node2_job(cluster)
    node2 = cluster.nodes[2]
    cluster.wait("the node2-only job's task to be killed",
                 lambda: cluster.partitioned not in cluster.task_jobs(node2), 3,
                 logs=["exec-2"])
