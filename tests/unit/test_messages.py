"""The typed messages (fluxes/messages): every type round-trips on its stream, every malformed
variant is refused with a one-line MessageError, and the bounds hold before any parser runs."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fluxes import messages as proto
from fluxes.messages.bounds import MessageError, check_bounds, nesting_depth
from workers.base import payload_prefix

#: A valid message of every type, per stream.
SAMPLES: dict[str, list[proto.Message]] = {
    "SCHED_REQUESTS": [
        proto.HelloReply(alloc=[proto.HeldJob(id=1, priority=2, userid=3, ranks="0-1"),
                                proto.HeldJob(id=2),
                                proto.HeldJob(id=3, expiration=1800000000.5)]),
        proto.Alloc(id=1, priority=16, userid=1000, t_submit=1.5, queue="batch"),
        proto.Cancel(id=1), proto.Prioritize(jobs=[(1, 2), (3, 4)]), proto.Free(id=1),
        proto.Reset(), proto.Expiration(id=1, expiration=1800000000.5)],
    "SCHED_RESPONSES": [
        proto.Hello(), proto.Ready(mode="limited", limit=3),
        proto.AllocResponse(id=1, type=proto.ALLOC_SUCCESS, annotations={"sched": {"a": [1]}},
                            ranks="0", nodelist="n0"),
        proto.AllocResponse(id=1, type=proto.ALLOC_DENY, note="no"),
        proto.FreeResponse(id=1), proto.SchedError(note="gone", id=5)],
    "EXEC_REQUESTS": [proto.Start(id=1, ranks="0-3"), proto.Kill(id=1, signal=15),
                      proto.Signal(id=1, signal=10)],
    "EXEC_EVENTS": [proto.ExecReport(id=1, rank=0, started=True, status=256, released=True,
                                     error="x")],
    "NEW_JOBS": [proto.New(id=2**64 - 1, userid=1000, urgency=16, flags=0, t_submit=1.5,
                           info={"name": "a", "dependencies": [{"scheme": "afterok"}]})],
    "CONTROL": [
        proto.CancelRequest(ids=[1, 2], userid=1000, note="n", reply="k"),
        proto.RaiseRequest(ids=[1], userid=0, type="t", severity=7, note="n", reply="k"),
        proto.UrgencyRequest(id=1, urgency=3, userid=1000, reply="k"),
        proto.QueuesChanged(stopped=["batch"]), proto.LostRanks(ranks="0-7"),
        proto.SignalRequest(ids=[1, 2], userid=1000, signal=10, reply="k"),
        proto.KillAllRequest(userid=1000, target=-1, signal=12, dry_run=True, reply="k"),
        proto.UpdateRequest(id=1, userid=1000, updates={"attributes.system.duration": 60.0},
                            base={"attributes.system.job.name": "a"}, base_expiration=5.0,
                            request="r", immutable=True, reply="k")],
}
REQUESTS: list[proto.Request] = [
    proto.SubmitJobs(req="r", jobs=[proto.SubmitItem(jobspec={"version": 1}, urgency=3,
                                                     flags=1), proto.SubmitItem(yaml="x")]),
    proto.CancelJobs(req="r", ids=[1], note="n"), proto.SetUrgency(req="r", id=1, urgency=2),
    proto.RaiseOnJobs(req="r", ids=[1, 2], type="t", severity=3, note="n"),
    proto.SignalJobs(req="r", ids=[1], signal=10),
    proto.KillAll(req="r", signal=9, user=1000, all_users=False, dry_run=True),
    proto.UpdateJob(req="r", id=1, updates={"duration": "+1h", "name": "x"}, dry_run=True)]
CASES = [(name, msg) for name, msgs in SAMPLES.items() for msg in msgs]


def _raw(*msgs: Any, epoch: Any = 0) -> dict[bytes, bytes]:
    return {proto.FIELD: json.dumps({"e": epoch, "m": list(msgs)}).encode()}


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and len(text.splitlines()) == 1 and len(text) <= 1000, text
    return text


@pytest.mark.parametrize(("channel", "msg"), CASES, ids=[f"{c}-{type(m).__name__}"
                                                         for c, m in CASES])
def test_every_message_round_trips(channel: str, msg: proto.Message) -> None:
    chan = getattr(proto, channel)
    epoch, [back] = proto.decode_entry(chan, proto.encode_entry([msg], epoch=7))
    assert (epoch, back) == (7, msg)
    # a test's or tool's dict becomes the same message
    assert proto.convert(chan, proto.to_builtins(msg)) == msg


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_round_trips(request_: proto.Request) -> None:
    # as Redis hands it back: field names are bytes
    assert proto.decode_request({b"d": proto.encode_request(request_)["d"]}) == request_


def test_replies_and_resource_events_round_trip() -> None:
    for reply in (proto.Reply(jobs=[proto.JobResult(id=1), proto.JobResult(error="e")]),
                  proto.Reply(ok=[1], errors=["x"], old=3), proto.Reply(errors=[]),
                  proto.Reply(ok=[1], updates={"attributes.system.duration": 1.0})):
        assert proto.decode_reply(proto.encode_reply(reply)) == reply
    for event in (proto.Drain(ranks="0", reason="r", auto=True, timestamp=1.0),
                  proto.Undrain(ranks="1-2")):
        assert proto.decode_resource_event({b"d": msgspec.json.encode(event)}) == event


def test_wire_format_is_the_documented_one() -> None:
    entry = proto.encode_entry([proto.Alloc(id=1, priority=2, userid=3)], epoch=4)
    assert entry == {b"d": b'{"e":4,"m":[{"t":"alloc","id":1,"priority":2,"userid":3}]}'}
    assert proto.encode_reply(proto.Reply(jobs=[proto.JobResult(id=5)])) == \
        b'{"jobs":[{"id":5}]}'


def _wrong(value: Any) -> list[Any]:
    """Values of other JSON types than ``value``."""
    others: list[Any] = [[[[1]]], "text", {"a": 1}, 1.5, True]
    if isinstance(value, bool):
        return [v for v in others if not isinstance(v, bool)]
    if isinstance(value, int | float):
        return [[[[1]]], "text", {"a": 1}, True]
    if isinstance(value, str):
        return [[[[1]]], 5, {"a": 1}, True]
    if isinstance(value, list):
        return ["text", 5, {"a": 1}]
    return [[[[1]]], "text", 5]


def _variants() -> list[tuple[str, dict[str, Any], str]]:
    out = []
    for channel, msg in CASES:
        doc = proto.to_builtins(msg)
        for key, value in doc.items():
            out += [(channel, {**doc, key: bad}, key) for bad in _wrong(value)]
        for field in msgspec.structs.fields(type(msg)):
            if field.required:
                out.append((channel, {k: v for k, v in doc.items() if k != field.encode_name},
                            field.encode_name))
    return out


VARIANTS = _variants()


@pytest.mark.parametrize(("channel", "doc", "key"), VARIANTS,
                         ids=[f"{c}-{d.get('t')}-{k}-{i}" for i, (c, d, k) in enumerate(VARIANTS)])
def test_every_malformed_field_is_refused(channel: str, doc: dict[str, Any], key: str) -> None:
    with pytest.raises(MessageError) as info:
        proto.decode_entry(getattr(proto, channel), _raw(doc))
    text = _one_line(info.value)
    assert text.startswith(getattr(proto, channel).name + ": ")
    assert "$.m[0]" in text


@pytest.mark.parametrize("doc", [{"t": "submit", "req": "r", "jobs": [{"urgency": "x"}]},
                                 {"t": "submit", "req": 5}, {"t": "submit"},
                                 {"t": "cancel", "req": "r", "ids": [[1]]},
                                 {"t": "urgency", "req": "r", "id": 1},
                                 {"t": "raise", "req": "r", "ids": [1], "severity": "7"},
                                 {"t": [1], "req": "r"}, {"t": "melt", "req": "r"}, [1]])
def test_malformed_requests_are_refused(doc: Any) -> None:
    with pytest.raises(MessageError) as info:
        proto.decode_request({b"d": orjson.dumps(doc)})
    assert _one_line(info.value).startswith("request: ")


def test_request_id_of_a_refused_request() -> None:
    assert proto.request_id({b"d": b'{"t": "melt", "req": "r9"}'}) == "r9"
    assert proto.request_id({b"d": b'{"t": "melt"}'}) is None
    assert proto.request_id({b"d": b'{"req": ' + b"[" * 100 + b"]" * 100 + b"}"}) is None


@pytest.mark.parametrize("entry", [
    b'{"t": "expiration", "id": 1, "expiration": 0}',
    b'{"t": "expiration", "id": 1, "expiration": -5.0}',
    b'{"t": "expiration", "id": 1, "expiration": 1e400}',
    b'{"t": "expiration", "id": 1}',
    b'{"t": "hello-reply", "alloc": [{"id": 1, "expiration": 0}]}'])
def test_an_expiration_must_be_a_finite_time_after_the_epoch(entry: bytes) -> None:
    with pytest.raises(MessageError):
        proto.decode_entry(proto.SCHED_REQUESTS, {b"d": b'{"e": 0, "m": [' + entry + b"]}"})


@pytest.mark.parametrize(("fields", "reason"), [
    ({b"x": b"1"}, "sched:req: entry has no 'd' field"),
    ({b"d": b"{not json"}, "sched:req: not JSON: "),
    ({b"d": b"\xff\xfe"}, "sched:req: not JSON: "),
    ({b"d": b"[1, 2]"}, "sched:req: Expected `object`, got `array`"),
    ({b"d": b'{"e": 0}'}, "sched:req: Object missing required field `m`"),
    ({b"d": b'{"e": true, "m": []}'}, "sched:req: Expected `int`, got `bool` - at `$.e`"),
    ({b"d": b'{"e": 0, "m": [{"t": "hello"}]}'}, "sched:req: Invalid value 'hello'"),
    ({b"d": b'{"e": 0, "m": [{"id": 1}]}'}, "sched:req: Object missing required field `t`"),
    ({b"d": b'{"e": 0, "m": [{"t": ' + b"[" * 1000 + b"]" * 1000 + b"}]}"},
     "sched:req: entry is nested more than 32 levels deep"),
    ({b"d": b"[" * 100_000}, "sched:req: not JSON: unbalanced brackets"),
    ({b"d": b'["' + b"[" * 100 + b"]"}, "sched:req: not JSON: unterminated string"),
    ({b"d": b'{"e": 0, "m": [{"t": "' + b"x" * 100_000 + b'"}]}'}, "sched:req: Invalid value"),
])
def test_malformed_entries(fields: dict[bytes, bytes], reason: str) -> None:
    with pytest.raises(MessageError) as info:
        proto.decode_entry(proto.SCHED_REQUESTS, fields)
    assert _one_line(info.value).startswith(reason)


def test_oversized_entry_is_refused_before_parsing() -> None:
    small = proto.Channel("s", 100, 32, proto.SCHED_REQUESTS.decoder)
    with pytest.raises(MessageError, match=r"^s: entry is 101 bytes, the limit is 100$"):
        small.decode(b" " * 101)


def test_free_form_parts_are_bounded_too() -> None:
    """Annotations may nest, but not past the stream's bound (orjson writes 254 at most)."""
    def ann(depth: int) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for _ in range(depth - 1):
            doc = {"a": doc}
        return doc

    # the envelope, the message and the annotations object: 3 levels
    ok = {"t": "alloc-response", "id": 1, "type": 1, "annotations": ann(29)}
    proto.decode_entry(proto.SCHED_RESPONSES, _raw(ok))
    with pytest.raises(MessageError, match="nested more than 32"):
        proto.decode_entry(proto.SCHED_RESPONSES, _raw({**ok, "annotations": ann(30)}))


