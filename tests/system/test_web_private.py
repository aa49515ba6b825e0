"""``fluxes web`` run by its owner inside a private instance needs no secret of its own:
it uses (or makes) the one in the instance's state directory, as ``fluxes start --web`` does."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fluxes.proc.launcher import Launcher
from fluxes.proc.state_dir import private_state_dir
from fluxes.store.security import ENV_CREDENTIALS
from tests.system.conftest import need_redis
from tests.system.test_web import _wait_http, free_port

pytestmark = pytest.mark.system


def test_web_inside_a_private_instance_uses_its_state_directory_secret() -> None:
    need_redis()
    base = Path(tempfile.mkdtemp(prefix="fluxes-webp-", dir="/tmp"))
    launcher = Launcher(state_dir=base / "state", nodes=1, cores_per_node=1)
    web = None
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, "")
            launcher.start()
        assert launcher.uri is not None
        assert private_state_dir(launcher.uri.redis_url) == base / "state"
        port = free_port()
        env = dict(os.environ, FLUXES_URI=str(launcher.uri), FLUXES_CREDENTIALS="")
        web = subprocess.Popen([sys.executable, "-m", "fluxes.cli.main", "web", "--listen",
                                f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE)
        try:
            _wait_http(f"http://127.0.0.1:{port}/")
        except OSError:
            web.kill()
            raise AssertionError(web.communicate()[1].decode()) from None
        secret = base / "state" / "web-secret"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=30)
        launcher.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_only_an_owned_unshared_fluxes_start_socket_names_a_state_directory(
        tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    os.chmod(tmp_path, 0o700)
    assert private_state_dir(f"unix://{tmp_path}/redis/redis.sock") == tmp_path
    assert private_state_dir(f"unix://{tmp_path}/redis/other.sock") is None
    assert private_state_dir("redis://127.0.0.1:6379/0") is None
    os.chmod(tmp_path, 0o777)  # anyone could have planted a secret there
    assert private_state_dir(f"unix://{tmp_path}/redis/redis.sock") is None
