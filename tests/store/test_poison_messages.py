"""Poison messages: a malformed entry on any worker input goes to the dead-letter stream with
the error, is acknowledged where a consumer group reads the stream, and the worker carries on.

Ingest, job manager and scheduler run in-process against a real redis-server
(tests/store/test_scheduler_worker.py's System); the job list has its own test
in tests/store/test_joblist.py and exec in tests/system/test_exec_worker.py.
"""

from __future__ import annotations

import orjson
import pytest
import redis

from fluxes.cli.main import main
from fluxes.store.keys import GROUP_INGEST, GROUP_JM
from tests.store.test_scheduler_worker import System, spec

#: Entries no protocol reader can take, and a word of the error each must give.
MALFORMED = [
    ({"x": "no d field"}, "no 'd' field"),
    ({"d": "{not json"}, "not JSON"),
    ({"d": '{"e": 0, "m": [{"t": "exec"}]}'}, "must be int"),  # a message without its id
]


@pytest.fixture
def system(real_redis: redis.Redis) -> System:
    return System(real_redis)


def letters(client: redis.Redis, system: System) -> list[dict[str, str]]:
    return [{k.decode(): v.decode() for k, v in fields.items()}
            for _sid, fields in client.xrange(system.keys.dead_letters)]


def runs_a_job(system: System) -> None:
    """The workers carry on: a new job runs to the end."""
    [jobid] = system.submit(spec())
    system.run()
    assert system.events(jobid)[-1] == "clean"


def test_ingest_submit_stream(system: System) -> None:
    runs_a_job(system)
    stream = system.keys.submit("me")
    bad = [{"x": "no d"}, {"d": "{not json"}, {"d": "[1, 2]"}, {"d": '{"t": "submit"}'}]
    sent = [system.redis.xadd(stream, fields).decode() for fields in bad]
    system.ingest.step()
    got = letters(system.redis, system)
    assert [(g["stream"], g["id"]) for g in got] == [(stream, s) for s in sent]
    assert all(g["error"] and g["worker"] == system.ingest.name for g in got)
    assert "KeyError" in got[0]["error"] and "'req'" in got[3]["error"]
    assert orjson.loads(got[1]["fields"]) == {"d": "{not json"}
    assert system.redis.xpending(stream, GROUP_INGEST)["pending"] == 0
    runs_a_job(system)


@pytest.mark.parametrize("which", ["jm_new", "jm_ctl", "sched_resp", "exec_events"])
def test_job_manager_inputs(system: System, which: str) -> None:
    runs_a_job(system)
    stream = getattr(system.keys, which)(0)
    sent = [system.redis.xadd(stream, fields).decode() for fields, _ in MALFORMED]
    system.run(rounds=2)
    got = [g for g in letters(system.redis, system) if g["stream"] == stream]
    assert [g["id"] for g in got] == sent
    for letter, (_fields, word) in zip(got, MALFORMED, strict=True):
        assert word in letter["error"] and letter["worker"] == system.jm.name
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0
    runs_a_job(system)


def test_scheduler_request_stream(system: System) -> None:
    runs_a_job(system)
    stream = system.keys.sched_req(0)
    sent = [system.redis.xadd(stream, fields).decode() for fields, _ in MALFORMED]
    system.run(rounds=2)
    got = [g for g in letters(system.redis, system) if g["stream"] == stream]
    assert [g["id"] for g in got] == sent  # read by position (no group): nothing to ack
    for letter, (_fields, word) in zip(got, MALFORMED, strict=True):
        assert word in letter["error"] and letter["worker"] == system.sched.name
    runs_a_job(system)


def test_dead_letters_command(system: System, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"unix://{system.redis.connection_pool.connection_kwargs['path']}?ns=t"
    assert main(["--uri", uri, "eventlog", "dead-letters"]) == 0
    assert capsys.readouterr().out == "no dead letters\n"
    stream = system.keys.jm_ctl(0)
    first = system.redis.xadd(stream, {"x": "1"}).decode()
    second = system.redis.xadd(stream, {"d": "{not json"}).decode()
    system.run(rounds=2)
    assert main(["--uri", uri, "eventlog", "dead-letters"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[1:3] == [stream, first] and "no 'd' field" in lines[0]
    assert lines[1].split()[1:3] == [stream, second] and "not JSON" in lines[1]
    assert main(["--uri", uri, "eventlog", "dead-letters", "--json", "-n", "1"]) == 0
    [doc] = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert doc["id"] == second and doc["stream"] == stream
    assert doc["fields"] == {"d": "{not json"} and doc["worker"] == system.jm.name
    assert "dead_letter_id" in doc


@pytest.mark.parametrize("count", ["0", "-3", "many"])
def test_dead_letters_count_must_be_positive(count: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli.util import run_cli

    assert run_cli(lambda: main(["eventlog", "dead-letters", "-n", count])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "expected a whole number >= 1" in err
