"""Progress of long operations: a bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Reports ``done`` out of ``total`` for a named operation (when enabled)."""

    def __init__(self, what: str, total: int, enabled: bool = True,
                 stream: TextIO | None = None, interval: float = 0.1) -> None:
        self.what = what
        self.total = max(total, 0)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.interval = interval if self.tty else max(interval, 1.0)
        self.started = time.monotonic()
        self._shown = 0.0
        self.done_count = 0

    def update(self, done: int) -> None:
        """Record progress; redraw at most every ``interval`` seconds."""
        self.done_count = done
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._shown < self.interval and done < self.total:
            return
        self._shown = now
        rate = done / max(now - self.started, 1e-6)
        if self.tty:
            width = 30
            filled = int(width * done / self.total) if self.total else width
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r{self.what} [{bar}] {done}/{self.total} {rate:,.0f}/s")
        else:
            self.stream.write(f"{self.what}: {done}/{self.total} ({rate:,.0f}/s)\n")
        self.stream.flush()

    def done(self) -> None:
        """Finish the display (a newline after a bar)."""
        if self.enabled:
            self.update(self.done_count if self.done_count else self.total)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()
