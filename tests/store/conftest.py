"""Store tests step workers in-process: an idle blocking read need not last a second."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def short_blocking_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle worker step returns after 10 ms instead of 0.5-1 s (its blocking read's
    timeout): the harnesses step workers in turn, so a long block is pure waiting."""
    import workers.ingest
    import workers.jobmanager
    import workers.scheduler

    monkeypatch.setattr(workers.jobmanager, "MAX_BLOCK_MS", 10)
    monkeypatch.setattr(workers.scheduler, "BLOCK_MS", 10)
    monkeypatch.setattr(workers.ingest, "BLOCK_MS", 10)
