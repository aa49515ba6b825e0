"""Inspection commands against a real redis-server: eventlog, wait-event, journal, replay, check."""

from __future__ import annotations

import threading
import time

import orjson
import pytest
import redis

from fluxes.cli.main import main
from fluxes.domain.job import events as ev
from fluxes.formats.jobid import encode
from fluxes.proc.redis_server import RedisServer
from fluxes.store.eventstore import EventStore
from fluxes.store.keys import Keys

KEYS = Keys("t")
T0 = 1_700_000_000.0


@pytest.fixture
def store(real_redis: redis.Redis) -> EventStore:
    real_redis.set(KEYS.jm_fence(0), "1")
    return EventStore(real_redis, KEYS)


@pytest.fixture
def uri(redis_server: RedisServer) -> str:
    return f"{redis_server.url}?ns=t"


def _append(store: EventStore, jobid: int, seq: int, *events: ev.Event) -> None:
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, seq, list(events))
    store.commit(batch, token="1")


def _submit(store: EventStore, jobid: int, t: float = T0) -> None:
    _append(store, jobid, 0,
            ev.decode("submit", t, {"urgency": 16, "userid": 0, "flags": 0, "version": 1}),
            ev.decode("validate", t + 0.5))


def test_eventlog_text_json_and_human(store: EventStore, uri: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _submit(store, 42)
    assert main(["--uri", uri, "job", "eventlog", encode(42, "f58")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{T0:.6f} submit urgency=16 userid=0 flags=0 version=1",
                   f"{T0 + 0.5:.6f} validate"]
    assert main(["--uri", uri, "job", "eventlog", "--format=json", "42"]) == 0
    lines = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["name"] == "submit" and lines[1] == {"timestamp": T0 + 0.5, "name": "validate"}
    assert main(["--uri", uri, "job", "eventlog", "-H", "42"]) == 0
    human = capsys.readouterr().out.splitlines()
    assert human[1] == "[  +0.500000] validate"


@pytest.mark.parametrize("command", [
    ["job", "eventlog"], ["job", "info"], ["job", "output"], ["job", "attach"],
    ["job", "wait"], ["job", "wait-event", "-t", "1s", "{id}", "clean"], ["jobs"]])
@pytest.mark.parametrize("typed", ["99", "0x63", encode(99, "words")])
def test_unknown_job_is_named_as_typed(store: EventStore, uri: str, command: list[str],
                                       typed: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [typed if word == "{id}" else word for word in command]
    if "{id}" not in command:
        argv.append(typed)
    assert main(["--uri", uri, *argv]) == 1
    assert capsys.readouterr().err == f"fluxes: job {typed} not found\n"


def test_wait_event_blocks_until_the_event(store: EventStore, uri: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _submit(store, 7)

    def later() -> None:
        # once the command waits (its read blocks in Redis), not before
        deadline = time.monotonic() + 10
        while not any("b" in c.get("flags", "") for c in store.redis.client_list()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        _append(store, 7, 2, ev.decode("exception", T0 + 1,
                                       {"type": "test", "severity": 3, "note": "nope"}),
                ev.decode("exception", T0 + 2, {"type": "cancel", "severity": 0, "note": ""}))

    thread = threading.Thread(target=later)
    thread.start()
    code = main(["--uri", uri, "job", "wait-event", "-t", "10s", "--match-context=type=cancel",
                 "7", "exception"])
    thread.join()
    assert code == 0
    assert 'type="cancel"' in capsys.readouterr().out


def test_wait_event_timeout(store: EventStore, uri: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    _submit(store, 8)
    assert main(["--uri", uri, "job", "wait-event", "-t", "0.2s", "8", "clean"]) == 1
    assert "timeout" in capsys.readouterr().err


def test_journal_filters_and_replay_time_travel(store: EventStore, uri: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _submit(store, 1, T0)
    _submit(store, 2, T0 + 100)
    assert main(["--uri", uri, "eventlog", "journal", "--job=2", "--json"]) == 0
    lines = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["id"], x["name"]) for x in lines] == [(2, "submit"), (2, "validate")]
    assert main(["--uri", uri, "eventlog", "journal", "--name=validate"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["--uri", uri, "eventlog", "replay", f"--until={T0 + 50}", "--json"]) == 0
    rows = [orjson.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["id"], r["state"]) for r in rows] == [(1, "DEPEND")]


def test_check_reports_a_job_whose_eventlog_disagrees(store: EventStore, uri: str,
                                                      real_redis: redis.Redis,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _submit(store, 1)
    _submit(store, 2)
    assert main(["--uri", uri, "eventlog", "check"]) == 0
    assert "2 jobs checked, 0 with problems" in capsys.readouterr().out
    # job 2's index names another job's entry, written behind our back
    sid = real_redis.xadd(KEYS.journal(0), {"j": 999, "s": 0, "n": "alloc", "t": "1.0"})
    real_redis.append(KEYS.eventlog(2), sid + b" ")
    assert main(["--uri", uri, "eventlog", "check"]) == 1
    out = capsys.readouterr().out
    assert f"{encode(2, 'f58')}: eventlog does not replay" in out


def test_job_info_reads_jobspecs_from_their_blobs(store: EventStore, uri: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.domain.jm.content import job_content
    from fluxes.store import jobhash

    _submit(store, 42)
    env = {"attributes": {"system": {"environment": {"HOME": "/h"}, "cwd": "/"}}}
    submitted = {**env, "version": 1}
    full = {**env, "version": 1, "tasks": []}
    batch = store.batch()
    jobhash.create(batch, KEYS, 42, owner=0, urgency=16, request="{}",
                   content=job_content(orjson.dumps(submitted), orjson.dumps(full)))
    store.commit(batch, token="1")
    assert main(["--uri", uri, "job", "info", "42", "jobspec", "jobspec_full"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line) for line in out] == [submitted, full]
    assert main(["--uri", uri, "job", "info", "42"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "jobspec", "jobspec_full", "owner", "request", "urgency"]
    assert main(["--uri", uri, "job", "info", "42", "env"]) == 1
    assert "has no 'env'" in capsys.readouterr().err
