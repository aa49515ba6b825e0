"""The simulator on a resource graph: its pool is the scheduler worker's choice
(``pool_of_table``), jobs are placed on the graph, and the invariants check its R."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.sched.pool import ResourcePool
from fluxes.sim.engine import Simulation
from fluxes.sim.run import load_swf
from fluxes.sim.synth import synthetic_swf
from fluxes.sim.workload import Machine

GRAPHS = Path(__file__).resolve().parents[1] / "cases" / "graph"
SWF = Path(__file__).resolve().parents[1] / "cases" / "swf"


def _config(resource: str) -> InstanceConfig:
    return InstanceConfig.from_toml(f"[resource]\n{resource}\n")


GRUG = f'graph = "{GRAPHS / "racks.graphml"}"'  # 2 racks x 2 nodes x 4 cores
RECIPE = 'graph-recipe = "cluster[1] -> rack[2] -> node[3] -> core[4]"'


@pytest.mark.parametrize("resource", [GRUG, RECIPE])
@pytest.mark.parametrize("whole_nodes", [False, True])
@pytest.mark.parametrize("policy", ["fcfs", "easy", "conservative"])
def test_a_graph_config_runs_on_the_graph_pool(resource: str, whole_nodes: bool,
                                               policy: str) -> None:
    config = _config(resource)
    machine = Machine.from_table(config.resource)
    assert "resource graph" in machine.description
    size = machine.nodes if whole_nodes else machine.cores
    workload = load_swf(synthetic_swf(150, size, seed=3).splitlines(),
                        whole_nodes=whole_nodes)
    sim = Simulation(workload.jobs, machine, config, overrides={"policy": policy})
    assert isinstance(sim.driver.sched.core.pool, GraphPool)
    outcome = sim.run()
    assert outcome.checked.ok, outcome.checked.to_dict()
    assert not outcome.refused
    ran = [r for r in outcome.runs if r.start is not None]
    assert len(ran) == len(workload.jobs)
    # every allocation is on the graph's hosts, and whole-node jobs hold whole nodes
    ranks = set(machine.inventory.ranks)
    for run in ran:
        assert run.masks and set(run.masks) <= ranks
        if whole_nodes:
            assert len(run.masks) == run.job.size
            assert run.ncores == run.job.size * machine.cores_per_node


def test_the_tiny_trace_places_the_same_on_a_graph() -> None:
    """4 cores anywhere on one graph node schedule as on a counted machine."""
    with open(SWF / "tiny.swf", encoding="utf-8") as f:
        workload = load_swf(f)
    config = _config('graph-recipe = "cluster[1] -> node[1] -> core[4]"')
    on_graph = Simulation(workload.jobs, Machine.from_table(config.resource), config,
                          overrides={"policy": "easy"}).run()
    counted = Simulation(workload.jobs, Machine.uniform(1, 4), InstanceConfig(),
                         overrides={"policy": "easy"}).run()
    assert on_graph.checked.ok
    assert [(r.start, r.end) for r in on_graph.runs] == [(r.start, r.end)
                                                         for r in counted.runs]


def test_a_table_without_a_graph_keeps_todays_pool() -> None:
    config = _config('config = [{hosts = "n[0-1]", cores = "0-3"}]')
    machine = Machine.from_table(config.resource)
    sim = Simulation([], machine, config)
    assert type(sim.driver.sched.core.pool) is ResourcePool
    assert machine.nodes == 2 and machine.cores == 8


def test_the_invariants_catch_a_graph_pool_that_double_books(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph pool that forgets what it allocated hands the same cores out twice: the
    core check sees it in the graph's R."""
    real_alloc = GraphPool.alloc

    def forgetful(self: GraphPool, *args: Any, **kwargs: Any) -> Any:
        rset = real_alloc(self, *args, **kwargs)
        if kwargs.get("start") is None:
            for jobid in list(self.jobids()):
                self.free(jobid)
        return rset

    monkeypatch.setattr(GraphPool, "alloc", forgetful)
    config = _config(GRUG)
    machine = Machine.from_table(config.resource)
    workload = load_swf(synthetic_swf(100, machine.cores, seed=5).splitlines())
    sim = Simulation(workload.jobs, machine, config, overrides={"policy": "fcfs"})
    outcome = sim.run()
    assert not outcome.checked.ok
    assert outcome.checked.violations["no core used by two jobs at once"] > 0
