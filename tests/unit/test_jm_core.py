"""The job manager's pure rules, driven with a fake scheduler and fake exec workers."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes import messages as proto
from fluxes.domain.jm.core import Effects, JobManagerCore
from fluxes.domain.job import events as ev
from fluxes.domain.job.record import JobRecord, apply_record
from fluxes.domain.job.states import JobResult, JobState
from fluxes.formats.idset import IDSet

OWNER = 1000
OTHER = 2000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


#: the stream whose messages each handler of the core takes
CHANNELS: dict[str, Any] = {"on_new": proto.NEW_JOBS, "on_sched": proto.SCHED_RESPONSES,
                            "on_exec": proto.EXEC_EVENTS, "on_ctl": proto.CONTROL}


def _typed(fn: Any, arg: Any) -> Any:
    """A dict message as the worker hands it to ``fn``: decoded from its stream."""
    if not isinstance(arg, dict):
        return arg
    return proto.convert(CHANNELS[fn.__name__], arg)


class Harness:
    """Drives a core, checks every step's events replay on a replica, keeps the log."""

    def __init__(self, **kw: Any) -> None:
        self.clock = Clock()
        self.core = JobManagerCore(owner_uid=OWNER, clock=self.clock, **kw)
        self.replica: dict[int, JobRecord] = {}
        self.log: dict[int, list[str]] = {}
        self.sched: list[dict[str, Any]] = []
        self.exec: dict[int, list[dict[str, Any]]] = {}
        self.replies: list[dict[str, Any]] = []
        self.retired: dict[int, tuple[str, float]] = {}
        self.epoch = 0

    def step(self, fn: Any, *args: Any) -> Effects:
        fx = Effects()
        fn(fx, *[_typed(fn, a) for a in args])
        for jobid, ops in fx.ops.items():
            rec = self.replica.get(jobid)
            if rec is not None and jobid in fx.base_seq:
                assert fx.base_seq[jobid] == rec.job.seq
            for op in ops:
                if op[0] == "E":
                    rec = apply_record(rec, jobid, op[1], op[2])
                    self.log.setdefault(jobid, []).append(op[1].event_name)
                else:
                    rec = apply_record(rec, jobid, op[1])
            assert rec is not None
            self.replica[jobid] = rec
        self.sched += [proto.to_builtins(m) for m in fx.sched]
        for rank, msgs in fx.exec.items():
            self.exec.setdefault(rank, []).extend(proto.to_builtins(m) for m in msgs)
        self.replies += [proto.to_builtins(payload) for _key, payload in fx.replies]
        self.retired.update(fx.retired)
        return fx

    def submit(self, jobid: int, userid: int = OWNER, urgency: int = 16,
               request: str | None = None, **info: Any) -> None:
        # what the ingest writes: submit + validate in the eventlog
        t = self.clock()
        rec = apply_record(None, jobid, ev.Submit(timestamp=t, urgency=urgency, userid=userid),
                           info)
        self.replica[jobid] = apply_record(rec, jobid, ev.Validate(timestamp=t))
        self.log[jobid] = ["submit", "validate"]
        new = {"t": "new", "id": jobid, "userid": userid, "urgency": urgency, "flags": 0,
               "t_submit": t, "info": info}
        if request is not None:
            new["request"] = request
        self.step(self.core.on_new, new)

    def hello(self, mode: str = "unlimited", limit: int = 0) -> None:
        self.epoch += 1
        self.step(self.core.on_sched, self.epoch, {"t": "hello"})
        self.step(self.core.on_sched, self.epoch, {"t": "ready", "mode": mode, "limit": limit})

    def allocs(self) -> list[int]:
        out = [m["id"] for m in self.sched if m["t"] == "alloc"]
        self.sched = [m for m in self.sched if m["t"] != "alloc"]
        return out

    def respond(self, jobid: int, kind: int, **extra: Any) -> None:
        self.step(self.core.on_sched, self.epoch,
                  {"t": "alloc-response", "id": jobid, "type": kind, **extra})

    def grant(self, jobid: int, ranks: str = "0") -> None:
        self.respond(jobid, proto.ALLOC_SUCCESS, ranks=ranks, nodelist="node0")

    def exec_report(self, jobid: int, rank: int, **what: Any) -> None:
        self.step(self.core.on_exec, {"t": "exec", "id": jobid, "rank": rank, **what})

    def free_responses(self) -> None:
        frees = [m["id"] for m in self.sched if m["t"] == "free"]
        self.sched = [m for m in self.sched if m["t"] != "free"]
        for jobid in frees:
            self.step(self.core.on_sched, self.epoch, {"t": "free-response", "id": jobid})

    def state(self, jobid: int) -> JobState:
        return self.replica[jobid].job.state


def run_to_end(h: Harness, jobid: int, ranks: str = "0", status: int = 0) -> None:
    h.grant(jobid, ranks)
    for rank in [int(r) for r in ranks.split(",")]:
        h.exec_report(jobid, rank, started=True, status=status, released=True)
    h.free_responses()


