"""The forecast engine (fluxes.forecast): a snapshot run forward through the driven cores."""

from __future__ import annotations

import math

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts, BankAdd, UserAdd, apply
from fluxes.domain.sched.inventory import Inventory, Target
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.forecast import Running, Snapshot, Waiting, forecast
from fluxes.forecast.history import predict, remember
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet

T0 = 1_000_000.0


def _inventory(nodes: int = 2, cores: int = 4) -> Inventory:
    return Inventory([Target(r, f"node{r}", IDSet.from_ranges([(0, cores - 1)]), IDSet())
                      for r in range(nodes)])


def _spec(nnodes: int = 0, ntasks: int = 1, duration: float = 30.0,
          queue: str | None = None) -> Jobspec:
    if nnodes:
        return Jobspec.from_command(["x"], nnodes=nnodes, ntasks=nnodes, exclusive=True,
                                    duration=duration, queue=queue)
    return Jobspec.from_command(["x"], ntasks=ntasks, duration=duration, queue=queue)


def _waiting(jobid: int, spec: Jobspec, *, userid: int = 1, priority: int = 16,
             t_submit: float | None = None, bank: str | None = None) -> Waiting:
    info: dict[str, object] = {"duration": spec.duration}
    if spec.queue:
        info["queue"] = spec.queue
    if bank is not None:
        info["bank"] = bank
    return Waiting(jobid, userid, 16, priority, T0 - 100 + jobid if t_submit is None
                   else t_submit, info, Request.from_jobspec(spec).to_wire())


def _running(inv: Inventory, jobid: int, spec: Jobspec, t_run: float, *, userid: int = 1,
             held: ResourcePool | None = None, bank: str | None = None) -> Running:
    """A job allocated at ``t_run`` (R as the scheduler wrote it)."""
    pool = held or ResourcePool(inv, clock=lambda: t_run)
    rset: ResourceSet = pool.alloc(Request.from_jobspec(spec), jobid, now=t_run)
    return Running(jobid, userid, rset, t_run, rset.expiration, bank)


def _policy(name: str) -> InstanceConfig:
    return InstanceConfig.from_toml(f'[policy.scheduler]\npolicy = "{name}"\n')


def _full_instance(config: InstanceConfig | None = None) -> tuple[Inventory, Snapshot]:
    """The issue's case: 2 nodes held by a job ending at its limit T, three 2-node 30 s
    jobs waiting."""
    inv = _inventory()
    run = _running(inv, 100, _spec(nnodes=2, duration=600.0), T0 - 500)
    waiting = tuple(_waiting(200 + i, _spec(nnodes=2, duration=30.0)) for i in range(3))
    return inv, Snapshot(T0, config or InstanceConfig(), inv, (run,), waiting)


@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_full_instance_waits_in_line(policy: str) -> None:
    _inv, snap = _full_instance(_policy(policy))
    out = forecast(snap)
    limit_t = T0 + 100  # the running job's expiration: 600 s after T0 - 500
    starts = [out.jobs[200 + i].t_start for i in range(3)]
    for got, want in zip(starts, [limit_t, limit_t + 30, limit_t + 60], strict=True):
        assert got is not None and abs(got - want) <= 2, starts
    assert out.jobs[200].ranks == "0-1" and out.jobs[200].nodelist == "node[0-1]"
    assert out.behind(201) == [100, 200]
    assert out.behind(200) == [100]


def test_forecast_is_read_only() -> None:
    _inv, snap = _full_instance()
    before = (snap.running, snap.waiting, str(snap.drained))
    forecast(snap)
    forecast(snap)
    assert (snap.running, snap.waiting, str(snap.drained)) == before
    assert str(snap.running[0].R.ranks) == "0-1"


def test_drained_only_job_never_starts() -> None:
    inv = _inventory()
    # rank 1 drained; the job needs both nodes: it can never start (under fcfs it
    # would block the one behind it, as the scheduler does: easy lets that one pass)
    snap = Snapshot(T0, _policy("easy"), inv, (),
                    (_waiting(300, _spec(nnodes=2)), _waiting(301, _spec(nnodes=1))),
                    drained=IDSet("1"))
    out = forecast(snap)
    assert out.jobs[300].t_start is None
    assert out.jobs[301].t_start == T0 and out.jobs[301].ranks == "0"


