"""Accounting in simulation: the banks file, fair share converging to the shares, running
limits held by the scheduler's gate, the ingest's charging, periodic reprioritizing."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.sim.accounting import read_banks
from fluxes.sim.engine import Outcome
from fluxes.sim.journal import read_records
from fluxes.sim.run import Workload, simulate
from fluxes.sim.workload import Machine, SimJob

#: Two users in two banks, uids 1 and 2 (the workload's users).
BANKS = ["# shares 1:3", "add-bank root 1", "add-bank --parent-bank=root small {small}",
         "fluxes account add-bank --parent-bank=root big {big}",
         "add-user --username=alice --userid=1 --bank=small {limit}",
         "add-user --username=bob --userid=2 --bank=big"]
#: Fair share decides: no age, size or urgency factor; a fast fold and reprioritizing.
CONFIG = ('[accounting]\npriority-plugin = "multifactor"\nhalf-life = "10m"\n'
          'reprioritize-interval = "10s"\n'
          '[accounting.weights]\nage = 0\njob-size = 0\nurgency = 0\n')
RUNTIME = 10.0


def _banks(small: int = 1, big: int = 3, limit: str = "") -> Accounts:
    return read_banks([line.format(small=small, big=big, limit=limit) for line in BANKS])


def _saturating(per_user: int) -> list[SimJob]:
    """Both users submit one-core 10 s jobs, each at 6 cores' worth: 12 cores offered to
    an 8-core machine, so both always have jobs waiting."""
    jobs: list[SimJob] = []
    for i in range(per_user):
        for uid in (1, 2):
            jobs.append(SimJob(len(jobs) + 1, i * RUNTIME / 6, 1, 2 * RUNTIME, RUNTIME, uid,
                               str(uid), "-"))
    return jobs


def _run(accounts: Accounts | None, per_user: int = 600, config: str = CONFIG,
         journal: Path | None = None, policy: str = "fcfs") -> Outcome:
    outcome = simulate(Workload(_saturating(per_user)), Machine.uniform(1, 8),
                       InstanceConfig.from_toml(config), {"policy": policy}, label=policy,
                       accounts=accounts, journal_out=journal)
    assert outcome.checked.ok, outcome.checked.to_dict()
    return outcome


def _split(outcome: Outcome, since: float = 200.0) -> float:
    """User 1's part of the core-seconds from ``since`` to the last submission (both
    users have jobs waiting all along)."""
    until = max(r.job.submit for r in outcome.runs)
    used = {1: 0.0, 2: 0.0}
    for r in outcome.runs:
        assert r.start is not None and r.end is not None
        lo, hi = max(r.start, since), min(r.end, until)
        if hi > lo:
            used[r.job.userid] += (hi - lo) * r.ncores
    return used[1] / (used[1] + used[2])


def test_shares_one_to_three_converge_to_a_quarter() -> None:
    assert _split(_run(_banks())) == pytest.approx(0.25, abs=0.03)
    # the same workload without fair share (equal shares, or no banks) splits evenly
    assert _split(_run(_banks(1, 1))) == pytest.approx(0.5, abs=0.03)
    assert _split(_run(None)) == pytest.approx(0.5, abs=0.03)


#: tests/system/test_fairshare.py's instance: half-life 5 s, reprioritizing every 0.5 s.
LIVE_CONFIG = ('[accounting]\npriority-plugin = "multifactor"\nhalf-life = "5s"\n'
               'reprioritize-interval = "0.5s"\n'
               '[accounting.weights]\nage = 0\njob-size = 0\nqueue = 0\nurgency = 0\n')
#: its jobs run half a second
LIVE_RUN = 0.5


@pytest.mark.parametrize(("big", "bobs_part"), [(3, 0.75), (1, 0.5)])
def test_the_live_fair_share_test_splits_the_core_seconds_as_the_shares(
        big: int, bobs_part: float) -> None:
    """The split tests/system/test_fairshare.py saw from a timed run, exactly: the system
    test's configuration and job length on its 2 x 4 cores, both users always waiting."""
    jobs: list[SimJob] = []
    for i in range(600):
        for uid in (1, 2):
            jobs.append(SimJob(len(jobs) + 1, i * LIVE_RUN / 6, 1, 2 * LIVE_RUN, LIVE_RUN, uid,
                               str(uid), "-"))
    outcome = simulate(Workload(jobs), Machine.uniform(2, 4), InstanceConfig.from_toml(
        LIVE_CONFIG), {"policy": "fcfs"}, label="fcfs", accounts=_banks(1, big))
    assert outcome.checked.ok, outcome.checked.to_dict()
    # past the warm-up of two half-lives
    assert 1 - _split(outcome, since=10.0) == pytest.approx(bobs_part, abs=0.02)


