"""Queues, policy rejections, dependencies, cancel in every state and drain, on real workers.

No assert depends on timing: a job's state is read from its eventlog (the
truth the read model follows), and where a test needs something to have
happened (an alloc request outstanding, a cancel sent) it waits for it on the
stream with a generous deadline.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.domain.job.states import JobResult, JobState
from fluxes.formats.idset import IDSet
from fluxes.formats.jobid import parse
from fluxes.proc.launcher import Launcher
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance
from tests import wire
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(pwd.getpwuid(os.getuid()).pw_gid).gr_name
#: Bound on waits for something the workers do within milliseconds.
WAIT_S = 60.0

CONFIG = f"""
[policy.jobspec.defaults.system]
queue = "batch"
duration = "1h"

# long enough that a job ignoring SIGTERM stays in CLEANUP until it exits itself
[exec]
kill-timeout = "5m"

[queues.batch]

[queues.debug]
requires = ["debug"]
policy.limits.job-size.max.nnodes = 1
policy.limits.job-size.max.ncores = 2
policy.limits.job-size.max.ngpus = 0
policy.limits.duration = "10m"
policy.jobspec.defaults.system.duration = "5m"

[queues.big]
policy.limits.job-size.min.nnodes = 2
policy.limits.job-size.min.ncores = 6

[queues.private]
policy.access.allow-user = ["nobody-here"]

[queues.team]
policy.access.allow-group = ["fluxes-no-such-group"]

[queues.mine]
policy.access.allow-group = ["{GROUP}"]

[[resource.config]]
hosts = "node[0-1]"
cores = "0-3"

[[resource.config]]
hosts = "node1"
properties = ["debug"]
"""


@pytest.fixture(scope="module")
def uri() -> Iterator[str]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-admin-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), config_text=CONFIG)
        launcher.start()
        try:
            yield str(launcher.uri)
        finally:
            launcher.stop()


@pytest.fixture(scope="module")
def inst(uri: str) -> Instance:
    return Instance.connect(uri)


def run(uri: str, *args: str) -> int:
    return main(["--uri", uri, *args])


def submit(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert run(uri, "submit", *args) == 0, capsys.readouterr().err
    return parse(capsys.readouterr().out.strip().splitlines()[-1])


def wait_event(uri: str, jobid: int, event: str, *extra: str) -> None:
    assert run(uri, "job", "wait-event", "-t", "60s", *extra, str(jobid), event) == 0


def state(inst: Instance, jobid: int) -> JobState:
    """The job's state, folded from its eventlog."""
    return EventStore(inst.redis, inst.keys).replay_job(jobid).state


def events(inst: Instance, jobid: int) -> list[str]:
    return [e.event_name for e in EventStore(inst.redis, inst.keys).eventlog(jobid)]


def snapshot(inst: Instance) -> tuple[list[bytes], list[int], list[int]]:
    """Every job key (hashes and eventlogs), journal lengths, new-job message counts."""
    keys = inst.keys
    parts = range(keys.partitions)
    jobs = sorted(k for p in parts for k in inst.redis.scan_iter(f"{keys.p(p)}:job:*"))
    return (jobs, [inst.redis.xlen(keys.journal(p)) for p in parts],
            [inst.redis.xlen(keys.jm_new(p)) for p in parts])


def sched_marks(inst: Instance) -> dict[str, str]:
    """Where each partition's scheduler request stream ends now."""
    out = {}
    for p in range(inst.keys.partitions):
        key = inst.keys.sched_req(p)
        last = inst.redis.xrevrange(key, count=1)
        out[key] = last[0][0].decode() if last else "0-0"
    return out


def wait_sched_request(inst: Instance, marks: dict[str, str], kind: str, jobid: int) -> None:
    """Wait until the job manager sends the scheduler ``kind`` for ``jobid`` after ``marks``."""
    positions = dict(marks)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        reply = inst.redis.xread(positions, count=100, block=1000)
        for stream, entries in reply or []:
            for sid, fields in entries:
                positions[stream.decode()] = sid.decode()
                if any(m["t"] == kind and m.get("id") == jobid
                       for m in wire.messages(fields)):
                    return
    pytest.fail(f"no {kind} request for job {jobid} within {WAIT_S:g}s")


