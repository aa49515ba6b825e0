"""The command line as system tests drive it: in this process, against an instance's URI."""

from __future__ import annotations

import pytest

from fluxes.cli.main import main
from fluxes.formats.jobid import parse


def cli(uri: str, *args: str) -> int:
    """Run ``fluxes --uri URI ARGS...``; its exit code."""
    return main(["--uri", uri, *args])


def submit(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    """``fluxes submit ARGS...``, which must succeed; the new job's id."""
    assert cli(uri, "submit", *args) == 0, capsys.readouterr().err
    return parse(capsys.readouterr().out.strip().splitlines()[-1])