def test_happy_path_drives_every_state_and_message() -> None:
    h = Harness()
    h.submit(1, duration=60)
    assert h.state(1) == JobState.SCHED
    assert h.allocs() == []  # no scheduler yet
    h.hello()
    assert h.sched[0] == {"t": "hello-reply", "alloc": []}
    assert h.allocs() == [1]
    h.grant(1)
    assert h.state(1) == JobState.RUN
    assert h.exec[0] == [{"t": "start", "id": 1, "ranks": "0"}]
    h.exec_report(1, 0, started=True, status=0, released=True)
    assert [m["t"] for m in h.sched if m["t"] == "free"] == ["free"]
    h.free_responses()
    assert h.log[1] == ["submit", "validate", "depend", "priority", "alloc", "start",
                        "finish", "release", "free", "clean"]
    assert h.replica[1].job.result == JobResult.COMPLETED
    assert h.retired[1][0] == "COMPLETED"
    assert 1 not in h.core.jobs


def test_multi_rank_job_aggregates_exec_reports() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1, "0-2")
    h.exec_report(1, 0, started=True)
    h.exec_report(1, 1, started=True)
    assert "start" not in h.log[1]
    h.exec_report(1, 2, started=True)
    assert h.log[1][-1] == "start"
    h.exec_report(1, 0, status=0, released=True)
    h.exec_report(1, 1, status=256, released=True)
    h.exec_report(1, 2, status=0, released=True)
    h.free_responses()
    assert h.replica[1].job.wait_status == 256
    assert h.replica[1].job.result == JobResult.FAILED


def test_exec_progress_is_deleted_only_where_it_was_stored() -> None:
    # a single-rank job's progress is in its events, never stored: its end deletes
    # nothing (one write less a job); a multi-rank job's stored progress goes with it
    h = _asked_for_two()
    h.grant(1)
    h.grant(2, "0,1")
    stored = [h.step(h.core.on_exec, {"t": "exec", "id": 2, "rank": 0, "started": True,
                                       "status": 0, "released": True}).progress]
    assert list(stored[0]) == [2] and stored[0][2] is not None
    assert not h.step(h.core.on_exec, {"t": "exec", "id": 1, "rank": 0, "started": True,
                                       "status": 0, "released": True}).progress
    h.exec_report(2, 1, started=True, status=0, released=True)
    frees = [m["id"] for m in h.sched if m["t"] == "free"]
    assert sorted(frees) == [1, 2]
    ended = {jobid: h.step(h.core.on_sched, h.epoch, {"t": "free-response", "id": jobid})
             for jobid in frees}
    assert h.retired.keys() == {1, 2}
    assert ended[1].progress == {}
    assert ended[2].progress == {2: None}


def test_granted_ranks_parsed_once_are_each_jobs_own() -> None:
    # the core keeps the rank lists it parsed: jobs granted the same text get equal
    # sets, never one shared set (IDSet is mutable)
    h = Harness()
    for jobid in (1, 2, 3):
        h.submit(jobid)
    h.hello()
    h.allocs()
    h.grant(1, "0-1")
    h.grant(2, "0-1")
    first, second = h.core.jobs[1].ranks, h.core.jobs[2].ranks
    assert first == second == IDSet("0-1") and first is not second
    with pytest.raises(proto.MessageError):
        h.grant(3, "1-0")  # a malformed list is refused, kept or not
    assert h.state(3) == JobState.SCHED


def test_new_jobs_of_one_submission_share_one_checked_submit() -> None:
    # the core keeps the submit events it checked: the jobs of one submission share
    # one, and a message a kept one would match only by equality is still checked
    core = JobManagerCore(owner_uid=OWNER, clock=Clock())

    def new(jobid: int, **kw: Any) -> proto.New:
        fields: dict[str, Any] = {"userid": OWNER, "urgency": 16, "flags": 0,
                                  "t_submit": 5.0, **kw}
        return proto.New(id=jobid, **fields)

    core.on_new(Effects(), new(1))
    core.on_new(Effects(), new(2))
    first, second = core.jobs[1].rec.job, core.jobs[2].rec.job
    assert (first.t_submit, first.urgency, first.userid) == (5.0, 16, OWNER)
    assert core._submit_of(new(3)) is core._submit_of(new(4))
    with pytest.raises(proto.MessageError, match="urgency"):
        core.on_new(Effects(), new(5, urgency=True))  # == 1, but no integer
    with pytest.raises(proto.MessageError, match="urgency"):
        core.on_new(Effects(), new(6, urgency=99))
    core.on_new(Effects(), new(7, t_submit=5))  # an int stamp: another kept event
    assert core.jobs[7].rec.job.t_submit == 5.0 and second.t_submit == 5.0
    assert 5 not in core.jobs and 6 not in core.jobs


def test_cancel_in_sched_sends_cancel_then_cleans_on_cancel_response() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    assert h.allocs() == [1]
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [1], "userid": OWNER, "reply": "r"})
    assert h.state(1) == JobState.CLEANUP
    assert {"t": "cancel", "id": 1} in h.sched
    h.respond(1, proto.ALLOC_CANCEL)
    assert h.state(1) == JobState.INACTIVE
    assert h.replica[1].job.result == JobResult.CANCELED
    assert h.replies == [{"ok": [1], "errors": []}]


