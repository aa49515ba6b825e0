"""Fuzz every decoder of stream entries and stored records, and the job manager's handlers.

Decoders (protocol entries, journal fields, RFC 18 events, job records, queue
events, submissions) must turn garbage into a clean one-line ValueError.
Every stream's typed decoder (and a user request's) turns garbage, however
deeply nested, into a MessageError. The job manager core is driven with
messages its streams' decoders accept but that are semantically odd (unknown
ids, negative ranks, out-of-range numbers, huge idsets): it must raise
nothing at all, or a MessageError *before* changing anything, and whatever
it emits must be valid: its events survive the store encoding and replay,
its messages decode on their streams to themselves.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fluxes import messages as proto
from fluxes.config import IngestLimits, InstanceConfig
from fluxes.domain.jm.core import Effects, JobManagerCore
from fluxes.domain.jm.queues import QueueConfig, QueueEvent, QueueState
from fluxes.domain.jm.submission import PreparedJob, prepare_job
from fluxes.domain.job import events as ev
from fluxes.domain.job.model import TransitionError
from fluxes.domain.job.record import JobRecord, apply_record
from fluxes.domain.joblist.model import ReadModel, counter_keys
from fluxes.errors import JobspecError, PolicyError
from fluxes.formats.jobspec import Jobspec
from fluxes.store.eventstore import decode_entry, encode_context, journal_entry
from tests.fuzz import (
    EDGE_INTS,
    FLOATS,
    JSON_INTS,
    check_message,
    fuzz_settings,
    grammar_text,
    hang_guard,
    json_objects,
    json_values,
    mutated,
    outcome,
    to_json_bytes,
)
from tests.strategies import histories

OWNER = 1000
OTHER = 2000
KNOWN_IDS = [1, 2, 3, 4, 5]
DATA = Path(__file__).resolve().parent.parent


# -- messages.decode -----------------------------------------------------------------

def _utf8(text: str) -> bool:
    """True unless ``text`` holds a lone surrogate (no JSON document can)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


IDS = st.one_of(st.sampled_from(KNOWN_IDS), JSON_INTS, EDGE_INTS)
USERS = st.one_of(st.sampled_from([OWNER, OTHER]), JSON_INTS)
RANKS_TEXT = st.one_of(
    st.sampled_from(["0", "0-1", "0-3", "1,3", "2", "all", "", "0-4294967294", "0-1048576",
                     "-1", "x", "[0-2]", "0,0"]),
    grammar_text("0123456789,-[]", 12),
)
TEXT = grammar_text(max_size=30).filter(_utf8)


def _json_safe(value: Any) -> bool:
    """True if orjson can dump ``value`` (what a stream entry can carry)."""
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


JSON = json_values(8).filter(_json_safe)
SMALL_JSON = json_values(3).filter(_json_safe)


def _msg(kind: str, required: dict[str, st.SearchStrategy[Any]],
         optional: dict[str, st.SearchStrategy[Any]] | None = None) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"t": st.just(kind), **required}, optional=optional or {})


SCHED_MSGS = st.one_of(
    _msg("hello", {}),
    _msg("ready", {"mode": st.one_of(st.sampled_from(proto.MODES), TEXT)},
         {"limit": st.one_of(st.integers(-2, 4), JSON)}),
    _msg("alloc-response", {"id": IDS, "type": st.one_of(st.integers(-1, 4), JSON_INTS)},
         {"annotations": JSON, "ranks": st.one_of(RANKS_TEXT, JSON),
          "nodelist": st.one_of(TEXT, JSON), "note": st.one_of(TEXT, JSON)}),
    _msg("free-response", {"id": IDS}),
    _msg("error", {}, {"note": TEXT, "id": IDS}),
)
EXEC_MSGS = _msg("exec", {"id": IDS, "rank": st.one_of(st.integers(-2, 5), JSON_INTS)},
                 {"started": st.one_of(st.booleans(), JSON),
                  "status": st.one_of(st.sampled_from([0, 256, 9, 15]), JSON_INTS, JSON),
                  "released": st.one_of(st.booleans(), JSON),
                  "error": st.one_of(TEXT, JSON)})
INFO = st.one_of(
    st.fixed_dictionaries({}, optional={
        "duration": st.one_of(FLOATS, JSON_INTS, JSON),
        "queue": st.one_of(st.sampled_from(["batch", ""]), JSON),
        "dependencies": st.one_of(JSON, st.lists(st.fixed_dictionaries({
            "scheme": st.sampled_from(["afterok", "afterany", "after", "begin-time", "x"]),
            "value": st.one_of(IDS.map(str), TEXT, FLOATS.map(repr))}), max_size=3)),
        "ranks": st.one_of(RANKS_TEXT, JSON),
        "name": st.one_of(TEXT, JSON),
    }),
    JSON,
)
NEW_MSGS = _msg("new", {"id": IDS, "userid": USERS,
                        "urgency": st.one_of(st.integers(-1, 32), JSON_INTS),
                        "flags": st.one_of(st.just(0), JSON_INTS),
                        "t_submit": st.one_of(st.just(1000.0), FLOATS, JSON_INTS)},
                {"info": INFO})
