"""fold_common against the event-by-event fold: equal, or declined, never different."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.job.fastfold import COMMON, fold_common
from fluxes.domain.job.record import JobRecord, apply_record, packed_extra
from fluxes.store.eventstore import journal_entry

JOBID = 1234

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4))
annotation_values = st.recursive(
    json_scalars, lambda inner: st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6)
annotation_dicts = st.dictionaries(st.sampled_from(["sched", "user", "x"]), annotation_values,
                              max_size=3)


def entry(pos: int | None, name: str, ts: float | str, ctx: Any = None,
          extra: Any = None) -> list[bytes]:
    """The flat field list commit.lua writes (journal-only entries have no position)."""
    fields = [b"j", str(JOBID).encode()]
    if pos is not None:
        fields += [b"s", str(pos).encode()]
    fields += [b"n", name.encode(), b"t", str(ts).encode()]
    if ctx is not None:
        fields += [b"c", ctx if isinstance(ctx, bytes) else orjson.dumps(ctx)]
    if extra is not None:
        fields += [b"x", extra if isinstance(extra, bytes) else orjson.dumps(extra)]
    return fields


@st.composite
def common_history(draw: st.DrawFn) -> list[list[bytes]]:
    t = sorted(draw(st.lists(st.floats(1e9, 2e9), min_size=10, max_size=10)))
    ctx: dict[str, Any] = {
        "submit": {"urgency": draw(st.integers(0, 31)), "userid": draw(st.integers(0, 2**32)),
                   "flags": draw(st.integers(0, 7)), "version": 1},
        "priority": {"priority": draw(st.integers(0, 4294967295))},
        "finish": {"status": draw(st.integers(0, 0xFFFF))},
        "release": {"ranks": draw(st.sampled_from(["all", "0", "0-3"])), "final": True},
    }
    alloc_ann = draw(st.none() | annotation_dicts)
    if alloc_ann is not None:
        ctx["alloc"] = {"annotations": alloc_ann}
    summary: dict[str, Any] = {"name": "x", "ntasks": draw(st.integers(1, 9)), "queue": "q"}
    if draw(st.booleans()):  # a summary the journal stores packed (packed_extra)
        summary.update(nnodes=0, ncores=1, ngpus=0, duration=draw(st.sampled_from([0.0, 60.0])))
    extras: dict[str, Any] = {"submit": packed_extra(summary),
                              "alloc": {"ranks": "0", "nodelist": "node0"}}
    out = []
    for pos, name in enumerate(c.decode() for c in COMMON):
        out.append(entry(pos, name, t[pos], ctx.get(name), extras.get(name)))
        if name in ("validate", "priority") and draw(st.booleans()):
            out.append(entry(None, "annotations", t[pos],
                             {"annotations": draw(st.none() | annotation_dicts)}))
    return out


def one_by_one(entries: list[list[bytes]]) -> JobRecord | str:
    """What EventStore._fold gives for these entries of one new job (or the error)."""
    record = None
    try:
        for i, fields in enumerate(entries):
            e = journal_entry(f"{i}-0".encode(), fields)
            if record is not None and e.seq is not None and e.seq < record.job.seq:
                continue
            record = apply_record(record, JOBID, e.event(),
                                  e.extra_dict() if e.extra else None)
    except ValueError as exc:
        return f"error: {exc}"
    assert record is not None
    return record


@settings(max_examples=300)
@given(common_history())
def test_common_histories_fold_in_one_step_to_the_same_record(
        entries: list[list[bytes]]) -> None:
    fast = fold_common(JOBID, entries)
    assert fast is not None
    assert fast == one_by_one(entries)


MUTATIONS = ["drop", "duplicate", "swap", "bad_value", "extra_key", "bad_stamp", "bad_json",
             "late_annotation", "no_context", "not_final", "wrong_position"]


@settings(max_examples=600)
@given(common_history(), st.sampled_from(MUTATIONS), st.data())
def test_other_histories_are_declined_or_fold_the_same(
        entries: list[list[bytes]], mutation: str, data: st.DataObject) -> None:
    entries = [list(e) for e in entries]
    i = data.draw(st.integers(0, len(entries) - 1))
    target = entries[i]
    if mutation == "drop":
        del entries[i]
    elif mutation == "duplicate":
        entries.insert(i, list(target))
    elif mutation == "swap" and i + 1 < len(entries):
        entries[i], entries[i + 1] = entries[i + 1], entries[i]
    elif mutation in ("bad_value", "extra_key", "not_final") and b"c" in target:
        k = target.index(b"c") + 1
        ctx = orjson.loads(target[k])
        key = next(iter(ctx))
        if mutation == "bad_value":
            ctx[key] = data.draw(st.sampled_from([-1, "7", True, None, 2**40, 1.5, [], {}]))
        elif mutation == "extra_key":
            ctx["surprise"] = 1
        elif "final" in ctx:
            ctx["final"] = False
        target[k] = orjson.dumps(ctx)
    elif mutation == "bad_stamp":
        k = target.index(b"t") + 1
        target[k] = data.draw(st.sampled_from([b"-1", b"nan", b"inf", b"x", b""]))
    elif mutation == "bad_json":
        k = (target.index(b"c") if b"c" in target else target.index(b"t")) + 1
        target[k] = b"{not json"
    elif mutation == "late_annotation":
        entries.insert(len(entries) - 1, entry(None, "annotations", 2e9, {"annotations": {}}))
    elif mutation == "no_context" and b"c" in target:
        k = target.index(b"c")
        del target[k:k + 2]
    elif mutation == "wrong_position" and b"s" in target:
        k = target.index(b"s") + 1
        target[k] = str(int(target[k]) + 1).encode()
    fast = fold_common(JOBID, entries)
    if fast is not None:
        assert fast == one_by_one(entries)


def test_an_unfinished_history_is_declined() -> None:
    entries = [entry(pos, name.decode(), 1e9 + pos) for pos, name in enumerate(COMMON[:5])]
    assert fold_common(JOBID, entries) is None