def test_success_racing_a_cancel_is_freed() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [1], "userid": OWNER})
    h.grant(1)  # the scheduler answered before it saw the cancel
    assert h.replica[1].job.has_resources
    assert h.exec[0] == [{"t": "kill", "id": 1, "signal": 15}]
    h.exec_report(1, 0, released=True)  # exec never ran it
    h.free_responses()
    assert h.state(1) == JobState.INACTIVE
    assert h.log[1][-3:] == ["alloc", "free", "clean"]


def test_cancel_running_job_kills_it() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1)
    h.exec_report(1, 0, started=True)
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [1], "userid": OWNER})
    assert h.exec[0][-1] == {"t": "kill", "id": 1, "signal": 15}
    h.exec_report(1, 0, status=15, released=True)
    h.free_responses()
    job = h.replica[1].job
    assert job.result == JobResult.CANCELED and job.exit_code == 128 + 15


def test_signal_request_goes_to_every_rank_and_the_job_runs_on() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    h.hello()
    h.allocs()
    h.grant(1, ranks="0-1")
    h.exec_report(1, 0, started=True)
    h.exec_report(1, 1, started=True)
    before = list(h.log[1])
    h.step(h.core.on_ctl, {"t": "signal-request", "ids": [1], "userid": OTHER, "signal": 10,
                           "reply": "r"})
    assert h.replies[-1] == {"ok": [1], "errors": []}
    assert h.exec[0][-1] == h.exec[1][-1] == {"t": "signal", "id": 1, "signal": 10}
    assert h.log[1] == before and h.state(1) == JobState.RUN  # no event: it runs on
    # the instance owner may signal it too
    h.step(h.core.on_ctl, {"t": "signal-request", "ids": [1], "userid": OWNER, "reply": "r"})
    assert h.replies[-1]["ok"] == [1] and h.exec[0][-1]["signal"] == 15


def test_signal_request_refusals() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    h.submit(2, userid=3000)
    h.hello()
    h.allocs()
    h.grant(2)
    h.step(h.core.on_ctl, {"t": "signal-request", "ids": [1, 2, 99], "userid": OTHER,
                           "signal": 10, "reply": "r"})
    assert h.replies[-1]["ok"] == []
    errors = h.replies[-1]["errors"]
    assert errors[0].endswith(": job is not running")
    assert errors[1].endswith(": permission denied")
    assert errors[2].endswith(": job is inactive or unknown")
    assert not any(m["t"] == "signal" for msgs in h.exec.values() for m in msgs)


def test_killall_signals_the_targets_running_jobs_or_only_names_them() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    h.submit(2, userid=3000)
    h.submit(3, userid=OTHER)  # pending: not matched
    h.hello()
    h.allocs()
    h.grant(1, ranks="0")
    h.grant(2, ranks="1")

    def signals() -> list[tuple[int, int]]:
        return [(r, m["id"]) for r, msgs in h.exec.items() for m in msgs if m["t"] == "signal"]

    h.step(h.core.on_ctl, {"t": "killall-request", "userid": OTHER, "target": OTHER,
                           "dry_run": True, "reply": "r"})
    assert h.replies[-1]["ok"] == [1] and signals() == []
    h.step(h.core.on_ctl, {"t": "killall-request", "userid": OTHER, "target": OTHER,
                           "signal": 10, "reply": "r"})
    assert h.replies[-1]["ok"] == [1] and signals() == [(0, 1)]
    h.step(h.core.on_ctl, {"t": "killall-request", "userid": OTHER, "target": -1,
                           "reply": "r"})
    assert "permission denied" in h.replies[-1]["errors"][0] and signals() == [(0, 1)]
    h.step(h.core.on_ctl, {"t": "killall-request", "userid": OWNER, "target": -1,
                           "reply": "r"})
    assert sorted(h.replies[-1]["ok"]) == [1, 2] and sorted(signals()) == [(0, 1), (0, 1),
                                                                           (1, 2)]


DUR, QUEUE_KEY, NAME_KEY = ("attributes.system.duration", "attributes.system.queue",
                            "attributes.system.job.name")


def update(h: Harness, jobid: int, updates: dict[str, Any], userid: int = OTHER,
           **kw: Any) -> dict[str, Any]:
    h.step(h.core.on_ctl, {"t": "update-request", "id": jobid, "userid": userid,
                           "updates": updates, "reply": "r", **kw})
    return h.replies[-1]


def test_update_of_a_pending_job_replaces_its_request() -> None:
    h = Harness()
    h.submit(1, userid=OTHER, request="old", duration=60.0, queue="batch")
    h.hello()
    assert h.allocs() == [1]
    fx = Effects()
    h.core.on_ctl(fx, proto.convert(proto.CONTROL, {
        "t": "update-request", "id": 1, "userid": OTHER, "reply": "r", "request": "new",
        "updates": {DUR: 120.0, QUEUE_KEY: "short", NAME_KEY: "n"}}))
    assert fx.job_fields == {1: {"request": "new", "queue": "short"}}
    assert fx.replies[-1][1].ok == [1]
    assert [m.__class__.__name__ for m in fx.sched] == ["Cancel"]  # the old request
    h.step(h.core.on_sched, h.epoch, {"t": "alloc-response", "id": 1,
                                      "type": proto.ALLOC_CANCEL})
    assert h.state(1) == JobState.SCHED
    # the CANCEL answer requeued it: asked again with its new request
    assert [m for m in h.sched if m["t"] == "alloc"][-1]["request"] == "new"