_ID_LIST = st.lists(st.one_of(IDS, JSON), max_size=6)
_REPLY = st.one_of(st.just("reply:1"), JSON)
CTL_MSGS = st.one_of(
    _msg("cancel-request", {"ids": _ID_LIST, "userid": USERS},
         {"note": st.one_of(TEXT, JSON), "reply": _REPLY}),
    _msg("raise", {"ids": _ID_LIST, "userid": USERS, "type": TEXT,
                   "severity": st.one_of(st.integers(-1, 8), JSON_INTS)},
         {"note": st.one_of(TEXT, JSON), "reply": _REPLY}),
    _msg("urgency-request", {"id": IDS, "urgency": st.one_of(st.integers(-1, 32), JSON_INTS),
                             "userid": USERS}, {"reply": _REPLY}),
    _msg("lost-ranks", {"ranks": RANKS_TEXT}, {"reply": _REPLY}),
    _msg("queues", {}, {"stopped": st.one_of(st.lists(st.sampled_from(["batch", "x"])), JSON)}),
)
OTHER_MSGS = st.one_of(
    _msg("hello-reply", {"alloc": st.lists(JSON, max_size=3)}),
    _msg("alloc", {"id": IDS, "priority": JSON_INTS, "userid": USERS}),
    _msg("cancel", {"id": IDS}), _msg("free", {"id": IDS}), _msg("reset", {}),
    _msg("prioritize", {"jobs": st.lists(JSON, max_size=3)}),
    _msg("start", {"id": IDS, "ranks": RANKS_TEXT}),
    _msg("kill", {"id": IDS, "signal": JSON_INTS}),
)
ALL_MSGS = st.one_of(SCHED_MSGS, EXEC_MSGS, NEW_MSGS, CTL_MSGS, OTHER_MSGS)


@st.composite
def entries(draw: st.DrawFn) -> dict[bytes, bytes]:
    """Stream entry fields: valid batches, damaged batches, random JSON or bytes."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        msgs = draw(st.lists(ALL_MSGS, max_size=4))
        doc: Any = {"e": draw(st.one_of(JSON_INTS, JSON)), "m": msgs}
        if draw(st.booleans()):
            doc = draw(mutated(doc, values=JSON))
        raw = to_json_bytes(doc)
    elif kind == 1:
        raw = orjson.dumps(draw(JSON))
    elif kind == 2:
        raw = draw(st.binary(max_size=100))
    else:
        raw = draw(st.text(max_size=100)).encode("utf-8", "surrogatepass")
    fields = {proto.FIELD: raw}
    if draw(st.integers(0, 9)) == 0:
        fields = {b"x": raw}
    return fields


_STREAMS = ["sched-req", "sched", "exec-req", "exec", "new", "ctl"]


def _channel(stream: str) -> Any:
    return {"sched-req": proto.SCHED_REQUESTS, "exec-req": proto.EXEC_REQUESTS,
            **CHANNELS}[stream]


@fuzz_settings(2)
@given(entries(), st.sampled_from(_STREAMS))
@example({b"d": b"[" * 2000}, "ctl")
@example({b"d": b'{"e": 1, "m": [' + b'{"t": "hello"},' * 20000 + b'{"t": "hello"}]}'}, "sched")
@example({b"d": b'{"e": 0, "m": [{"t": ' + b"[" * 1000 + b"]" * 1000 + b"}]}"}, "new")
@example({b"d": b'{"e": 0, "m": [{"t": "new", "id": 1, "userid": 1, "urgency": 1, "flags": 0, '
               b'"t_submit": 1, "info": {"a": ' + b"[" * 300 + b"]" * 300 + b"}}]}"}, "new")
@example({b"d": b'{"e": 0, "m": [{"t": "free", "id": ' + b"[" * 20 + b"]" * 20 + b"}]}"},
         "sched-req")
def test_typed_decode(fields: dict[bytes, bytes], stream: str) -> None:
    """Every stream's decoder: typed messages that re-encode to themselves, or a clean
    MessageError; never a RecursionError, whatever the nesting."""
    channel = _channel(stream)
    result = outcome(proto.decode_entry, channel, fields)
    if isinstance(result, ValueError):
        assert isinstance(result, proto.MessageError)
        return
    epoch, msgs = result
    assert proto.decode_entry(channel, proto.encode_entry(msgs, epoch)) == (epoch, msgs)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """User requests: valid ones, damaged ones, random JSON, deep JSON."""
    kind = draw(st.integers(0, 3))
    if kind == 3:
        depth = draw(st.integers(0, 2000))
        return b'{"t": "submit", "req": "r", "jobs": [' + b'{"a":' * depth + b"{}" + \
            b"}" * depth + b"]}"
    if kind == 2:
        return orjson.dumps(draw(JSON))
    doc: dict[str, Any] = draw(st.one_of(
        st.fixed_dictionaries({"t": st.just("submit"), "req": TEXT},
                              optional={"jobs": st.lists(submission_items(), max_size=3)}),
        st.fixed_dictionaries({"t": st.just("cancel"), "req": TEXT, "ids": _ID_LIST},
                              optional={"note": st.one_of(TEXT, JSON)}),
        st.fixed_dictionaries({"t": st.just("urgency"), "req": TEXT, "id": IDS,
                               "urgency": st.one_of(st.integers(-1, 32), JSON)}),
        st.fixed_dictionaries({"t": st.just("raise"), "req": TEXT, "ids": _ID_LIST},
                              optional={"type": st.one_of(TEXT, JSON),
                                        "severity": st.one_of(st.integers(-1, 8), JSON)})))
    if kind == 1:
        doc = draw(mutated(doc, values=JSON))
    return to_json_bytes(doc)


@fuzz_settings(2)
@given(requests())
@example(b'{"t": ' + b"[" * 1000 + b"]" * 1000 + b', "req": "r2"}')
@example(b'{"t": "submit", "req": "r1", "jobs": [' + b'{"a":' * 299 + b"{}" + b"}" * 299 + b"]}")
def test_request_decode(raw: bytes) -> None:
    """A user request: typed (and then every job item can be written back as JSON, which
    the ingest does), or a clean MessageError."""
    result = outcome(proto.decode_request, {b"d": raw})
    if isinstance(result, ValueError):
        assert isinstance(result, proto.MessageError)
        return
    assert proto.decode_request({b"d": proto.encode_request(result)["d"]}) == result
    if isinstance(result, proto.SubmitJobs):
        for item in result.jobs:
            orjson.dumps(item.jobspec)  # orjson writes 254 levels at most


# -- the job manager core -------------------------------------------------------------


class Clock:
    """A settable clock so that runs are reproducible."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _snapshot(core: JobManagerCore, fx: Effects) -> Any:
    """Everything a handler may change, deep-copied for comparison."""
    return copy.deepcopy((
        {j: (a.rec.job, a.rec.info, None if a.ranks is None else str(a.ranks), a.alloc_epoch,
             a.cancel_sent, a.free_sent, a.start_sent, a.kill_sent, a.exec_started,
             a.exec_finished, a.exec_released, a.exec_error, a.deadline)
         for j, a in core.jobs.items()},
        vars(core.session), core._waiting, core._queued, core._parked, core._timers,
        core._prioritize, core.inactive_count, core.stopped_queues, len(core.deps),
        fx.ops, fx.sched, fx.exec, fx.replies, fx.retired, fx.progress, fx.acks,
    ))


