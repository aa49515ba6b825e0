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
        # what the display says now: a count is never shown twice in a row,
        # so the final count is not repeated by done() after the last update
        self._shown_count: int | None = None
        self.done_count = 0

    def update(self, done: int) -> None:
        """Record progress; redraw at most every ``interval`` seconds."""
        self.done_count = done
        if not self.enabled or done == self._shown_count:
            return
        now = time.monotonic()
        if now - self._shown < self.interval and done < self.total:
            return
        self._draw(now)

    def _draw(self, now: float) -> None:
        done = self.done_count
        self._shown = now
        self._shown_count = done
        rate = done / max(now - self.started, 1e-6)
        if self.tty:
            width = 30
            filled = min(width, int(width * done / self.total)) if self.total else width
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r{self.what} [{bar}] {done}/{self.total} {rate:,.0f}/s")
        else:
            self.stream.write(f"{self.what}: {done}/{self.total} ({rate:,.0f}/s)\n")
        self.stream.flush()

    def message(self, line: str) -> None:
        """Print ``line`` (on the progress stream) without garbling a bar.

        On a terminal the bar is cleared, the line printed and the bar drawn
        again below it; otherwise the line is just printed.
        """
        if self.tty and self._shown_count is not None:
            self.stream.write("\r\033[K" + line + "\n")
            self._draw(time.monotonic())
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def done(self) -> None:
        """Finish the display: the final count (once), and a newline after a bar."""
        if not self.enabled:
            return
        if self._shown_count != self.done_count:
            self._draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
