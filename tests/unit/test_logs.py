"""Log format: one JSON object per line when stderr is not a terminal, for normal log lines and
for the fatal error that stops a worker; one plain line on a terminal."""

from __future__ import annotations

import io
import logging
import os
import pty
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from fluxes.proc.logs import JsonFormatter, JsonLines, TextFormatter, wants_json

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "unix:///nonexistent/fluxes.sock?ns=fx"
#: A worker's normal log lines: what setup_logging gives every worker.
LOGS = ("from fluxes.proc.logs import setup_logging\n"
        "log = setup_logging('fluxes.test')\n"
        "log.info('started', extra={'worker': 'w1', 'n': 3})\n"
        "log.warning('dead letter', extra={'stream': 's', 'error': 'bad'})\n")


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FLUXES_LOG_FORMAT", "FLUXES_DEBUG")}
    return {**env, **extra}


def piped(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Run with stderr a pipe (not a terminal)."""
    return subprocess.run(argv, check=False, capture_output=True, text=True, env=environ(**env),
                          cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL)


def on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run with stdout and stderr a pseudo-terminal; exit status and what it printed."""
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=child, stderr=child,
                            env=environ(), cwd=ROOT)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(60), b"".join(chunks).decode().replace("\r\n", "\n")


def json_lines(text: str) -> list[dict[str, object]]:
    lines = text.splitlines()
    assert lines, "nothing was logged"
    out = []
    for line in lines:
        obj = orjson.loads(line)  # every line is one JSON object
        assert isinstance(obj, dict)
        assert {"ts", "level", "logger", "msg"} <= obj.keys()
        out.append(obj)
    return out


def test_normal_lines_are_json_off_a_terminal() -> None:
    done = piped([sys.executable, "-c", LOGS])
    assert done.returncode == 0
    first, second = json_lines(done.stderr)
    assert first["msg"] == "started" and first["level"] == "info"
    assert first["logger"] == "fluxes.test" and first["worker"] == "w1" and first["n"] == 3
    assert second["level"] == "warning" and second["error"] == "bad"


def test_normal_lines_are_text_on_a_terminal() -> None:
    code, out = on_a_terminal([sys.executable, "-c", LOGS])
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 and "info    fluxes.test: started" in lines[0]
    assert "worker=w1" in lines[0] and not lines[0].startswith("{")


@pytest.mark.parametrize("argv", [
    ["-m", "workers", "ingest", "--uri", UNREACHABLE],
    ["-m", "fluxes.cli.main", "worker", "job-list", "--uri", UNREACHABLE],
])
def test_fatal_error_is_one_json_line_off_a_terminal(argv: list[str]) -> None:
    done = piped([sys.executable, *argv])
    assert done.returncode == 1
    [fatal] = json_lines(done.stderr)
    assert fatal["level"] == "critical"
    assert fatal["logger"] in ("fluxes.ingest", "fluxes.job-list")
    assert str(fatal["msg"]).startswith("cannot reach the instance")


def test_usage_error_is_one_json_line_off_a_terminal() -> None:
    done = piped([sys.executable, "-m", "workers", "bogus"])
    assert done.returncode == 2
    [fatal] = json_lines(done.stderr)
    assert "invalid choice: 'bogus'" in str(fatal["msg"])


def test_fatal_error_is_one_plain_line_on_a_terminal() -> None:
    code, out = on_a_terminal([sys.executable, "-m", "workers", "ingest", "--uri", UNREACHABLE])
    assert code == 1
    [line] = out.splitlines()
    assert line.startswith("fluxes: cannot reach the instance")


def test_the_environment_forces_a_format() -> None:
    done = piped([sys.executable, "-c", LOGS], FLUXES_LOG_FORMAT="text")
    assert "info    fluxes.test: started" in done.stderr
    done = piped([sys.executable, "-m", "workers", "ingest", "--uri", UNREACHABLE],
                 FLUXES_LOG_FORMAT="text")
    assert done.stderr.startswith("fluxes: cannot reach the instance")


def test_json_lines_stream_splits_and_flushes() -> None:
    target = io.StringIO()
    stream = JsonLines(target, "fluxes.x", logging.ERROR)
    stream.write("fluxes: first\nsecond")
    stream.write(" half\n\n")
    stream.write("unterminated")
    stream.flush()
    objs = [orjson.loads(line) for line in target.getvalue().splitlines()]
    assert [o["msg"] for o in objs] == ["first", "second half", "unterminated"]
    assert {o["level"] for o in objs} == {"error"} and {o["logger"] for o in objs} == {"fluxes.x"}


def test_wants_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLUXES_LOG_FORMAT", raising=False)
    assert wants_json(io.StringIO())  # not a terminal
    monkeypatch.setenv("FLUXES_LOG_FORMAT", "text")
    assert not wants_json(io.StringIO())
    monkeypatch.setenv("FLUXES_LOG_FORMAT", "json")
    assert wants_json(io.StringIO())


def test_formatters_carry_extras() -> None:
    record = logging.makeLogRecord({"name": "fluxes.y", "levelno": 20, "levelname": "INFO",
                                    "msg": "hello %s", "args": ("you",), "extra_key": 5})
    obj = orjson.loads(JsonFormatter().format(record))
    assert obj["msg"] == "hello you" and obj["extra_key"] == 5 and obj["level"] == "info"
    assert TextFormatter().format(record).endswith("fluxes.y: hello you extra_key=5")
