"""``fluxes bench accounting``: what folding the journal into usage costs per job.

Writes a history of N jobs (the ten events of a normal life each, with the
journal extras of submit and alloc) to a private redis-server, then:

* folds it in memory (decode + fold, no Redis): CPU microseconds per job;
* rebuilds the usage read model from it as the accounting worker folds it
  (blocks of 2,000 entries, each written with its position in one fenced
  step): CPU microseconds per job of this process and of redis-server, and
  wall time;
* computes the fair-share table for a tree of banks and users;
* with N active jobs stored (``--active``) and a ``max-active-jobs`` limit
  set, what the ingest's check costs per block of submissions: reading
  every active job and counting them (what it did before the fold kept
  counts) against reading the few counts the block's user needs (a limit
  on the user and their bank), and those of every association (a limit on
  the root bank).

The accounting worker's share of ``fluxes bench throughput`` is this fold's
cost times the jobs per second (docs/accounting.md, "Cost").
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import Any

from fluxes.bench.common import Stopwatch, private_redis
from fluxes.bench.eventlog import T0, _job_batch
from fluxes.domain.accounting.banks import Accounts, BankAdd, BankEdit, UserAdd, UserEdit, apply
from fluxes.domain.accounting.fairshare import fair_share
from fluxes.domain.accounting.limits import (
    ActiveIndex,
    HeldJob,
    SubmitLedger,
    check_submit,
    holdings,
)
from fluxes.domain.accounting.usage import UsageState
from fluxes.store.accounting import UsageStore, decode_entry, rebuild
from fluxes.store.errors import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.keys import Keys

NS = "bench"
HALF_LIFE = 7 * 86400.0


def _cpu() -> float:
    """CPU seconds (user + system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _server_cpu(client: Client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _tree(banks: int, users_per_bank: int) -> tuple[Accounts, dict[tuple[int, str], float]]:
    accounts = apply(BankAdd(timestamp=T0, bank="root", shares=1), Accounts())
    usage: dict[tuple[int, str], float] = {}
    uid = 10_000
    for b in range(banks):
        name = f"bank{b}"
        accounts = apply(BankAdd(timestamp=T0, bank=name, parent="root", shares=1 + b % 3),
                         accounts)
        for _ in range(users_per_bank):
            accounts = apply(UserAdd(timestamp=T0, username=f"u{uid}", userid=uid,
                                     bank=name), accounts)
            usage[(uid, "")] = float(uid % 97)
            uid += 1
    return accounts, usage


def _submit_check(client: Client, active: int, accounts: Accounts,
                  figures: dict[str, Any]) -> None:
    """Store ``active`` pending jobs of the tree's users (as the fold does), then time the
    ingest's max-active-jobs check of one submission both ways."""
    keys = Keys(f"{NS}{active}")
    store = UsageStore(client, keys)
    store.ensure_groups()
    client.set(keys.acct_fence(0), "1")
    users = sorted({(a.userid, a.bank) for a in accounts.associations.values()})
    state = UsageState(HALF_LIFE)
    for jobid in range(1, active + 1):
        uid, bank = users[jobid % len(users)]
        state.feed(jobid, "submit", T0, {"userid": uid},
                   {"bank": bank, "ncores": 1, "nnodes": 1})
    store.write(0, state.take_changes(), "0-0", 0, "1")
    name, uid, bank = "u10000", users[0][0], users[0][1]
    job = HeldJob(uid, bank, False)

    def before() -> None:
        held = holdings(accounts, (HeldJob(j.userid, j.bank or None, j.t_alloc is not None,
                                           j.nnodes, j.ncores)
                                   for j in store.open_jobs().values()))
        check_submit(accounts, held, name, job)

    ledger = SubmitLedger()

    def after(limited: Accounts) -> Callable[[], None]:
        index = ActiveIndex(limited)

        def check() -> None:
            counts, positions = store.active_counts(index.wanted([name]))
            check_submit(limited, ledger.holdings(limited, counts, positions, T0, index),
                         name, job)
        return check

    # a limit on the root bank: the counts of every association below it are read
    everyone = apply(BankEdit(timestamp=T0, bank="root", limits={"max_active_jobs": 10**9}),
                     accounts)
    for label, call, rounds in (("read_all", before, 3), ("counts", after(accounts), 300),
                                ("counts_root_limit", after(everyone), 100)):
        began = time.perf_counter()
        for _ in range(rounds):
            call()
        figures[f"submit_check_{label}_{active}_active_us"] = \
            (time.perf_counter() - began) / rounds * 1e6


def run(jobs: int = 100_000, batch_jobs: int = 100, banks: int = 50,
        users_per_bank: int = 20, active: tuple[int, ...] = (10_000, 100_000)
        ) -> dict[str, Any]:
    """Measure and return the figures."""
    figures: dict[str, Any] = {"jobs": jobs, "events": jobs * 10}
    accounts, usage = _tree(banks, users_per_bank)
    # a limit on the first user and on its bank, high enough never to refuse
    limited = apply(BankEdit(timestamp=T0, bank="bank0",
                             limits={"max_active_jobs": 10**9}), accounts)
    limited = apply(UserEdit(timestamp=T0, username="u10000", bank="bank0",
                             limits={"max_active_jobs": 10**9}), limited)
    with private_redis() as (_server, client):
        for n in active:
            _submit_check(client, n, limited, figures)
        keys = Keys(NS)
        client.set(keys.jm_fence(0), "1")
        store = EventStore(client, keys)
        jobid = 1
        while jobid <= jobs:
            end = min(jobid + batch_jobs, jobs + 1)
            store.commit(_job_batch(store, keys, range(jobid, end)), "1")
            jobid = end

        entries = []
        start = "-"
        while True:
            block = client.xrange(keys.journal(0), min=start, count=10_000)
            entries += [fields for _sid, fields in block]
            if len(block) < 10_000:
                break
            start = "(" + block[-1][0].decode()
        state = UsageState(HALF_LIFE)
        cpu = _cpu()
        for fields in entries:
            decoded = decode_entry(fields)
            if decoded is not None:
                state.feed(*decoded)
        state.take_changes()
        figures["fold_in_memory_us_cpu_per_job"] = (_cpu() - cpu) / jobs * 1e6
        del entries

        cpu, server, watch = _cpu(), _server_cpu(client), Stopwatch()
        [done] = rebuild(client, keys, HALF_LIFE)
        figures["fold_to_redis_us_cpu_per_job"] = (_cpu() - cpu) / jobs * 1e6
        figures["fold_to_redis_redis_us_cpu_per_job"] = \
            (_server_cpu(client) - server) / jobs * 1e6
        figures["fold_to_redis_jobs_per_s"] = jobs / watch.elapsed
        figures["fold_entries"] = done.entries

    began = time.perf_counter()
    rounds = 20
    for _ in range(rounds):
        fair_share(accounts, usage)
    figures["fair_share_associations"] = banks * users_per_bank
    figures["fair_share_ms"] = (time.perf_counter() - began) / rounds * 1e3
    return figures