@pytest.mark.parametrize("policy", ["fcfs", "easy"])
def test_max_running_jobs_is_never_exceeded(tmp_path: Path, policy: str) -> None:
    """alice may run 2 jobs at once: the simulated journal never shows 3, while bob's jobs
    kept starting (the gate holds her jobs back without blocking the queue)."""
    journal = tmp_path / "j.jsonl"
    outcome = _run(_banks(limit="--max-running-jobs=2"), per_user=200, journal=journal,
                   policy=policy)
    owner: dict[int, int] = {}
    running: dict[int, set[int]] = defaultdict(set)
    peak = {1: 0, 2: 0}
    with open(journal, "rb") as f:
        for rec in read_records(f):
            jobid, name = rec["j"], rec["n"]
            if name == "submit":
                owner[jobid] = rec["c"]["userid"]
                assert rec["x"]["bank"] == ("small" if owner[jobid] == 1 else "big")
            elif name == "alloc":
                running[owner[jobid]].add(jobid)
                uid = owner[jobid]
                peak[uid] = max(peak[uid], len(running[uid]))
            elif name == "free":
                running[owner[jobid]].discard(jobid)
    assert peak[1] == 2
    assert peak[2] > 2  # bob uses the rest of the machine meanwhile
    assert all(r.result == "COMPLETED" for r in outcome.runs)


def test_without_the_limit_alice_runs_more_than_two() -> None:
    """The check above can fail: the same run without the limit runs 3+ of alice's jobs."""
    outcome = _run(_banks(), per_user=200)
    starts = sorted((r.start, 1, r.job.userid) for r in outcome.runs if r.start is not None)
    ends = sorted((r.end, 0, r.job.userid) for r in outcome.runs if r.end is not None)
    now, peak = 0, 0
    for _t, kind, uid in sorted(starts + ends):
        if uid == 1:
            now += 1 if kind else -1
            peak = max(peak, now)
    assert peak > 2


def test_the_ingest_charges_and_refuses_as_the_worker_does() -> None:
    """A user in no bank is refused with the ingest's message; max-active-jobs refuses
    what is over it."""
    accounts = read_banks(["add-bank root 1",
                           "add-user --username=bob --userid=2 --bank=root "
                           "--max-active-jobs=5"])
    outcome = simulate(Workload(_saturating(20)), Machine.uniform(1, 8),
                       InstanceConfig(), {"policy": "fcfs"}, label="fcfs", accounts=accounts)
    assert outcome.refused["user 1 belongs to no bank: the instance owner adds them with "
                           "'fluxes account add-user --username=1 --bank=BANK'"] == 20
    assert outcome.refused["max-active-jobs limit (5) reached for bob/root"] > 0
    assert {r.job.userid for r in outcome.runs} == {2}


def test_priorities_are_recomputed_on_the_virtual_clock(tmp_path: Path) -> None:
    """``priority`` events come at the reprioritize interval's ticks, in phase with the
    first instant, as the job manager's timer would post them."""
    journal = tmp_path / "j.jsonl"
    _run(_banks(), per_user=100, journal=journal)
    with open(journal, "rb") as f:
        records = list(read_records(f))
    first = records[0]["t"]
    seen: set[int] = set()
    again = set()  # a job's priority events after its first (the one PRIORITY gives)
    for r in records:
        if r["n"] == "priority":
            if r["j"] in seen:
                again.add(r["t"] - first)
            seen.add(r["j"])
    assert len(again) > 3, "no job was reprioritized"
    assert all(t % 10 == 0 for t in again), sorted(again)[:5]