def test_jobspec_depth_agrees_with_the_jobspec_module() -> None:
    from fluxes.formats import jobspec

    assert proto.JOBSPEC_DEPTH == jobspec.MAX_DEPTH


def test_encode_chunks_keep_entries_within_the_bound() -> None:
    msgs = [proto.Start(id=i, ranks="0" * 50) for i in range(100)]
    entries = proto.encode_chunks(msgs, 3, 30, 1000)
    assert all(len(e[proto.FIELD]) <= 1000 for e in entries)
    back = [m for e in entries for m in proto.decode_entry(proto.EXEC_REQUESTS, e)[1]]
    assert back == msgs
    # one message larger than the bound still goes, alone (the reader refuses it loudly)
    assert len(proto.encode_chunks([proto.Start(id=1, ranks="0" * 2000)], 0, 30, 1000)) == 1


def test_queue_events_are_bounded() -> None:
    assert proto.load_queue_event({b"d": b'{"kind": "stop", "timestamp": 1}'})["kind"] == "stop"
    with pytest.raises(MessageError, match="nested more than 4"):
        proto.load_queue_event({b"d": b'{"kind": ' + b"[" * 10 + b"]" * 10 + b"}"})


def test_dead_letter_payload_is_a_bounded_prefix() -> None:
    big = {b"d": b"x" * 10_000_000, b"e": b"y" * 10}
    doc = orjson.loads(payload_prefix(big))
    assert doc["d"] == "x" * 4096 + "...[10000000 bytes]"
    assert doc["e"] == "...[10 bytes]"  # nothing of the budget left
    assert orjson.loads(payload_prefix({b"d": b"{not json"})) == {"d": "{not json"}


