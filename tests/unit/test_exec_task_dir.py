"""Where ``fluxes start`` puts its exec workers' task files: on tmpfs when the state
directory is on a disk (fluxes/proc/state_dir.py ``fast_exec_dir``), private, one
per state directory, removed when the instance stops."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fluxes.proc import state_dir as sd
from fluxes.proc.launcher import Launcher

needs_shm = pytest.mark.skipif(sd.mount_type("/dev/shm") != "tmpfs",
                               reason="no tmpfs at /dev/shm")


def test_mount_type_names_the_deepest_mount() -> None:
    assert sd.mount_type("/") is not None
    if sd.mount_type("/dev/shm") == "tmpfs":
        assert sd.mount_type("/dev/shm/no/such/file") == "tmpfs"


@needs_shm
def test_a_disk_state_dir_gets_a_private_tmpfs_task_dir(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(sd, "mount_type", lambda p: "tmpfs" if str(p).startswith(
        "/dev/shm") else "ext4")
    fast = sd.fast_exec_dir(tmp_path / "state")
    assert fast is not None
    assert fast.parent == Path(f"/dev/shm/fluxes-exec-{os.getuid()}")
    info = os.lstat(fast.parent)
    assert info.st_uid == os.geteuid() and not info.st_mode & 0o077
    # one per state directory, the same for a restarted one
    assert sd.fast_exec_dir(tmp_path / "state") == fast
    assert sd.fast_exec_dir(tmp_path / "other") != fast


def test_a_tmpfs_state_dir_keeps_its_own(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sd, "mount_type", lambda p: "tmpfs")
    assert sd.fast_exec_dir(tmp_path) is None


@needs_shm
def test_a_base_of_another_user_or_open_to_all_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "shm"
    base.mkdir()
    mine = base / f"fluxes-exec-{os.getuid()}"
    mine.mkdir(mode=0o777)
    mine.chmod(0o777)  # someone made it writable by all: refused
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    real_mount = sd.mount_type
    monkeypatch.setattr(sd, "mount_type", lambda p: "tmpfs" if str(p).startswith(
        (str(base), "/dev/shm")) else real_mount(p))
    fast = sd.fast_exec_dir(tmp_path / "state")
    assert fast is None or not str(fast).startswith(str(base))
    mine.chmod(0o700)
    assert str(sd.fast_exec_dir(tmp_path / "state")).startswith(str(mine))


def test_the_launcher_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = tmp_path / "fast" / "i-1"
    monkeypatch.setattr("fluxes.proc.launcher.fast_exec_dir", lambda state: fast)
    assert Launcher(state_dir=tmp_path / "s").task_dir() == fast
    # jobs run as their users: the state directory's own, whose permissions it sets
    assert Launcher(state_dir=tmp_path / "s", require_auth=True).task_dir() == \
        tmp_path / "s" / "exec"
    assert Launcher(state_dir=tmp_path / "s", exec_dir=tmp_path / "x").task_dir() == \
        tmp_path / "x"
    monkeypatch.setattr("fluxes.proc.launcher.fast_exec_dir", lambda state: None)
    assert Launcher(state_dir=tmp_path / "s").task_dir() == tmp_path / "s" / "exec"


def test_stop_removes_the_tmpfs_task_dir_only(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fast = tmp_path / "fast" / "i-1"
    monkeypatch.setattr("fluxes.proc.launcher.fast_exec_dir", lambda state: fast)
    launcher = Launcher(state_dir=tmp_path / "s")
    (launcher.task_dir() / "rank0").mkdir(parents=True)
    launcher.stop()
    assert not fast.exists()
    given = tmp_path / "given"
    (given / "rank0").mkdir(parents=True)
    launcher = Launcher(state_dir=tmp_path / "s", exec_dir=given)
    launcher.task_dir()
    launcher.stop()
    assert given.exists() and stat.S_ISDIR(os.lstat(given).st_mode)