#: the stream each handler of the core reads
CHANNELS: dict[str, Any] = {"sched": proto.SCHED_RESPONSES, "exec": proto.EXEC_EVENTS,
                            "new": proto.NEW_JOBS, "ctl": proto.CONTROL}


def typed(stream: str, doc: dict[str, Any]) -> Any:
    """``doc`` decoded as the reader of ``stream`` decodes it."""
    return proto.convert(CHANNELS[stream], doc)


class Driver:
    """Feeds messages to a core the way workers/jobmanager.py does, checking every step."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.core = JobManagerCore(owner_uid=OWNER, clock=self.clock)
        self.replica: dict[int, JobRecord] = {}

    def seed(self) -> None:
        """A few jobs in various states: the odd messages then have something to hit."""
        for jobid in KNOWN_IDS:
            t = self.clock()
            info: dict[str, Any] = {"duration": 60.0} if jobid % 2 else {}
            userid = OWNER if jobid < 4 else OTHER
            self.feed("new", {"t": "new", "id": jobid, "userid": userid,
                              "urgency": 16, "flags": 0, "t_submit": t, "info": info})
        self.feed("sched", {"t": "hello"}, epoch=1)
        self.feed("sched", {"t": "ready", "mode": "unlimited"}, epoch=1)
        self.feed("sched", {"t": "alloc-response", "id": 1, "type": 0, "ranks": "0-1"}, epoch=1)
        self.feed("sched", {"t": "alloc-response", "id": 2, "type": 0, "ranks": "2"}, epoch=1)
        self.feed("exec", {"t": "exec", "id": 2, "rank": 2, "started": True})
        assert set(self.core.jobs) == set(KNOWN_IDS) == set(self.replica)

    def feed(self, stream: str, doc: dict[str, Any], epoch: int = 1) -> None:
        """One message through the handler of ``stream``; check the effects."""
        # exactly what a reader gets (json: orjson would refuse to write deep nesting)
        try:
            [msg] = proto.decode_entry(CHANNELS[stream], {
                proto.FIELD: json.dumps({"e": 0, "m": [doc]}).encode()})[1]
        except proto.MessageError as exc:
            check_message(exc)  # refused at the door: dead-lettered, nothing runs
            return
        core = self.core
        if isinstance(msg, proto.New) and msg.id in self.replica and msg.id not in core.jobs:
            # A repeated "new" for a job the core has retired: the core cannot tell it
            # from a new job without a store lookup (its commit would then fail with an
            # eventlog CONFLICT); see docs/hostile-input.md. The ingest never does this.
            return
        fx = Effects()
        before = _snapshot(core, fx)
        submitted = None
        if isinstance(msg, proto.New) and msg.id not in self.replica:
            # what the ingest wrote to the journal before sending this message
            submitted = outcome(ev.decode, "submit", msg.t_submit, {
                "version": 1, "urgency": msg.urgency, "userid": msg.userid, "flags": msg.flags})
        with hang_guard():
            try:
                if isinstance(msg, proto.SchedResponse):
                    core.on_sched(fx, epoch, msg)
                elif isinstance(msg, proto.ExecReport):
                    core.on_exec(fx, msg)
                elif isinstance(msg, proto.New):
                    core.on_new(fx, msg)
                else:
                    core.on_ctl(fx, msg)
            except proto.MessageError as exc:
                # refused as malformed: dead-lettered, so nothing may have changed
                check_message(exc)
                assert _snapshot(core, fx) == before, f"{exc} after a partial change"
                return
        if isinstance(submitted, ev.Submit) and isinstance(msg, proto.New):
            rec = apply_record(None, msg.id, submitted, msg.info)
            self.replica[msg.id] = apply_record(rec, msg.id,
                                                ev.Validate(timestamp=submitted.timestamp))
        self.check(fx)
        self.clock.now += 1.0
        timers = Effects()
        core.on_timers(timers)
        self.check(timers)

    def check(self, fx: Effects) -> None:
        """Events survive the store encoding and replay; messages decode to themselves."""
        for jobid, ops in fx.ops.items():
            rec = self.replica.get(jobid)
            if rec is not None and jobid in fx.base_seq:
                assert fx.base_seq[jobid] == rec.job.seq
            for op in ops:
                event = op[1]
                stored = decode_entry(event.event_name.encode(), repr(event.timestamp).encode(),
                                      encode_context(event.context()))
                assert stored == event
                if op[0] == "E" and op[2]:
                    orjson.dumps(op[2])
                rec = apply_record(rec, jobid, event, op[2] if op[0] == "E" else None)
            assert rec is not None
            self.replica[jobid] = rec
        for jobid, act in self.core.jobs.items():
            if jobid in self.replica:
                assert act.rec.job == self.replica[jobid].job
        assert proto.decode_entry(proto.SCHED_REQUESTS, proto.encode_entry(fx.sched))[1] \
            == fx.sched
        for rank, msgs in fx.exec.items():
            assert isinstance(rank, int) and rank >= 0
            assert proto.decode_entry(proto.EXEC_REQUESTS, proto.encode_entry(msgs))[1] == msgs
        for key, answer in fx.replies:
            assert isinstance(key, str)
            assert proto.decode_reply(proto.encode_reply(answer)) == answer
        for result, t_inactive in fx.retired.values():
            assert isinstance(result, str) and isinstance(t_inactive, float)
        for progress in fx.progress.values():
            orjson.dumps(progress)


def _deep(depth: int) -> dict[str, Any]:
    """An object nested ``depth`` levels (orjson reads 1024, but writes only 254)."""
    doc: dict[str, Any] = {}
    for _ in range(depth):
        doc = {"a": doc}
    return doc


STEPS = st.lists(st.one_of(
    st.tuples(st.just("sched"), st.one_of(SCHED_MSGS, ALL_MSGS),
              st.one_of(st.integers(0, 2), JSON_INTS)),
    st.tuples(st.just("exec"), st.one_of(EXEC_MSGS, ALL_MSGS), st.just(0)),
    st.tuples(st.just("new"), st.one_of(NEW_MSGS, ALL_MSGS), st.just(0)),
    st.tuples(st.just("ctl"), st.one_of(CTL_MSGS, ALL_MSGS), st.just(0)),
), max_size=12)


@fuzz_settings(2)
@given(STEPS)
@example([("sched", {"t": "alloc-response", "id": 3, "type": 0, "ranks": "0-4294967294"}, 1)])
@example([("ctl", {"t": "lost-ranks", "ranks": "0-4294967294"}, 0)])
@example([("exec", {"t": "exec", "id": 1, "rank": 0, "status": -1, "started": True}, 0),
          ("exec", {"t": "exec", "id": 1, "rank": 1, "status": 2**40, "started": True}, 0)])
@example([("ctl", {"t": "urgency-request", "id": -1, "urgency": 1, "userid": OWNER}, 0)])
@example([("ctl", {"t": "cancel-request", "ids": [1, -1, 2**64 - 1], "userid": OWNER}, 0)])
@example([("new", {"t": "new", "id": 9, "userid": 1, "urgency": 99, "flags": -1,
                   "t_submit": -5, "info": [1]}, 0)])
@example([("exec", {"t": "hello"}, 0), ("new", {"t": "hello"}, 0)])
@example([("sched", {"t": "alloc-response", "id": 3, "type": 1, "annotations": _deep(300)}, 1)])
@example([("exec", {"t": "exec", "id": 1, "rank": 7, "started": True, "status": 0}, 0),
          ("exec", {"t": "exec", "id": 1, "rank": 0, "started": True, "status": 0}, 0)])
def test_job_manager_handlers(steps: list[tuple[str, dict[str, Any], int]]) -> None:
    """Odd but schema-valid messages: no exception, or a MessageError with nothing changed."""
    driver = Driver()
    driver.seed()
    for stream, msg, epoch in steps:
        driver.feed(stream, msg, epoch)


# -- journal entries and stored events ------------------------------------------------

_FIELD_NAMES = st.sampled_from([b"j", b"s", b"n", b"t", b"c", b"x", b"?"])
_FIELD_VALUES = st.one_of(
    st.binary(max_size=20), JSON_INTS.map(lambda n: str(n).encode()),
    st.sampled_from([b"submit", b"alloc", b"clean", b"exception", b"1000.5", b"nan", b"inf",
                     b"-1", b"1e400", b"{}", b'{"status": 0}', b"\xff\xfe", b""]),
    json_values(4).filter(_json_safe).map(orjson.dumps),
)


@st.composite
def field_lists(draw: st.DrawFn) -> list[bytes]:
    """Flat field lists as XRANGE returns them, well-formed or not."""
    if draw(st.booleans()):
        out = [b"j", draw(_FIELD_VALUES), b"s", draw(_FIELD_VALUES), b"n", draw(_FIELD_VALUES),
               b"t", draw(_FIELD_VALUES)]
        for _ in range(draw(st.integers(0, 3))):
            out += [draw(_FIELD_NAMES), draw(_FIELD_VALUES)]
        if draw(st.booleans()) and out:
            del out[draw(st.integers(0, len(out) - 1))]
        return out
    return draw(st.lists(st.one_of(_FIELD_NAMES, _FIELD_VALUES), max_size=12))


@fuzz_settings(2)
@given(st.one_of(st.just(b"1-0"), st.binary(max_size=8)), field_lists(), st.booleans())
@example(b"1-0", [b"j", b"1", b"s", b"0", b"n", b"submit"], True)
@example(b"1-0", [b"j", b"9" * 5000, b"s", b"0", b"n", b"x", b"t", b"1"], True)
def test_journal_entry(stream_id: bytes, fields: list[bytes], as_dict: bool) -> None:
    """journal_entry + event() + extra_dict(): an entry or a clean ValueError."""
    given_fields: Any = dict(zip(fields[::2], fields[1::2], strict=False)) if as_dict else fields
    entry = outcome(journal_entry, stream_id, given_fields)
    if isinstance(entry, ValueError):
        assert isinstance(entry, ev.EventError)
        return
    outcome(entry.event)
    outcome(entry.extra_dict)


@fuzz_settings(2)
@given(_FIELD_VALUES, _FIELD_VALUES, st.one_of(st.none(), _FIELD_VALUES))
@example(b"submit", b"1e400", None)
@example(b"\xff", b"1", b"")
@example(b"memo", b"1", b"[" * 2000)
def test_decode_entry(name: bytes, ts: bytes, ctx: bytes | None) -> None:
    """decode_entry on random stream fields: an event or a clean ValueError."""
    event = outcome(decode_entry, name, ts, ctx)
    if isinstance(event, ev.Event):
        again = decode_entry(event.event_name.encode(), repr(event.timestamp).encode(),
                             encode_context(event.context()))
        assert again == event


_EVENT_NAMES = st.one_of(st.sampled_from(sorted(ev.EVENT_NAMES)), st.just("debug.x"), TEXT)


@fuzz_settings(2)
@given(st.one_of(
    st.fixed_dictionaries({"name": _EVENT_NAMES,
                           "timestamp": st.one_of(FLOATS, JSON_INTS, JSON,
                                                  st.integers(-(2**2000), 2**2000))},
                          optional={"context": st.one_of(json_objects(10).filter(_json_safe), JSON)}),
    json_values(10, big_ints=True, nonfinite=True),
))
@example({"name": "submit", "timestamp": 10**400})
@example({"name": "finish", "timestamp": 1, "context": {"status": 10**400}})
@example({"name": "resource-update", "timestamp": 1, "context": {"expiration": 10**400}})
def test_event_from_rfc18(obj: Any) -> None:
    """events.from_rfc18: an event that round-trips through RFC 18, or a clean EventError."""
    event = outcome(ev.from_rfc18, obj)
    if isinstance(event, ValueError):
        assert isinstance(event, ev.EventError)
        return
    assert ev.from_rfc18(event.to_rfc18()) == event


# -- job records and the job-list read model ------------------------------------------


@st.composite
def records(draw: st.DrawFn) -> JobRecord:
    """A valid record: a random history folded, with random extras."""
    log = draw(histories())
    rec = None
    for event in log:
        rec = apply_record(rec, 7, event)
    assert rec is not None
    return JobRecord(rec.job, draw(st.dictionaries(TEXT, JSON, max_size=3)))


@fuzz_settings()
@given(st.one_of(
    records().map(lambda r: r.to_obj()).flatmap(lambda o: mutated(o, values=JSON)).map(
        to_json_bytes),
    st.binary(max_size=100),
    JSON.map(orjson.dumps),
))
@example(b'{"j": [], "i": "ab"}')
@example(b'{"j": null}')
def test_job_record_from_json(raw: bytes) -> None:
    """JobRecord.from_json: a record, or a clean ValueError.

    The decoder checks the shape, not the type of every field: records are
    written only by fluxes (checkpoints are checksummed too), and replay and
    listing read millions of them. So a record is not re-encoded here.
    """
    rec = outcome(JobRecord.from_json, raw)
    assert isinstance(rec, JobRecord | ValueError)


@fuzz_settings(0.5)
@given(records())
def test_job_record_round_trip(rec: JobRecord) -> None:
    """Valid records survive to_json/from_json exactly."""
    assert JobRecord.from_json(rec.to_json()) == rec


@fuzz_settings(0.5)
@given(st.lists(st.tuples(
    st.sampled_from([1, 2, 3]),
    st.one_of(st.sampled_from(sorted(ev.EVENT_NAMES)), TEXT),
    st.one_of(json_objects(6).filter(_json_safe), st.fixed_dictionaries({}, optional={
        "urgency": st.integers(-1, 32), "userid": USERS, "flags": st.just(0),
        "version": st.just(1), "status": st.integers(-1, 70000), "type": TEXT,
        "severity": st.integers(-1, 8), "note": TEXT, "priority": JSON_INTS,
        "ranks": RANKS_TEXT, "final": st.booleans(), "description": TEXT,
        "annotations": SMALL_JSON})),
    st.one_of(json_objects(4).filter(_json_safe), st.fixed_dictionaries({}, optional={
        "queue": SMALL_JSON, "name": SMALL_JSON, "ntasks": SMALL_JSON,
        "ranks": SMALL_JSON}))), max_size=10))
def test_joblist_fold(entries: list[tuple[int, str, dict[str, Any], dict[str, Any]]]) -> None:
    """The read-model fold: each entry applies or is refused with a clean ValueError."""
    model = ReadModel()
    for jobid, name, ctx, extra in entries:
        event = outcome(ev.decode, name, 1000.0, ctx)
        if isinstance(event, ValueError):
            continue
        done = outcome(model.feed, [(jobid, event, extra)])
        if isinstance(done, ValueError):
            assert isinstance(done, TransitionError | ev.EventError)
    for summary in model.summaries.values():
        counter_keys(summary)
        assert JobRecord.from_json(summary.to_json()).job == summary.job
    assert all(v > 0 for v in model.counters.values())


# -- queue admin events ----------------------------------------------------------------


@fuzz_settings(2)
@given(st.one_of(
    st.fixed_dictionaries({}, optional={
        "kind": st.one_of(st.sampled_from(["enable", "disable", "start", "stop"]), JSON),
        "timestamp": st.one_of(FLOATS, JSON_INTS, JSON, st.integers(-(2**2000), 2**2000),
                               st.sampled_from([math.nan, math.inf])),
        "queue": st.one_of(st.sampled_from(["batch", None]), JSON),
        "reason": st.one_of(TEXT, JSON), "all": st.one_of(st.booleans(), JSON)}),
    json_values(8),
))
@example({"kind": "stop", "timestamp": 10**400})
@example({"kind": "stop", "timestamp": 1, "x" * 5000: 1})
def test_queue_event_from_dict(obj: Any) -> None:
    """QueueEvent.from_dict: an event that round-trips, or a clean PolicyError."""
    event = outcome(QueueEvent.from_dict, obj)
    if isinstance(event, ValueError):
        assert isinstance(event, PolicyError)
    else:
        assert QueueEvent.from_dict(event.to_dict()) == event


# -- submissions (the ingest's pure part) ----------------------------------------------

QUEUE_CONFIG = InstanceConfig.from_toml("""
[policy]
jobspec.defaults.system.duration = "5m"
jobspec.defaults.system.queue = "batch"
[queues.batch]
requires = ["batch"]
[queues.debug]
policy.limits.job-size.max.nnodes = 2
policy.limits.duration = "10m"
[ingest]
max-tasks = 100000
""")
CONFIGS = [InstanceConfig(), QUEUE_CONFIG]
SEED_JOBSPECS = [Jobspec.from_yaml(p.read_text()).to_dict()
                 for p in sorted((DATA / "spec-data" / "rfc25").glob("*.yaml"))]
_SPEC_VALUES = st.one_of(
    JSON, EDGE_INTS, st.sampled_from(["batch", "debug", "nope", "0-4294967294", "1+",
                                      "afterok:1", "/tmp", "x" * 200]),
    st.sampled_from([{"type": "node", "count": 4294967294, "with": []},
                     {"scheme": "afterok", "value": "ƒ1"}]).map(copy.deepcopy),
)


@st.composite
def submission_items(draw: st.DrawFn) -> Any:
    """What a ``jobs`` list of a submit request holds: good, damaged or random items."""
    kind = draw(st.integers(0, 3))
    if kind == 3:
        return draw(JSON)
    spec = draw(mutated(draw(st.sampled_from(SEED_JOBSPECS)), values=_SPEC_VALUES))
    if kind == 2:
        item: dict[str, Any] = {"yaml": json.dumps(spec) if draw(st.booleans())
                                else draw(TEXT)}
    else:
        item = {"jobspec": spec}
    extra = draw(st.fixed_dictionaries({}, optional={
        "urgency": st.one_of(st.integers(-1, 32), JSON), "flags": st.one_of(JSON_INTS, JSON)}))
    return {**item, **extra}


def _huge_totals_jobspec() -> dict[str, Any]:
    n = 4294967294
    return {"version": 1, "resources": [{"type": "node", "count": n, "with": [
        {"type": "socket", "count": n, "with": [
            {"type": "slot", "count": n, "label": "t", "with": [{"type": "core", "count": n}]}]}]}],
        "tasks": [{"command": ["x"], "slot": "t", "count": {"total": 1}}],
        "attributes": {"system": {}}}


@fuzz_settings(2)
@given(submission_items(), st.sampled_from(CONFIGS), st.booleans(), st.booleans())
@example({"jobspec": _huge_totals_jobspec()}, CONFIGS[0], False, False)
def test_prepare_job(item: Any, config: InstanceConfig, owner: bool, stopped: bool) -> None:
    """prepare_job: a job ready to store (JSON-encodable), or a clean JobspecError/PolicyError.

    A prepared job goes into a stream entry and a journal entry as JSON, so
    everything in it must be encodable: otherwise the ingest worker dies on
    a user's request.
    """
    states: dict[str | None, QueueState] | None = None
    if stopped:
        states = {"batch": QueueState(enabled=False, enable_reason="maintenance")}
    result = outcome(prepare_job, item, OWNER if owner else OTHER, "alice", config, states,
                     is_owner=owner)
    if isinstance(result, ValueError):
        assert isinstance(result, JobspecError | PolicyError)
        return
    assert isinstance(result, PreparedJob)
    orjson.dumps(result.info)
    orjson.loads(result.jobspec)
    proto.decode_entry(proto.NEW_JOBS, proto.encode_entry([proto.New(
        id=1, userid=1, urgency=result.urgency, flags=result.flags, t_submit=1.0,
        info=result.info)]))
    submit = ev.Submit(timestamp=1.0, urgency=result.urgency, userid=1, flags=result.flags)
    assert decode_entry(b"submit", b"1.0", encode_context(submit.context())) == submit


@pytest.mark.parametrize("config", CONFIGS)
def test_limits_and_queues_load(config: InstanceConfig) -> None:
    """The configurations the submission fuzzing uses are what they claim."""
    assert isinstance(config.ingest, IngestLimits)
    assert isinstance(config.queues, QueueConfig)


# -- regressions: bugs the fuzzing found ---------------------------------------------


def _running_driver() -> Driver:
    driver = Driver()
    driver.seed()  # job 1 holds ranks 0-1, job 2 rank 2 (started), 3-5 wait for the scheduler
    return driver


def test_huge_allocation_is_refused_whole() -> None:
    """ranks 0-4294967294 made the core loop over every rank (a hang)."""
    driver = _running_driver()
    before = _snapshot(driver.core, Effects())
    for ranks in ("0-4294967294", "", "0-", "x"):
        with pytest.raises(proto.MessageError, match=r"^alloc-response: "):
            driver.core.on_sched(Effects(), 1, typed("sched", {
                "t": "alloc-response", "id": 3, "type": 0, "ranks": ranks}))
    assert _snapshot(driver.core, Effects()) == before


def test_foreign_rank_does_not_count() -> None:
    """A report for a rank the job does not hold must not complete the job's ranks."""
    driver = _running_driver()
    driver.feed("exec", {"t": "exec", "id": 1, "rank": 0, "started": True})
    driver.feed("exec", {"t": "exec", "id": 1, "rank": 7, "started": True})
    assert not driver.core.jobs[1].job.started
    driver.feed("exec", {"t": "exec", "id": 1, "rank": 1, "started": True})
    assert driver.core.jobs[1].job.started