# -- the depth scan against a recursive count ---------------------------------------------------


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


TRICKY = st.sampled_from(['[', ']', '{', '}', '"', '\\', '\\"', '\\\\', '"[', '\\\\"{', 'é',
                          '\u2028', '[]', '{"a": [', ''])
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.lists(TRICKY, max_size=6).map("".join)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.lists(TRICKY, max_size=3).map("".join), inner,
                                            max_size=4)),
    max_leaves=60)


@given(VALUES, st.integers(0, 12))
@example(["[[[[", {"\\\"[[": [[["\\\\"]]]}], 3)
def test_nesting_depth_is_exact(value: Any, bound: int) -> None:
    raw = json.dumps(value, ensure_ascii=False).encode()
    depth = nesting_depth(raw, bound)
    real = _depth(value)
    if depth > bound:
        assert depth == bound + 1 and real > bound
    else:
        # exact, or 0 for a text with too few brackets to nest past the bound
        assert real <= bound and depth in (real, 0)
        if raw.count(b"[") + raw.count(b"{") > bound:
            assert depth == real


@given(st.binary(max_size=200), st.integers(0, 8))
def test_nesting_depth_on_garbage_is_a_clean_error_or_a_bound(raw: bytes, bound: int) -> None:
    try:
        depth = nesting_depth(raw, bound)
    except MessageError as exc:
        _one_line(exc)
        return
    assert 0 <= depth <= bound + 1
    if depth <= bound:
        # whatever a parser makes of it, it never nests deeper than the bound
        try:
            value = json.loads(raw)
        except ValueError:
            return
        assert _depth(value) <= max(bound, len(raw))


def test_check_bounds_names_the_stream() -> None:
    with pytest.raises(MessageError, match=r"^x: not JSON: unbalanced brackets$"):
        check_bounds(b"[" * 40, 1000, 32, "x")


def test_a_stamped_entry_carries_its_send_time_and_an_unstamped_one_reads_as_zero() -> None:
    msgs = [proto.Free(id=5)]
    stamped = proto.encode_entry(msgs, epoch=3, sent=1764000000.25)
    assert proto.decode_entry_sent(proto.SCHED_REQUESTS, stamped) == (3, msgs, 1764000000.25)
    assert proto.decode_entry(proto.SCHED_REQUESTS, stamped) == (3, msgs)
    assert proto.decode_entry_sent(proto.SCHED_REQUESTS, proto.encode_entry(msgs, 3)) == (
        3, msgs, 0.0)
    [chunk] = proto.encode_chunks(msgs, 3, 10, 1000, sent=2.5)
    assert proto.decode_entry_sent(proto.SCHED_REQUESTS, chunk)[2] == 2.5
    with pytest.raises(proto.MessageError, match="Expected `float`"):
        proto.decode_entry_sent(proto.SCHED_REQUESTS, {b"d": b'{"e":0,"m":[],"s":"soon"}'})