def sent_to_scheduler(inst: Instance, marks: dict[str, str], kind: str, jobid: int) -> int:
    """How many ``kind`` messages for ``jobid`` went to the scheduler after ``marks``."""
    count = 0
    for key, mark in marks.items():
        for _sid, fields in inst.redis.xrange(key, min="(" + mark if mark != "0-0" else "-"):
            count += sum(1 for m in wire.messages(fields)
                         if m["t"] == kind and m.get("id") == jobid)
    return count


def fill_machine(uri: str, capsys: pytest.CaptureFixture[str], inst: Instance) -> int:
    """A running job holding every core, so the next job's alloc request stays outstanding."""
    filler = submit(uri, capsys, "-N2", "-x", "sleep", "300")
    wait_event(uri, filler, "start")
    return filler


@pytest.mark.parametrize(("args", "message"), [
    (["-q", "nope", "true"], "invalid queue 'nope' specified"),
    (["-q", "debug", "-N2", "true"], "job requests 2 nodes, queue debug allows at most 1"),
    (["-q", "debug", "-n", "3", "true"], "job requests 3 cores, queue debug allows at most 2"),
    (["-q", "debug", "-g", "1", "true"], "job requests 1 gpu, queue debug allows at most 0"),
    (["-q", "big", "-N1", "true"], "job requests 1 node, queue big requires at least 2"),
    (["-q", "big", "-N2", "-n", "2", "true"],
     "job requests 2 cores, queue big requires at least 6"),
    (["-q", "debug", "-t", "1h", "true"],
     "job duration 1h exceeds the limit of 10m for queue debug"),
    (["-q", "private", "true"], f"user {USER} is not allowed to submit to queue private"),
    (["-q", "team", "true"], f"user {USER} is not allowed to submit to queue team"),
    (["--urgency", "31", "-n", "0", "true"], "ntasks: must be an integer >= 1, got 0"),
])
def test_rejections_give_one_line_and_store_nothing(uri: str, inst: Instance, args: list[str],
                                                    message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "queue", "drain", "--timeout=60s") == 0  # nothing in flight
    before = snapshot(inst)
    assert run(uri, "submit", *args) == 1
    assert capsys.readouterr().err == f"fluxes: {message}\n"
    assert snapshot(inst) == before


