"""Jobspec.from_command(gpus_per_node=...): flux's per-node GPU request."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes.errors import JobspecError
from fluxes.formats.jobspec import Jobspec


def test_one_slot_per_node_holds_the_gpus() -> None:
    spec = Jobspec.from_command(["app"], nnodes=3, ntasks=3, cores_per_task=2,
                                gpus_per_node=4, exclusive=True).to_dict()
    assert spec["resources"] == [{
        "type": "node", "count": 3, "exclusive": True,
        "with": [{"type": "slot", "count": 1, "label": "task",
                  "with": [{"type": "core", "count": 2}, {"type": "gpu", "count": 4}]}]}]
    assert spec["tasks"][0]["count"] == {"per_slot": 1}


def test_zero_gpus_per_node_asks_for_none() -> None:
    spec = Jobspec.from_command(["app"], nnodes=2, ntasks=2, gpus_per_node=0).to_dict()
    assert spec["resources"][0]["with"][0]["with"] == [{"type": "core", "count": 1}]


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"ntasks": 2, "gpus_per_node": 1}, "needs nnodes"),
    ({"nnodes": 2, "ntasks": 4, "gpus_per_node": 1}, "one task per node"),
    ({"nnodes": 2, "ntasks": 2, "gpus_per_node": 1, "gpus_per_task": 1}, "gpus_per_task"),
    ({"nnodes": 2, "ntasks": 2, "gpus_per_node": -1}, "gpus_per_node"),
    ({"nnodes": 2, "ntasks": 2, "gpus_per_node": True}, "gpus_per_node"),
])
def test_refusals(kwargs: dict[str, Any], why: str) -> None:
    with pytest.raises(JobspecError, match=why):
        Jobspec.from_command(["app"], **kwargs)
