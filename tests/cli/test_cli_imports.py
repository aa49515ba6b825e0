"""The hot commands import only what they use (start-up time, issue 26).

``fluxes --version`` and parsing ``fluxes submit`` / ``run`` / ``jobs`` import the
module of that command only (fluxes/cli/main.py, ``_COMMANDS``), and none of the
heavy libraries: redis (its package imports redis.asyncio), jsonschema (the jobspec
fast path accepts what the command line builds), yaml (only YAML text needs it).
Each check runs in a fresh interpreter, as a user's command does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from fluxes.cli import main as cli_main
from fluxes.cli.util import ArgumentParser, add_subcommands

#: Never imported by the hot commands below.
HEAVY = ("redis", "redis.asyncio", "jsonschema", "yaml", "fluxes.config",
         "fluxes.domain.jm.queues", "fluxes.store.instance", "fluxes.cli.cmd_batch",
         "fluxes.cli.cmd_account", "workers")
#: Nor these, unless an option needs them (submit --cc makes copies with the job
#: manager's array code, which hashes): the message module (msgspec and every message
#: type), OpenSSL's hashes, the secrets module, and argparse's way to the terminal's
#: width (shutil, zlib, bz2, lzma).
UNNEEDED = ("fluxes.messages", "msgspec", "hashlib", "secrets", "shutil")

_PROBE = """
import json, sys
from fluxes.cli.main import main
argv = json.loads(sys.argv[1])
import io, contextlib
with contextlib.redirect_stdout(io.StringIO()):
    main(argv)
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after running ``fluxes ARGV``."""
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], check=True,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    return set(json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.parametrize("argv", [
    ["--version"],
    ["submit", "--dry-run", "-n2", "-t", "5m", "--cc=1-3", "--env=-*", "true"],
    ["run", "--help"],
    ["jobs", "--help"],
], ids=lambda a: " ".join(a[:2]))
def test_hot_commands_import_little(argv: list[str]) -> None:
    loaded = _modules_after(argv)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    if "--cc=1-3" not in argv:
        assert not loaded & set(UNNEEDED), sorted(loaded & set(UNNEEDED))
    commands = {m for m in loaded if m.startswith("fluxes.cli.cmd_")}
    if argv[0].startswith("-"):
        assert not commands
    else:
        # its own command module, and the few a command module borrows from
        assert commands <= {f"fluxes.cli.{cli_main._COMMANDS[argv[0]]}", "fluxes.cli.cmd_queue"}


def test_command_table_names_every_command() -> None:
    """``_COMMANDS`` maps each command to the module that registers it (a command
    missing there works, but builds the whole parser: slow)."""
    found: dict[str, str] = {}
    for group in cli_main._GROUPS:
        parser = ArgumentParser(prog="fluxes")
        sub = add_subcommands(parser, "commands")
        __import__(f"fluxes.cli.{group}", fromlist=["register"]).register(sub)
        found.update(dict.fromkeys(sub.choices, group))
    assert found == cli_main._COMMANDS


@pytest.mark.parametrize(("argv", "word"), [
    (["submit", "-n2", "true"], "submit"), (["--uri", "unix:///x", "jobs"], "jobs"),
    (["--version"], None), (["-h"], None), (["--", "x"], None), ([], None),
])
def test_command_word(argv: list[str], word: str | None) -> None:
    assert cli_main.command_word(argv) == word


def test_help_and_unknown_commands_build_every_command() -> None:
    assert cli_main._groups_for([]) == cli_main._GROUPS
    assert cli_main._groups_for(["--help"]) == cli_main._GROUPS
    assert cli_main._groups_for(["help", "submit"]) == cli_main._GROUPS
    assert cli_main._groups_for(["nosuch"]) == cli_main._GROUPS
    assert cli_main._groups_for(["--version"]) == ()
    assert cli_main._groups_for(["run", "true"]) == ("cmd_submit",)


_SUBMIT_PROBE = """
import json, sys
from argparse import Namespace
from fluxes import messages as proto
from fluxes.cli.util import instance
from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
inst = instance(Namespace(uri=sys.argv[1], _lite=True))
spec = Jobspec.from_command(["true"], environment={"A": "1"}).to_dict()
Client(inst)._post([proto.SubmitJobs(req="probe", jobs=[proto.SubmitItem(jobspec=spec)])])
print(json.dumps(sorted(sys.modules)))
"""


def test_submit_talks_to_redis_without_redis_py(redis_server: Any, real_redis: Any) -> None:
    """What ``fluxes submit`` does after parsing (connect, read the instance, post the
    request) goes through fluxes.store.lite: redis-py is never imported."""
    out = subprocess.run([sys.executable, "-c", _SUBMIT_PROBE, redis_server.url + "?ns=t"],
                         check=True, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not {m for m in loaded if m == "redis" or m.startswith("redis.")}
    assert not loaded & {"jsonschema", "yaml", "fluxes.config"}
    assert real_redis.xlen("{t}:submit:" + _user()) == 1


_JOBS_PROBE = """
import io, json, sys, contextlib
from fluxes.cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["--uri", sys.argv[1], "jobs", "-a", "--stats"])
print(json.dumps([code, out.getvalue(), sorted(sys.modules)]))
"""


def test_jobs_lists_without_redis_py(redis_server: Any) -> None:
    """``fluxes jobs`` reads the job list (its position, indexes and counters) through
    fluxes.store.lite: neither redis-py nor the instance configuration is imported."""
    out = subprocess.run([sys.executable, "-c", _JOBS_PROBE, redis_server.url + "?ns=t"],
                         check=True, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    code, printed, modules = json.loads(out.stdout.splitlines()[-1])
    assert code == 0
    assert printed.splitlines()[0].startswith("0 running, 0 completed")
    assert "JOBID" in printed.splitlines()[1]
    loaded = set(modules)
    assert not {m for m in loaded if m == "redis" or m.startswith("redis.")}
    connected = {*HEAVY, *UNNEEDED} - {"fluxes.store.instance"}  # it talks to an instance
    assert not loaded & connected, sorted(loaded & connected)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def test_following_a_job_imports_no_redis_py() -> None:
    """``fluxes run`` follows its job with the modules below (attach, the event decoder,
    the job model, the client, the reader of the owner's private note): none imports
    redis-py."""
    loaded = _loaded_by("fluxes.cli.attach, fluxes.store.entries, fluxes.domain.job.model",
                        "fluxes.store.private",
                        "fluxes.store.client, fluxes.store.lite, fluxes.store.instance")
    assert not {m for m in loaded if m == "redis" or m.startswith("redis.")}
    # fluxes run as it is: the client (and the message module) only to cancel on a
    # second Ctrl-C
    lean = _loaded_by("fluxes.cli.cmd_submit, fluxes.cli.attach, fluxes.store.entries",
                      "fluxes.domain.job.model, fluxes.store.private, fluxes.store.lite",
                      "fluxes.store.instance, fluxes.store.lite_submit")
    assert not lean & set(UNNEEDED), sorted(lean & set(UNNEEDED))


def _loaded_by(*imports: str) -> set[str]:
    """The modules a fresh interpreter holds after ``import`` of each line."""
    probe = "import json, sys\n" + "".join(f"import {line}\n" for line in imports) + \
        "print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"})
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_owner_field_is_the_job_hash_s() -> None:
    from fluxes.cli.attach import OWNER_FIELD
    from fluxes.store.jobhash import OWNER

    assert OWNER_FIELD == OWNER


_EXIT_PROBE = """
import atexit, sys
class Noisy:
    def __del__(self):
        sys.stdout.write("teardown\\n")
noisy = Noisy()  # freed, and heard, only if the interpreter tears down
if sys.argv[1] == "atexit":
    atexit.register(lambda: sys.stdout.write("atexit\\n"))
sys.argv[1:] = sys.argv[2:]
from fluxes.cli.main import main
sys.exit(main())
"""


def _exit_probe(mode: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _EXIT_PROBE, mode, *argv],
                          check=False, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})


def test_short_commands_skip_the_teardown_but_flush_their_output() -> None:
    """``fluxes --version`` and the commands whose parser says ``_quick_exit`` end
    without the interpreter's teardown (start-up time, issue 26), after their output
    (a pipe here: block-buffered) is flushed, with their exit code."""
    from fluxes import __version__

    done = _exit_probe("plain", "--version")
    assert (done.returncode, done.stdout) == (0, f"fluxes {__version__}\n")
    spec = _exit_probe("plain", "submit", "--dry-run", "--env=-*", "--cc=1-200", "true")
    assert spec.returncode == 0
    assert len(spec.stdout.splitlines()) == 200  # ~100 KB: every buffer flushed
    assert "teardown" not in spec.stdout
    usage = _exit_probe("plain", "submit", "--dry-run")
    assert usage.returncode == 2 and "no command" in usage.stderr


def test_pending_atexit_callbacks_or_other_commands_get_the_teardown() -> None:
    """With an atexit callback registered, or a command that does not say it leaves
    nothing to the teardown, the process ends the ordinary way."""
    hooked = _exit_probe("atexit", "submit", "--dry-run", "true")
    assert hooked.returncode == 0
    assert hooked.stdout.splitlines()[-2:] == ["atexit", "teardown"]
    other = _exit_probe("plain", "jobspec", "--help")
    assert other.returncode == 0 and other.stdout.endswith("teardown\n")


@pytest.mark.parametrize("columns", ["50", "133", "", "junk"])
def test_help_is_as_wide_as_argparse_makes_it(monkeypatch: pytest.MonkeyPatch,
                                               columns: str) -> None:
    """Our parsers learn the terminal's width without shutil; argparse's own rule."""
    import argparse

    monkeypatch.setenv("COLUMNS", columns)
    ours = ArgumentParser(prog="fluxes")._get_formatter()
    assert ours._width == argparse.HelpFormatter("fluxes")._width


_MAIN_PROBE = """
import io, json, sys, contextlib
from fluxes.cli.main import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = main(json.loads(sys.argv[1]))
print(json.dumps([code, out.getvalue(), err.getvalue(), sorted(sys.modules)]))
"""


def _as_ingest(client: Any, stream: str, answer: bytes | None) -> Any:
    """Play the ingest for one request on ``stream``: read it, answer ``answer`` (None:
    the job's id, 42); the request decoded."""
    from fluxes import messages as proto

    entries = client.xread({stream: "0-0"}, count=1, block=30_000)
    [[_name, [(_sid, fields)]]] = entries
    request = proto.decode_request(fields)
    reply = answer if answer is not None else proto.encode_reply(
        proto.Reply(jobs=[proto.JobResult(id=42)]))
    client.rpush(f"{{t}}:reply:{_user()}:{request.req}", reply)
    return request


@pytest.mark.parametrize(("answer", "problem"), [
    (None, ""),
    (b'{"jobs": [{"error": "job requests 99 cores"}]}', "fluxes: job requests 99 cores\n"),
    (b'{"errors": ["queue q is disabled"]}', "fluxes: queue q is disabled\n"),
    (b'{"jobs": "no"}', "malformed answer from the instance: reply:"),
], ids=["id", "refused", "refused-whole", "malformed"])
def test_submit_posts_and_reads_without_the_message_module(
        redis_server: Any, real_redis: Any, answer: bytes | None, problem: str) -> None:
    """``fluxes submit`` (one job) sends the client's request and says what the client
    would of each answer, without importing msgspec or the message module (a
    malformed answer goes to the message module's decoder)."""
    import threading

    from fluxes import messages as proto

    argv = ["--uri", redis_server.url + "?ns=t", "submit", "--urgency=hold", "true"]
    got: list[Any] = []
    ingest = threading.Thread(target=lambda: got.append(_as_ingest(
        real_redis, "{t}:submit:" + _user(), answer)))
    ingest.start()
    out = subprocess.run([sys.executable, "-c", _MAIN_PROBE, json.dumps(argv)], check=True,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    ingest.join()
    code, stdout, stderr, modules = json.loads(out.stdout.splitlines()[-1])
    [request] = got
    assert isinstance(request, proto.SubmitJobs) and request.jobs[0].urgency == 0
    assert request.jobs[0].jobspec is not None
    assert request.jobs[0].jobspec["tasks"][0]["command"] == ["true"]
    if problem:
        assert code == 1 and stdout == "" and problem in stderr
    else:
        assert code == 0 and stderr == ""
        from fluxes.formats.jobid import encode

        assert stdout == encode(42, "f58") + "\n"
    if "malformed" not in problem:
        loaded = set(modules)
        assert not {m for m in loaded if m.split(".")[0] in ("msgspec", "redis")}
        assert "fluxes.messages" not in loaded


def test_a_second_ctrl_c_within_2s_still_cancels_the_job(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``fluxes run`` imports the full client only when a second Ctrl-C cancels the job;
    then it cancels it and follows the output to the end, as before."""
    from types import SimpleNamespace

    from fluxes.cli import attach
    from fluxes.store.client import Client

    interrupts = [KeyboardInterrupt(), KeyboardInterrupt()]
    ended: Any = SimpleNamespace(exit_code=143)
    inst: Any = SimpleNamespace()

    def follow(*args: Any, **kwargs: Any) -> Any:
        if interrupts:
            raise interrupts.pop()
        return ended

    canceled: list[tuple[list[int], str]] = []
    monkeypatch.setattr(attach, "follow", follow)
    monkeypatch.setattr(attach, "print_redirections", lambda *a, **k: None)
    monkeypatch.setattr(Client, "__init__", lambda self, inst: None)
    monkeypatch.setattr(Client, "cancel", lambda self, ids, note="": canceled.append(
        (list(ids), note)))
    assert attach.follow_interruptible(inst, 42, jobspec_text="{}") is ended
    assert canceled == [([42], "interrupted")]
    assert capsys.readouterr().err.splitlines()[-1].endswith(": canceled")
