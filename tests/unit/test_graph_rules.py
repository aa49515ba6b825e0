"""Fluxion's three matching rules, on graphs of our own (tiny, medium, resv, granule).

1. An exclusive vertex is closed to every other job with its whole subtree,
   but the job holds (lists, carries in R, is charged for) only what its
   jobspec named.
2. Counts are gathered where Fluxion gathers them: at the top, levels may be
   omitted (the graph is searched from the root); below a matched vertex only
   its direct children match; a slot copy lives below one vertex whose
   children are of the slot's types.
3. Exclusive pool vertices (memory of several GB) are taken whole, per slot
   copy; a shared request may take part of a vertex.

``tests/cases/graph/query/*.cmds`` are resource-query sessions; their
``.out`` files are what Fluxion's rules give, line for line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fluxes.domain.accounting.usage import UsageState
from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.output import rset_of
from fluxes.domain.graph.pool import GraphPool
from fluxes.domain.graph.query import QuerySession
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import graph_request, parse_resources

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "graph"


def load(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


def session_output(name: str) -> tuple[str, str]:
    """What resource-query prints for the session *name*, and what it should print."""
    text = (CASES / "query" / f"{name}.cmds").read_text()
    header = text.splitlines()[0].split()
    graph = load_grug((CASES / f"{header[2]}.graphml").read_text())
    session = QuerySession(graph, load, header[4])
    out: list[str] = []
    for line in text.splitlines():
        reply = session.execute(line)
        assert not reply.err, reply.err
        out += reply.out
    return "".join(f"{line}\n" for line in out), (CASES / "query" / f"{name}.out").read_text()


@pytest.mark.parametrize("name", ["exclusive", "levels", "granule", "granule_shared",
                                  "reservation"])
def test_sessions_print_what_fluxion_rules_give(name: str) -> None:
    got, expected = session_output(name)
    assert got == expected


def spec(path: str) -> Any:
    return load(f"tests/cases/graph/jobspecs/{path}")


def test_rule1_r_holds_the_named_core_and_the_socket_stays_closed() -> None:
    g = load_grug((CASES / "tiny.graphml").read_text())
    t = Traverser(g)
    needs = t.compile(parse_resources(spec("excl_socket.yaml")["resources"]))
    hold = t.allocate(needs, 1, 0.0, 3600.0, "high")
    assert hold is not None
    doc = rset_of(g, hold, scheduling=True).encode()
    assert doc["execution"]["R_lite"] == [{"rank": "1", "children": {"core": "35"}}]
    names = {n["metadata"]["name"]: n["metadata"]["exclusive"]
             for n in doc["scheduling"]["graph"]["nodes"]}
    assert names == {"tiny0": False, "rack0": False, "node1": False, "socket1": True,
                     "core35": True}
    # nothing below socket1 is free for anyone else: a one-core job avoids it
    one = t.compile(parse_resources(spec("one_core.yaml")["resources"]))
    other = t.allocate(one, 2, 0.0, 3600.0, "high")
    assert other is not None
    assert [g.path(v) for v in other.amounts] == ["/tiny0/rack0/node1/socket0/core17"]


def test_rule1_the_graph_pool_r_and_its_recovery_hold_only_what_was_named() -> None:
    g = load_grug((CASES / "tiny.graphml").read_text())
    pool = GraphPool(g, clock=lambda: 0.0)
    jobspec = {**spec("excl_socket.yaml"), "version": 1}
    jobspec["resources"][0]["with"][0]["label"] = "task"
    request = graph_request(jobspec)
    rset = pool.alloc(request, 7, "high", now=0.0)
    assert rset.encode()["execution"]["R_lite"] == [{"rank": "1",
                                                    "children": {"core": "35"}}]
    assert rset.ncores == 1  # what the scheduler reports, and accounting charges
    fresh = GraphPool(g, clock=lambda: 0.0)
    fresh.adopt(7, rset.encode())
    assert fresh.hold_of(7).amounts == pool.hold_of(7).amounts
    assert fresh.hold_of(7).blocked == pool.hold_of(7).blocked  # socket1 closed again


def test_rule2_counts_are_not_gathered_across_sockets_or_through_skipped_levels() -> None:
    g = load_grug((CASES / "tiny.graphml").read_text())
    t = Traverser(g)
    for name in ("slot_core19.yaml", "node_core.yaml"):
        needs = t.compile(parse_resources(spec(name)["resources"]))
        assert t.allocate(needs, 1, 0.0, 10.0, "low") is None
        assert not t.satisfiable(needs)
    # omitted levels at the top are searched: socket -> slot -> core[18] finds a socket
    top = t.compile(parse_resources([{"type": "socket", "count": 1, "with": [
        {"type": "slot", "count": 1, "with": [{"type": "core", "count": 18}]}]}]))
    assert t.allocate(top, 2, 0.0, 10.0, "low") is not None


def test_rule3_granules_per_slot_copy() -> None:
    g = load_grug((CASES / "granule.graphml").read_text())
    t = Traverser(g)
    needs = t.compile(parse_resources(spec("granule_slots.yaml")["resources"]))
    hold = t.allocate(needs, 1, 0.0, 10.0, "low")
    assert hold is not None
    # 3 copies of 2 GB: three whole 4 GB vertices, not 6 GB in two
    assert sorted(a for v, a in hold.amounts.items() if g.types[v] == "memory") == [4, 4, 4]


def test_inspection_commands_status_property_info_and_find() -> None:
    g = load_grug((CASES / "tiny.graphml").read_text())
    s = QuerySession(g, load, "high")
    js = "tests/cases/graph/jobspecs"

    def run(line: str) -> list[str]:
        reply = s.execute(line)
        assert not reply.err, reply.err
        return reply.out + reply.console

    run("set-status /tiny0/rack0/node1 down")
    assert run("get-status /tiny0/rack0/node1") == ["/tiny0/rack0/node1 is down"]
    # a vertex down is never matched: high ids first would take node1
    assert "      ---------node0[1:s]" in run(f"match allocate {js}/excl_socket.yaml")
    run("set-status /tiny0/rack0/node1 up")
    out = run(f"multi-match allocate {js}/one_core.yaml {js}/one_core.yaml")
    assert out.count("INFO: RESOURCES=ALLOCATED") == 2
    assert run("info 1") == [f"INFO: 1, ALLOCATED, 0, {js}/excl_socket.yaml, 0.000000"]
    assert len(run("list")) == 3 and run("stat")[0] == "INFO: Num. of Jobs Matched: 3"
    found = run("find sched-now=allocated and type=socket or status=down")
    # sockets the one-core jobs only pass through are free, as in Fluxion's planners
    assert [line.strip("- ") for line in found[:4]] == ["socket1[1:x]", "node0[1:x]",
                                                        "rack0[1:x]", "tiny0[1:x]"]
    assert [line.strip("- ") for line in run("find (type=core and sched-now=allocated) "
                                             "status=up rank=1")][:2] == [
        "core34[1:x]", "core35[1:x]"]
    run("set-property /tiny0/rack0/node0 color=red")
    assert run("get-property /tiny0/rack0/node0") == ["color=red"]
    assert s.execute("get-status /nowhere").err == [
        "ERROR: could not find path /nowhere in resource graph"]
    assert s.execute("find color").err[0].startswith(
        "ERROR: find: invalid criteria: 'color' is not KEY=VALUE")
    for bad in ("(type=core", "type=core or", "type=core )", "names=core[a["):
        assert s.execute(f"find {bad}").err[0].startswith("ERROR: find: invalid criteria"), bad


def test_node_centric_policies_rank_nodes_by_what_they_would_give() -> None:
    g = load_grug((CASES / "tiny.graphml").read_text())
    js = spec("excl_socket.yaml")["resources"]
    for policy, order in (("hinode", ["node1/socket1", "node0/socket1", "node1/socket0",
                                      "node0/socket0"]),
                          ("high", ["node1/socket1", "node1/socket0", "node0/socket1",
                                    "node0/socket0"]),
                          ("lonode", ["node0/socket0", "node1/socket0", "node0/socket1",
                                      "node1/socket1"])):
        t = Traverser(g)
        needs = t.compile(parse_resources(js))
        got = []
        for jobid in range(4):
            hold = t.allocate(needs, jobid, 0.0, 10.0, policy)
            assert hold is not None
            got += ["/".join(g.path(v).split("/")[3:5]) for v in hold.amounts
                    if g.types[v] == "socket"]
        assert got == order, policy


def test_accounting_charges_the_cores_the_graph_pool_r_holds() -> None:
    """The scheduler sends R's counts with the alloc (``ncores=rset.ncores``); the usage
    fold charges those, not what the jobspec's exclusive socket closed."""
    g = load_grug((CASES / "tiny.graphml").read_text())
    pool = GraphPool(g, clock=lambda: 0.0)
    jobspec = {**spec("excl_socket.yaml"), "version": 1}
    jobspec["resources"][0]["with"][0]["label"] = "task"
    rset = pool.alloc(graph_request(jobspec), 7, "high", now=0.0)
    usage = UsageState(half_life=0.0)
    usage.feed(7, "submit", 0.0, {"userid": 1000}, {"ncores": 18})
    usage.feed(7, "alloc", 10.0, {}, {"ncores": rset.ncores, "ngpus": rset.ngpus,
                                      "ranks": str(rset.ranks)})
    usage.feed(7, "free", 110.0, {}, {})
    charge = usage.take_changes().charges[0]
    assert (charge.ncores, charge.ngpus, charge.nnodes) == (1, 0, 1)
    assert next(iter(usage.accums.values())).raw.core_seconds == 100.0  # 1 core × 100 s, not 18