def test_invalid_wait_status_fails_the_job() -> None:
    """A status the finish event cannot hold becomes an exec exception, not a broken job."""
    driver = _running_driver()
    fx = Effects()
    driver.core.on_exec(fx, proto.ExecReport(id=2, rank=2, status=2**40))
    names = [op[1].event_name for op in fx.ops[2]]
    assert names[0] == "exception"
    assert fx.ops[2][0][1].note == "rank 2 reported an invalid wait status"
    assert all(op[1].event_name != "finish" for op in fx.ops[2])


@pytest.mark.parametrize("msg", [
    {"t": "urgency-request", "id": -1, "urgency": 1, "userid": OWNER, "reply": "r"},
    {"t": "cancel-request", "ids": [-1, 2**64 - 1, 2**70], "userid": OWNER, "reply": "r"},
])
def test_replies_for_ids_outside_64_bits(msg: dict[str, Any]) -> None:
    """Formatting the reply for a forged id raised ValueError after the request was half done."""
    driver = _running_driver()
    fx = Effects()
    driver.core.on_ctl(fx, typed("ctl", msg))
    [(key, answer)] = fx.replies
    assert key == "r" and answer.errors
    assert "-1: job is inactive or unknown" in answer.errors


def test_malformed_control_requests_change_nothing() -> None:
    """A negative requester would be written into events that replay refuses: the
    decoder refuses it, and so does the core (for a message built in memory)."""
    driver = _running_driver()
    fx = Effects()
    before = _snapshot(driver.core, fx)
    with pytest.raises(proto.MessageError, match=r"Expected `int` >= 0 - at `\$.m\[0\].userid`"):
        typed("ctl", {"t": "cancel-request", "ids": [1], "userid": -1})
    with pytest.raises(proto.MessageError, match=r"'userid' must be >= 0"):
        driver.core.on_ctl(fx, proto.CancelRequest(ids=[1], userid=-1))
    with pytest.raises(proto.MessageError, match=r"^lost-ranks: "):
        driver.core.on_ctl(fx, typed("ctl", {"t": "lost-ranks", "ranks": "0-"}))
    # a message of another stream's type never reaches a handler
    for stream in ("exec", "new", "ctl"):
        with pytest.raises(proto.MessageError, match=r"Invalid value 'hello' - at `\$.m\[0\].t`"):
            typed(stream, {"t": "hello"})
    assert _snapshot(driver.core, fx) == before


