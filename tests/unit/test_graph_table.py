"""The instance's resources as a graph: [resource] keys, the recorded graph, the pool the
scheduler picks, feasibility at submission and the scheduler's recovery on a graph."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.recipe import parse_recipe
from fluxes.domain.graph.table import graph_of_table, pool_of_table, recorded_table
from fluxes.domain.graph.wants import GraphRequest, graph_request
from fluxes.domain.jm.feasibility import load_feasibility
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.inventory import Inventory
from fluxes.domain.sched.policy import POLICIES, PendingJob, QueuePolicy, Scheduler
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.protocol import SchedulerPool
from fluxes.domain.sched.session import Requests
from fluxes.errors import ConfigError
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet

CASES = Path(__file__).parent.parent / "cases" / "graph"
#: 2 racks x 2 nodes x 4 cores (node0, node1 in rack0; node2, node3 in rack1)
RACKS = str(CASES / "racks.graphml")
PLAIN = {"config": [{"hosts": "n[0-3]", "cores": "0-3"}]}


def rack_spec(nodes: int, cores: int = 1, duration: float = 60.0) -> dict[str, Any]:
    """``rack[1] -> node[nodes] -> slot[1] -> core[cores]``."""
    return Jobspec.from_dict({
        "version": 1,
        "resources": [{"type": "rack", "count": 1, "with": [
            {"type": "node", "count": nodes, "with": [
                {"type": "slot", "count": 1, "label": "task",
                 "with": [{"type": "core", "count": cores}]}]}]}],
        "tasks": [{"command": ["true"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": duration}}}).to_dict()


def racks_of(pool: GraphPool, rset: ResourceSet) -> set[str]:
    """The racks the hosts of an R are in."""
    g = pool.graph
    return {g.path(g.rank_host[r]).split("/")[2] for r in rset.ranks}


# -- [resource] keys ----------------------------------------------------------------------


@pytest.mark.parametrize(("table", "message"), [
    ({"graph": RACKS, "config": PLAIN["config"]}, "cannot be given with resource.config"),
    ({"graph": RACKS, "path": "R.json"}, "cannot be given with resource.path"),
    ({"graph": RACKS, "graph-format": "xml"}, "graph-format: expected one of jgf, grug"),
    ({"graph-format": "jgf", "scheduling": {"graph": {}}}, "needs resource.graph"),
    ({"graph": ""}, "expected the path of a JGF or GRUG file"),
    ({"graph": 3}, "expected the path of a JGF or GRUG file"),
    ({"graph": "/nonexistent/g.json"}, "cannot read /nonexistent/g.json"),
    ({"graph": RACKS, "graph-format": "jgf"}, "(jgf): jgf: invalid JSON"),
    ({"scheduling": {"nodes": []}}, "resource.scheduling: jgf: missing 'graph'"),
    ({"graph-recipe": "cluster[1] -> node[2]", "graph": RACKS},
     "graph-recipe: cannot be given with resource.graph"),
    ({"graph-recipe": "cluster[1] -> node", "config": []}, "cannot be given with resource.config"),
    ({"graph-recipe": "cluster[1] -> node"}, "graph-recipe: recipe: 'node' is not TYPE[COUNT]"),
    ({"graph-recipe": ["cluster[1]"]}, "graph-recipe: expected a recipe"),
    ({"graph-recipe": "cluster[2] -> node[2] -> core[1]"}, "root level must have count 1"),
    ({"graph-recipe": "cluster[1] -> rack[2] -> core[4]"}, "no vertex of type node"),
])
def test_bad_graph_tables_are_one_line_config_errors(table: dict[str, Any], message: str
                                                     ) -> None:
    with pytest.raises(ConfigError) as err:
        graph_of_table(table)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        Inventory.from_table(table)  # every reader of the table says the same


def test_a_graph_without_hosts_is_refused(tmp_path: Path) -> None:
    jgf = tmp_path / "g.json"
    jgf.write_text(orjson.dumps({"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "cluster", "name": "c0"}}], "edges": []}}).decode())
    with pytest.raises(ConfigError, match="no vertex of type node"):
        graph_of_table({"graph": str(jgf)})


def test_the_recorded_table_holds_the_graph_itself(tmp_path: Path) -> None:
    copy = tmp_path / "racks.graphml"
    copy.write_bytes(Path(RACKS).read_bytes())
    table = recorded_table({"graph": str(copy)})
    assert set(table) == {"scheduling"}
    copy.unlink()  # the record needs no file: another host reads the same graph
    stored = orjson.loads(orjson.dumps(table))
    graph = graph_of_table(stored)
    assert graph is not None and len(graph) == 27
    inventory = Inventory.from_table(stored)
    assert [t.hostname for t in inventory] == ["node0", "node1", "node2", "node3"]
    assert str(inventory.rset().ranks) == "0-3"
    assert recorded_table(PLAIN) == PLAIN  # without a graph, the table as configured


def test_a_jgf_file_and_its_format_by_name(tmp_path: Path) -> None:
    jgf = tmp_path / "racks.json"
    jgf.write_bytes(orjson.dumps(recorded_table({"graph": RACKS})["scheduling"]))
    graph = graph_of_table({"graph": str(jgf)})  # .json: read as JGF
    assert graph is not None and len(graph.hosts) == 4


def test_an_inline_recipe_is_the_issue_example() -> None:
    text = ("cluster[1] -> rack[2] -> node[4] -> socket[2] -> core[18], memory[8] x 2 GB, "
            "gpu[1]")
    table = recorded_table({"graph-recipe": text})
    assert set(table) == {"scheduling"}
    graph = graph_of_table(table)
    assert graph is not None
    assert len(graph) == 1 + 2 + 8 + 16 + 16 * (18 + 8 + 1)
    assert [graph.path(h) for h in graph.hosts][3:5] == ["/cluster0/rack0/node3",
                                                         "/cluster0/rack1/node4"]
    inventory = Inventory.from_table(table)
    # cores and gpus numbered per node (what R needs), memory 8 x 2 GB per socket
    assert {str(t.cores) for t in inventory} == {"0-35"}
    assert {str(t.gpus) for t in inventory} == {"0-1"}
    assert {t.memory for t in inventory} == {32 << 30}


@pytest.mark.parametrize(("text", "message"), [
    ("cluster[1] -> rack[2], switch[1] -> node[2]", "only the last link may list several"),
    ("cluster[1] -> node[x]", "is not TYPE[COUNT]"),
    ("cluster[1] -> node[2] x", "is not TYPE[COUNT]"),
    ("", "is not TYPE[COUNT]"),
    ("c[1]" + " -> n[1]" * 2000, "at most 4096 characters"),
])
def test_bad_recipes(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_recipe(text)


# -- the pool the scheduler picks -----------------------------------------------------------


def test_pool_of_table_picks_the_graph_pool_once_there_is_a_graph() -> None:
    assert isinstance(pool_of_table({"graph": RACKS}), GraphPool)
    assert isinstance(pool_of_table(recorded_table({"graph": RACKS})), GraphPool)
    assert isinstance(pool_of_table(PLAIN), ResourcePool)


def schedule_all(pool: SchedulerPool, policy: str, jobs: list[tuple[int, Any]]
                 ) -> dict[int, ResourceSet]:
    """Add jobs to a Scheduler on *pool* and run one pass; the allocations made."""
    sched = Scheduler(pool, default=QueuePolicy(policy))
    for jobid, request in jobs:
        sched.add(PendingJob(jobid, 16, float(jobid), 1000, None, request))
    return dict(sched.schedule(0.0).allocated)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_rack_jobs_through_the_protocol(policy: str) -> None:
    pool = pool_of_table({"graph": RACKS}, clock=lambda: 0.0)
    assert isinstance(pool, GraphPool)
    whole = graph_request(rack_spec(2, cores=4))
    most = graph_request(rack_spec(2, cores=3))
    short = graph_request(Jobspec.from_command(["true"], cwd="/", attributes={
        "system": {"duration": 30}}).to_dict())
    got = schedule_all(pool, policy, [(1, whole), (2, most), (3, whole), (4, short)])
    # 1 fills a rack, 2 takes 3 cores of each node of the other; 3 must wait for a whole
    # rack (60 s); 4 (30 s, one core) fits before that: backfilled unless fcfs
    assert set(got) == ({1, 2} if policy == "fcfs" else {1, 2, 4})
    assert len(racks_of(pool, got[1])) == 1 and len(racks_of(pool, got[2])) == 1
    assert racks_of(pool, got[1]) != racks_of(pool, got[2])
    assert all(len(got[2].cores(r)) == 3 for r in got[2].ranks)
    cores = [(r, c) for rset in got.values() for r in rset.ranks for c in rset.cores(r)]
    assert len(cores) == len(set(cores))


def test_recovery_from_stored_r_restores_the_graph_holds() -> None:
    """What the scheduler worker does on hello: a fresh graph pool adopts each stored R
    (with its scheduling subgraph); new work then never lands on held resources."""
    table = recorded_table({"graph": RACKS})
    first = pool_of_table(table, clock=lambda: 0.0)
    r1 = first.alloc(graph_request(rack_spec(2, cores=3)), 1, now=0.0)
    stored = r1.dumps()
    assert "scheduling" in orjson.loads(stored)
    again = pool_of_table(table, clock=lambda: 0.0)
    again.adopt(1, stored)
    assert again.jobids() == [1]
    assert again.allocated().encode() == first.allocated().encode()
    # the rack job 1 holds 3 cores of both nodes of its rack: another two-node rack job of
    # 2 cores a node must take the other rack
    r2 = again.alloc(graph_request(rack_spec(2, cores=2)), 2, now=0.0)
    assert isinstance(again, GraphPool)
    assert racks_of(again, r2).isdisjoint(racks_of(again, ResourceSet(stored)))
    with pytest.raises(ValueError, match="already"):
        again.adopt(3, stored)  # the same resources twice: refused


# -- feasibility at submission -----------------------------------------------------------


def test_feasibility_on_a_graph_accepts_what_the_graph_can_hold() -> None:
    recorded = orjson.dumps(recorded_table({"graph": RACKS}))
    check = load_feasibility(recorded, InstanceConfig())
    assert check.note(Jobspec.from_dict(rack_spec(2))) is None
    note = check.note(Jobspec.from_dict(rack_spec(3)))
    assert note is not None and "cannot hold" in note
    assert [t.hostname for t in check.inventory] == ["node0", "node1", "node2", "node3"]
    # without a graph, the plain pool cannot express a rack at all
    plain = load_feasibility(orjson.dumps(PLAIN), InstanceConfig())
    assert plain.note(Jobspec.from_dict(rack_spec(2))) is not None


def test_the_worker_reads_stored_jobspecs_as_graph_requests_on_a_graph() -> None:
    raw = orjson.dumps(rack_spec(2))
    assert isinstance(Requests(graph=True).of_jobspec(raw), GraphRequest)
    with pytest.raises(InfeasibleRequest):
        Requests(graph=False).of_jobspec(raw)
