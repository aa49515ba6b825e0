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


@pytest.fixture(autouse=True)
def private_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                      ) -> None:
    """Workers' local files (acknowledgement logs, lost-write marks) in a directory of the
    test's, never in the user's ``~/.local/state``."""
    import os

    if "FLUXES_STATE_DIR" not in os.environ:
        monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path_factory.mktemp("state")))