@pytest.mark.parametrize(("fields", "message"), [
    ({"info": [1]}, "jm:new: Expected `object`, got `array` - at `$.m[0].info`"),
    ({"info": {"dependencies": 5}}, "new: 'info' must be an object with a list"),
    ({"urgency": 99}, "new: submit: context.urgency: 99 is out of range 0..31"),
    ({"t_submit": -5}, "new: submit: timestamp must be a finite number >= 0"),
    ({"id": -1}, "job id -1 is out of range"),
])
def test_malformed_new_job_is_refused(fields: dict[str, Any], message: str) -> None:
    core = JobManagerCore(owner_uid=OWNER, clock=Clock())
    msg = {"t": "new", "id": 9, "userid": 1, "urgency": 16, "flags": 0, "t_submit": 1.0,
           **fields}
    with pytest.raises(proto.MessageError) as info:
        core.on_new(Effects(), typed("new", msg))
    assert str(info.value).startswith(message)
    assert core.jobs == {}


def test_deep_annotations_are_refused() -> None:
    """orjson reads 1024 levels but writes 254: the commit would have failed later."""
    driver = _running_driver()
    doc = {"t": "alloc-response", "id": 3, "type": 1, "annotations": _deep(300)}
    with pytest.raises(proto.MessageError, match=r"nested more than 32 levels"):
        proto.decode_entry(proto.SCHED_RESPONSES, {proto.FIELD: json.dumps(
            {"e": 1, "m": [doc]}).encode()})
    # a message built in memory is checked by the core too
    with pytest.raises(proto.MessageError, match=r"nested too deeply"):
        driver.core.on_sched(Effects(), 1, proto.AllocResponse(id=3, type=1,
                                                               annotations=_deep(300)))


def test_journal_entry_missing_field() -> None:
    with pytest.raises(ev.EventError, match=r"^journal entry b'1-0': missing field b't'$"):
        journal_entry(b"1-0", {b"j": b"1", b"s": b"0", b"n": b"submit"})


def test_huge_numbers_in_events_and_queue_events() -> None:
    with pytest.raises(ev.EventError, match=r"^submit: timestamp is too large$"):
        ev.decode("submit", 10**400, {})
    with pytest.raises(ev.EventError, match=r"expected a number >= 0, got a 1329-bit integer"):
        ev.decode("resource-update", 1.0, {"expiration": 10**400})
    with pytest.raises(PolicyError, match=r"^queue event: invalid timestamp"):
        QueueEvent.from_dict({"kind": "stop", "timestamp": 10**400})


def test_jobspec_that_is_not_json_is_a_jobspec_error() -> None:
    with pytest.raises(JobspecError, match=r"^jobspec is not JSON: "):
        prepare_job({"jobspec": {"\ud800": 1}}, OWNER, "owner", CONFIGS[0])
