"""Forecasts on a real instance (issue 28): ``fluxes jobs --forecast``, ``{t_forecast}``,
``fluxes job forecast``, read from the live state without writing to it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest

from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system

#: Upper bound of the wait for the job list to show a state (it lags by milliseconds).
CATCH_UP_S = 30.0


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance (2 nodes x 4 cores), forecasts not cached (each call reads
    the state as it is)."""
    from tests.system.conftest import running_instance

    with running_instance(config_text='[exec]\nkill-timeout = "2s"\n[forecast]\ncache = 0\n'
                          ) as inst:
        yield inst


def _listed(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> dict[int, dict]:
    assert cli(uri, "jobs", "--json", *args) == 0, capsys.readouterr().err
    return {j["id"]: j for j in orjson.loads(capsys.readouterr().out)["jobs"]}


def _wait_states(uri: str, capsys: pytest.CaptureFixture[str], want: dict[int, str]) -> dict:
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        jobs = _listed(uri, capsys, "-A", *map(str, want))
        if all(jobs.get(j, {}).get("state") == s for j, s in want.items()):
            return jobs
        assert time.monotonic() < deadline, f"jobs never listed as {want}: {jobs}"
        time.sleep(0.05)


def test_full_instance_forecasts_the_line(uri: str, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    """The issue's case: both nodes held by a job ending at its limit T, three 2-node
    jobs of 30 s waiting: T, T+30, T+60."""
    big = submit(uri, capsys, "-N2", "--exclusive", "-t", "120s", "sleep", "600")
    line = [submit(uri, capsys, "-N2", "--exclusive", "-t", "30s", "true") for _ in range(3)]
    jobs = _wait_states(uri, capsys, {big: "RUN", **{j: "SCHED" for j in line}})
    t_limit = jobs[big]["t_run"] + 120
    listed = _listed(uri, capsys, "--forecast")
    starts = [listed[j]["t_forecast"] for j in line]
    for got, want in zip(starts, [t_limit, t_limit + 30, t_limit + 60], strict=True):
        assert abs(got - want) <= 2, (starts, t_limit)
    assert big not in listed  # --forecast lists pending jobs
    # the -o field, and the default pending view's START column
    assert cli(uri, "jobs", "--forecast", "-n", "-o", "{id.dec} {t_forecast:.0f}") == 0
    out = capsys.readouterr().out.split()
    assert out[0::2] == [str(j) for j in line] or sorted(out[0::2]) == sorted(map(str, line))
    assert cli(uri, "jobs", "--forecast", "-n", "-o", "{id.dec}", "--sort=-t_forecast") == 0
    assert capsys.readouterr().out.split() == [str(j) for j in reversed(line)]
    assert cli(uri, "jobs", "--forecast") == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "START" in header.split()
    # job forecast: when, where, behind what
    assert cli(uri, "job", "forecast", str(line[1])) == 0
    text = capsys.readouterr().out
    assert "expected start" in text and "on:" in text and "waits behind:" in text
    assert cli(uri, "job", "forecast", "--json", str(line[1])) == 0
    got = orjson.loads(capsys.readouterr().out)
    assert got["behind"][:2] == [big, line[0]]
    assert got["ranks"] == "0-1"
    # a running job has no forecast: an error, not a traceback
    assert cli(uri, "job", "forecast", str(big)) == 1
    assert "is not pending" in capsys.readouterr().err
    # a held job never starts by itself: -
    held = submit(uri, capsys, "--urgency=hold", "-N1", "-t", "30s", "true")
    _wait_states(uri, capsys, {held: "SCHED"})
    assert _listed(uri, capsys, "--forecast")[held]["t_forecast"] == "-"
    cli(uri, "cancel", str(held))
    # forecasting wrote nothing: the jobs are as they were
    again = _listed(uri, capsys, "-A", str(big), *map(str, line))
    assert [again[j]["state"] for j in (big, *line)] == ["RUN", "SCHED", "SCHED", "SCHED"]
    for jobid in (big, *line):
        cli(uri, "cancel", str(jobid))
    capsys.readouterr()


def test_job_on_drained_nodes_shows_dash(uri: str, capsys: pytest.CaptureFixture[str],
                                         launcher: Launcher) -> None:
    assert cli(uri, "resource", "drain", "1", "forecast test") == 0
    try:
        capsys.readouterr()
        both = submit(uri, capsys, "-N2", "-t", "30s", "true")
        _wait_states(uri, capsys, {both: "SCHED"})
        deadline = time.monotonic() + CATCH_UP_S
        while True:  # the scheduler publishes the drain within its housekeeping (~1 s)
            assert cli(uri, "jobs", "--forecast", "-n", "-o", "{id.dec} {t_forecast}") == 0
            out = capsys.readouterr().out.split()
            if out == [str(both), "-"]:
                break
            assert time.monotonic() < deadline, out
            time.sleep(0.1)
        assert cli(uri, "job", "forecast", str(both)) == 0
        assert "no expected start" in capsys.readouterr().out
        cli(uri, "cancel", str(both))
    finally:
        cli(uri, "resource", "undrain", "1")
        capsys.readouterr()
