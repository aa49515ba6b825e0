"""A worker that dies outside the drill's planned kills makes the drill fail by its deadline,
naming the worker, instead of hanging; one that dies once is restarted and the drill passes."""

from __future__ import annotations

import sys

import pytest

from fluxes.drill import runner
from fluxes.drill.runner import Drill
from fluxes.drill.targets import OwnInstance
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system


class BrokenIngest(OwnInstance):
    """An instance whose ingest exits at once every time it is (re)started."""

    def __init__(self, nodes: int, cores_per_node: int, appendfsync: str) -> None:
        super().__init__(nodes, cores_per_node, appendfsync)
        spec = self.launcher.worker("ingest")
        spec.args = [sys.executable, "-c", "import sys; sys.exit('ingest: broken on purpose')"]
        self.kill_worker("ingest")


class IngestDiesOnce(OwnInstance):
    """An instance whose ingest is SIGKILLed behind the drill's back, once."""

    def __init__(self, nodes: int, cores_per_node: int, appendfsync: str) -> None:
        super().__init__(nodes, cores_per_node, appendfsync)
        self.kill_worker("ingest")


def test_a_worker_that_keeps_dying_is_named_when_time_runs_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    need_redis()
    monkeypatch.setattr(runner, "OwnInstance", BrokenIngest)
    result = Drill(jobs=20, kill="exec", rounds=1, seed=1, timeout=15).run()
    assert not result.ok
    [timeout] = [v for v in result.violations if v.invariant == "finishes within --timeout"]
    assert "no answer to a submission" in timeout.detail
    assert "worker ingest" in timeout.detail
    assert "broken on purpose" in timeout.detail  # its last words, from its log


def test_an_unplanned_death_is_restarted_by_the_drill(monkeypatch: pytest.MonkeyPatch) -> None:
    need_redis()
    monkeypatch.setattr(runner, "OwnInstance", IngestDiesOnce)
    result = Drill(jobs=20, kill="exec", rounds=1, seed=1, timeout=120).run()
    assert result.ok, result.figures()["violations"]
    assert result.figures()["jobs"] == 20
