"""Poison messages: an entry on any worker input that fails to decode, or whose handling
raises, goes to the dead-letter stream with its reason, is acknowledged in the same step
(where a consumer group reads the stream), and the worker goes on with the next entry.

Ingest, job manager and scheduler run in-process (tests/store/test_scheduler_worker.py's
System) on both backends; the job list has its own test in tests/store/test_joblist.py
and exec in tests/system/test_exec_worker.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.cli.main import main
from fluxes.store.keys import GROUP_INGEST, GROUP_JM
from tests.store.test_scheduler_worker import System, spec

#: Entries no protocol reader can take, and a word of the error each must give.
MALFORMED = [
    ({"x": "no d field"}, "no 'd' field"),
    ({"d": "{not json"}, "not JSON"),
    ({"d": '{"e": 0, "m": [{"t": "exec"}]}'}, "at `$.m[0]"),  # exec: missing its id
    ({"d": '{"e": 0, "m": [{"t": "frobnicate", "id": 1}]}'}, "Invalid value 'frobnicate'"),
    ({"d": '{"e": 0, "m": [{"t": ' + "[" * 1000 + "]" * 1000 + "}]}"}, "nested more than"),
    ({"d": "[" * 100_000}, "unbalanced brackets"),
    ({"d": '{"e": "0", "m": []}'}, "Expected `int`, got `str` - at `$.e`"),
]


@pytest.fixture(params=["fake", "real"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """Both backends: fakeredis (with Lua) and a private redis-server."""
    yield request.getfixturevalue("fake_redis" if request.param == "fake" else "real_redis")


@pytest.fixture
def system(client: redis.Redis) -> System:
    return System(client)


def letters(system: System, stream: str | None = None) -> list[dict[str, str]]:
    out = [{k.decode(): v.decode() for k, v in fields.items()}
           for _sid, fields in system.redis.xrange(system.keys.dead_letters)]
    return [g for g in out if stream is None or g["stream"] == stream]


def runs_a_job(system: System) -> None:
    """The workers carry on: a new job runs to the end."""
    [jobid] = system.submit(spec())
    system.run()
    assert system.events(jobid)[-1] == "clean"


def deep(n: int) -> bytes:
    """An object nested ``n`` levels."""
    return b'{"a":' * (n - 1) + b"{}" + b"}" * (n - 1)


def entry(*msgs: dict[str, Any], epoch: int = 0) -> dict[str, bytes]:
    return {"d": orjson.dumps({"e": epoch, "m": list(msgs)})}


# -- ingest ---------------------------------------------------------------------------------


def test_ingest_submit_stream(system: System) -> None:
    runs_a_job(system)
    stream = system.keys.submit("me")
    bad = [{"x": "no d"}, {"d": "{not json"}, {"d": "[1, 2]"}, {"d": '{"t": "submit"}'},
           {"d": '{"t": "frobnicate", "req": "r5"}'}]
    sent = [system.redis.xadd(stream, fields).decode() for fields in bad]
    system.ingest.step()
    got = letters(system)
    assert [(g["stream"], g["id"]) for g in got] == [(stream, s) for s in sent]
    assert all(g["error"] and g["worker"] == system.ingest.name for g in got)
    assert "no 'd' field" in got[0]["error"] and "not JSON" in got[1]["error"]
    assert "`req`" in got[3]["error"] and "'frobnicate'" in got[4]["error"]
    assert orjson.loads(got[1]["fields"]) == {"d": "{not json"}
    assert system.redis.xpending(stream, GROUP_INGEST)["pending"] == 0
    # a refused request whose req can be read is answered, so its client does not wait
    [answer] = system.redis.lrange(system.keys.reply("me", "r5"), 0, -1)
    assert "frobnicate" in orjson.loads(answer)["errors"][0]
    runs_a_job(system)


@pytest.mark.parametrize(("raw", "word"), [
    # orjson.dumps(item) raised "Recursion limit reached" inside the ingest (it writes
    # at most 254 levels), before the request was acknowledged: a crash loop
    (b'{"t": "submit", "req": "r1", "jobs": [' + deep(300) + b"]}", "nested more than 67"),
    # formatting "unknown request type [[[...]]]" raised RecursionError
    (b'{"t": ' + b"[" * 1000 + b"]" * 1000 + b', "req": "r2"}', "nested more than 67"),
    # a deep value where an int belongs fails at its first bracket, at any depth allowed
    (b'{"t": "submit", "req": "r3", "jobs": [{"urgency": ' + b"[" * 60 + b"]" * 60 + b"}]}",
     "Expected `int | null`, got `array` - at `$.jobs[0].urgency`"),
])
def test_deep_requests_are_refused_and_the_next_one_handled(system: System, raw: bytes,
                                                            word: str) -> None:
    stream = system.keys.submit("me")
    sent = system.redis.xadd(stream, {"d": raw}).decode()
    runs_a_job(system)  # its request is read in the same block as the poison
    [letter] = letters(system)
    assert letter["id"] == sent and word in letter["error"]
    assert system.redis.xpending(stream, GROUP_INGEST)["pending"] == 0


def test_oversized_request_keeps_a_bounded_prefix(system: System) -> None:
    stream = system.keys.submit("me")
    size = proto.MAX_REQUEST_BYTES + 1
    raw = b'{"t": "submit", "req": "big", "jobs": [{"yaml": "' + b"x" * size + b'"}]}'
    system.redis.xadd(stream, {"d": raw})
    runs_a_job(system)
    [letter] = letters(system)
    assert f"entry is {len(raw)} bytes, the limit is {proto.MAX_REQUEST_BYTES}" \
        in letter["error"]
    kept = orjson.loads(letter["fields"])["d"]
    assert kept.endswith(f"...[{len(raw)} bytes]") and len(kept) < 4200
    assert system.redis.xpending(stream, GROUP_INGEST)["pending"] == 0


def test_request_whose_handling_raises_is_refused_alone(system: System,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything a handler raises (not only MessageError): that request is dead-lettered
    and answered, the others of its block are handled."""
    import fluxes.domain.ingest.checks
    from fluxes.domain.jm.submission import prepare_job as real

    def flaky(item: Any, *args: Any, **kw: Any) -> Any:
        if item.get("jobspec", {}).get("attributes", {}).get("user", {}).get("boom"):
            raise RuntimeError("boom")
        return real(item, *args, **kw)

    monkeypatch.setattr(fluxes.domain.ingest.checks, "prepare_job", flaky)
    from fluxes.store.client import Client

    client = Client(system.instance, user="me")
    poison = spec()
    poison.setdefault("attributes", {}).setdefault("user", {})["boom"] = True
    keys = client._send([{"t": "submit", "jobs": [{"jobspec": spec()}]},
                         {"t": "submit", "jobs": [{"jobspec": poison}]},
                         {"t": "submit", "jobs": [{"jobspec": spec()}]}])
    system.ingest.step()
    answers = [client._wait(key, 1.0)[0] for key in keys]
    assert "id" in answers[0]["jobs"][0] and "id" in answers[2]["jobs"][0]
    assert answers[1] == {"errors": ["request refused: RuntimeError: boom"]}
    [letter] = letters(system)
    assert letter["error"] == "RuntimeError: boom"
    assert system.redis.xpending(system.keys.submit("me"), GROUP_INGEST)["pending"] == 0
    system.run()
    for answer in (answers[0], answers[2]):
        assert system.events(answer["jobs"][0]["id"])[-1] == "clean"


