"""``fluxes admin init`` on a bare Redis, then the workers started by hand, as a deployment does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from fluxes.cli.main import main
from fluxes.proc.redis_server import RedisServer
from fluxes.store.keys import Keys

pytestmark = pytest.mark.system

CONFIG = """
[[resource.config]]
hosts = "node[0-1]"
cores = "0-1"
"""


@pytest.fixture
def bare(real_redis: redis.Redis, redis_server: RedisServer) -> str:
    """The URI of an empty namespace on the session's redis-server."""
    return f"{redis_server.url}?ns=fxinit"


def init(uri: str, config: Path, *extra: str) -> int:
    return main(["admin", "init", "--uri", uri, "--config", str(config), *extra])


def test_bad_configuration_is_refused_and_nothing_is_stored(
        bare: str, real_redis: redis.Redis, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "syntax.toml": "[[resource.config]\nhosts = 1",
        "unknown.toml": "[resourse]\n",
        "empty.toml": "",
        "badhosts.toml": '[[resource.config]]\nhosts = "node[1-"\ncores = "0"\n',
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        assert init(bare, path) == 1, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("fluxes: "), err
    assert init(bare, tmp_path / "missing.toml") == 1
    assert "cannot read" in capsys.readouterr().err
    assert real_redis.keys("{fxinit}*") == []


def test_partitions_cannot_change(bare: str, real_redis: redis.Redis, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "instance.toml"
    path.write_text(CONFIG)
    assert init(bare, path, "--json") == 0
    assert '"new":true' in capsys.readouterr().out.replace(" ", "")
    key = Keys("fxinit").instance
    before = real_redis.hgetall(key)
    assert before[b"partitions"] == b"1" and before[b"config"] == CONFIG.encode()
    assert init(bare, path, "--partitions", "2") == 1
    assert "1 partitions" in capsys.readouterr().err
    assert real_redis.hget(key, "partitions") == b"1"
    path.write_text(CONFIG + '\n[exec]\nkill-timeout = "2s"\n')
    assert init(bare, path) == 0
    assert "updated the configuration" in capsys.readouterr().out
    assert real_redis.hget(key, "created") == before[b"created"]


@pytest.fixture
def workers(bare: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_workers_started_by_hand_run_jobs(bare: str, tmp_path: Path,
                                          workers: list[subprocess.Popen[bytes]]) -> None:
    path = tmp_path / "instance.toml"
    path.write_text(CONFIG)
    assert init(bare, path) == 0
    base = [sys.executable, "-m", "workers"]
    commands = [["ingest"], ["job-manager", "--partition", "0"], ["scheduler"], ["job-list"],
                *(["exec", "--ranks", str(r), "--state-dir", str(tmp_path / "exec")]
                  for r in (0, 1))]
    log = open(tmp_path / "workers.log", "ab")  # noqa: SIM115  # closed with the test's tmp
    for args in commands:
        workers.append(subprocess.Popen([*base, *args, "--uri", bare],
                                        stdout=log, stderr=subprocess.STDOUT))
    try:
        assert main(["--uri", bare, "run", "-N2", "-n2", "true"]) == 0
        assert main(["--uri", bare, "run", "sh", "-c", "exit 3"]) == 3
    finally:
        log.close()