def test_update_is_replayed_like_any_event() -> None:
    h = Harness()
    h.submit(1, userid=OTHER, duration=60.0, queue="batch")
    assert update(h, 1, {DUR: 120.0, NAME_KEY: "n"}) == {
        "ok": [1], "updates": {DUR: 120.0, NAME_KEY: "n"}}
    assert "jobspec-update" in h.log[1]
    info = h.replica[1].info
    assert (info["duration"], info["name"], info["queue"]) == (120.0, "n", "batch")


def test_update_refused_when_the_job_changed_since_the_check() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    assert update(h, 1, {NAME_KEY: "a"})["ok"] == [1]
    answer = update(h, 1, {NAME_KEY: "b"})  # checked against no earlier update
    assert answer["errors"][0].endswith("the job changed while the update was checked: "
                                        "try again")
    assert update(h, 1, {NAME_KEY: "b"}, base={NAME_KEY: "a"})["ok"] == [1]
    assert update(h, 1, {NAME_KEY: "c"}, userid=3000, base={NAME_KEY: "b"})["errors"][0] \
        .endswith("permission denied")
    assert h.log[1].count("jobspec-update") == 2


def test_an_owners_update_past_the_limits_makes_the_job_immutable() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    assert update(h, 1, {DUR: 1e6}, userid=OWNER, immutable=True)["ok"] == [1]
    assert h.replica[1].job.set_flags == frozenset({"immutable"})


def test_update_of_a_running_job_moves_its_time_limit() -> None:
    h = Harness()
    h.submit(1, userid=OTHER, duration=5)
    h.hello()
    h.allocs()
    h.grant(1)
    h.exec_report(1, 0, started=True)
    assert h.core.next_timer() == pytest.approx(1005.0)
    assert update(h, 1, {DUR: 100.0}, userid=OWNER)["ok"] == [1]
    assert h.log[1][-1] == "resource-update"
    assert h.replica[1].job.expiration == pytest.approx(1100.0)
    h.clock.now = 1006.0
    h.step(h.core.on_timers)  # the old limit is gone
    assert h.state(1) == JobState.RUN
    assert h.core.next_timer() == pytest.approx(1100.0)
    assert update(h, 1, {NAME_KEY: "x"}, userid=OWNER, base_expiration=1100.0)["errors"][0] \
        .endswith("only the duration of a running job may be updated")
    assert update(h, 1, {DUR: 0}, userid=OWNER, base_expiration=1100.0)["errors"][0] \
        .endswith("cannot become unlimited")
    assert update(h, 1, {DUR: 2.0}, userid=OWNER, base_expiration=1100.0)["ok"] == [1]
    h.step(h.core.on_timers)  # 1002 is past: it times out now
    assert h.state(1) == JobState.CLEANUP


def test_a_running_jobs_new_end_reaches_the_scheduler_and_its_next_hello() -> None:
    h = Harness()
    h.submit(1, userid=OTHER, duration=5)
    assert update(h, 1, {DUR: 50.0}, userid=OWNER)["ok"] == [1]  # pending: no expiration
    h.hello()
    h.allocs()
    h.grant(1)
    h.sched.clear()
    assert update(h, 1, {DUR: 100.0}, userid=OWNER, base={DUR: 50.0})["ok"] == [1]
    assert h.sched == [{"t": "expiration", "id": 1, "expiration": pytest.approx(1100.0)}]
    # a restarted scheduler's hello: the stored R still ends at 1050, the reply says 1100
    h.sched.clear()
    h.epoch += 1
    h.step(h.core.on_sched, h.epoch, {"t": "hello"})
    assert h.sched[0] == {"t": "hello-reply", "alloc": [
        {"id": 1, "priority": 16, "userid": OTHER, "ranks": "0",
         "expiration": pytest.approx(1100.0)}]}


@pytest.mark.parametrize("updates", [
    {}, {"attributes.system.urgency": 1}, {DUR: -1}, {DUR: "1h"}, {DUR: True},
    {NAME_KEY: ""}, {QUEUE_KEY: 3},
])
def test_malformed_update_requests_are_refused_whole(updates: dict[str, Any]) -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    fx = Effects()
    msg = proto.convert(proto.CONTROL, {"t": "update-request", "id": 1, "userid": OTHER,
                                        "updates": updates})
    with pytest.raises(proto.MessageError):
        h.core.on_ctl(fx, msg, ("s", b"1-0"))
    assert not fx.acks and not fx.ops


def test_users_cancel_only_their_own_jobs() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    h.submit(2, userid=3000)
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [1, 2, 99], "userid": OTHER,
                           "reply": "r"})
    assert h.state(1) == JobState.INACTIVE and h.state(2) == JobState.SCHED
    errors = h.replies[-1]["errors"]
    assert len(errors) == 2 and "permission denied" in errors[0] and "unknown" in errors[1]
    exc = [e for e in h.log[1] if e == "exception"]
    assert exc == ["exception"]


