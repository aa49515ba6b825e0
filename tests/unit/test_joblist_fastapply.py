"""fast_apply against the general fold of journal entries: equal, or declined, never
different; and the common history is folded without the general way."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.job.events import EventError
from fluxes.domain.job.model import TransitionError
from fluxes.domain.job.record import JobRecord, apply_record, packed_extra
from fluxes.domain.joblist.fastapply import fast_apply
from fluxes.store.eventstore import journal_entry

JOBID = 4321
T0 = 1795971203.5973794

Fields = dict[bytes, bytes]


def entry(seq: int | None, name: str, ts: float | str, ctx: Any = None,
          extra: Any = None) -> Fields:
    """A journal entry's fields as a stream read returns them."""
    fields = {b"j": str(JOBID).encode()}
    if seq is not None:
        fields[b"s"] = str(seq).encode()
    fields[b"n"] = name.encode()
    fields[b"t"] = str(ts).encode()
    if ctx is not None:
        fields[b"c"] = ctx if isinstance(ctx, bytes) else orjson.dumps(ctx)
    if extra is not None:
        fields[b"x"] = extra if isinstance(extra, bytes) else orjson.dumps(extra)
    return fields


def common_history(status: int = 0) -> list[Fields]:
    """A job's entries as the bench's jobs write them (annotations while it waits)."""
    return [
        entry(0, "submit", T0, {"urgency": 16, "userid": 0, "flags": 0, "version": 1},
              packed_extra({"name": "true", "ntasks": 1, "nnodes": 0, "ncores": 1,
                            "ngpus": 0, "duration": 0.0})),
        entry(1, "validate", T0),
        entry(2, "depend", T0 + 0.003),
        entry(3, "priority", T0 + 0.0031, {"priority": 16}),
        entry(None, "annotations", T0 + 0.004,
              {"annotations": {"sched": {"reason_pending": "insufficient resources"}}}),
        entry(4, "alloc", T0 + 0.007, {"annotations": {"sched": {"resource_summary": "r0"}}},
              {"ranks": "0", "nodelist": "node0", "ncores": 1, "ngpus": 0}),
        entry(5, "start", T0 + 0.012),
        entry(6, "finish", T0 + 0.012, {"status": status}),
        entry(7, "release", T0 + 0.012, {"ranks": "all", "final": True}),
        entry(8, "free", T0 + 0.014),
        entry(9, "clean", T0 + 0.0141),
    ]


def general(record: JobRecord | None, fields: Fields) -> JobRecord | None:
    """The general fold of one entry; None when it is refused."""
    try:
        e = journal_entry(b"1-0", fields)
        return apply_record(record, e.jobid, e.event(), e.extra_dict())
    except (KeyError, ValueError, EventError, TransitionError):
        return None


def fold_both(entries: list[Fields]) -> tuple[int, int]:
    """Fold ``entries`` both ways, checking every step; (entries fast-folded, refused)."""
    record: JobRecord | None = None
    fast = refused = 0
    for fields in entries:
        slow = general(record, fields)
        # the fold reads the job id first and asks fast_apply only with a plain one
        raw = fields.get(b"j", b"")
        quick = fast_apply(record, int(raw), fields) if raw.isdigit() else None
        if quick is not None:
            fast += 1
            assert slow == quick, fields
        if slow is None:
            refused += 1
        else:
            record = slow
    return fast, refused


def test_the_common_history_is_folded_fast_and_equal() -> None:
    for status in (0, 256, 9):
        history = common_history(status)
        assert fold_both(history) == (len(history), 0)


def test_a_new_job_takes_only_a_submit() -> None:
    _submit, validate, *_ = common_history()
    assert fast_apply(None, JOBID, validate) is None


def test_uncommon_entries_are_left_to_the_general_fold() -> None:
    history = common_history()
    record: JobRecord | None = None
    for fields in history[:4]:
        record = general(record, fields)
    for fields in (entry(4, "urgency", T0, {"urgency": 0, "userid": 0}),
                   entry(4, "exception", T0, {"type": "cancel", "severity": 0, "note": ""}),
                   entry(4, "priority", T0, {"priority": True}),
                   entry(4, "alloc", T0, b"null"),
                   entry(4, "alloc", T0, {"other": 1}),
                   entry(4, "alloc", T0, b"{broken"),
                   entry(4, "alloc", "nan"),
                   entry(4, "alloc", -1.0),
                   entry(4, "alloc", T0, None, b"[1,2"),
                   {**entry(4, "alloc", T0), b"s": b"-4"}):
        assert fast_apply(record, JOBID, fields) is None, fields


# ---------------------------------------------------------------- odd entries

ODD: list[Any] = [None, True, False, -1, 0, 1, 7, 31, 32, 65535, 65536, 2**32, 1.5, "", "all", "0-1",
       {}, [], {"a": None}, {"sched": {"x": 1}}]
ODD_VALUES = st.sampled_from(ODD)
NAMES = ["submit", "validate", "depend", "priority", "alloc", "start", "finish", "release",
         "free", "clean", "annotations", "exception", "urgency", "memo", "dependency-add"]
RAW_CONTEXTS = [b"", b"null", b"[]", b"{", b"{}", b"7", b'{"x":1}']
STAMPS = [b"nan", b"inf", b"-1", b"x", b"0", b"1e3", b" 5", b""]
SEQS = [b"-1", b"x", b"", b"+3", b"12", b"0"]
EXTRAS = [b"{", b"[]", b"{}", b"null", b'{"queue":"q"}', b'["n",1,1,1]', b'{"name":"b"}']


