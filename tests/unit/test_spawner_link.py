"""The exec worker's link to its spawner, without a spawner: what it keeps of the ends
the spawner reports (fluxes/proc/spawner_client.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxes.proc import spawner_client
from fluxes.proc.spawner_client import SpawnerLink


def test_ends_no_task_took_are_kept_within_a_bound(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawner_client, "MAX_ENDED", 3)
    link = SpawnerLink(str(tmp_path), enabled=False)
    for pid in range(100, 110):
        link._ended([b"%d" % pid, b"0", b"fluxes-task:t:0:1:0"])
    # the newest stay (the older ones' status files settle them)
    assert list(link.ended) == [107, 108, 109]
    assert link.fresh == list(range(100, 110))


def test_an_end_the_worker_took_from_the_zombie_is_not_kept(tmp_path: Path
                                                            ) -> None:
    link = SpawnerLink(str(tmp_path), enabled=False)
    link.running[7] = "m"
    link.taken(7)
    link._ended([b"7", b"0", b"m"])
    assert link.ended == {} and link.fresh == [] and link.early == {}
