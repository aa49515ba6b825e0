"""The exec worker against a real redis-server: simulated and real jobs, kills, restarts."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.domain.jm.content import job_content
from fluxes.formats import jobid as fjobid
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet
from fluxes.proc.redis_server import RedisServer
from fluxes.store import exec_streams
from fluxes.store.exec_streams import ExecStreams, entries
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import GROUP_EXEC, Keys
from tests import wire
from workers.exec import LOST_ERROR, ExecWorker, Outbox

pytestmark = [pytest.mark.system, pytest.mark.redis]

NS = "t"
KEYS = Keys(NS)


def stored_job(client: Any, jobid: int, spec: Jobspec, **fields: str) -> None:
    """The job's hash naming its jobspec's blobs, and the blobs, as the ingest stores
    them (owned by this process' user)."""
    owner = os.getuid()
    content = job_content(spec.dumps().encode())
    names = {"spec": content.spec, "env": content.env}
    client.hset(KEYS.job(jobid), mapping={
        "owner": str(owner), **{n: b.digest for n, b in names.items() if b}, **fields})
    for blob in content.blobs:
        client.hset(KEYS.blob(KEYS.partition_of(jobid), owner, blob.digest),
                    mapping={"data": blob.data, "refs": 1})


class Harness:
    """Job hashes, requests and reports around one or more exec workers."""

    def __init__(self, server: RedisServer, client: redis.Redis, state: Path) -> None:
        self.server = server
        self.client = client
        self.state = state
        self.uri = InstanceURI(server.url, NS)
        self.threads: list[tuple[ExecWorker, threading.Thread]] = []

    # -- workers

    def worker(self, ranks: str = "0", cls: type[ExecWorker] = ExecWorker,
               **options: Any) -> ExecWorker:
        """An exec worker running in a thread of the test process."""
        worker = cls(Instance(self.uri, client=self.server.client()), ranks, self.state,
                     **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        self.threads.append((worker, thread))
        return worker

    def stop(self) -> None:
        for worker, thread in self.threads:
            worker.request_stop()
            thread.join(5)
        self.threads.clear()
        # A failed test may leave tasks running: end them (by pid, checking the marker).
        try:
            records = [r for key in self.client.scan_iter(match=f"{{{NS}}}:exec:jobs:*")
                       for r in self.client.hvals(key)]
        except redis.RedisError:
            records = []
        for raw in records:
            for task in orjson.loads(raw).get("t", []):
                pid = task[1]
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        wrapped = b"fluxes-task:" in handle.read()
                    with open(f"/proc/{pid}/environ", "rb") as handle:
                        # a task of the spawner: no wrapper, its environment says
                        if not wrapped and b"FLUXES_JOB_ID_DEC=" not in handle.read():
                            continue
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass

    def subprocess_worker(self, ranks: str = "0", grace: float = 5.0) -> subprocess.Popen[bytes]:
        code = ("import sys\nfrom fluxes.store.instance import Instance\nfrom workers.exec import main\n"
                "sys.exit(main(Instance.connect(sys.argv[1]), sys.argv[2], sys.argv[3], "
                "kill_grace=float(sys.argv[4])))")
        return subprocess.Popen([sys.executable, "-c", code, str(self.uri), ranks,
                                 str(self.state), str(grace)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    # -- jobs

    def job(self, jobid: int, spec: Jobspec, ranks: Mapping[int, str] | None = None,
            gpus: Mapping[int, str] | None = None) -> None:
        ranks = ranks or {0: "0-1"}
        rset = ResourceSet.from_ranks({r: (c, (gpus or {}).get(r)) for r, c in ranks.items()})
        stored_job(self.client, jobid, spec, R=rset.dumps())

    def start(self, jobid: int, ranks: str = "0", rank: int | None = None) -> None:
        targets = [rank] if rank is not None else [int(r) for r in ranks.split(",")]
        for r in targets:
            self.client.xadd(KEYS.exec_rank(r), wire.entry(
                [{"t": "start", "id": jobid, "ranks": ranks}]))

    def kill(self, jobid: int, sig: int = 15, rank: int = 0) -> None:
        self.client.xadd(KEYS.exec_rank(rank), wire.entry(
            [{"t": "kill", "id": jobid, "signal": sig}]))

    # -- reading

    def reports(self, jobid: int, rank: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _id, fields in self.client.xrange(KEYS.exec_events(0)):
            msgs = wire.full(proto.EXEC_EVENTS, fields)
            # no [exec] prolog/epilog here: those fields stay at their default
            out.extend({k: v for k, v in m.items() if k not in ("prolog", "epilog")}
                       for m in msgs if m["id"] == jobid and m["rank"] == rank)
        return out

    def wait(self, jobid: int, pred: Callable[[dict[str, Any]], bool], rank: int = 0,
             timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            reports = self.reports(jobid, rank)
            for report in reports:
                if pred(report):
                    return report
            if time.monotonic() > deadline:
                raise AssertionError(f"job {jobid} rank {rank}: no matching report in {reports}")
            time.sleep(0.02)

    def final(self, jobid: int, rank: int = 0, timeout: float = 10.0) -> dict[str, Any]:
        return self.wait(jobid, lambda m: m["released"], rank, timeout)

    def output(self, jobid: int, owner: int | None = None) -> list[dict[str, str]]:
        key = KEYS.output(os.getuid() if owner is None else owner, jobid)
        return [{k.decode(): v.decode() for k, v in fields.items()}
                for _id, fields in self.client.xrange(key)]

    def lines(self, jobid: int) -> list[tuple[str, str, str]]:
        return [(e["rank"], e["stream"], e["data"]) for e in self.output(jobid) if "data" in e]


@pytest.fixture
def harness(redis_server: RedisServer, real_redis: redis.Redis,
            tmp_path: Path) -> Iterator[Harness]:
    h = Harness(redis_server, real_redis, tmp_path / "state")
    yield h
    h.stop()


def sim(duration: str, **kw: Any) -> Jobspec:
    return Jobspec.from_command(["true"], attributes={
        "system": {"exec": {"test": {"run_duration": duration}}}}, **kw)


def cmd(*argv: str, **kw: Any) -> Jobspec:
    return Jobspec.from_command(list(argv), **kw)


# ----------------------------------------------------------------------------- simulated


def test_simulated_job_starts_at_once_and_ends_after_run_duration(harness: Harness) -> None:
    harness.worker()
    harness.job(1, sim("0.3s"))
    t0 = time.monotonic()
    harness.start(1)
    first = harness.wait(1, lambda m: m["started"])
    final = harness.final(1)
    assert first["status"] is None and not first["released"]
    assert final == {"t": "exec", "id": 1, "rank": 0, "started": True, "status": 0,
                     "released": True, "error": None}
    assert time.monotonic() - t0 >= 0.3
    assert harness.output(1) == []  # simulated jobs write no output stream


def test_a_start_runs_from_the_facts_its_entry_carries(harness: Harness) -> None:
    """A start written (commit.lua's Y op) while the worker runs carries its job's
    hash fields: the worker starts the job from them without reading the hash (here
    emptied by the same commit, after the copy); a start without them reads the
    hash, as before."""
    from fluxes.store.eventstore import EventStore
    from fluxes.store.jobhash import START_FIELDS

    worker = harness.worker()
    deadline = time.monotonic() + 10
    while worker.intake.fresh_after_ms is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.01)  # entry ids now name a later millisecond than the worker's start
    store = EventStore(harness.client, KEYS)
    batch = store.batch(0)
    for jobid in (1, 2):
        harness.job(jobid, sim("0s"))
        carried = [(KEYS.job(jobid), proto.FACTS_FIELD % jobid)] if jobid == 1 else []
        batch.xadd_with_facts(KEYS.exec_rank(0), wire.entry(
            [{"t": "start", "id": jobid, "ranks": "0"}]), START_FIELDS, carried)
        batch.hdel(KEYS.job(jobid), ["owner", "spec", "env", "R"])
    store.commit(batch)
    assert harness.final(1)["status"] == 0
    assert "no jobspec" in (harness.final(2)["error"] or "")


def test_simulated_job_killed_early_reports_the_signal(harness: Harness) -> None:
    harness.worker()
    harness.job(2, sim("100s"))
    harness.start(2)
    harness.wait(2, lambda m: m["started"])
    harness.kill(2, signal.SIGTERM)
    final = harness.final(2)
    assert final["status"] == signal.SIGTERM and final["started"]


def test_many_simulated_jobs_in_one_entry(harness: Harness) -> None:
    harness.worker()
    spec = sim("1ms")
    ids = list(range(100, 400))
    pipe = harness.client.pipeline()
    for jobid in ids:
        stored_job(pipe, jobid, spec, R="{}")
    pipe.execute()
    harness.client.xadd(KEYS.exec_rank(0), wire.entry(
        [{"t": "start", "id": j, "ranks": "0"} for j in ids]))
    harness.final(ids[-1])
    done = {m["id"] for _id, f in harness.client.xrange(KEYS.exec_events(0))
            for m in wire.full(proto.EXEC_EVENTS, f) if m["released"] and m["status"] == 0}
    assert done == set(ids)


# ----------------------------------------------------------------------------- real jobs


def test_output_is_labelled_by_task_rank(harness: Harness) -> None:
    harness.worker()
    harness.job(3, cmd("sh", "-c", "echo out $FLUXES_TASK_RANK; echo err >&2", ntasks=2))
    harness.start(3)
    final = harness.final(3)
    assert final["started"] and final["status"] == 0 and final["error"] is None
    assert sorted(harness.lines(3)) == [("0", "stderr", "err\n"), ("0", "stdout", "out 0\n"),
                                        ("1", "stderr", "err\n"), ("1", "stdout", "out 1\n")]
    assert harness.output(3)[-1] == {"eof": "1", "rank": "0", "tasks": "0-1"}


def test_hostname_output(harness: Harness) -> None:
    harness.worker()
    harness.job(4, cmd("hostname", ntasks=2))
    harness.start(4)
    assert harness.final(4)["status"] == 0
    host = socket.gethostname() + "\n"
    assert sorted(harness.lines(4)) == [("0", "stdout", host), ("1", "stdout", host)]


def test_exit_code_is_a_wait_status(harness: Harness) -> None:
    harness.worker()
    harness.job(5, cmd("sh", "-c", 'exit "$FLUXES_TASK_RANK"', ntasks=2))
    harness.job(6, cmd("sh", "-c", "exit 3"))
    harness.start(5)
    harness.start(6)
    assert harness.final(5)["status"] == 1 << 8  # the largest over the tasks
    assert harness.final(6)["status"] == 768


def test_missing_command_is_an_error(harness: Harness) -> None:
    harness.worker()
    harness.job(7, cmd("nope-no-such-command"))
    harness.start(7)
    final = harness.final(7)
    # as flux's shell: the job started, its task could not (exit code 127)
    assert final == {"t": "exec", "id": 7, "rank": 0, "started": True, "status": 127 << 8,
                     "released": True,
                     "error": "cannot execute 'nope-no-such-command': No such file or directory"}


def test_environment_and_cwd(harness: Harness, tmp_path: Path) -> None:
    harness.worker()
    script = ('pwd; echo "$FOO"; echo "${HOME-unset}"; '
              'echo "$FLUXES_JOB_ID $FLUXES_JOB_ID_DEC $FLUXES_TASK_RANK $FLUXES_TASK_LOCAL_ID '
              '$FLUXES_JOB_SIZE $FLUXES_JOB_NNODES $FLUXES_NODE_RANK $FLUXES_URI"; '
              'echo "${CUDA_VISIBLE_DEVICES-none}"')
    harness.job(8, cmd("sh", "-c", script, cwd=str(tmp_path),
                       environment={"FOO": "bar baz", "HOME": None, "PATH": "/usr/bin:/bin"}))
    harness.start(8)
    assert harness.final(8)["status"] == 0
    out = [data for _r, _s, data in harness.lines(8)]
    assert out == [f"{tmp_path}\n", "bar baz\n", "unset\n",
                   f"{fjobid.encode(8, 'f58')} 8 0 0 1 1 0 {harness.uri}\n", "none\n"]


def test_gpus_are_visible(harness: Harness) -> None:
    harness.worker()
    harness.job(9, cmd("sh", "-c", "echo $CUDA_VISIBLE_DEVICES", ntasks=2, gpus_per_task=1),
                gpus={0: "2-3"})
    harness.start(9)
    assert harness.final(9)["status"] == 0
    assert [d for _r, _s, d in harness.lines(9)] == ["2,3\n", "2,3\n"]


def test_output_file_templates(harness: Harness, tmp_path: Path) -> None:
    harness.worker()
    harness.job(10, cmd("sh", "-c", "echo hi; echo oops >&2", cwd=str(tmp_path),
                        output="out-{{id}}.txt"))
    harness.job(11, cmd("sh", "-c", "echo task $FLUXES_TASK_RANK; echo e >&2", ntasks=2,
                        cwd=str(tmp_path), output="{{jobid.dec}}-{{taskid}}.out",
                        error=str(tmp_path / "err-{{id}}")))
    harness.start(10)
    harness.start(11)
    assert harness.final(10)["status"] == 0
    assert harness.final(11)["status"] == 0
    f58 = fjobid.encode(10, "f58")
    assert sorted((tmp_path / f"out-{f58}.txt").read_text().splitlines()) == ["hi", "oops"]
    assert harness.lines(10) == []  # the file replaces the output stream
    pids, eof = harness.output(10)  # where its tasks ran, then its end
    assert pids["rank"] == "0" and pids["pids"].startswith("0:")
    assert eof == {"eof": "1", "rank": "0", "tasks": "0"}
    assert (tmp_path / "11-0.out").read_text() == "task 0\n"
    assert (tmp_path / "11-1.out").read_text() == "task 1\n"
    assert (tmp_path / f"err-{fjobid.encode(11, 'f58')}").read_text() == "e\ne\n"


def test_tasks_spread_over_two_ranks(harness: Harness) -> None:
    harness.worker("0-1")
    harness.job(12, cmd("sh", "-c", "echo $FLUXES_TASK_RANK $FLUXES_NODE_RANK $FLUXES_EXEC_RANK",
                        nnodes=2, ntasks=4), ranks={0: "0-1", 1: "0-1"})
    harness.start(12, "0-1", rank=0)
    harness.start(12, "0-1", rank=1)
    assert harness.final(12, rank=0)["status"] == 0
    assert harness.final(12, rank=1)["status"] == 0
    assert sorted(harness.lines(12)) == [("0", "stdout", "0 0 0\n"), ("1", "stdout", "1 0 0\n"),
                                         ("2", "stdout", "2 1 1\n"), ("3", "stdout", "3 1 1\n")]
    eofs = sorted(e["rank"] + ":" + e["tasks"] for e in harness.output(12) if "eof" in e)
    assert eofs == ["0:0-1", "1:2-3"]


# ----------------------------------------------------------------------------- kill


def test_kill_ends_a_sleeping_job(harness: Harness) -> None:
    harness.worker(kill_grace=5.0)
    harness.job(13, cmd("sleep", "100"))
    harness.start(13)
    harness.wait(13, lambda m: m["started"])
    harness.kill(13)
    final = harness.final(13)
    assert final["status"] == signal.SIGTERM  # SIGTERM did it (SIGKILL would say 9)


def test_kill_escalates_to_sigkill(harness: Harness) -> None:
    harness.worker(kill_grace=0.3)
    harness.job(14, cmd("sh", "-c", "trap '' TERM; echo ready; sleep 100"))
    harness.start(14)
    harness.wait(14, lambda m: m["started"])
    deadline = time.monotonic() + 5
    while not harness.lines(14) and time.monotonic() < deadline:
        time.sleep(0.02)  # the trap is set once "ready" is out
    harness.kill(14)
    final = harness.final(14)
    assert final["status"] == signal.SIGKILL


def test_kill_of_unknown_job_answers_released(harness: Harness) -> None:
    harness.worker()
    harness.kill(15)
    final = harness.final(15)
    assert final == {"t": "exec", "id": 15, "rank": 0, "started": False, "status": None,
                     "released": True, "error": None}


def test_duplicate_start_is_ignored(harness: Harness) -> None:
    harness.worker()
    harness.job(16, cmd("sh", "-c", "echo once; sleep 0.3"))
    harness.start(16)
    harness.start(16)
    harness.final(16)
    harness.start(16)  # after the end: the final state again, nothing rerun
    deadline = time.monotonic() + 5
    while sum(m["released"] for m in harness.reports(16)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert harness.lines(16) == [("0", "stdout", "once\n")]
    assert [m["status"] for m in harness.reports(16) if m["released"]] == [0, 0]


def test_malformed_request_goes_to_dead_letters(harness: Harness) -> None:
    harness.worker()
    harness.client.xadd(KEYS.exec_rank(0), {"d": b"not json"})
    harness.client.xadd(KEYS.exec_rank(0), wire.entry([{"t": "alloc", "id": 1}]))
    harness.kill(17)
    harness.final(17)
    letters = harness.client.xrange(KEYS.dead_letters)
    assert len(letters) == 2
    assert harness.client.xpending(KEYS.exec_rank(0), GROUP_EXEC)["pending"] == 0


class RaisingWorker(ExecWorker):
    """A worker whose start handler has a bug for job 66 (and kill handler for job 67)."""

    def _start(self, box: Outbox, rank: int, jobid: int, *args: Any) -> Any:
        if jobid == 66:
            raise RuntimeError("a bug in the start handler")
        return super()._start(box, rank, jobid, *args)

    def _on_request(self, rank: int, request: Any, redelivered: bool) -> None:
        if request.id == 67:
            raise KeyError("a bug in the kill handler")
        super()._on_request(rank, request, redelivered)


def test_every_request_is_survived_and_the_next_job_runs(harness: Harness) -> None:
    """The door: a request that cannot be decoded, whose job is gone, or whose handling
    raises is dead-lettered and acknowledged in the loop's one write; the worker goes on."""
    worker = harness.worker(cls=RaisingWorker)
    # wrong types, in an entry of its own and among good requests
    harness.client.xadd(KEYS.exec_rank(0), wire.entry([{"t": "start", "id": "x", "ranks": 0}]))
    harness.client.xadd(KEYS.exec_rank(0), wire.entry(
        [{"t": "kill", "id": 1, "signal": 9}, {"t": "start", "id": [[[]]], "ranks": "0"}]))
    harness.start(65)  # no job hash at all (purged, or never stored)
    harness.job(66, cmd("true"))
    harness.start(66)  # its handler raises
    harness.job(68, cmd("echo", "good"))
    harness.client.xadd(KEYS.exec_rank(0), wire.entry(
        [{"t": "kill", "id": 67, "signal": 15}, {"t": "start", "id": 68, "ranks": "0"}]))
    assert harness.final(68)["status"] == 0
    assert harness.lines(68) == [("0", "stdout", "good\n")]
    assert "has no jobspec" in harness.final(65)["error"]
    failed = harness.final(66)
    assert "cannot start the job: RuntimeError: a bug in the start handler" in failed["error"]
    letters = [{k.decode(): v.decode() for k, v in f.items()}
               for _id, f in harness.client.xrange(KEYS.dead_letters)]
    assert len(letters) == 4, letters
    assert all(d["stream"] == KEYS.exec_rank(0) and d["worker"] == worker.name
               for d in letters)
    errors = [d["error"] for d in letters]
    assert sum(e.startswith("MessageError: ") for e in errors) == 2
    assert "RuntimeError: a bug in the start handler" in errors
    assert "KeyError: 'a bug in the kill handler'" in errors
    # the refused request itself is what a dead letter keeps, not its whole entry
    kill = next(d for d in letters if d["error"].startswith("KeyError"))
    kept = orjson.loads(orjson.loads(kill["fields"])["d"])["m"]
    assert kept == [{"t": "kill", "id": 67, "signal": 15}]
    deadline = time.monotonic() + 5
    while harness.client.xpending(KEYS.exec_rank(0), GROUP_EXEC)["pending"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert worker.stopping is False and any(t.is_alive() for _w, t in harness.threads)


def test_registry_heartbeat(harness: Harness) -> None:
    worker = harness.worker("0-1")
    deadline = time.monotonic() + 5
    while harness.client.hlen(KEYS.exec_registry) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    entry = orjson.loads(harness.client.hget(KEYS.exec_registry, "1"))
    assert entry["hostname"] == socket.gethostname() and entry["worker"] == worker.name
    first = entry["heartbeat"]
    deadline = time.monotonic() + 5  # it beats every second
    while orjson.loads(harness.client.hget(KEYS.exec_registry, "1"))["heartbeat"] <= first:
        assert time.monotonic() < deadline, "no new heartbeat"
        time.sleep(0.05)


def test_registry_hostnames_from_the_instance_inventory(harness: Harness) -> None:
    harness.client.hset(KEYS.instance, "resources", orjson.dumps(
        {"config": [{"hosts": "node[0-3]", "cores": "0-1"}]}))
    harness.worker("2-3")
    deadline = time.monotonic() + 5
    while harness.client.hlen(KEYS.exec_registry) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    hosts = {r.decode(): orjson.loads(v)["hostname"]
             for r, v in harness.client.hgetall(KEYS.exec_registry).items()}
    assert hosts == {"2": "node2", "3": "node3"}


# ----------------------------------------------------------------------------- restart


def _task_pids(client: redis.Redis, jobid: int) -> list[int]:
    record = orjson.loads(client.hget(KEYS.exec_jobs(0), str(jobid)))
    return [t[1] for t in record["t"]]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_restarted_worker_adopts_running_jobs(harness: Harness) -> None:
    proc = harness.subprocess_worker()
    chatty = "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.15; done; exit 5"
    # one core each: a start whose cores a running job holds waits for them
    harness.job(20, cmd("sh", "-c", chatty), ranks={0: "0"})
    harness.job(21, cmd("sleep", "1"), ranks={0: "1"})
    harness.job(22, cmd("sleep", "30"), ranks={0: "2"})
    harness.job(23, cmd("sleep", "30"), ranks={0: "3"})
    for jobid in (20, 21, 22, 23):
        harness.start(jobid)
    for jobid in (20, 21, 22, 23):
        harness.wait(jobid, lambda m: m["started"])
    deadline = time.monotonic() + 5
    while len(harness.lines(20)) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    # While no worker runs: job 22's processes vanish without a trace, and a
    # kill for job 23 is queued.
    vanished = _task_pids(harness.client, 22)
    for pid in vanished:
        os.killpg(pid, signal.SIGKILL)
    harness.kill(23)
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in vanished):
        assert time.monotonic() < deadline, "job 22's task outlived SIGKILL"
        time.sleep(0.02)
    # Without a trace: the spawner, which outlives the worker, records the kill in
    # the task's status file; take that away too.
    status_files: list[Path] = []
    while not status_files:
        assert time.monotonic() < deadline, "the spawner recorded no status for job 22"
        time.sleep(0.02)
        status_files = list((harness.state / "rank0").glob("22.*.st.*"))
    for path in status_files:
        path.unlink()
    harness.worker(kill_grace=1.0)
    final = harness.final(20)
    assert final["status"] == 5 << 8 and final["error"] is None
    assert [d for _r, _s, d in harness.lines(20)] == [f"line {i}\n" for i in range(1, 11)]
    assert harness.output(20)[-1]["eof"] == "1"
    assert harness.final(21)["status"] == 0
    lost = harness.final(22)
    assert lost["error"] == LOST_ERROR and lost["released"]
    assert harness.final(23)["status"] == signal.SIGTERM


def test_restart_after_sigkill_escalation_and_pending_start(harness: Harness) -> None:
    proc = harness.subprocess_worker(grace=0.2)
    harness.job(30, cmd("sh", "-c", "trap '' TERM; echo ready; sleep 100"))
    harness.start(30)
    deadline = time.monotonic() + 5
    while not harness.lines(30):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    harness.kill(30)
    harness.final(30)
    proc.kill()
    proc.wait()
    # A start that arrives while the worker is down is handled by the next one.
    harness.job(31, cmd("echo", "late"))
    harness.start(31)
    harness.worker()
    assert harness.final(31)["status"] == 0
    assert harness.lines(31) == [("0", "stdout", "late\n")]
    assert harness.final(30)["status"] == signal.SIGKILL


class FlakyWorker(ExecWorker):
    """Loses its connection right after spawning a job, before recording it."""

    failed = False
    adopted = 0

    def _adopt_unrecorded(self, *args: Any) -> Any:
        job = super()._adopt_unrecorded(*args)
        FlakyWorker.adopted += job is not None
        return job

    def _flush(self, box: Outbox) -> None:
        if not self.failed and any(j is not None and j.kind == "run" and j.tasks
                                   for j in box.records.values()):
            FlakyWorker.failed = True
            raise redis.ConnectionError("injected: lost the connection before the write")
        super()._flush(box)


def test_tasks_spawned_but_not_recorded_are_adopted(harness: Harness) -> None:
    harness.worker(cls=FlakyWorker)
    harness.job(40, cmd("sh", "-c", "echo once; sleep 0.3; exit 2"))
    harness.start(40)
    final = harness.final(40)
    assert FlakyWorker.failed and FlakyWorker.adopted == 1
    assert final["status"] == 2 << 8 and final["error"] is None
    assert harness.lines(40) == [("0", "stdout", "once\n")]
    assert [m["started"] for m in harness.reports(40)].count(True) >= 1
    # The pending entry is done with: new requests are read again.
    harness.job(41, cmd("echo", "after"))
    harness.start(41)
    assert harness.final(41)["status"] == 0


def test_redis_outage_while_a_job_runs(tmp_path: Path) -> None:
    from tests.conftest import _need_redis_server

    _need_redis_server()
    server = RedisServer(tmp_path / "redis", appendonly=True, appendfsync="always").start()
    h = Harness(server, server.client(), tmp_path / "state")
    try:
        worker = h.worker()
        h.job(50, cmd("sh", "-c", "echo a; sleep 1; echo b; exit 4"))
        h.start(50)
        h.wait(50, lambda m: m["started"])
        server.kill()
        deadline = time.monotonic() + 10
        while not worker.stall_retries:  # the worker met the outage, and waits it out
            assert time.monotonic() < deadline, "the worker never noticed the outage"
            time.sleep(0.02)
        server.start()
        h.client = server.client()
        assert h.final(50, timeout=15)["status"] == 4 << 8
        assert h.lines(50) == [("0", "stdout", "a\n"), ("0", "stdout", "b\n")]
    finally:
        h.stop()
        server.stop()


def test_output_is_complete_past_a_hundred_thousand_lines(harness: Harness) -> None:
    # (the output stream used to be trimmed to ~100,000 entries, dropping the
    # oldest lines silently)
    harness.worker()
    harness.job(40, cmd("seq", "1", "150000"), ranks={0: "0"})
    harness.start(40)
    assert harness.final(40, timeout=60)["status"] == 0
    lines = [data for _rank, stream, data in harness.lines(40) if stream == "stdout"]
    assert lines == [f"{i}\n" for i in range(1, 150001)]


def test_output_past_the_limit_is_dropped_with_a_note(harness: Harness) -> None:
    harness.worker(output_limit=1000)
    harness.job(41, cmd("sh", "-c", "seq 100000 100299; echo done >&2"), ranks={0: "0"})
    harness.start(41)
    assert harness.final(41, timeout=30)["status"] == 0
    lines = harness.lines(41)
    stdout = [data for _r, stream, data in lines if stream == "stdout"]
    stderr = [data for _r, stream, data in lines if stream == "stderr"]
    assert stdout == [f"{i}\n" for i in range(100000, 100000 + 1000 // 7)]  # 7 bytes a line
    assert stderr == ["fluxes: output limit of 1000 reached on rank 0: further output dropped "
                      "(use --output/--error files for more)\n"]
    assert any("eof" in e for e in harness.output(41))  # readers still see the end


def test_kill_grace_comes_from_the_instance_configuration(harness: Harness,
                                                          tmp_path: Path) -> None:
    harness.client.hset(KEYS.instance, "config", '[exec]\nkill-timeout = "0.2s"\n')
    worker = harness.worker()
    ready = tmp_path / "trapped"
    # the kill must come after the trap is set, or SIGTERM ends the shell (status 15)
    harness.job(42, cmd("sh", "-c", f'trap "" TERM; touch {ready}; sleep 30'), ranks={0: "0"})
    harness.start(42)
    harness.wait(42, lambda m: m["started"])
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.kill_grace == 0.2
    harness.kill(42)
    assert harness.final(42, timeout=20)["status"] == 9  # SIGKILL after 0.2 s, not 5 s


# ----------------------------------------------------------------------------- the waker


def _readable(fd: int, timeout_ms: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_ms))


def _blocked(client: redis.Redis) -> bool:
    return any("b" in c.get("flags", "") for c in client.client_list())


#: Both wakers: the helper thread's (any connection) and the one owning its socket.
WAKERS = pytest.mark.parametrize("own_socket", [False, True], ids=["thread", "socket"])


def test_a_plain_connection_gets_the_waker_that_owns_its_socket(
        real_redis: redis.Redis) -> None:
    streams = ExecStreams(real_redis, KEYS, [0])
    assert isinstance(streams.waker(), exec_streams.SocketWaker)
    assert exec_streams.socket_params(real_redis) is not None
    ssl = redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=redis.SSLConnection, host="localhost"))
    assert exec_streams.socket_params(ssl) is None  # TLS keeps the thread
    assert isinstance(ExecStreams(ssl, KEYS, [0]).waker(), exec_streams.Waker)


@WAKERS
def test_waker_answers_through_its_pipe(real_redis: redis.Redis, own_socket: bool) -> None:
    streams = ExecStreams(real_redis, KEYS, [0])
    streams.load()  # creates the group
    waker = streams.waker(own_socket)
    try:
        waker.arm({KEYS.exec_rank(0): ">"}, "rank0")
        assert not _readable(waker.fileno(), 0)  # nothing yet
        real_redis.xadd(KEYS.exec_rank(0), wire.entry([{"t": "kill", "id": 1, "signal": 9}]))
        assert _readable(waker.fileno(), 10_000)
        got = entries(waker.consume())
        assert [wire.messages(fields) for _id, fields in got] == [
            [{"t": "kill", "id": 1, "signal": 9}]]
        assert not waker.outstanding and not _readable(waker.fileno(), 0)
    finally:
        waker.close()


@WAKERS
def test_closing_the_waker_ends_its_read_and_delivers_nothing(
        real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch, own_socket: bool) -> None:
    monkeypatch.setattr(exec_streams, "WAKE_BLOCK_MS", 600_000)  # only an unblock ends it
    streams = ExecStreams(real_redis, KEYS, [0])
    streams.load()
    waker = streams.waker(own_socket)
    waker.arm({KEYS.exec_rank(0): ">"}, "rank0")
    thread = waker.thread
    assert (thread is None) is own_socket
    deadline = time.monotonic() + 10
    while not _blocked(real_redis):  # the read is out, the helper waits for its answer
        assert time.monotonic() < deadline
        time.sleep(0.01)
    waker.close()
    # its read ended: nothing can be delivered to it any more
    assert thread is None or not thread.is_alive()
    real_redis.xadd(KEYS.exec_rank(0), wire.entry([{"t": "kill", "id": 2, "signal": 9}]))
    assert real_redis.xpending(KEYS.exec_rank(0), GROUP_EXEC)["pending"] == 0
    assert not _blocked(real_redis)


@WAKERS
def test_a_waker_whose_connection_dies_raises_in_the_loop(real_redis: redis.Redis,
                                                          own_socket: bool) -> None:
    streams = ExecStreams(real_redis, KEYS, [0])
    streams.load()
    waker = streams.waker(own_socket)
    try:
        waker.arm({KEYS.exec_rank(0): "$"})
        real_redis.client_kill_filter(_id=waker.client_id)
        assert _readable(waker.fileno(), 10_000)
        with pytest.raises(redis.ConnectionError):
            waker.consume()
    finally:
        waker.close()


def test_the_socket_waker_logs_in_as_the_pool_would(redis_server: RedisServer,
                                                    real_redis: redis.Redis) -> None:
    real_redis.execute_command("ACL", "SETUSER", "waker", "on", ">pw", "~*", "&*", "+@all")
    try:
        client = redis.Redis(unix_socket_path=str(redis_server.socket), username="waker",
                             password="pw", client_name="exec-waker-test", db=3)
        streams = ExecStreams(client, KEYS, [0])
        streams.load()
        waker = streams.waker(own_socket=True)
        try:
            waker.arm({KEYS.exec_rank(0): ">"}, "rank0")
            [me] = [c for c in real_redis.client_list() if int(c["id"]) == waker.client_id]
            assert (me["user"], me["name"], me["db"]) == ("waker", "exec-waker-test", "3")
            client.xadd(KEYS.exec_rank(0), wire.entry([{"t": "kill", "id": 1, "signal": 9}]))
            assert _readable(waker.fileno(), 10_000)
            assert len(entries(waker.consume())) == 1
        finally:
            waker.close()
        wrong = redis.Redis(unix_socket_path=str(redis_server.socket), username="waker",
                            password="nope")
        with pytest.raises(redis.AuthenticationError):
            ExecStreams(wrong, KEYS, [0]).waker(own_socket=True).arm({KEYS.exec_rank(0): "$"})
    finally:
        real_redis.execute_command("ACL", "DELUSER", "waker")


def test_output_of_a_task_that_ended_while_no_worker_ran_is_forwarded(
        harness: Harness, tmp_path: Path) -> None:
    proc = harness.subprocess_worker()
    gate = tmp_path / "go"
    # the task writes only after the worker is gone, and ends before it is back
    script = f"while [ ! -e {gate} ]; do sleep 0.02; done; echo late line; exit 3"
    harness.job(24, cmd("sh", "-c", script))
    harness.start(24)
    harness.wait(24, lambda m: m["started"])
    proc.kill()
    proc.wait()
    gate.touch()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in _task_pids(harness.client, 24)):
        assert time.monotonic() < deadline, "the task did not end"
        time.sleep(0.02)
    harness.worker()
    final = harness.final(24)
    assert final["status"] == 3 << 8 and final["error"] is None
    assert [d for _r, _s, d in harness.lines(24)] == ["late line\n"]
