"""``fluxes resource reload`` on a real instance (3 nodes x 4 cores, one exec worker
each): the instance shrinks to two nodes and grows back, the scheduler and the
submission checks following; a reload that would pull a node from under a running
job needs ``-f``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.proc.launcher import Launcher
from tests.system.clitools import cli, submit

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    from tests.system.conftest import running_instance

    with running_instance(nodes=3) as inst:
        yield inst


def table(path: Path, hosts: str) -> str:
    path.write_text(f'[[resource.config]]\nhosts = "{hosts}"\ncores = "0-3"\n')
    return str(path)


def submitted(uri: str, capsys: pytest.CaptureFixture[str], *args: str
              ) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli(uri, "submit", *args)
    out, err = capsys.readouterr()
    return code, out.strip(), err


def accepted_within(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Submit until the ingest (which re-reads the resources once a second) accepts;
    the new job's id."""
    deadline = time.monotonic() + 30
    while True:
        code, out, err = submitted(uri, capsys, *args)
        if code == 0 or time.monotonic() > deadline:
            assert code == 0, err
            return out
        time.sleep(0.2)


def test_the_instance_shrinks_and_grows_back(launcher: Launcher, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    two, three = table(tmp_path / "two.toml", "node[0-1]"), table(tmp_path / "three.toml",
                                                                 "node[0-2]")
    # a job on every node: taking node2 away needs -f
    busy = submit(uri, capsys, "-N3", "-n3", "sleep", "300")
    assert cli(uri, "job", "wait-event", str(busy), "start") == 0
    capsys.readouterr()
    assert cli(uri, "resource", "reload", two) == 1
    assert "ranks 2 run jobs" in capsys.readouterr().err
    assert cli(uri, "cancel", str(busy)) == 0
    assert cli(uri, "job", "wait-event", str(busy), "clean") == 0
    capsys.readouterr()
    assert cli(uri, "resource", "reload", two) == 0
    assert capsys.readouterr().out == "fluxes resource reload: 2 nodes -node2\n"
    # the next command sees it: the scheduler applied the reload before it returned
    assert cli(uri, "resource", "list", "--json") == 0
    summary = orjson.loads(capsys.readouterr().out)
    assert summary["free"]["nodelist"] == "node[0-1]" and summary["free"]["ncores"] == 8
    assert cli(uri, "resource", "info") == 0
    assert capsys.readouterr().out == "2 Nodes, 8 Cores, 0 GPUs\n"
    # the submission check follows: three nodes no longer exist
    deadline = time.monotonic() + 30
    while True:
        code, _out, err = submitted(uri, capsys, "-N3", "true")
        if code != 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert code == 1 and "job requests 3 nodes, only 2 exist" in err
    assert cli(uri, "resource", "reload", two) == 0
    assert capsys.readouterr().out == "fluxes resource reload: no change\n"
    # back to three: node2's exec worker never left, so a job runs on all three
    assert cli(uri, "resource", "reload", three) == 0
    assert capsys.readouterr().out == "fluxes resource reload: 3 nodes +node2\n"
    job = accepted_within(uri, capsys, "-N3", "-n3", "hostname")
    assert cli(uri, "job", "attach", job) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted([launcher_host()] * 3)
    # a file that is no [resource] table, and one naming no host, change nothing
    bad = tmp_path / "bad.toml"
    bad.write_text("resource = 3\n")
    assert cli(uri, "resource", "reload", str(bad)) == 1
    assert cli(uri, "resource", "reload", str(tmp_path / "nosuch.toml")) == 1
    assert "cannot read" in capsys.readouterr().err


def launcher_host() -> str:
    import socket

    return socket.gethostname()
