"""Queues, policy rejections, dependencies, cancel in every state and drain, on real workers."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxes.cli.main import main
from fluxes.jobid import parse
from fluxes.launcher import Launcher
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

CONFIG = """
[policy.jobspec.defaults.system]
queue = "batch"
duration = "1h"

[queues.batch]

[queues.debug]
requires = ["debug"]
policy.limits.job-size.max.nnodes = 1
policy.limits.duration = "10m"
policy.jobspec.defaults.system.duration = "5m"

[queues.private]
policy.access.allow-user = ["nobody-here"]

[[resource.config]]
hosts = "node[0-1]"
cores = "0-3"

[[resource.config]]
hosts = "node1"
properties = ["debug"]
"""


@pytest.fixture(scope="module")
def uri() -> Iterator[str]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-admin-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), config_text=CONFIG)
        launcher.start()
        try:
            yield str(launcher.uri)
        finally:
            launcher.stop()


def run(uri: str, *args: str) -> int:
    return main(["--uri", uri, *args])


def submit(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert run(uri, "submit", *args) == 0, capsys.readouterr().err
    return parse(capsys.readouterr().out.strip().splitlines()[-1])


def wait_event(uri: str, jobid: int, event: str, *extra: str) -> None:
    assert run(uri, "job", "wait-event", "-t", "60s", *extra, str(jobid), event) == 0


@pytest.mark.parametrize(("args", "message"), [
    (["-q", "nope", "true"], "invalid queue 'nope' specified"),
    (["-q", "debug", "-N2", "true"], "job requests 2 nodes, queue debug allows at most 1"),
    (["-q", "debug", "-t", "1h", "true"], "exceeds the limit"),
    (["-q", "private", "true"], "not allowed to submit to queue private"),
    (["--urgency", "31", "-n", "0", "true"], ""),  # -n 0 is a bad jobspec
])
def test_rejections_give_one_line_and_store_nothing(uri: str, args: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "submit", *args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fluxes: ")
    assert message in err


def test_queue_requires_places_jobs_on_matching_nodes(uri: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    jobid = submit(uri, capsys, "-q", "debug", "hostname")
    assert run(uri, "job", "wait", str(jobid)) == 0
    capsys.readouterr()
    assert run(uri, "jobs", "-a", "-o", "{id.dec} {nodelist}", "-n") == 0
    assert f"{jobid} node1" in capsys.readouterr().out


def test_disable_enable_stop_start(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "queue", "disable", "debug", "-m", "maintenance") == 0
    time.sleep(1.5)  # the ingest re-reads queue states once a second
    assert run(uri, "submit", "-q", "debug", "true") == 1
    assert "queue debug is disabled: maintenance" in capsys.readouterr().err
    assert run(uri, "queue", "enable", "debug") == 0
    assert run(uri, "queue", "stop", "batch", "-m", "hold on") == 0
    jobid = submit(uri, capsys, "true")
    time.sleep(1.0)
    assert run(uri, "queue", "status", "batch") == 0
    assert "Scheduling is stopped: hold on" in capsys.readouterr().out
    assert run(uri, "jobs", "-o", "{id.dec} {status}", "-n") == 0
    assert f"{jobid} SCHED" in capsys.readouterr().out
    assert run(uri, "queue", "start", "batch") == 0
    assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    assert run(uri, "queue", "idle", "--timeout=60s") == 0
    assert run(uri, "queue", "drain", "--timeout=60s") == 0


def test_dependency_chain(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = submit(uri, capsys, "sh", "-c", "sleep 0.5")
    second = submit(uri, capsys, f"--dependency=afterok:{first}", "true")
    third = submit(uri, capsys, f"--dependency=afterany:{second}", "true")
    bad = submit(uri, capsys, f"--dependency=afternotok:{first}", "true")
    assert run(uri, "job", "wait", "-t", "60s", str(third)) == 0
    wait_event(uri, bad, "clean")
    assert run(uri, "job", "eventlog", str(bad)) == 0
    assert "type=\"dependency\"" in capsys.readouterr().out


def test_cancel_in_every_state(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = submit(uri, capsys, "sleep", "100")
    depend = submit(uri, capsys, f"--dependency=afterok:{blocker}", "true")   # DEPEND
    held = submit(uri, capsys, "--urgency", "hold", "true")                   # SCHED, held
    wait_event(uri, blocker, "start")                                         # RUN
    for jobid in (depend, held, blocker):
        assert run(uri, "cancel", str(jobid)) == 0
        wait_event(uri, jobid, "clean")
    capsys.readouterr()
    assert run(uri, "jobs", "-a", "-o", "{id.dec} {result}", "-n") == 0
    out = capsys.readouterr().out
    for jobid in (depend, held, blocker):
        assert f"{jobid} CANCELED" in out


def test_drain_and_undrain(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(uri, "resource", "drain", "node0", "testing") == 0
    time.sleep(1.5)  # the scheduler reads resource events once a second
    ids = [submit(uri, capsys, "hostname") for _ in range(3)]
    for jobid in ids:
        assert run(uri, "job", "wait", "-t", "60s", str(jobid)) == 0
    capsys.readouterr()
    assert run(uri, "jobs", "-a", "-c", "3", "-o", "{nodelist}", "-n") == 0
    assert set(capsys.readouterr().out.split()) == {"node1"}
    assert run(uri, "resource", "status") == 0
    assert "testing" in capsys.readouterr().out
    assert run(uri, "resource", "undrain", "node0") == 0
