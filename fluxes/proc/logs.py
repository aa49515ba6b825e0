"""Logging set-up: one JSON object per line when stderr is not a terminal.

``FLUXES_LOG_FORMAT=json`` or ``text`` forces either format. A worker's fatal
error (the one line ``fluxes: ...`` a command prints before exiting) goes
through :func:`error_stream`, so a log collector reading a worker's stderr
sees nothing but JSON objects, the last of them saying why it stopped.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import time
from typing import IO, Any, TextIO, cast

import orjson


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: time, level, logger, message and extras."""

    _SKIP = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as compact JSON."""
        obj: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._SKIP and not key.startswith("_"):
                obj[key] = value
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(obj, default=str).decode()


class TextFormatter(logging.Formatter):
    """Human format for terminals: time, logger, message and extras as key=value."""

    _SKIP = JsonFormatter._SKIP

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one readable line."""
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items()
                          if k not in self._SKIP and not k.startswith("_"))
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        return f"{line} {extras}" if extras else line


def wants_json(stream: IO[str] | None = None) -> bool:
    """Whether log lines on ``stream`` (default stderr) are JSON: ``$FLUXES_LOG_FORMAT``
    (``json`` or ``text``) decides, else JSON unless the stream is a terminal."""
    wanted = os.environ.get("FLUXES_LOG_FORMAT", "")
    if wanted in ("json", "text"):
        return wanted == "json"
    target = stream if stream is not None else sys.stderr
    try:
        return not target.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return True


class JsonLines(io.TextIOBase):
    """A text stream that writes each line it is given as one JSON log record (the fatal
    error a worker prints on its way out), in :class:`JsonFormatter`'s shape."""

    def __init__(self, target: IO[str], logger: str, level: int = logging.CRITICAL) -> None:
        super().__init__()
        self.target = target
        self.logger = logger
        self.level = level
        self._partial = ""

    def writable(self) -> bool:
        """Always: this is an output stream."""
        return True

    def write(self, text: str) -> int:
        """Turn every complete line of ``text`` into a JSON record."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        """Emit a line still waiting for its newline, then flush the target."""
        if self._partial:
            line, self._partial = self._partial, ""
            self._emit(line)
        self.target.flush()

    def _emit(self, line: str) -> None:
        if not line.strip():
            return
        # run_cli prefixes the program name, which a log record carries as its logger
        msg = line[len("fluxes: "):] if line.startswith("fluxes: ") else line
        record = logging.makeLogRecord({"name": self.logger, "levelno": self.level,
                                        "levelname": logging.getLevelName(self.level),
                                        "msg": msg})
        self.target.write(JsonFormatter().format(record) + "\n")


def error_stream(logger: str) -> TextIO:
    """Where a worker process prints its fatal error: stderr as it is on a terminal, else
    stderr through :class:`JsonLines` (so the error is a JSON record like every log line)."""
    if not wants_json():
        return sys.stderr
    return cast(TextIO, JsonLines(sys.stderr, logger))


def setup_logging(name: str, level: str | None = None) -> logging.Logger:
    """Configure the root logger once and return the logger ``name``."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if wants_json() else TextFormatter())
        root.addHandler(handler)
        wanted = (level or os.environ.get("FLUXES_LOG_LEVEL", "INFO")).upper()
        if wanted not in logging.getLevelNamesMapping():
            # a typo in the environment must not stop a worker from starting
            root.setLevel(logging.INFO)
            root.warning("unknown FLUXES_LOG_LEVEL %r, using INFO", wanted)
        else:
            root.setLevel(wanted)
    return logging.getLogger(name)
