"""Text users write into their jobs' events is private to the owner: exception notes,
dependency descriptions, the summary's cwd and dependencies. Ingest and job manager
driven in-process on a real Redis (the harness of test_ingest_jobmanager)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import orjson
import redis

from fluxes.domain.job.privacy import PLACEHOLDER, split, split_summary
from fluxes.store.keys import Keys
from fluxes.store.private import read_private, reveal_for_reader, reveal_records, revealed_events
from fluxes.store.security import read_patterns
from tests.store.test_ingest_jobmanager import System
from workers.jobmanager import JobManagerWorker

SECRET = "s3cr3t-words"


def public_values(client: redis.Redis, keys: Keys, uid: int) -> bytes:
    """Everything another user (uid) may read, dumped together."""
    patterns = read_patterns(keys, uid)
    out = []
    for key in client.scan_iter("*"):
        name = key.decode()
        if not any(fnmatchcase(name, p) for p in patterns):
            continue
        kind = client.type(key)
        if kind == b"stream":
            out += [repr(f).encode() for _sid, f in client.xrange(key)]
        elif kind == b"hash":
            out.append(repr(client.hgetall(key)).encode())
        elif kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"zset":
            out.append(repr(client.zrange(key, 0, -1)).encode())
        elif kind == b"list":
            out.append(repr(client.lrange(key, 0, -1)).encode())
    return b"\n".join(out)


def _waiting_on_a_running_job(system: System, **submit: Any) -> tuple[int, int]:
    """A job held running, and one submitted (with ``submit``'s options) to wait for
    it: their ids."""
    system.jm.step()
    system.sched.hello()
    [target] = system.submit()
    system.exec.hold = {target}
    system.run(2)
    [waiting] = system.submit(dependencies=[f"afterany:{target}"], **submit)
    system.run(2)
    return target, waiting


def test_notes_dependencies_and_cwd_are_the_owners_only(real_redis: redis.Redis) -> None:
    system = System(real_redis)
    keys = system.keys
    target, waiting = _waiting_on_a_running_job(system, cwd=f"/home/me/{SECRET}")
    assert system.events(waiting)[-1] == "dependency-add"
    # a job manager restarted now must pair the dependency's remove with its add
    system.redis.delete(keys.jm_lease(0))
    system.jm = JobManagerWorker(system.instance)
    system.jm.setup()
    system.run(1)
    assert system.jm.core is not None and waiting in system.jm.core.jobs
    sent = system.client._send([{"t": "cancel", "ids": [target], "note": SECRET}])
    system.ingest.step()
    system.run(6)
    system.client._wait(sent[0], 1.0)
    assert system.events(waiting)[-1] == "clean"
    assert "dependency-remove" in system.events(waiting)
    # nothing another user may read holds the text; the owner's private hashes do
    seen = public_values(system.redis, keys, 5001)
    assert SECRET.encode() not in seen and b"afterany" not in seen
    assert b"after-finish" not in seen
    assert PLACEHOLDER.encode() in seen
    private = read_private(system.redis, keys, [(target, 1000), (waiting, 1000)])
    notes = [v["note"] for v in private[target].values() if "note" in v]
    assert notes == [SECRET]
    # the cwd is kept in the owner's jobspec only, the dependencies in the hash
    assert private[waiting]["x"] == {
        "dependencies": [{"scheme": "afterany", "value": str(target)}]}
    assert [v["description"] for v in private[waiting].values()
            if "description" in v] == [f"after-finish={target}"] * 2
    # the owner (here full access) gets the text back
    shown = revealed_events(system.redis, keys, target, system.store.eventlog(target))
    assert [c["note"] for _t, n, c in shown if n == "exception"] == [SECRET]
    records = system.store.replay(0).records
    [job] = reveal_for_reader(system.redis, keys, [records[target]])
    assert job.job.fatal is not None and job.job.fatal.note == SECRET
    fatal = records[target].job.fatal
    assert fatal is not None and fatal.note == PLACEHOLDER


def test_split_leaves_other_fields_and_empty_notes_alone() -> None:
    public, private = split("exception", {"type": "cancel", "severity": 0, "note": "x",
                                          "userid": 5}, b"k")
    assert public == {"type": "cancel", "severity": 0, "note": PLACEHOLDER, "userid": 5}
    assert private == {"note": "x", "severity": 0}
    assert split("exception", {"type": "t", "severity": 0, "note": ""}, b"k") == (None, {})
    add, _ = split("dependency-add", {"description": "after-finish=5"}, b"k")
    remove, _ = split("dependency-remove", {"description": "after-finish=5"}, b"k")
    other, _ = split("dependency-add", {"description": "after-finish=5"}, b"another key")
    assert add == remove and add != other and add is not None
    assert "after-finish" not in orjson.dumps(add).decode()
    assert split("start", {}, b"k") == (None, {})
    summary, hidden = split_summary({"name": "n", "cwd": "/c", "dependencies": ["a"]})
    assert summary == {"name": "n"} and hidden == {"dependencies": ["a"]}
    assert split_summary({"name": "n"}) == (None, {})
    # a cwd alone: left out of the public summary, and no private hash for it
    assert split_summary({"name": "n", "cwd": "/c"}) == ({"name": "n"}, {})


def test_a_summary_written_with_its_cwd_still_reads(real_redis: redis.Redis) -> None:
    """A private summary of the previous layout (its ``cwd`` too) is put back as it is."""
    system = System(real_redis)
    keys = system.keys
    _target, waiting = _waiting_on_a_running_job(system)
    key = keys.private(keys.partition_of(waiting), 1000, waiting)
    system.redis.hset(key, "x", orjson.dumps({"cwd": "/old", "dependencies": ["d"]}))
    records = system.store.replay(0).records
    reveal_records(system.redis, keys, records)
    assert records[waiting].info["cwd"] == "/old"
    assert records[waiting].info["dependencies"] == ["d"]