def test_deny_raises_alloc_exception_with_the_note() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.respond(1, proto.ALLOC_DENY, note="job requests 300 nodes, only 256 match [gpu]")
    job = h.replica[1].job
    assert job.state == JobState.INACTIVE and job.result == JobResult.FAILED
    assert job.fatal is not None and job.fatal.note.startswith("job requests 300")


def test_single_and_limited_modes() -> None:
    h = Harness()
    for j in (1, 2, 3):
        h.submit(j)
    h.hello("single")
    assert h.allocs() == [1]
    h.grant(1)
    assert h.allocs() == [2]
    h2 = Harness()
    for j in (1, 2, 3):
        h2.submit(j)
    h2.hello("limited", 2)
    assert h2.allocs() == [1, 2]


def test_priority_order_and_hold() -> None:
    h = Harness()
    h.submit(1, urgency=16)
    h.submit(2, urgency=31)  # expedite
    h.submit(3, urgency=0)  # held
    h.hello("single")
    assert h.allocs() == [2]
    assert h.replica[3].job.priority == 0
    h.grant(2)
    assert h.allocs() == [1]
    h.grant(1)
    assert h.allocs() == []  # 3 is held
    h.step(h.core.on_ctl, {"t": "urgency-request", "id": 3, "urgency": 16, "userid": OWNER})
    assert h.log[3][-2:] == ["urgency", "priority"]
    assert h.allocs() == [3]


def test_urgency_of_pending_job_goes_to_scheduler_as_prioritize() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.step(h.core.on_ctl, {"t": "urgency-request", "id": 1, "urgency": 20, "userid": OWNER})
    assert {"t": "prioritize", "jobs": [[1, 20]]} in h.sched
    h.step(h.core.on_ctl, {"t": "urgency-request", "id": 1, "urgency": 0, "userid": OWNER})
    assert {"t": "cancel", "id": 1} in h.sched
    assert h.state(1) == JobState.SCHED


def test_guest_may_not_expedite() -> None:
    h = Harness()
    h.submit(1, userid=OTHER)
    h.step(h.core.on_ctl, {"t": "urgency-request", "id": 1, "urgency": 31, "userid": OTHER,
                           "reply": "r"})
    assert "guests can only adjust urgency" in h.replies[-1]["errors"][0]


def test_timelimit_exception_then_kill() -> None:
    h = Harness()
    h.submit(1, duration=5)
    h.hello()
    h.allocs()
    h.grant(1)
    h.exec_report(1, 0, started=True)
    assert h.core.next_timer() == pytest.approx(1005.0)
    h.clock.now = 1006.0
    h.step(h.core.on_timers)
    assert h.state(1) == JobState.CLEANUP
    assert h.exec[0][-1]["t"] == "kill"
    h.exec_report(1, 0, status=9, released=True)
    h.free_responses()
    assert h.replica[1].job.result == JobResult.TIMEOUT


def test_a_staged_jobs_time_limit_counts_from_when_it_may_start() -> None:
    """Staged behind a job ending at 1003 (docs/scheduling-policies.md): its 5 s limit
    ends at 1008, not 1005; a t_start that is not a number is not used."""
    h = Harness()
    h.submit(1, duration=5)
    h.submit(2, duration=5)
    h.hello()
    h.allocs()
    h.respond(1, proto.ALLOC_SUCCESS, ranks="0",
              annotations={"sched": {"staged": {"after": [9], "t_start": 1003.0}}})
    h.exec_report(1, 0, started=True)
    assert h.core.next_timer() == pytest.approx(1008.0)
    h.respond(2, proto.ALLOC_SUCCESS, ranks="0",
              annotations={"sched": {"staged": {"after": [1], "t_start": "soon"}}})
    h.exec_report(2, 0, started=True)
    assert sorted(d for d, _j, _k in h.core._timers) == [pytest.approx(1005.0),
                                                         pytest.approx(1008.0)]


def test_afterok_chain() -> None:
    h = Harness()
    h.submit(1)
    h.submit(2, dependencies=[{"scheme": "afterok", "value": "1"}])
    assert h.state(2) == JobState.DEPEND
    assert h.log[2][-1] == "dependency-add"
    h.hello()
    assert h.allocs() == [1]
    run_to_end(h, 1)
    assert h.log[2][-3:] == ["dependency-remove", "depend", "priority"]
    assert h.allocs() == [2]


def test_afterok_on_failed_job_raises_dependency_exception() -> None:
    h = Harness()
    h.submit(1)
    h.submit(2, dependencies=[{"scheme": "afterok", "value": "1"}])
    h.hello()
    h.allocs()
    run_to_end(h, 1, status=256)
    job = h.replica[2].job
    assert job.state == JobState.INACTIVE and job.fatal is not None
    assert job.fatal.type == "dependency"


def test_begin_time_dependency_waits_for_its_time() -> None:
    h = Harness()
    h.submit(1, dependencies=[{"scheme": "begin-time", "value": "1010.0"}])
    assert h.state(1) == JobState.DEPEND
    h.clock.now = 1011.0
    h.step(h.core.on_timers)
    assert h.state(1) == JobState.SCHED


