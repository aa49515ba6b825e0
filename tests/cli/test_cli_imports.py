"""The hot commands import only what they use (start-up time, issue 26).

``fluxes --version`` and parsing ``fluxes submit`` / ``run`` / ``jobs`` import the
module of that command only (fluxes/cli/main.py, ``_COMMANDS``), and none of the
heavy libraries: redis (its package imports redis.asyncio), jsonschema (the jobspec
fast path accepts what the command line builds), yaml (only YAML text needs it).
Each check runs in a fresh interpreter, as a user's command does.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fluxes.cli import main as cli_main
from fluxes.cli.util import ArgumentParser, add_subcommands

#: Never imported by the hot commands below.
HEAVY = ("redis", "redis.asyncio", "jsonschema", "yaml", "fluxes.config",
         "fluxes.domain.jm.queues", "fluxes.store.instance", "fluxes.cli.cmd_batch",
         "fluxes.cli.cmd_account", "workers")

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