def test_job_without_limit_blocks_forever() -> None:
    inv = _inventory(1)
    run = _running(inv, 100, _spec(nnodes=1, duration=0.0), T0 - 10)
    snap = Snapshot(T0, InstanceConfig(), inv, (run,), (_waiting(200, _spec(nnodes=1)),))
    assert forecast(snap).jobs[200].t_start is None


def test_priority_orders_the_line() -> None:
    inv, snap = _full_instance()
    # the last submitted job is the most urgent: it goes first
    waiting = list(snap.waiting)
    waiting[2] = _waiting(202, _spec(nnodes=2), priority=20)
    snap = Snapshot(T0, InstanceConfig(), inv, snap.running, tuple(waiting))
    out = forecast(snap)
    assert out.jobs[202].t_start == pytest.approx(T0 + 100)
    assert out.jobs[200].t_start == pytest.approx(T0 + 130)


def _accounts(max_running: int) -> Accounts:
    accounts = Accounts()
    for event in (BankAdd(timestamp=0, bank="root", shares=1),
                  UserAdd(timestamp=0, username="alice", userid=1, bank="root",
                          limits={"max_running_jobs": max_running})):
        accounts = apply(event, accounts)
    return accounts


def test_max_running_jobs_limit_moves_forecasts() -> None:
    inv = _inventory(4, 1)
    waiting = tuple(_waiting(200 + i, _spec(nnodes=1, duration=60.0), bank="root")
                    for i in range(4))
    free = forecast(Snapshot(T0, InstanceConfig(), inv, (), waiting))
    assert [free.jobs[200 + i].t_start for i in range(4)] == [T0] * 4
    limited = forecast(Snapshot(T0, InstanceConfig(), inv, (), waiting,
                                accounts=_accounts(2)))
    starts = [limited.jobs[200 + i].t_start for i in range(4)]
    assert starts == [T0, T0, T0 + 60, T0 + 60]
    assert "max-running-jobs" in limited.jobs[202].reason
    # a running job of hers counts against the limit too
    run = _running(inv, 100, _spec(nnodes=1, duration=30.0), T0 - 10, bank="root")
    held = forecast(Snapshot(T0, InstanceConfig(), inv, (run,), waiting[:2],
                             accounts=_accounts(2)))
    assert held.jobs[200].t_start == T0 and held.jobs[201].t_start == pytest.approx(T0 + 20)


def test_reservation_moves_forecasts() -> None:
    """A running job holds node 0 for 100 s; the head needs both nodes; a 1-node job
    of 200 s would fit on node 1 now but delays the head: EASY reserves for the head, so
    the small job waits; a 50 s one backfills."""
    inv = _inventory(2, 1)
    run = _running(inv, 100, _spec(nnodes=1, duration=100.0), T0)
    head = _waiting(200, _spec(nnodes=2, duration=60.0))
    long_ = _waiting(201, _spec(nnodes=1, duration=200.0))
    short = _waiting(202, _spec(nnodes=1, duration=50.0))
    fcfs = forecast(Snapshot(T0, InstanceConfig(), inv, (run,), (head, long_, short)))
    assert [fcfs.jobs[j].t_start for j in (200, 201, 202)] == [T0 + 100, T0 + 160, T0 + 160]
    easy_cfg = _policy("easy")
    easy = forecast(Snapshot(T0, easy_cfg, inv, (run,), (head, long_, short)))
    assert easy.jobs[202].t_start == T0  # backfilled: ends before the head's reservation
    assert easy.jobs[200].t_start == T0 + 100  # the reservation holds
    assert easy.jobs[201].t_start == T0 + 160  # would delay the head: waits for it
    assert "reserv" in easy.jobs[201].reason or "reserv" in easy.jobs[200].reason


