"""Short recovery drills for every worker kind (fluxes drill --rounds 5)."""

from __future__ import annotations

import pytest

from fluxes.drill.runner import KINDS, Drill
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system


@pytest.mark.parametrize("kind", KINDS)
def test_short_drill(kind: str) -> None:
    need_redis()
    result = Drill(jobs=150, kill=kind, rounds=5, seed=3, timeout=180).run()
    figures = result.figures()
    assert result.ok, figures["violations"]
    assert figures["kills"] == 5
    assert figures["jobs"] == 150
