"""No identity a user can obtain runs Lua of its own (docs/security.md): a batch job's
child identity may not EVAL (a busy loop would stall every user's Redis), load a
function or read the memory report, while its child instance works on our Redis
functions (FCALL); the attribute set by hand on a plain job gets no identity."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.formats.jobid import parse
from fluxes.proc.launcher import Launcher
from fluxes.store import acl
from fluxes.store.instance import Instance
from fluxes.store.security import ENV_CREDENTIALS
from tests.system.clitools import cli, submit
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

#: Run by the batch script with the credentials its tasks got: what the identity may do.
PROBE = """
import os, redis
from fluxes.store.instance import Instance
r = Instance.connect(os.environ["FLUXES_URI"]).redis
print("whoami=" + r.execute_command("ACL", "WHOAMI").decode())
for name, call in [
        ("eval", lambda: r.eval("return redis.call('TIME')[1]", 0)),
        ("eval_ro", lambda: r.execute_command("EVAL_RO", "return 1", 0)),
        ("script", lambda: r.script_load("return 1")),
        ("function", lambda: r.execute_command(
            "FUNCTION", "LOAD", "#!lua name=mine\\nredis.register_function('mine', "
            "function() return 1 end)")),
        ("memory", lambda: r.execute_command("MEMORY", "STATS"))]:
    try:
        call()
        print(name + "=allowed")
    except redis.exceptions.NoPermissionError:
        print(name + "=refused")
"""


@pytest.fixture
def launcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[Launcher]:
    """A password-protected instance (so jobs' children get identities), 2 x 1 cores."""
    need_redis()
    monkeypatch.setenv(ENV_CREDENTIALS, "")
    monkeypatch.delenv("FLUXES_URI", raising=False)
    with tempfile.TemporaryDirectory(prefix="fluxes-childlua-") as tmp:
        inst = Launcher(state_dir=Path(tmp) / "state", nodes=2, cores_per_node=1,
                        require_auth=True)
        inst.start()
        monkeypatch.setenv(ENV_CREDENTIALS, str(inst.credentials))
        try:
            yield inst
        finally:
            inst.stop()


def eventlog(inst: Instance, jobid: int) -> list[tuple[str, dict[str, object]]]:
    return [(f[b"n"].decode(), orjson.loads(f.get(b"c", b"{}")))
            for _i, f in inst.redis.xrange(inst.keys.eventlog(jobid))]


def ended(inst: Instance, jobid: int) -> dict[str, object]:
    """Wait for the job's end; its finish event's context."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        events = eventlog(inst, jobid)
        if any(n == "clean" for n, _c in events):
            return next(c for n, c in events if n == "finish")
        time.sleep(0.1)
    raise AssertionError(f"job {jobid} did not end: {eventlog(inst, jobid)}")


def test_a_child_identity_runs_no_lua_of_its_own_while_its_instance_works(
        launcher: Launcher, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    uri = str(launcher.uri)
    admin = Instance.connect(uri)
    fluxes = f"{sys.executable} -m fluxes.cli.main"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = tmp_path / "out.txt"
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/sh\n"
                      f"{fluxes} run -N2 -n2 echo step-ran || exit 90\n"
                      f"{sys.executable} {probe} || exit 91\n")
    assert cli(uri, "batch", "-N2", "--cwd", str(tmp_path), f"--output={out}",
               str(script)) == 0, capsys.readouterr().err
    jobid = parse(capsys.readouterr().out.strip().splitlines()[-1])
    finish = ended(admin, jobid)
    assert out.exists(), eventlog(admin, jobid)
    text = out.read_text()
    assert finish["status"] == 0, text
    # the child instance worked (its workers call our functions as the child identity)
    assert text.count("step-ran\n") == 2, text
    assert f"whoami=child:fx.{jobid}:" in text, text
    for what in ("eval", "eval_ro", "script", "function", "memory"):
        assert f"{what}=refused" in text, text
    # a plain job with the attribute set by hand mints no identity
    before = acl.users(admin.redis)
    plain = submit(uri, capsys, "--setattr=system.child-instance=true", "--cwd", "/tmp",
                   "sh", "-c", 'echo "creds=${FLUXES_CREDENTIALS:-none}"; sleep 1')
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            n == "start" for n, _c in eventlog(admin, plain)):
        time.sleep(0.1)
    assert not {u for u in acl.users(admin.redis) - before if u.startswith("child:")}
    assert ended(admin, plain)["status"] == 0
    assert cli(uri, "job", "attach", str(plain)) == 0
    shown = capsys.readouterr().out
    assert "creds=" in shown and "child-credentials" not in shown, shown