def test_history_predictor() -> None:
    assert predict(None, 600.0) == 600.0
    assert predict((10.0, 30.0), 600.0) == 20.0
    assert predict((10.0, 30.0, 5000.0), 600.0) == 600.0
    assert predict((100.0,), math.inf) == 100.0
    assert remember((1.0, 2.0), 3.0) == (2.0, 3.0)


def test_history_runtime_moves_forecasts() -> None:
    inv, snap = _full_instance()
    # the user's jobs ran 10 s lately: the running job (started 500 s ago) outlived
    # that, so it still ends at its limit; each waiting job runs 10 s
    snap = Snapshot(T0, InstanceConfig(), inv, snap.running, snap.waiting,
                    history={1: (10.0, 10.0)})
    out = forecast(snap, runtime="history")
    starts = [out.jobs[200 + i].t_start for i in range(3)]
    assert starts == [T0 + 100, T0 + 110, T0 + 120]
    assert out.jobs[200].runtime == "history"
    with pytest.raises(ValueError, match="runtime"):
        forecast(snap, runtime="guess")  # type: ignore[arg-type]


def test_forecast_config() -> None:
    from fluxes.errors import ConfigError

    assert InstanceConfig().forecast.runtime == "limit"
    cfg = InstanceConfig.from_toml('[forecast]\nruntime = "history"\ncache = "2s"\n')
    assert (cfg.forecast.runtime, cfg.forecast.cache) == ("history", 2.0)
    for bad, said in (('[forecast]\nruntime = "guess"\n', "forecast.runtime"),
                      ("[forecast]\nhorizon = 1\n", "forecast.horizon: unknown key"),
                      ("forecast = 1\n", "forecast: expected a table")):
        with pytest.raises(ConfigError, match=said):
            InstanceConfig.from_toml(bad)


def test_forecast_round_trips_for_the_cache() -> None:
    from fluxes.forecast import ForecastRun

    _inv, snap = _full_instance()
    out = forecast(snap)
    back = ForecastRun.from_obj(out.to_obj())
    assert back.jobs == out.jobs
    assert back.behind(202) == out.behind(202) == [100, 200, 201]
    with pytest.raises(ValueError, match="bad forecast"):
        ForecastRun.from_obj({"now": 1})


def _trace(n: int, exact: bool) -> list:
    import random

    from fluxes.sim.workload import SimJob

    rng = random.Random(3)
    jobs = []
    for i in range(n):
        limit = rng.choice([60.0, 120.0, 600.0])
        ran = limit if exact else limit * rng.uniform(0.1, 1.0)
        jobs.append(SimJob(id=i + 1, submit=i * 20.0, size=rng.choice([1, 2, 4, 8]),
                           requested=limit, runtime=round(ran), userid=i % 3,
                           user=f"u{i % 3}", queue_label=""))
    return jobs


def test_forecast_eval_is_exact_when_jobs_run_their_limits() -> None:
    """Under fcfs, later submissions never move earlier jobs: with every job running to
    its limit, each forecast made at submission is the start it gets."""
    from fluxes.forecast.evaluate import evaluate
    from fluxes.sim.workload import Machine

    ev = evaluate(_trace(60, exact=True), Machine.uniform(1, 8), InstanceConfig(),
                  {"policy": "fcfs"}, every=2)
    rows = {r["predictor"]: r for r in ev.rows()}
    assert ev.probed == 30 and rows["forecast, limit"]["n"] == 30
    assert rows["forecast, limit"]["p90_s"] == 0.0
    # jobs shorter than their limits: the limit over-estimates, history does better
    ev = evaluate(_trace(60, exact=False), Machine.uniform(1, 8), InstanceConfig(),
                  {"policy": "easy"}, every=2)
    rows = {r["predictor"]: r for r in ev.rows()}
    assert rows["forecast, limit"]["median_s"] > 0
    assert rows["forecast, history"]["mean_s"] < rows["forecast, limit"]["mean_s"]
    assert "EASY head t_estimate" in rows and ev.text()[1].split()[0] == "predictor"