def test_new_hello_resets_outstanding_allocs_and_reports_held_resources() -> None:
    h = Harness()
    h.submit(1)
    h.submit(2)
    h.hello()
    assert h.allocs() == [1, 2]
    h.grant(1)
    h.sched.clear()
    h.hello()  # the scheduler restarted
    reply = next(m for m in h.sched if m["t"] == "hello-reply")
    assert [a["id"] for a in reply["alloc"]] == [1]
    assert h.allocs() == [2]  # requested again in the new epoch
    h.respond(2, proto.ALLOC_SUCCESS, ranks="1")  # current epoch: accepted
    assert h.state(2) == JobState.RUN


def test_stale_epoch_responses_are_ignored() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    old = h.epoch
    h.hello()
    h.step(h.core.on_sched, old, {"t": "alloc-response", "id": 1, "type": 0, "ranks": "0"})
    assert h.state(1) == JobState.SCHED


def _asked_for_two() -> Harness:
    """Jobs 1 and 2 submitted, the scheduler said hello and was asked for both."""
    h = Harness()
    h.submit(1)
    h.submit(2)
    h.hello()
    h.allocs()
    return h


def test_restart_from_records_flux_restarts_sched_jobs_and_resends() -> None:
    h = _asked_for_two()
    h.grant(1)
    # a new core takes over from the same records (what replay gives)
    h2 = Harness()
    h2.replica = dict(h.replica)
    h2.log = {k: list(v) for k, v in h.log.items()}
    h2.core.load(h.replica.values())
    h2.step(h2.core.restart)
    assert {"t": "reset"} in h2.sched
    assert h2.log[2][-2:] == ["flux-restart", "priority"]
    assert h2.exec[0] == [{"t": "start", "id": 1, "ranks": "0"}]  # idempotent resend
    h2.hello()
    reply = next(m for m in h2.sched if m["t"] == "hello-reply")
    assert [a["id"] for a in reply["alloc"]] == [1]
    assert h2.allocs() == [2]


def test_alloc_requests_carry_the_request_while_the_job_is_pending() -> None:
    h = Harness()
    h.submit(1, request='{"c":2}')
    h.submit(2)  # an older job: no request, the scheduler reads its jobspec
    h.hello()
    allocs = {m["id"]: m for m in h.sched if m["t"] == "alloc"}
    assert allocs[1]["request"] == '{"c":2}' and "request" not in allocs[2]
    h.sched.clear()
    h.hello()  # a new scheduler: the outstanding requests go out again, request and all
    assert [m.get("request") for m in h.sched if m["t"] == "alloc"] == ['{"c":2}', None]
    assert h.core.jobs[1].request == '{"c":2}'
    h.grant(1)
    assert h.core.jobs[1].request is None  # kept only while pending


def test_jobs_of_one_shape_share_one_request_string() -> None:
    h = Harness()
    h.submit(1, request="".join(['{"c"', ":2}"]))
    h.submit(2, request="".join(['{"c":', "2}"]))
    assert h.core.jobs[1].request is h.core.jobs[2].request


def test_restart_sends_the_stored_requests_of_pending_jobs() -> None:
    h = Harness()
    h.submit(1, request='{"c":2}')
    h.submit(2, request='{"c":3}')
    h.submit(3, request='{"g":1}', urgency=0)  # held
    h.hello()
    h.allocs()
    h.grant(2)
    assert sorted(JobManagerCore.pending_ids(h.replica.values())) == [1, 3]
    h2 = Harness()
    h2.replica = dict(h.replica)
    h2.log = {k: list(v) for k, v in h.log.items()}
    h2.core.load(h.replica.values(), requests={1: '{"c":2}', 3: '{"g":1}'})
    h2.step(h2.core.restart)
    h2.hello()
    assert [(m["id"], m.get("request")) for m in h2.sched if m["t"] == "alloc"] == \
        [(1, '{"c":2}')]
    assert h2.core.jobs[3].request == '{"g":1}' and h2.core.jobs[2].request is None


def test_queue_stop_cancels_pending_allocs_and_start_resumes() -> None:
    h = Harness()
    h.submit(1, queue="debug")
    h.submit(2, queue="batch")
    h.hello()
    assert h.allocs() == [1, 2]
    h.step(h.core.on_ctl, {"t": "queues", "stopped": ["debug"]})
    assert {"t": "cancel", "id": 1} in h.sched
    h.respond(1, proto.ALLOC_CANCEL)
    assert h.state(1) == JobState.SCHED
    h.submit(3, queue="debug")
    assert h.allocs() == []
    h.step(h.core.on_ctl, {"t": "queues", "stopped": []})
    assert sorted(h.allocs()) == [1, 3]


def test_exec_error_fails_the_job() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1)
    h.exec_report(1, 0, error="cannot execute 'nope': No such file", released=True)
    h.free_responses()
    job = h.replica[1].job
    assert job.result == JobResult.FAILED and job.fatal is not None and job.fatal.type == "exec"


def test_started_job_whose_tasks_were_lost_finishes_as_killed() -> None:
    # the restarted exec worker found neither the tasks nor their status: it
    # reports started + released + an error and no wait status
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1, "0-1")
    h.exec_report(1, 0, started=True)
    h.exec_report(1, 1, started=True)
    h.exec_report(1, 0, status=0, released=True)
    h.exec_report(1, 1, started=True, released=True,
                  error="exec: lost the job's processes (exec worker restarted)")
    h.free_responses()
    assert h.log[1][-5:] == ["exception", "finish", "release", "free", "clean"]
    job = h.replica[1].job
    assert job.wait_status == 9 and job.result == JobResult.FAILED


