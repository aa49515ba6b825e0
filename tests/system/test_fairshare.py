"""Accounting wired into the job path, on a real instance (docs/accounting.md).

Two users in two banks keep a simulated 8-core machine saturated with equal
short jobs; the multi-factor plugin reprioritizes every half second from the
usage the accounting worker folds, and the journal is replayed to check
what happened: a max-running-jobs limit never let a third job of the user
run while the other user's jobs went on, and usage equals a from-scratch fold.
That the allocated core-seconds follow the shares (1:3, then 1:1) is checked
exactly, on the same configuration, by the simulator, which drives the same
policy on a virtual clock (tests/unit/test_sim_accounting.py): a timed run
here could only check it loosely.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.domain.accounting.usage import UsageState
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store.accounting import UsageStore, decode_entry
from fluxes.store.client import Client
from fluxes.store.groups import stream_lags
from fluxes.store.instance import Instance
from fluxes.store.keys import GROUP_INGEST
from tests.system.conftest import running_instance

ALICE, BOB = ("alice", 5001), ("bob", 5002)
#: seconds each simulated job runs
RUN = 0.5
#: pending jobs each feeder keeps (the 8 cores never run dry)
BACKLOG = 10
CONFIG = """
[exec]
kill-timeout = "2s"

[accounting]
half-life = "5s"
priority-plugin = "multifactor"
reprioritize-interval = "0.5s"

[accounting.weights]
age = 0
job-size = 0
queue = 0
urgency = 0
"""


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """An 8-core instance (2 nodes x 4 cores) with the multi-factor plugin."""
    with running_instance(config_text=CONFIG) as inst:
        yield inst


def account(uri: str, *args: str) -> None:
    """``fluxes account ...`` as the instance owner."""
    assert main(["--uri", uri, "account", *args]) == 0


def job(bank: str | None = None) -> dict[str, Any]:
    """A 1-core simulated job of RUN seconds."""
    attrs: dict[str, Any] = {"system": {"exec": {"test": {"run_duration": RUN}}}}
    if bank:
        attrs["system"]["bank"] = bank
    return {"jobspec": Jobspec.from_command(["true"], attributes=attrs)}


class Feeder:
    """Keeps BACKLOG jobs of one user pending, from the folded active jobs."""

    def __init__(self, inst: Instance, user: tuple[str, int]) -> None:
        self.client = Client(inst, user=user[0])
        self.store = UsageStore(inst.redis, inst.keys)
        self.uid = user[1]
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        """Top up the backlog every 0.2 s until stopped."""
        while not self.stop.is_set():
            waiting = sum(1 for j in self.store.open_jobs().values()
                          if j.userid == self.uid and j.t_alloc is None)
            if waiting < BACKLOG:
                got = self.client.submit([job()] * (BACKLOG - waiting))
                self.errors += [g for g in got if isinstance(g, str)]
            self.stop.wait(0.2)

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join()
        active = [jobid for jobid, j in self.store.open_jobs().items() if j.userid == self.uid]
        if active:
            self.client.cancel(active)


def journal(inst: Instance, until: str = "+"
            ) -> list[tuple[int, str, float, dict[str, Any], dict[str, Any]]]:
    """Every journal entry the usage fold reads (up to ``until``), decoded."""
    out = []
    for _sid, fields in inst.redis.xrange(inst.keys.journal(0), max=until):
        decoded = decode_entry(fields)
        if decoded is not None:
            out.append(decoded)
    return out


def intervals(inst: Instance) -> dict[int, tuple[int, float, float]]:
    """jobid -> (userid, alloc time, free time) of every allocation, from the journal
    (a job still running ends now)."""
    users: dict[int, int] = {}
    start: dict[int, float] = {}
    out: dict[int, tuple[int, float, float]] = {}
    for jobid, name, t, ctx, _x in journal(inst):
        if name == "submit":
            users[jobid] = ctx["userid"]
        elif name == "alloc":
            start[jobid] = t
        elif name == "free" and jobid in start:
            out[jobid] = (users[jobid], start.pop(jobid), t)
    now = time.time()
    out.update({j: (users[j], t, now) for j, t in start.items()})
    return out


def core_seconds(inst: Instance, since: float, until: float) -> dict[int, float]:
    """Allocated core-seconds per user within [since, until) (every job holds 1 core)."""
    out: dict[int, float] = {}
    for uid, a, b in intervals(inst).values():
        part = min(b, until) - max(a, since)
        if part > 0:
            out[uid] = out.get(uid, 0.0) + part
    return out


def most_running(inst: Instance, uid: int, since: float) -> int:
    """The most jobs of ``uid`` allocated at once, from the journal, after ``since``."""
    edges = sorted([(a, 1) for u, a, _b in intervals(inst).values() if u == uid and a >= since]
                   + [(b, -1) for u, a, b in intervals(inst).values() if u == uid and a >= since])
    most = running = 0
    for _t, step in edges:  # at one instant a free sorts before an alloc
        running += step
        most = max(most, running)
    return most


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds (fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def ingest_reads(inst: Instance, user: str) -> bool:
    """The ingest knows ``user``: it reads the user's submit stream (its group is there)."""
    return any(g.group == GROUP_INGEST for g in stream_lags(inst.redis, [inst.keys.submit(user)]))