def test_cache_file_round_trip_and_staleness(tmp_path, monkeypatch) -> None:
    import os
    import time as _time

    from fluxes.service import forecasting

    _inv, snap = _full_instance()
    run = forecast(snap)
    path = tmp_path / "fc.json"
    forecasting._write_cached(path, run)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    back = forecasting._read_cached(path, 5.0)
    assert back is not None and back.jobs == run.jobs
    old = _time.time() - 10
    os.utime(path, (old, old))
    assert forecasting._read_cached(path, 5.0) is None  # stale
    path.write_text("not json")
    os.utime(path, None)
    assert forecasting._read_cached(path, 5.0) is None  # unreadable: made again


def test_dependencies_met_already_are_not_waited_on_again() -> None:
    inv = _inventory(1)
    job = _waiting(200, _spec(nnodes=1))
    met = Waiting(job.id, job.userid, job.urgency, job.priority, job.t_submit,
                  {**job.info, "dependencies": [{"scheme": "afterok", "value": 12345}]},
                  job.request)
    assert forecast(Snapshot(T0, InstanceConfig(), inv, (), (met,))).jobs[200].t_start == T0


def test_a_forecast_for_some_jobs_stops_once_they_started() -> None:
    inv, snap = _full_instance()
    many = tuple(_waiting(200 + i, _spec(nnodes=2, duration=30.0)) for i in range(50))
    snap = Snapshot(T0, InstanceConfig(), inv, snap.running, many)
    full = forecast(snap)
    some = forecast(snap, wanted=[201])
    assert full.complete and not some.complete
    assert some.jobs[201] == full.jobs[201] and some.behind(201) == full.behind(201)
    assert 202 not in some.jobs and some.passes < full.passes / 10
    # a job that is not waiting, or none: the first pass only
    assert forecast(snap, wanted=[999]).passes == 1
    # a wanted job that never starts: run to the end, it says never
    drained = Snapshot(T0, InstanceConfig(), inv, snap.running, many, drained=IDSet("1"))
    out = forecast(drained, wanted=[230])
    assert out.complete and out.jobs[230].t_start is None


def test_overlapping_running_jobs_keep_the_newer() -> None:
    """A snapshot read while a job ended and another took its node: the newer holds it."""
    inv = _inventory(1)
    old = _running(inv, 100, _spec(nnodes=1, duration=600.0), T0 - 500)
    new = _running(inv, 101, _spec(nnodes=1, duration=60.0), T0 - 10)
    snap = Snapshot(T0, InstanceConfig(), inv, (old, new), (_waiting(200, _spec(nnodes=1)),))
    assert forecast(snap).jobs[200].t_start == T0 + 50


def test_the_job_managers_limited_mode_moves_forecasts() -> None:
    """In the ``limited`` mode the job manager sends one alloc request at a time (limit
    1): the scheduler sees only the head, so nothing backfills past it."""
    inv = _inventory(2, 1)
    run = _running(inv, 100, _spec(nnodes=1, duration=100.0), T0)
    head = _waiting(200, _spec(nnodes=2, duration=60.0))
    short = _waiting(201, _spec(nnodes=1, duration=50.0))
    easy = forecast(Snapshot(T0, _policy("easy"), inv, (run,), (head, short)))
    assert [easy.jobs[j].t_start for j in (200, 201)] == [T0 + 100, T0]
    limited = InstanceConfig.from_toml('[policy.scheduler]\npolicy = "easy"\n'
                                       '[sched]\nmode = "limited"\nlimit = 1\n')
    one = forecast(Snapshot(T0, limited, inv, (run,), (head, short)))
    assert [one.jobs[j].t_start for j in (200, 201)] == [T0 + 100, T0 + 160]


def test_a_held_job_never_starts_and_holds_nobody_up() -> None:
    """Priority 0 (``--urgency=hold``): the job manager sends no alloc request for it."""
    inv = _inventory(1)
    held = _waiting(200, _spec(nnodes=1), priority=0)
    after = _waiting(201, _spec(nnodes=1))
    out = forecast(Snapshot(T0, InstanceConfig(), inv, (), (held, after)))
    assert out.jobs[200].t_start is None and out.jobs[201].t_start == T0
