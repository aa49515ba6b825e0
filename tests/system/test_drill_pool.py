"""The drill's pool check compares for real: with the scheduler's pool right it passes, and
when the stored R it compares with says something else it reports the difference."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes.drill import collect
from fluxes.drill.runner import Drill
from fluxes.formats.rset import ResourceSet
from fluxes.store.instance import Instance
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system


def test_pool_recovered_after_a_scheduler_restart_equals_stored_r() -> None:
    need_redis()
    result = Drill(jobs=20, kill="job-list", rounds=1, seed=2, timeout=120).run()
    assert result.ok, result.figures()["violations"]
    assert result.pool_check == "equal after a scheduler restart, 3 jobs holding resources"


def test_a_pool_that_differs_from_stored_r_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    need_redis()
    real = collect.read_rsets

    def one_job_short(inst: Instance, jobids: Any) -> tuple[dict[int, ResourceSet],
                                                          dict[int, str]]:
        rsets, broken = real(inst, jobids)
        if rsets:
            del rsets[min(rsets)]  # as if the scheduler had recovered one job too many
        return rsets, broken

    monkeypatch.setattr(collect, "read_rsets", one_job_short)
    result = Drill(jobs=10, kill="exec", rounds=1, seed=2, timeout=60).run()
    [pool] = [v for v in result.violations if v.invariant == "pool equals stored R"]
    assert "ncores 3 (stored R: 2)" in pool.detail
    assert result.pool_check.startswith("differs after a scheduler restart")