def scheduler_status_after(inst: Instance, after: float) -> bool:
    """The scheduler published its status (which it does after re-reading the banks)
    later than ``after``."""
    raw = inst.redis.get(inst.keys.sched_status)
    return raw is not None and orjson.loads(raw).get("time", 0) > after


def test_limits_and_fair_share_from_the_journal(launcher: Launcher,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    inst = Instance.connect(uri)
    inst.redis.hset(inst.keys.users, mapping={ALICE[0]: ALICE[1], BOB[0]: BOB[1]})
    wait_until("the ingest to read alice's and bob's submissions",
               lambda: ingest_reads(inst, ALICE[0]) and ingest_reads(inst, BOB[0]))
    alice = Client(inst, user=ALICE[0])

    # before any bank exists, everyone submits; once one does, a user needs a bank
    account(uri, "add-bank", "root", "1")
    [refused] = alice.submit([job()])
    assert isinstance(refused, str) and "fluxes account add-user" in refused
    account(uri, "add-bank", "--parent-bank=root", "small", "1")
    account(uri, "add-bank", "--parent-bank=root", "large", "3")
    # -1: no limit, over flux-accounting's defaults (5 running, 7 active jobs)
    account(uri, "add-user", "--username=alice", f"--userid={ALICE[1]}", "--bank=small",
            "--max-running-jobs=2", "--max-active-jobs=-1")
    account(uri, "add-user", "--username=bob", f"--userid={BOB[1]}", "--bank=large",
            "--max-running-jobs=-1", "--max-active-jobs=-1")
    [other] = alice.submit([job("large")])
    assert isinstance(other, str) and "not in bank large" in other

    # a limit of 2 running jobs: alice's others wait with the reason, bob's run on
    added = time.time()
    wait_until("the scheduler to read the banks", lambda: scheduler_status_after(inst, added))
    limited = time.time()
    shown = ""

    def limit_seen() -> bool:
        nonlocal shown
        capsys.readouterr()
        assert main(["--uri", uri, "jobs", "-A", "-o", "{userid} {contextual_info}"]) == 0
        shown = capsys.readouterr().out
        # alice's jobs wait on her limit, she went through several turns of her two
        # slots (each one a decision of the gate), and bob ran on beside her
        turns = sum(1 for u, a, _b in intervals(inst).values() if u == ALICE[1] and a >= limited)
        return ("max-running-jobs limit (2) reached for alice/small" in shown and turns >= 8
                and core_seconds(inst, limited, time.time()).get(BOB[1], 0) > 3 * RUN * 2)

    with Feeder(inst, ALICE) as fa, Feeder(inst, BOB) as fb:
        wait_until("alice held at 2 running jobs while bob runs on", limit_seen)
    assert fa.errors == fb.errors == []
    assert most_running(inst, ALICE[1], limited) == 2  # never 3, up to the feeders' stop

    # the usage model equals a fold of the journal from scratch, up to where it folded
    store = UsageStore(inst.redis, inst.keys)
    deadline = time.monotonic() + 10
    while True:
        before = store.position(0)[0]
        stored = store.partition(0)
        if store.position(0)[0] == before:
            break  # model and position read between two writes
        assert time.monotonic() < deadline
    scratch = UsageState(5.0)
    scratch.feed_all(journal(inst, until=before))
    assert stored.accums == scratch.accums
    assert stored.open == scratch.open
    assert {uid for uid, _bank in scratch.accums} == {ALICE[1], BOB[1]}