def variants(fields: Fields) -> list[Fields]:
    """``fields`` changed in every way a test here tries, one change each."""
    ctx = orjson.loads(fields[b"c"]) if b"c" in fields else {}
    out = [{**fields, b"c": raw} for raw in RAW_CONTEXTS]
    out += [{**fields, b"c": orjson.dumps({**ctx, key: value})}
            for key in [*ctx, "extra"] for value in ODD]
    out += [{**fields, b"c": orjson.dumps({k: v for k, v in ctx.items() if k != key})}
            for key in ctx]
    out += [{**fields, b"t": stamp} for stamp in STAMPS]
    out += [{**fields, b"s": seq} for seq in SEQS]
    out += [{**fields, b"x": extra} for extra in EXTRAS]
    out += [{**fields, b"n": name.encode()} for name in NAMES]
    out += [{k: v for k, v in fields.items() if k != key} for key in fields]
    return out


def canceled_history() -> list[Fields]:
    """A job canceled while it runs: the shells still finish, in CLEANUP."""
    history = common_history(15)
    cancel = entry(6, "exception", T0 + 0.012, {"type": "cancel", "severity": 0, "note": ""})
    renumbered = [{**f, b"s": str(int(f[b"s"]) + 1).encode()} if b"s" in f else f
                  for f in history[6:]]
    return [*history[:6], cancel, *renumbered]


def dependent_history() -> list[Fields]:
    """A job that waits for a dependency before its ``depend``."""
    history = common_history()
    waits = [entry(2, "dependency-add", T0, {"description": "after"}),
             entry(3, "dependency-remove", T0 + 0.001, {"description": "after"})]
    renumbered = [{**f, b"s": str(int(f[b"s"]) + 2).encode()} if b"s" in f else f
                  for f in history[2:]]
    return [*history[:2], *waits, *renumbered]


def test_every_odd_entry_in_a_common_history_folds_equal() -> None:
    for history in (common_history(0), common_history(256), canceled_history(),
                    dependent_history()):
        for i, fields in enumerate(history):
            fold_both([*history[:i], *history[i + 1:]])  # one missing
            fold_both([*history, fields])  # one again, at the end
            for odd in variants(fields):
                fold_both([*history[:i], odd, *history[i + 1:]])
                fold_both([*history[:i], odd, *history[i:]])  # an extra entry
                fold_both([*history, odd])


# ---------------------------------------------------------------- random histories


@st.composite
def mutated(draw: st.DrawFn, fields: Fields) -> Fields:
    """``fields`` with one thing changed (or none)."""
    out = dict(fields)
    what = draw(st.sampled_from(["keep", "keep", "ctx-key", "ctx-value", "ctx-raw", "ts",
                                 "seq", "extra", "name", "drop-field"]))
    ctx = orjson.loads(out[b"c"]) if b"c" in out else {}
    if what == "ctx-key" and ctx:
        ctx.pop(draw(st.sampled_from(sorted(ctx))))
        out[b"c"] = orjson.dumps(ctx)
    elif what == "ctx-key":
        out[b"c"] = orjson.dumps({draw(st.sampled_from(["annotations", "x", "status"])):
                                  draw(ODD_VALUES)})
    elif what == "ctx-value":
        key = draw(st.sampled_from([*sorted(ctx), "extra"]))
        ctx[key] = draw(ODD_VALUES)
        out[b"c"] = orjson.dumps(ctx)
    elif what == "ctx-raw":
        out[b"c"] = draw(st.sampled_from(RAW_CONTEXTS))
    elif what == "ts":
        out[b"t"] = draw(st.sampled_from(STAMPS))
    elif what == "seq":
        out[b"s"] = draw(st.sampled_from(SEQS))
    elif what == "extra":
        out[b"x"] = draw(st.sampled_from(EXTRAS))
    elif what == "name":
        out[b"n"] = draw(st.sampled_from(NAMES)).encode()
    elif what == "drop-field":
        out.pop(draw(st.sampled_from(sorted(out))))
    return out


@st.composite
def histories(draw: st.DrawFn) -> list[Fields]:
    """The common history reordered, cut, repeated and mutated."""
    base = common_history(draw(st.sampled_from([0, 256, 15])))
    picks = draw(st.lists(st.integers(0, len(base) - 1), max_size=16))
    order = list(range(len(base))) if draw(st.booleans()) else picks
    if draw(st.booleans()):
        order = sorted(order + picks)
    return [draw(mutated(base[i])) for i in order]


@settings(max_examples=400, deadline=None)
@given(histories())
def test_random_histories_fold_equal(history: list[Fields]) -> None:
    fold_both(history)


def test_kept_contexts_and_facts_never_mix_jobs_up() -> None:
    """Contexts and facts are kept by their bytes and merged facts by the info they
    were merged into: infos made and dropped by the thousand, and the same bytes in
    many jobs, each fold as the general fold does."""
    from fluxes.domain.joblist import fastapply

    history = common_history()
    record: JobRecord | None = None
    for fields in history[:5]:
        record = general(record, fields)
    assert record is not None
    alloc = {**history[5], b"x": b'{"ranks":"0"}'}
    for i in range(3 * fastapply.KEPT):
        # a new info each time, made where the one dropped last was (Python's free list)
        info = {**record.info, "name": f"j{i}"}
        fast = fast_apply(JobRecord(record.job, info), JOBID, alloc)
        slow = general(JobRecord(record.job, info), alloc)
        assert fast is not None and fast == slow
        del fast, slow
        del info
    for i in range(3 * fastapply.KEPT):
        submit, *rest = common_history(i % 3)
        submit = {**submit, b"x": packed_extra({"name": f"j{i % 11}", "ntasks": 1,
                                                "nnodes": 0, "ncores": 1, "ngpus": 0,
                                                "duration": float(i % 13)})}
        fold_both([submit, *rest])
