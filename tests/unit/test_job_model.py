"""RFC 21 state machine: every transition, every refusal, and replay properties."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, TransitionError, apply, merge_annotations, replay
from fluxes.domain.job.states import JobResult, JobState, parse_states
from tests.strategies import histories

T = 1000.0


def e(name: str, **ctx: object) -> ev.Event:
    return ev.decode(name, T, ctx)


SUBMIT = e("submit", urgency=16, userid=1000, flags=0, version=1)


def run(*names_or_events: ev.Event | str) -> Job:
    job = Job(42)
    for item in names_or_events:
        job = apply(e(item) if isinstance(item, str) else item, job)
    return job


HAPPY: list[ev.Event | str] = [SUBMIT, "validate", "depend", e("priority", priority=100), "alloc", "start",
         e("finish", status=0), e("release", ranks="all", final=True), "free", "clean"]


def test_happy_path_states_in_order() -> None:
    job = Job(42)
    seen = []
    for item in HAPPY:
        job = apply(e(item) if isinstance(item, str) else item, job)
        seen.append(job.state)
    assert seen == [JobState.NEW, JobState.DEPEND, JobState.PRIORITY, JobState.SCHED,
                    JobState.RUN, JobState.RUN, JobState.CLEANUP, JobState.CLEANUP,
                    JobState.CLEANUP, JobState.INACTIVE]
    assert job.result == JobResult.COMPLETED
    assert job.exit_code == 0
    assert job.seq == len(HAPPY)
    assert not job.has_resources


def test_jobs_stamped_alike_share_their_timestamps_and_user_id() -> None:
    """Issue 26: pending jobs submitted together keep one float per timestamp and one user
    id between them, decoded apart as they are (the values, of course, are unchanged)."""
    def pending(jobid: int) -> Job:
        raw = orjson.dumps([{"timestamp": 1764400000.25 + i, "name": name, "context": ctx}
                            for i, (name, ctx) in enumerate([
                                ("submit", {"urgency": 16, "userid": 51234, "flags": 0,
                                            "version": 1}),
                                ("validate", {}), ("depend", {}),
                                ("priority", {"priority": 123456})])])
        return replay(jobid, (ev.decode(e["name"], e["timestamp"], e["context"])
                              for e in orjson.loads(raw)))
    a, b = pending(1), pending(2)
    assert a.state is b.state is JobState.SCHED
    for field in ("userid", "priority", "t_submit", "t_depend", "t_priority", "t_sched"):
        assert getattr(a, field) is getattr(b, field), field
    assert (a.userid, a.priority, a.t_submit, a.t_sched) == (51234, 123456, 1764400000.25,
                                                             1764400003.25)


def test_virtual_states() -> None:
    assert JobState.SCHED & JobState.PENDING
    assert JobState.CLEANUP & JobState.RUNNING
    assert not JobState.INACTIVE & JobState.ACTIVE
    assert not JobState.NEW & JobState.ACTIVE
    assert parse_states("pending,run") == JobState.PENDING | JobState.RUN
    assert parse_states("completed") == JobResult.COMPLETED
    with pytest.raises(ValueError, match="unknown job state"):
        parse_states("bogus")


@pytest.mark.parametrize(
    ("history", "bad"),
    [
        ([], "validate"),  # before submit
        ([SUBMIT], SUBMIT),  # submit twice
        ([SUBMIT], "depend"),  # NEW -> PRIORITY skipped
        ([SUBMIT, "validate"], "alloc"),
        ([SUBMIT, "validate"], e("priority", priority=1)),
        ([SUBMIT, "validate", "depend"], "start"),
        ([SUBMIT, "validate", "depend", e("priority", priority=1)], "free"),
        ([SUBMIT, "validate", "depend", e("priority", priority=1), "alloc"], "alloc"),
        ([SUBMIT, "validate", "depend", e("priority", priority=1), "alloc"],
         e("finish", status=0)),  # finish before start
        ([SUBMIT, "validate", "depend", e("priority", priority=1), "alloc", "start"], "start"),
        ([SUBMIT, "validate", "depend", e("priority", priority=1), "alloc", "start"], "clean"),
        (HAPPY[:-2], "clean"),  # still holds resources
        (HAPPY, e("exception", type="cancel", severity=0, note="")),
        (HAPPY, e("memo", a=1)),
        ([SUBMIT, "validate", e("dependency-add", description="x")], "depend"),
        ([SUBMIT, "validate"], e("dependency-remove", description="nope")),
        ([SUBMIT], e("exception", type="x", severity=0, note="")),
        ([SUBMIT, "validate", "depend", e("priority", priority=1), "alloc", "start"],
         e("urgency", urgency=3, userid=1)),
    ],
)
def test_refused_events_raise_and_change_nothing(history: list[ev.Event | str],
                                                 bad: ev.Event | str) -> None:
    job = run(*history)
    before = job
    with pytest.raises(TransitionError, match="job 42: event"):
        apply(e(bad) if isinstance(bad, str) else bad, job)
    assert job == before


def test_dependencies_hold_in_depend() -> None:
    job = run(SUBMIT, e("dependency-add", description="afterok=1"), "validate",
              e("dependency-add", description="begin-time=5"))
    assert job.dependencies == {"afterok=1", "begin-time=5"}
    job = apply(e("dependency-remove", description="afterok=1"), job)
    with pytest.raises(TransitionError, match="outstanding"):
        apply(e("depend"), job)
    job = apply(e("dependency-remove", description="begin-time=5"), job)
    job = apply(e("depend"), job)
    assert job.state == JobState.PRIORITY


@pytest.mark.parametrize("name", ["urgency", "flux-restart", "jobspec-update"])
def test_sched_back_to_priority(name: str) -> None:
    job = run(SUBMIT, "validate", "depend", e("priority", priority=7))
    assert job.state == JobState.SCHED
    ctx: dict[str, object] = dict({
        "urgency": {"urgency": 0, "userid": 1},
        "flux-restart": {},
        "jobspec-update": {"attributes.system.duration": 60},
    }[name])
    job = apply(ev.decode(name, T, ctx), job)
    assert job.state == JobState.PRIORITY
    job = apply(e("priority", priority=0), job)
    assert job.state == JobState.SCHED and job.priority == 0


def test_priority_change_in_sched_stays() -> None:
    job = run(SUBMIT, "validate", "depend", e("priority", priority=7), e("priority", priority=9))
    assert job.state == JobState.SCHED and job.priority == 9


def test_fatal_exception_moves_to_cleanup_first_is_root_cause() -> None:
    job = run(SUBMIT, "validate", "depend", e("priority", priority=7))
    job = apply(e("exception", type="cancel", severity=0, note="by user"), job)
    assert job.state == JobState.CLEANUP
    job = apply(e("exception", type="timelimit", severity=0, note="late"), job)
    assert job.fatal is not None and job.fatal.type == "cancel"
    assert job.exceptions == 2
    assert job.can_clean
    job = apply(e("clean"), job)
    assert job.result == JobResult.CANCELED


def test_nonfatal_exception_changes_nothing_but_count() -> None:
    job = run(SUBMIT, "validate")
    after = apply(e("exception", type="warn", severity=3, note="hm"), job)
    assert after.state == JobState.DEPEND and after.fatal is None and after.exceptions == 1


@pytest.mark.parametrize("state_events", [
    [SUBMIT, "validate"],
    [SUBMIT, "validate", "depend"],
    [SUBMIT, "validate", "depend", e("priority", priority=1)],
    [SUBMIT, "validate", "depend", e("priority", priority=1), "alloc"],
    [SUBMIT, "validate", "depend", e("priority", priority=1), "alloc", "start"],
])
def test_fatal_exception_from_every_active_state(state_events: list[ev.Event | str]) -> None:
    job = run(*state_events, e("exception", type="timelimit", severity=0, note=""))
    assert job.state == JobState.CLEANUP


def test_timeout_and_failed_results_and_exit_codes() -> None:
    base: list[ev.Event | str] = [SUBMIT, "validate", "depend", e("priority", priority=1),
                                  "alloc", "start"]
    job = run(*base, e("exception", type="timelimit", severity=0, note=""),
              e("finish", status=15), e("release", ranks="all", final=True), "free", "clean")
    assert job.result == JobResult.TIMEOUT and job.exit_code == 128 + 15
    job = run(*base, e("finish", status=3 << 8), e("release", ranks="all", final=True),
              "free", "clean")
    assert job.result == JobResult.FAILED and job.exit_code == 3


def test_alloc_after_cancel_is_held_and_must_be_freed() -> None:
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1),
              e("exception", type="cancel", severity=0, note=""))
    assert not job.free_owed
    job = apply(e("alloc"), job)
    assert job.state == JobState.CLEANUP and job.free_owed and job.can_free
    with pytest.raises(TransitionError):
        apply(e("clean"), job)
    job = apply(e("clean"), apply(e("free"), job))
    assert job.state == JobState.INACTIVE


def test_prolog_and_epilog_holds() -> None:
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1), "alloc",
              e("prolog-start", description="p"))
    assert not job.can_start
    with pytest.raises(TransitionError, match="prolog"):
        apply(e("start"), job)
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1), "alloc",
                e("prolog-start", description="p"), e("prolog-finish", description="p", status=0),
                "start", e("finish", status=0), e("release", ranks="all", final=True),
                e("epilog-start", description="q"))
    assert job.free_owed and not job.can_free
    with pytest.raises(TransitionError, match="epilog"):
        apply(e("free"), job)
    job = apply(e("epilog-finish", description="q", status=0), job)
    assert job.can_free


def test_annotations_merge_and_alloc_snapshot() -> None:
    assert merge_annotations({"sched": {"a": 1, "b": 2}}, {"sched": {"a": None, "c": 3}}) == {
        "sched": {"b": 2, "c": 3}}
    assert merge_annotations({"sched": {"a": 1}}, {"sched": {"a": None}}) is None
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1))
    job = apply(ev.decode("annotations", T, {"annotations": {"sched": {"reason_pending": "x"}}}),
                job)
    seq = job.seq
    assert job.annotations == {"sched": {"reason_pending": "x"}}
    assert job.seq == seq  # journal-only, not an eventlog event
    job = apply(e("alloc", annotations={"sched": {"resource_summary": "rank0/core0"}}), job)
    assert job.annotations == {"sched": {"resource_summary": "rank0/core0"}}


@pytest.mark.parametrize(("old", "new", "merged"), [
    # a new key: its nulls are dropped, at every depth (RFC 27: null removes a key)
    (None, {"sched": {"resource_summary": "x", "reason_pending": None}},
     {"sched": {"resource_summary": "x"}}),
    (None, {"sched": {"reason_pending": None, "t_estimate": None}}, None),
    (None, {"a": None}, None),
    (None, {"user": {"x": {"y": None, "z": 1}, "w": {"v": None}}}, {"user": {"x": {"z": 1}}}),
    ({"sched": {"queue": "q"}}, {"user": {"n": None}}, {"sched": {"queue": "q"}}),
    # an existing key that is not an object is replaced by the object, without its nulls
    ({"sched": "s"}, {"sched": {"a": 1, "b": None}}, {"sched": {"a": 1}}),
    ({"sched": "s"}, {"sched": {"b": None}}, None),
    # existing objects: merged recursively, null removes, an emptied object goes too
    ({"sched": {"a": 1, "b": 2}}, {"sched": {"a": None, "c": 3}}, {"sched": {"b": 2, "c": 3}}),
    ({"sched": {"a": 1}, "user": {"u": 1}}, {"sched": {"a": None}}, {"user": {"u": 1}}),
    ({"sched": {"a": {"b": 1}}}, {"sched": {"a": {"b": None, "c": None}}}, None),
    # other values replace, lists and all
    ({"sched": {"a": 1}}, {"sched": {"a": [1, None]}}, {"sched": {"a": [1, None]}}),
    ({"sched": {"a": {"b": 1}}}, {"sched": {"a": 5}}, {"sched": {"a": 5}}),
    ({"sched": {"a": 1}}, None, None),
])
def test_annotations_merge_drops_nulls_everywhere(
        old: dict[str, object] | None, new: dict[str, object] | None,
        merged: dict[str, object] | None) -> None:
    assert merge_annotations(old, new) == merged


def test_alloc_snapshot_keeps_no_nulls() -> None:
    # an eventlog written before nulls were dropped still gives a clean record
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1),
              e("alloc", annotations={"sched": {"resource_summary": "r", "t_estimate": None,
                                                "reason_pending": None}}))
    assert job.annotations == {"sched": {"resource_summary": "r"}}
    job = run(SUBMIT, "validate", "depend", e("priority", priority=1),
              e("alloc", annotations={"sched": {"t_estimate": None}}))
    assert job.annotations is None


def test_memo_merge() -> None:
    job = run(SUBMIT, e("memo", a=1, b=2), e("memo", a=None, c=3))
    assert job.memo == {"b": 2, "c": 3}


def test_unknown_and_debug_events_kept_and_ignored() -> None:
    unknown = ev.decode("future-thing", T, {"x": 1})
    assert isinstance(unknown, ev.UnknownEvent)
    assert unknown.to_rfc18() == {"timestamp": T, "name": "future-thing", "context": {"x": 1}}
    debug = ev.decode("debug.free-request", T)
    job = run(SUBMIT, "validate")
    for item in (unknown, debug):
        after = apply(item, job)
        assert after.state == job.state and after.seq == job.seq + 1


@pytest.mark.parametrize(("name", "ctx", "fragment"), [
    ("submit", {"urgency": 40, "userid": 1, "flags": 0, "version": 1}, "urgency"),
    ("submit", {"userid": 1, "flags": 0, "version": 1}, "urgency"),
    ("submit", {"urgency": True, "userid": 1, "flags": 0, "version": 1}, "urgency"),
    ("priority", {"priority": -1}, "priority"),
    ("priority", {"priority": 2**32}, "priority"),
    ("exception", {"type": "x", "severity": 9, "note": ""}, "severity"),
    ("exception", {"severity": 0, "note": ""}, "type"),
    ("finish", {}, "status"),
    ("release", {"ranks": "all"}, "final"),
    ("dependency-add", {}, "description"),
    ("jobspec-update", {"duration": 5}, "attributes."),
    ("jobspec-update", {}, "at least one"),
    ("set-flags", {"flags": "debug"}, "flags"),
    ("alloc", {"annotations": [1]}, "annotations"),
])
def test_bad_contexts_rejected(name: str, ctx: dict[str, object], fragment: str) -> None:
    with pytest.raises(ev.EventError, match=fragment):
        ev.decode(name, T, ctx)


def test_bad_event_shapes() -> None:
    bad: object
    for bad in (None, 1, "x", [], {"name": "submit"}, {"timestamp": 1.0},
                {"name": "", "timestamp": 1.0}, {"name": "x", "timestamp": -1},
                {"name": "x", "timestamp": float("nan")}, {"name": "x", "timestamp": 1, "context": 3}):
        with pytest.raises(ev.EventError):
            ev.from_rfc18(bad)


def test_rfc21_examples_decode() -> None:
    lines = [
        '{"timestamp":1552593348.073045,"name":"submit","context":{"urgency":16,"userid":5588,"flags":0,"version":1}}',
        '{"timestamp":1552593348.073045,"name":"jobspec-update","context":{"attributes.system.duration":3600}}',
        '{"timestamp":1605115080.0358412,"name":"validate"}',
        '{"timestamp":1552593348.073045,"name":"set-flags","context":{"flags":["debug"]}}',
        '{"timestamp":1552593547.411336,"name":"priority","context":{"priority":42}}',
        '{"timestamp":1552593348.088391,"name":"alloc","context":{"annotations":{"sched.resource_summary":"rank0/core[0-1]"}}}',
        '{"timestamp":1552593348.092830,"name":"release","context":{"ranks":"all","final":true}}',
        '{"timestamp":1552593986.335602,"name":"exception","context":{"type":"oom","severity":0,"userid":5588,"note":"out of memory on foo42"}}',
        '{"timestamp":1637723184.3725791,"name":"memo","context":{"key":"value"}}',
        '{"timestamp":1552594649.848032,"name":"debug.free-request"}',
    ]
    for line in lines:
        obj = orjson.loads(line)
        assert ev.from_rfc18(obj).to_rfc18() == obj


# ------------------------------------------------------------ property tests

@settings(max_examples=300, deadline=None)
@given(histories())
def test_incremental_equals_replay_through_the_wire_format(log: list[ev.Event]) -> None:
    job = Job(7)
    for event in log:
        job = apply(event, job)
        # invariants that hold after every event
        assert job.state in {JobState.NEW, JobState.DEPEND, JobState.PRIORITY, JobState.SCHED,
                             JobState.RUN, JobState.CLEANUP, JobState.INACTIVE}
        if job.has_resources:
            assert job.state & JobState.RUNNING
        assert (job.result is not None) == (job.state == JobState.INACTIVE)
    wire = [orjson.loads(orjson.dumps(x.to_rfc18())) for x in log]
    assert replay(7, (ev.from_rfc18(obj) for obj in wire)) == job
    assert job.seq == sum(1 for x in log if not isinstance(x, ev.Annotations))


@settings(max_examples=100, deadline=None)
@given(histories())
def test_codec_round_trip(log: list[ev.Event]) -> None:
    from fluxes.domain.job.codec import job_from_json, job_to_json

    job = replay(7, log)
    assert job_from_json(orjson.loads(orjson.dumps(job_to_json(job)))) == job


def test_codec_leaves_trailing_defaults_out_and_reads_full_records() -> None:
    from fluxes.domain.job.codec import job_from_json, job_to_json

    job = replay(7, [ev.decode("submit", 1.0, {"urgency": 16, "userid": 5, "flags": 0,
                                               "version": 1}),
                     ev.decode("validate", 2.0)])
    short = job_to_json(job)
    assert len(short) < len(Job._fields)  # a pending job's record stops at its last fact
    assert job_from_json(short) == job
    # a record written before trailing defaults were left out still reads
    full = short + [job[i] for i in range(len(short), len(Job._fields))]
    full = [list(v) if isinstance(v, frozenset | tuple) else v for v in full]
    full[-1] = {}
    assert job_from_json(full) == job


def test_the_read_models_compact_record_round_trips() -> None:
    """The job list's stored form (no id, known facts by position, a time equal to the
    one before it as "="), read back equal; the object form stored before reads too."""
    from fluxes.domain.job.record import JobRecord, record_from_stored, stored_record

    job = Job(5).replace(t_submit=1.5, t_depend=1.5, t_priority=1.5, t_sched=2.0,
                         t_run=2.0)
    known = {"name": "x", "ntasks": 1, "nnodes": 0, "ncores": 1, "ngpus": 0,
             "duration": 0.0}
    for info in ({"name": "x"}, known, {**known, "queue": "q", "ranks": "0-1"}):
        record = JobRecord(job, info)
        raw = stored_record(record)
        assert record_from_stored(5, raw) == record
        assert not raw.startswith(b"[[5,") and raw.count(b"1.5") == 1 and raw.count(b"2.0") == 1
        assert record_from_stored(5, record.to_json()) == record
    assert b'"ntasks"' not in stored_record(JobRecord(job, known))
    for bad in (b"[1]", b'[[1],[1,2]]', b"nope", b'[[1],"x"]'):
        with pytest.raises(ValueError):
            record_from_stored(5, bad)


def test_the_journals_packed_extras_round_trip() -> None:
    """A submit summary is stored in the journal as an array by position (its names not
    repeated in every entry) and reads back equal; other extras (alloc's ranks) stay
    objects; an object stored before reads as it is; anything else is no extras."""
    from fluxes.domain.job.record import packed_extra, unpacked_extra

    known = {"name": "x", "ntasks": 1, "nnodes": 0, "ncores": 1, "ngpus": 0,
             "duration": 0.0}
    for extra in (known, {**known, "queue": "q", "dependencies": ["afterok:1"]},
                  {"ranks": "0-1", "nodelist": ["n0"]}, {"name": "only"}):
        raw = packed_extra(extra)
        assert unpacked_extra(orjson.loads(raw)) == extra
        assert unpacked_extra(extra) == extra  # the previous layout's object
    assert orjson.loads(packed_extra(known)) == ["x", 1, 0, 1]  # trailing defaults left out
    assert len(packed_extra(known)) < len(orjson.dumps(known)) - 50
    for bad in ([1, 2], ["x", 1, 0, 1, 0, 0.0, "not an object"], ["x", 1, 0, 1, 0, 0.0, 1, {}],
                "x", 5, None):
        assert unpacked_extra(bad) is None


@settings(max_examples=300)
@given(st.floats(1e9, 2e9), st.lists(st.one_of(st.none(), st.floats(-1.0, 1e5)),
                                     min_size=5, max_size=5),
       st.sampled_from([0, 2]), st.sampled_from([0.0, 60.0, 0]))
def test_stored_times_and_packed_info_read_back_exactly(
        first: float, steps: list[float | None], ngpus: int, duration: float) -> None:
    """State times after the first are stored as their difference from the one before
    (when shorter) and read back bit for bit; the info's trailing defaults are left out
    and come back with their types."""
    from fluxes.domain.job.record import JobRecord, record_from_stored, stored_record

    times: list[float | None] = [first]
    for step in steps:
        before = times[-1]
        times.append(None if step is None or before is None else before + step)
    names = ("t_submit", "t_depend", "t_priority", "t_sched", "t_run", "t_cleanup")
    job = Job(5).replace(**dict(zip(names, times, strict=True)))
    info = {"name": "x", "ntasks": 1, "nnodes": 0, "ncores": 1, "ngpus": ngpus,
            "duration": duration}
    record = JobRecord(job, info)
    back = record_from_stored(5, stored_record(record))
    assert back == record
    assert [type(v) for v in back.info.values()] == [type(v) for v in info.values()]


def test_a_pending_jobs_stored_record_is_short() -> None:
    """The bench's pending job: ~85 bytes (Redis allocates 96), not ~102 (112)."""
    from fluxes.domain.job.record import JobRecord, record_from_stored, stored_record

    t = 1795962280.0537558
    job = Job(5).replace(state=JobState.SCHED, seq=4, urgency=16, userid=0, priority=16,
                         t_submit=t, t_depend=t, t_priority=1795962280.1083403,
                         t_sched=1795962280.1083448)
    info = {"name": "true", "ntasks": 1, "nnodes": 0, "ncores": 1, "ngpus": 0,
            "duration": 0.0}
    raw = stored_record(JobRecord(job, info))
    assert len(raw) <= 92, raw  # sds header and NUL: within jemalloc's 96-byte class
    assert record_from_stored(5, raw) == JobRecord(job, info)
    assert raw.endswith(b'["true",1,0,1]]')


def test_stored_infos_kept_by_identity_are_never_another_dicts() -> None:
    """The stored form of an info is kept per dict (the jobs of a submission share one):
    dicts made and dropped by the thousand, equal or not, each read back as itself."""
    from fluxes.domain.job import record as rec

    job = Job(5).replace(t_submit=1.5)
    shared = {"name": "x", "ntasks": 1, "nnodes": 0, "ncores": 1, "ngpus": 0,
              "duration": 0.0}
    for i in range(3 * rec.INFOS_KEPT):
        info = {**shared, "ntasks": i} if i % 3 else {"name": f"j{i}", "queue": "q"}
        for record in (rec.JobRecord(job, info), rec.JobRecord(job, shared)):
            raw = rec.stored_record(record)
            assert rec.record_from_stored(5, raw) == record
        del info
