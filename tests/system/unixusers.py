"""Real UNIX users for system tests of privilege separation (they need root)."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest


def need_root_users() -> None:
    """Real UNIX users need root: skip without it, except under CI where it must be."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("these tests create UNIX users and need root, and CI is set")
        pytest.skip("creating UNIX users needs root")


def useradd(name: str) -> int:
    """Create a login-less user ``name`` with no home directory; its uid."""
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    return pwd.getpwnam(name).pw_uid


def userdel(name: str) -> None:
    """Remove user ``name`` (quietly, if it is gone already)."""
    subprocess.run(["userdel", name], check=False, capture_output=True)