def test_annotations_are_journal_only_and_kept_on_success() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.respond(1, proto.ALLOC_ANNOTATE, annotations={"sched": {"reason_pending": "busy"}})
    assert h.replica[1].job.annotations == {"sched": {"reason_pending": "busy"}}
    assert h.log[1][-1] == "priority"  # no eventlog event for annotations
    h.respond(1, proto.ALLOC_SUCCESS, ranks="0",
              annotations={"sched": {"reason_pending": None, "resource_summary": "rank0/core0"}})
    assert h.replica[1].job.annotations == {"sched": {"resource_summary": "rank0/core0"}}


# ------------------------------------------------------------ RFC 27 suspension

def test_scheduler_error_suspends_scheduling_until_the_next_hello() -> None:
    h = Harness()
    for jobid in (1, 2, 3):
        h.submit(jobid)
    h.hello("limited", 2)
    assert h.allocs() == [1, 2]
    h.step(h.core.on_sched, h.epoch, {"t": "error", "id": 1, "note": "ENOSYS"})
    assert h.core.session.suspended == "scheduler error (job ƒ2): ENOSYS"
    assert not h.core.session.ready
    # answers of the session's epoch still count: they say what the scheduler did
    h.grant(1)
    assert h.state(1) == JobState.RUN
    assert h.allocs() == []  # a slot is free, but nothing goes out
    h.step(h.core.on_sched, h.epoch, {"t": "ready", "mode": "unlimited"})
    assert h.allocs() == []  # only a new hello resumes (RFC 27)
    h.exec_report(1, 0, started=True, status=0, released=True)
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [2], "userid": OWNER})
    h.step(h.core.on_ctl, {"t": "urgency-request", "id": 3, "urgency": 20, "userid": OWNER})
    assert [m["t"] for m in h.sched if m["t"] not in ("hello-reply",)] == []
    assert h.state(1) == JobState.CLEANUP and h.state(2) == JobState.CLEANUP
    h.sched.clear()
    h.hello()  # a new scheduler: everything owed is sent again
    reply = next(m for m in h.sched if m["t"] == "hello-reply")
    assert [a["id"] for a in reply["alloc"]] == [1]
    assert h.state(2) == JobState.INACTIVE  # its request died with the old session
    assert h.allocs() == [3]
    assert {"t": "free", "id": 1} in h.sched
    h.free_responses()
    assert h.state(1) == JobState.INACTIVE
    session = h.core.session  # read anew: mypy would keep the narrowing of the assert above
    assert session.suspended is None and session.ready


def test_error_of_another_epoch_is_ignored() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.step(h.core.on_sched, h.epoch - 1, {"t": "error"})
    assert h.core.session.ready and h.core.session.suspended is None
    h.step(h.core.on_sched, h.epoch, {"t": "error"})
    assert h.core.session.suspended == "scheduler error"


def test_scheduler_without_lease_suspends_and_nothing_is_lost() -> None:
    h = Harness()
    assert h.core.check_scheduler(None) is None  # no session yet: nothing to watch
    h.submit(1)
    h.hello("single")
    assert h.allocs() == [1]
    assert h.core.check_scheduler(h.epoch) is None  # its scheduler still leads
    why = h.core.check_scheduler(None)
    assert why is not None and "went away" in why
    assert h.core.check_scheduler(None) is None  # already suspended: said once
    h.submit(2)
    assert h.allocs() == []
    h.hello("unlimited")
    assert h.allocs() == [1, 2]  # the lost request is sent again


def test_replaced_scheduler_suspends_until_its_hello() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    why = h.core.check_scheduler(h.epoch + 1)
    assert why is not None and "replaced" in why
    h.submit(2)
    assert h.allocs() == []
    h.hello()
    assert h.allocs() == [1, 2]


def test_cancel_in_priority_state() -> None:
    # PRIORITY is left in the commit that enters it; a record caught there
    # (as replay would hand one over) is still canceled cleanly
    h = Harness()
    t = h.clock()
    rec = apply_record(None, 1, ev.Submit(timestamp=t, urgency=16, userid=OWNER), {})
    for event in (ev.Validate(timestamp=t), ev.Depend(timestamp=t)):
        rec = apply_record(rec, 1, event)
    assert rec.job.state == JobState.PRIORITY
    h.replica[1] = rec
    h.log[1] = ["submit", "validate", "depend"]
    h.core.load([rec])
    h.step(h.core.on_ctl, {"t": "cancel-request", "ids": [1], "userid": OWNER, "reply": "r"})
    assert h.log[1][-2:] == ["exception", "clean"]
    assert h.replica[1].job.result == JobResult.CANCELED
    assert h.replies == [{"ok": [1], "errors": []}]


class _Table:
    """A priority plugin whose answers the test changes (fair share moving)."""

    def __init__(self) -> None:
        self.by_user: dict[int, int] = {OWNER: 100, OTHER: 50}

    def priority(self, job: Any) -> int:
        return self.by_user[job.userid]


