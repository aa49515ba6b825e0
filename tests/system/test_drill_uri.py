"""``fluxes drill --uri``: a drill on an instance started elsewhere (``fluxes start --detach``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.cli.main import main
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

FLUXES = str(Path(sys.executable).parent / "fluxes")


@pytest.fixture(scope="module")
def detached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need_redis()
    state = tmp_path_factory.mktemp("detached")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUXES_")}
    out = subprocess.run([FLUXES, "start", "--detach", "--nodes", "2", "--state-dir",
                          str(state)], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    uri = out.split("'")[1]
    try:
        yield uri
    finally:
        subprocess.run([FLUXES, "--uri", uri, "stop"], env=env, timeout=60, check=False)


@pytest.mark.parametrize("kind", ["job-manager", "scheduler", "exec"])
def test_drill_kills_the_running_instances_workers(
        detached: str, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--uri", detached, "--kill", kind, "--rounds", "2", "--jobs", "80",
                 "--seed", "5", "--json"]) == 0
    figures = orjson.loads(capsys.readouterr().out)
    assert figures["ok"] and figures["jobs"] == 80
    assert figures["kills_by_kind"] == {kind: 2}
    assert figures["recovery_max_s"] is not None


def test_redis_cannot_be_killed_through_uri(detached: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--uri", detached, "--kill", "redis"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--kill redis" in err