def test_banks_file_commands_and_events_fold_the_same() -> None:
    commands = _banks(limit="--max-running-jobs=2")
    events = [json.dumps(e) for e in (
        {"kind": "add-bank", "timestamp": 0, "bank": "root", "shares": 1},
        {"kind": "add-bank", "timestamp": 0, "bank": "small", "parent": "root", "shares": 1},
        {"kind": "add-bank", "timestamp": 0, "bank": "big", "parent": "root", "shares": 3},
        {"kind": "add-user", "timestamp": 0, "username": "alice", "userid": 1,
         "bank": "small", "limits": {"max_running_jobs": 2}},
        {"kind": "add-user", "timestamp": 0, "username": "bob", "userid": 2, "bank": "big"})]
    assert read_banks(events) == commands
    assert commands.associations[("alice", "small")].limits.max_running_jobs == 2


@pytest.mark.parametrize(("line", "message"), [
    ("add-user --username=alice --bank=root", r"line 2: .*--userid"),
    ("add-bank --parent-bank=nowhere b 1", r"line 2: .*nowhere"),
    ("remove-bank root", r"line 2: .*invalid choice"),
    ('{"kind": "add-bank"}', r"line 2: add-bank: timestamp is required"),
    ("add-user --username=a --userid=1 --bank=root --max-cores=-2", r"line 2: --max-cores"),
    ("add-bank 'root", r"line 2: No closing quotation"),
])
def test_bad_banks_lines_name_the_line(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_banks(["add-bank root 1", line])


def test_the_invariants_catch_a_gate_that_lets_jobs_through(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's end checks count the running jobs per association from what ran: a gate
    that holds nothing back breaks alice's max-running-jobs, and the check says so."""
    from fluxes.domain.accounting.limits import LimitGate
    from fluxes.sim.accounting import LIMITS_INVARIANT

    accounts = _banks(limit="--max-running-jobs=2")
    clean = simulate(Workload(_saturating(100)), Machine.uniform(1, 8),
                     InstanceConfig.from_toml(CONFIG), {"policy": "fcfs"}, label="fcfs",
                     accounts=accounts)
    assert clean.checked.ok
    monkeypatch.setattr(LimitGate, "refusal", lambda _self, _job: None)
    broken = simulate(Workload(_saturating(100)), Machine.uniform(1, 8),
                      InstanceConfig.from_toml(CONFIG), {"policy": "fcfs"}, label="fcfs",
                      accounts=accounts)
    assert broken.checked.violations[LIMITS_INVARIANT] > 0
    assert "max-running-jobs limit (2) reached for alice/small" in broken.checked.examples[0]


def test_a_job_asking_for_a_bank_is_charged_to_it_and_a_history_keeps_it(
        tmp_path: Path) -> None:
    """alice is in small (her default) and big: a job that asks for big is charged to big,
    and a history replayed asks for the bank its jobs were charged to."""
    from fluxes.sim.run import load_journal

    accounts = read_banks(["add-bank root 1", "add-bank --parent-bank=root small 1",
                           "add-bank --parent-bank=root big 1",
                           "add-user --username=alice --userid=1 --bank=small",
                           "add-user --username=alice --userid=1 --bank=big"])
    jobs = [SimJob(1, 0.0, 1, 20.0, 10.0, 1, "1", "-", bank="big"),
            SimJob(2, 0.0, 1, 20.0, 10.0, 1, "1", "-"),
            SimJob(3, 0.0, 1, 20.0, 10.0, 1, "1", "-", bank="nowhere")]
    journal = tmp_path / "j.jsonl"
    outcome = simulate(Workload(jobs), Machine.uniform(1, 4), InstanceConfig(),
                       {"policy": "fcfs"}, label="fcfs", accounts=accounts,
                       journal_out=journal)
    assert outcome.refused == {"user alice is not in bank nowhere (their banks: big, small)": 1}
    with open(journal, "rb") as f:
        replayed = load_journal(f).jobs
    assert {j.id: j.bank for j in replayed} == {1: "big", 2: "small"}