# -- the job manager's inputs -----------------------------------------------------------------

#: A valid message of every type the job manager reads, per input stream.
JM_MESSAGES: dict[str, list[dict[str, Any]]] = {
    "jm_new": [{"t": "new", "id": 99, "userid": 1000, "urgency": 16, "flags": 0,
                "t_submit": 1.0, "info": {}}],
    "jm_ctl": [{"t": "cancel-request", "ids": [99], "userid": 1000, "note": "", "reply": "r"},
               {"t": "raise", "ids": [99], "userid": 1000, "type": "x", "severity": 0,
                "note": "", "reply": "r"},
               {"t": "urgency-request", "id": 99, "urgency": 3, "userid": 1000, "reply": "r"},
               {"t": "queues", "stopped": ["q"], "reply": "r"},
               {"t": "lost-ranks", "ranks": "7", "reply": "r"}],
    "sched_resp": [{"t": "ready", "mode": "single", "limit": 1},
                   {"t": "alloc-response", "id": 99, "type": 1, "annotations": {},
                    "note": "n", "ranks": "0", "nodelist": "n0"},
                   {"t": "free-response", "id": 99},
                   {"t": "error", "note": "n", "id": 99}],
    "exec_events": [{"t": "exec", "id": 99, "rank": 0, "started": True, "status": 0,
                     "released": True, "error": "e"}],
}


def wrong(value: Any) -> Any:
    """A value of another JSON type than ``value`` (a deep list where a scalar belongs)."""
    if isinstance(value, str | int | float) or value is None:
        return [[[1]]]
    return "not a container"


def wrong_fields() -> list[tuple[str, dict[str, Any], str]]:
    out = []
    for which, msgs in JM_MESSAGES.items():
        for msg in msgs:
            for key, value in msg.items():
                out.append((which, {**msg, key: wrong(value)}, key))
    return out


