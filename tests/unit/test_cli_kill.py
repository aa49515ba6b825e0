"""``fluxes job kill``'s signal argument."""

from __future__ import annotations

import argparse
import signal

import pytest

from fluxes.cli.cmd_kill import parse_signal


@pytest.mark.parametrize(("text", "number"), [
    ("USR1", signal.SIGUSR1), ("SIGUSR1", signal.SIGUSR1), ("usr1", signal.SIGUSR1),
    ("term", signal.SIGTERM), ("9", 9), (" 10 ", 10),
])
def test_signal_names_and_numbers(text: str, number: int) -> None:
    assert parse_signal(text) == number


@pytest.mark.parametrize(("text", "error"), [
    ("NOSUCH", "unknown signal 'NOSUCH'"), ("0", "out of range"),
    (str(signal.NSIG), "out of range"), ("-1", "unknown signal"), ("", "unknown signal"),
    ("SIG_DFL", "unknown signal"),
])
def test_bad_signals(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=error):
        parse_signal(text)
