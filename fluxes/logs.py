"""Logging set-up: one JSON object per line when stderr is not a terminal."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

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


def setup_logging(name: str, level: str | None = None) -> logging.Logger:
    """Configure the root logger once and return the logger ``name``."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        json_wanted = os.environ.get("FLUXES_LOG_FORMAT", "")
        use_json = json_wanted == "json" or (json_wanted != "text" and not sys.stderr.isatty())
        handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
        root.addHandler(handler)
        wanted = (level or os.environ.get("FLUXES_LOG_LEVEL", "INFO")).upper()
        if wanted not in logging.getLevelNamesMapping():
            # a typo in the environment must not stop a worker from starting
            root.setLevel(logging.INFO)
            root.warning("unknown FLUXES_LOG_LEVEL %r, using INFO", wanted)
        else:
            root.setLevel(wanted)
    return logging.getLogger(name)