@pytest.mark.parametrize("which", sorted(JM_MESSAGES))
def test_job_manager_inputs(system: System, which: str) -> None:
    runs_a_job(system)
    stream = getattr(system.keys, which)(0)
    sent = [system.redis.xadd(stream, fields).decode() for fields, _ in MALFORMED]
    runs_a_job(system)
    got = letters(system, stream)
    assert [g["id"] for g in got] == sent
    for letter, (_fields, word) in zip(got, MALFORMED, strict=True):
        assert word in letter["error"] and letter["worker"] == system.jm.name
        assert len(letter["error"].splitlines()) == 1
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0


@pytest.mark.parametrize(("which", "msg", "key"), wrong_fields(),
                         ids=[f"{w}-{m['t'] if k != 't' else 'type'}-{k}"
                              for w, m, k in wrong_fields()])
def test_job_manager_wrong_types(system: System, which: str, msg: dict[str, Any],
                                 key: str) -> None:
    stream = getattr(system.keys, which)(0)
    sent = system.redis.xadd(stream, entry(msg)).decode()
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert letter["id"] == sent
    assert f"$.m[0].{key}" in letter["error"] or "$.m[0]`" in letter["error"]
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0


@pytest.mark.parametrize("which", sorted(JM_MESSAGES))
def test_job_manager_oversized_entry(system: System, which: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    channel = {"jm_new": "NEW_JOBS", "jm_ctl": "CONTROL", "sched_resp": "SCHED_RESPONSES",
               "exec_events": "EXEC_EVENTS"}[which]
    monkeypatch.setattr(proto, channel, getattr(proto, channel).bounded(10_000))
    stream = getattr(system.keys, which)(0)
    raw = orjson.dumps({"e": 0, "m": [{"t": "x", "pad": "y" * 20_000}]})
    system.redis.xadd(stream, {"d": raw})
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert f"entry is {len(raw)} bytes, the limit is 10000" in letter["error"]
    assert len(letter["fields"]) < 4200
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0


def test_job_manager_handler_that_raises(system: System,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler raising after it changed memory: the input is dead-lettered and
    acknowledged in one commit, and the job manager rebuilds from storage."""
    for fake in system.execs.values():
        fake.hold = set()
    [held] = system.submit(spec())
    for fake in system.execs.values():
        fake.hold.add(held)
    system.run(4)
    assert system.events(held)[-1] == "start"
    core = system.jm.core
    assert core is not None
    real = core.on_exec

    def half_done(fx: Any, msg: proto.ExecReport, ack: Any = None) -> None:
        real(fx, msg, ack)  # memory changed...
        if msg.id == held:
            raise RuntimeError("late failure")  # ...then it fails

    monkeypatch.setattr(core, "on_exec", half_done)
    stream = system.keys.exec_events(0)
    sent = system.redis.xadd(stream, entry({"t": "exec", "id": held, "rank": 0, "status": 0,
                                            "released": True})).decode()
    system.run(1, exec_too=False)
    [letter] = letters(system, stream)
    assert letter["id"] == sent and letter["error"] == "RuntimeError: late failure"
    assert system.redis.xpending(stream, GROUP_JM)["pending"] == 0
    assert system.jm.core is not core  # rebuilt: the half-applied report is forgotten
    assert system.events(held)[-1] == "start"
    rebuilt = system.jm.core
    assert rebuilt is not None and not rebuilt.jobs[held].exec_finished
    runs_a_job(system)


# -- the scheduler --------------------------------------------------------------------------------


def test_scheduler_request_stream(system: System) -> None:
    runs_a_job(system)
    stream = system.keys.sched_req(0)
    sent = [system.redis.xadd(stream, fields).decode() for fields, _ in MALFORMED]
    runs_a_job(system)
    got = letters(system, stream)
    assert [g["id"] for g in got] == sent  # read by position (no group): nothing to ack
    for letter, (_fields, word) in zip(got, MALFORMED, strict=True):
        assert word in letter["error"] and letter["worker"] == system.sched.name


SCHED_MESSAGES: list[dict[str, Any]] = [
    {"t": "hello-reply", "alloc": [{"id": 1, "priority": 1, "userid": 1, "ranks": "0"}]},
    {"t": "alloc", "id": 1, "priority": 1, "userid": 1, "t_submit": 1.0, "queue": "q"},
    {"t": "cancel", "id": 1}, {"t": "prioritize", "jobs": [[1, 2]]}, {"t": "free", "id": 1},
    {"t": "expiration", "id": 1, "expiration": 1800000000.5},
]


@pytest.mark.parametrize(("msg", "key"), [({**m, k: wrong(v)}, k) for m in SCHED_MESSAGES
                                          for k, v in m.items()])
def test_scheduler_wrong_types(system: System, msg: dict[str, Any], key: str) -> None:
    runs_a_job(system)
    stream = system.keys.sched_req(0)
    system.redis.xadd(stream, entry(msg, epoch=system.sched.sessions[0].epoch))
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert "$.m[0]" in letter["error"]


@pytest.mark.parametrize("expiration", [0, -1.0, "1e400"])
def test_scheduler_refuses_an_expiration_out_of_range(system: System,
                                                      expiration: float | str) -> None:
    runs_a_job(system)
    stream = system.keys.sched_req(0)
    raw = b'{"e": %d, "m": [{"t": "expiration", "id": 1, "expiration": %s}]}' % (
        system.sched.sessions[0].epoch, str(expiration).encode())
    system.redis.xadd(stream, {b"d": raw})
    runs_a_job(system)
    [letter] = letters(system, stream)
    assert "$.m[0].expiration" in letter["error"]


def test_scheduler_handler_that_raises(system: System,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose handling raises: dead-lettered, and a new epoch rebuilds the pool."""
    runs_a_job(system)
    assert system.sched.core is not None
    sched = system.sched.core.sched

    def broken(jobid: int, priority: int) -> None:
        raise RuntimeError("prioritize broke")

    monkeypatch.setattr(sched, "prioritize", broken)
    epoch = system.sched.sessions[0].epoch
    stream = system.keys.sched_req(0)
    sent = system.redis.xadd(stream, entry({"t": "prioritize", "jobs": [[1, 2]]},
                                           epoch=epoch)).decode()
    system.sched.step()
    [letter] = letters(system, stream)
    assert letter["id"] == sent and letter["error"] == "RuntimeError: prioritize broke"
    assert system.sched.sessions[0].epoch > epoch
    runs_a_job(system)


def test_resource_events(system: System) -> None:
    runs_a_job(system)
    stream = system.keys.resource_events
    sent = [system.redis.xadd(stream, fields).decode() for fields in (
        {"d": '{"t": "drain", "ranks": [[[0]]]}'}, {"d": '{"t": "melt", "ranks": "0"}'},
        {"d": '{"t": "drain", "ranks": "x"}'})]
    system.sched._housekept = 0.0
    runs_a_job(system)
    got = letters(system, stream)
    assert [g["id"] for g in got] == sent
    assert "$.ranks" in got[0]["error"] and "'melt'" in got[1]["error"]


# -- the job list ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["general", "fast"])
def test_job_list_entry_whose_fold_raises(system: System, monkeypatch: pytest.MonkeyPatch,
                                          path: str) -> None:
    """A journal entry whose fold raises anything, in the general fold or in the fast
    fold of the common entries: dead-lettered, passed over, and every other entry of
    its block folded (the position moves past it)."""
    import fluxes.store.joblist_fold as fold
    from workers.joblist import JobListWorker

    [good] = system.submit(spec())
    [bad] = system.submit(spec())
    system.run()
    real = fold.apply_record  # type: ignore[attr-defined]  # the name the folder calls
    fast = fold.fast_apply  # type: ignore[attr-defined]

    def broken(summary: Any, jobid: int, event: Any, extra: Any) -> Any:
        if jobid == bad and event.event_name == "clean":  # its last entry
            raise RuntimeError("fold broke")
        return real(summary, jobid, event, extra)

    def broken_fast(record: Any, jobid: int, fields: Any) -> Any:
        if jobid == bad and fields.get(b"n") == b"clean":
            raise RuntimeError("fold broke")
        return fast(record, jobid, fields)

    if path == "general":
        # the fast fold leaves every entry to the general one, which breaks
        monkeypatch.setattr(fold, "fast_apply", lambda *_args: None)
        monkeypatch.setattr(fold, "apply_record", broken)
    else:
        monkeypatch.setattr(fold, "fast_apply", broken_fast)
    worker = JobListWorker(system.instance)
    worker.setup()
    worker.step()
    journal = system.keys.journal(0)
    [letter] = letters(system, journal)
    assert letter["error"] == "RuntimeError: fold broke"
    [(last, _fields)] = system.redis.xrevrange(journal, count=1)
    assert worker.folders[0].position == last.decode()
    assert worker.store.position(0)[0] == last.decode()
    summaries = worker.store.get_many([good, bad])
    assert summaries[0] is not None and summaries[0].job.state.name == "INACTIVE"
    # its other entries were folded
    assert summaries[1] is not None and summaries[1].job.state.name == "CLEANUP"


# -- the command line ------------------------------------------------------------------------------


def test_dead_letters_command(system: System, capsys: pytest.CaptureFixture[str]) -> None:
    if not system.redis.connection_pool.connection_kwargs.get("path"):
        pytest.skip("the command line needs a server to connect to")
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