def test_invalid_jobspec_is_refused_and_nothing_stored(uri: str, inst: Instance,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    assert run(uri, "queue", "drain", "--timeout=60s") == 0
    before = snapshot(inst)
    # from a file, checked by the command before it is sent
    with tempfile.NamedTemporaryFile("w", suffix=".json") as bad:
        bad.write('{"version": 1, "resources": [], "tasks": [], "attributes": {}}')
        bad.flush()
        assert run(uri, "submit", bad.name) == 1
    assert capsys.readouterr().err == "fluxes: resources: must not be empty\n"
    # sent as is: the ingest's own check answers, with one line
    [result] = Client(inst).submit([{"jobspec": {"version": 1, "resources": [],
                                                 "tasks": [], "attributes": {}}}])
    assert isinstance(result, str) and "resources" in result and "\n" not in result
    assert snapshot(inst) == before


def test_allow_group_admits_members(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-q", "mine", "true")
    assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0


def test_queue_requires_places_jobs_on_matching_nodes(uri: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-q", "debug", "hostname")
    assert run(uri, "job", "wait", str(jobid)) == 0
    capsys.readouterr()
    assert run(uri, "jobs", "-a", "-o", "{id.dec} {nodelist}", "-n") == 0
    assert f"{jobid} node1" in capsys.readouterr().out


def test_disable_enable_stop_start(uri: str, inst: Instance,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "queue", "disable", "debug", "-m", "maintenance") == 0
    # no pause: the ingest applies every admin event written before a submission
    assert run(uri, "submit", "-q", "debug", "true") == 1
    assert capsys.readouterr().err == "fluxes: queue debug is disabled: maintenance\n"
    assert run(uri, "queue", "enable", "debug") == 0
    jobid = submit(uri, capsys, "-q", "debug", "true")
    assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    assert run(uri, "queue", "stop", "batch", "-m", "hold on") == 0
    jobid = submit(uri, capsys, "true")
    wait_event(uri, jobid, "priority")
    assert run(uri, "queue", "status", "batch") == 0
    assert "Scheduling is stopped: hold on" in capsys.readouterr().out
    assert state(inst, jobid) == JobState.SCHED
    assert run(uri, "queue", "start", "batch") == 0
    assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    assert run(uri, "queue", "idle", "--timeout=60s") == 0
    assert run(uri, "queue", "drain", "--timeout=60s") == 0


def test_drain_and_idle_of_an_unknown_queue_fail(uri: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for kind in ("drain", "idle", "status"):
        assert run(uri, "queue", kind, "nosuch") == 1
        assert capsys.readouterr().err == "fluxes: unknown queue 'nosuch'\n"


def test_drain_and_idle_wait_for_a_busy_queue(uri: str, inst: Instance,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # drain, right after the submission: it must see the job and wait for its end
    jobid = submit(uri, capsys, "-q", "debug", "sleep", "1")
    assert run(uri, "queue", "drain", "debug", "--timeout=60s") == 0
    assert state(inst, jobid) == JobState.INACTIVE
    # idle waits while a job runs
    jobid = submit(uri, capsys, "-q", "debug", "sleep", "1")
    wait_event(uri, jobid, "start")
    assert run(uri, "queue", "idle", "debug", "--timeout=60s") == 0
    assert state(inst, jobid) == JobState.INACTIVE
    # a held job keeps the queue from draining, though it is idle
    held = submit(uri, capsys, "-q", "debug", "--urgency", "hold", "true")
    wait_event(uri, held, "priority")
    assert run(uri, "queue", "idle", "debug", "--timeout=60s") == 0
    assert run(uri, "queue", "drain", "debug", "--timeout=0.5s") == 1
    assert capsys.readouterr().err == "fluxes: queue drain: timeout with 1 jobs left\n"
    assert state(inst, held) == JobState.SCHED
    assert run(uri, "cancel", str(held)) == 0
    assert run(uri, "queue", "drain", "debug", "--timeout=60s") == 0
    assert state(inst, held) == JobState.INACTIVE


def test_queue_stop_cancels_outstanding_alloc_requests(uri: str, inst: Instance,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    filler = fill_machine(uri, capsys, inst)
    marks = sched_marks(inst)
    jobid = submit(uri, capsys, "true")
    wait_sched_request(inst, marks, "alloc", jobid)  # outstanding: no core is free
    assert run(uri, "queue", "stop", "batch") == 0
    wait_sched_request(inst, marks, "cancel", jobid)
    assert state(inst, jobid) == JobState.SCHED  # stopped, not canceled
    restart = sched_marks(inst)
    assert run(uri, "queue", "start", "batch") == 0
    wait_sched_request(inst, restart, "alloc", jobid)  # asked for again
    assert run(uri, "cancel", str(filler)) == 0
    assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    assert events(inst, jobid).count("alloc") == 1


def test_dependency_chain(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = submit(uri, capsys, "sh", "-c", "sleep 0.5")
    second = submit(uri, capsys, f"--dependency=afterok:{first}", "true")
    third = submit(uri, capsys, f"--dependency=afterany:{second}", "true")
    bad = submit(uri, capsys, f"--dependency=afternotok:{first}", "true")
    assert run(uri, "job", "wait", "-t", "60s", str(third)) == 0
    wait_event(uri, bad, "clean")
    assert run(uri, "job", "eventlog", str(bad)) == 0
    assert "type=\"dependency\"" in capsys.readouterr().out


def test_cancel_in_every_state(uri: str, inst: Instance, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    # PRIORITY is left in the same commit that enters it, so no request can
    # meet a job there; tests/unit/test_jm_core.py cancels one the core holds.
    filler = fill_machine(uri, capsys, inst)
    depend = submit(uri, capsys, f"--dependency=afterok:{filler}", "true")
    held = submit(uri, capsys, "--urgency", "hold", "true")
    marks = sched_marks(inst)
    waiting = submit(uri, capsys, "true")
    wait_sched_request(inst, marks, "alloc", waiting)
    wait_event(uri, held, "priority")
    expected: dict[int, JobState] = {depend: JobState.DEPEND, held: JobState.SCHED,
                                     waiting: JobState.SCHED, filler: JobState.RUN}
    for jobid, before in expected.items():
        assert state(inst, jobid) == before
        assert run(uri, "cancel", str(jobid)) == 0
        wait_event(uri, jobid, "clean")
    # RFC 27: only the job whose alloc request was outstanding needs a sched.cancel
    assert sent_to_scheduler(inst, marks, "cancel", waiting) == 1
    assert sent_to_scheduler(inst, marks, "cancel", held) == 0
    # CLEANUP: a job that ignores SIGTERM stays there after its cancel until it exits
    flag = tmp_path / "exit-now"
    stubborn = submit(uri, capsys, "sh", "-c",
                      f"trap '' TERM; while [ ! -e {flag} ]; do sleep 0.1; done")
    wait_event(uri, stubborn, "start")
    assert run(uri, "cancel", str(stubborn)) == 0
    wait_event(uri, stubborn, "exception")
    assert state(inst, stubborn) == JobState.CLEANUP
    assert run(uri, "cancel", str(stubborn)) == 0
    flag.touch()
    wait_event(uri, stubborn, "clean")
    names = events(inst, stubborn)
    assert names.count("exception") == 2 and names.index("finish") > names.index("exception")
    store = EventStore(inst.redis, inst.keys)
    for jobid in (*expected, stubborn):
        assert store.replay_job(jobid).result == JobResult.CANCELED
    assert "alloc" not in events(inst, waiting) and "alloc" not in events(inst, depend)


def test_drain_and_undrain(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "resource", "drain", "node0", "testing") == 0  # applied when it returns
    ids = [submit(uri, capsys, "hostname") for _ in range(3)]
    for jobid in ids:
        assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    capsys.readouterr()
    assert run(uri, "jobs", "-a", "-c", "3", "-o", "{nodelist}", "-n") == 0
    assert set(capsys.readouterr().out.split()) == {"node1"}
    assert run(uri, "resource", "status") == 0
    assert "testing" in capsys.readouterr().out
    assert run(uri, "resource", "undrain", "node0") == 0


def resource_json(uri: str, capsys: pytest.CaptureFixture[str], what: str) -> dict[str, Any]:
    capsys.readouterr()
    assert run(uri, "resource", what, "--json") == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return doc


def node0_state(uri: str, capsys: pytest.CaptureFixture[str]) -> str:
    rows = resource_json(uri, capsys, "status")["targets"]
    return next(row["state"] for row in rows if 0 in IDSet(row["ranks"]))


def test_a_drain_is_seen_by_the_next_command_and_a_node_is_in_one_column(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-N1", "--requires=node0", "sleep", "300")
    wait_event(uri, jobid, "start")
    assert run(uri, "resource", "drain", "node0", "bad DIMM") == 0
    # at once: node0 is draining (its job still runs), listed allocated and not down
    assert node0_state(uri, capsys) == "draining"
    listing = resource_json(uri, capsys, "list")
    assert listing["allocated"]["ranks"] == "0" and listing["down"]["ranks"] == ""
    assert run(uri, "cancel", str(jobid)) == 0
    wait_event(uri, jobid, "clean")
    deadline = time.monotonic() + 30  # the scheduler republishes once a second
    while node0_state(uri, capsys) != "drained":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    listing = resource_json(uri, capsys, "list")
    assert listing["down"]["ranks"] == "0" and "0" not in listing["allocated"]["ranks"]
    # as flux: drain alone lists; a second drain is refused without -f (replace) or -u
    capsys.readouterr()
    assert run(uri, "resource", "drain") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TIME", "STATE", "REASON", "NODELIST"]
    assert lines[1].split()[2:] == ["drained", "bad", "DIMM", "node0"]
    assert run(uri, "resource", "drain", "node0", "other") == 1
    assert "already drained" in capsys.readouterr().err
    assert run(uri, "resource", "drain", "-u", "node[0-1]", "update") == 0
    rows = resource_json(uri, capsys, "drain")["drained"]
    assert {(r["ranks"], r["reason"]) for r in rows} == {("0", "bad DIMM"), ("1", "update")}
    assert run(uri, "resource", "drain", "-f", "node0", "replaced") == 0
    rows = resource_json(uri, capsys, "drain")["drained"]
    assert {(r["ranks"], r["reason"]) for r in rows} == {("0", "replaced"), ("1", "update")}
    assert run(uri, "resource", "undrain", "node[0-1]") == 0
    assert node0_state(uri, capsys) == "online"