def test_reprioritize_posts_changed_priorities_and_tells_the_scheduler() -> None:
    plugin = _Table()
    h = Harness(priority=plugin)
    h.submit(1, userid=OWNER)
    h.submit(2, userid=OTHER)
    h.submit(3, userid=OTHER, urgency=0)  # held: stays held whatever the plugin says
    h.hello("single")
    assert h.allocs() == [1]  # outstanding: it learns of changes by prioritize
    plugin.by_user = {OWNER: 10, OTHER: 70}
    fx = h.step(h.core.reprioritize)
    assert sorted(fx.ops) == [1, 2]
    assert h.replica[1].job.priority == 10 and h.replica[2].job.priority == 70
    assert h.replica[3].job.priority == 0
    assert h.log[2][-1] == "priority" and h.state(2) == JobState.SCHED
    assert {"t": "prioritize", "jobs": [[1, 10]]} in h.sched
    assert h.step(h.core.reprioritize).ops == {}  # nothing changed: no event
    # a queued job that rose goes out in its new place
    h.submit(4, userid=OWNER)
    plugin.by_user = {OWNER: 90, OTHER: 70}
    h.step(h.core.reprioritize)
    h.grant(1)
    assert h.allocs() == [4]


def test_alloc_requests_and_hello_carry_the_bank() -> None:
    h = Harness()
    h.submit(1, bank="physics")
    h.hello()
    assert [m.get("bank") for m in h.sched if m["t"] == "alloc"] == ["physics"]
    h.respond(1, proto.ALLOC_SUCCESS, ranks="0", nodelist="node0", ncores=4, ngpus=0)
    assert h.replica[1].info["ncores"] == 4  # R's count, in the alloc extras
    h.step(h.core.on_sched, h.epoch + 1, {"t": "hello"})
    reply = [m for m in h.sched if m["t"] == "hello-reply"][-1]
    assert reply["alloc"] == [{"id": 1, "priority": 16, "userid": OWNER, "ranks": "0",
                               "bank": "physics"}]


def test_a_staged_success_marks_the_alloc_extras_for_accounting() -> None:
    h = Harness()
    h.submit(1)
    h.submit(2)
    h.hello()
    h.respond(1, proto.ALLOC_SUCCESS, ranks="0", ncores=1, ngpus=0)
    h.respond(2, proto.ALLOC_SUCCESS, ranks="0", ncores=1, ngpus=0,
              annotations={"sched": {"staged": {"after": [1], "t_start": 5.0}}})
    assert "staged" not in h.replica[1].info
    assert h.replica[2].info["staged"] is True
    annotations = h.replica[2].job.annotations
    assert annotations is not None and annotations["sched"]["staged"]["after"] == [1]


def test_prolog_then_start_again_then_epilog_in_flux_order() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1, "0-1")
    assert [m["t"] for m in h.exec[0]] == ["start"]
    h.exec_report(1, 0, prolog=-1)
    h.exec_report(1, 1, prolog=-1)
    h.exec_report(1, 0, prolog=0)
    assert h.log[1][-1] == "prolog-start" and len(h.exec[0]) == 1
    h.exec_report(1, 1, prolog=0)
    # every rank's prolog ended well: prolog-finish, and the start again (the go)
    assert h.log[1][-1] == "prolog-finish"
    assert [m["t"] for m in h.exec[0]] == ["start", "start"]
    assert [m["t"] for m in h.exec[1]] == ["start", "start"]
    h.exec_report(1, 0, started=True, prolog=0)
    h.exec_report(1, 1, started=True, prolog=0)
    assert h.log[1][-1] == "start"
    h.exec_report(1, 0, started=True, status=0, epilog=-1)
    h.exec_report(1, 1, started=True, status=0, epilog=-1)
    assert h.log[1][-2:] == ["finish", "epilog-start"]
    h.exec_report(1, 0, started=True, status=0, epilog=0, released=True)
    h.exec_report(1, 1, started=True, status=0, epilog=0, released=True)
    h.free_responses()
    assert h.log[1] == ["submit", "validate", "depend", "priority", "alloc", "prolog-start",
                        "prolog-finish", "start", "finish", "epilog-start", "epilog-finish",
                        "release", "free", "clean"]
    assert h.replica[1].job.result == JobResult.COMPLETED


def test_a_failed_prolog_fails_the_job_with_a_prolog_exception() -> None:
    h = Harness()
    h.submit(1)
    h.hello()
    h.allocs()
    h.grant(1, "0-1")
    h.exec_report(1, 0, prolog=-1)
    h.exec_report(1, 1, prolog=256, error="prolog exited with code=1 on n1 (rank 1)",
                  released=True)
    job = h.replica[1].job
    assert job.fatal is not None and job.fatal.type == "prolog"
    assert job.fatal.note == "prolog exited with code=1 on n1 (rank 1)"
    assert "prolog-finish" not in h.log[1]  # rank 0's prolog still runs
    assert [m["t"] for m in h.exec[0]] == ["start", "kill"]
    h.exec_report(1, 0, released=True)  # killed while in its prolog
    h.free_responses()
    assert h.log[1] == ["submit", "validate", "depend", "priority", "alloc", "prolog-start",
                        "exception", "prolog-finish", "free", "clean"]
    assert h.replica[1].job.result == JobResult.FAILED
