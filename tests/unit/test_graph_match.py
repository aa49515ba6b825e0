"""Matching resources trees on our graphs: every jobspec shape, policy and operation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.model import ResourceGraph
from fluxes.domain.graph.output import pretty_lines, rset_of, simple_lines
from fluxes.domain.graph.state import Hold
from fluxes.domain.graph.traverser import Traverser
from fluxes.domain.graph.wants import describe, parse_resources
from fluxes.domain.sched.errors import InfeasibleRequest

CASES = Path(__file__).resolve().parents[1] / "cases" / "graph"
INF = math.inf


def graph(name: str) -> ResourceGraph:
    return load_grug((CASES / f"{name}.graphml").read_text())


def r(kind: str, count: Any, *children: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One jobspec resource vertex."""
    vertex: dict[str, Any] = {"type": kind, "count": count, **extra}
    if children:
        vertex["with"] = list(children)
    return vertex


class Session:
    """A traverser with the helpers the tests need."""

    def __init__(self, name: str, policy: str = "low") -> None:
        self.g = graph(name)
        self.t = Traverser(self.g)
        self.policy = policy
        self.next = 1

    def needs(self, *resources: dict[str, Any]) -> Any:
        return self.t.compile(parse_resources(list(resources)))

    def alloc(self, *resources: dict[str, Any], length: float = 3600.0,
              policy: str | None = None) -> Hold | None:
        jobid = self.next
        self.next += 1
        return self.t.allocate(self.needs(*resources), jobid, 0.0, length,
                               policy or self.policy)

    def reserve(self, *resources: dict[str, Any], length: float = 3600.0) -> Hold | None:
        """allocate_orelse_reserve at time 0."""
        needs = self.needs(*resources)
        jobid = self.next
        self.next += 1
        hold = self.t.allocate(needs, jobid, 0.0, length, self.policy)
        if hold is not None:
            return hold
        found = self.t.earliest(needs, jobid, 0.0, length, self.policy)
        if found is None:
            return None
        return self.t.reserve_at(needs, jobid, found[0], length, self.policy)

    def taken(self, hold: Hold | None, kind: str) -> list[str]:
        """Paths of the vertices of *kind* the hold takes."""
        assert hold is not None
        return [self.g.path(v) for v in sorted(hold.amounts)
                if self.g.types[v] == kind and hold.amounts[v]]

    def hosts(self, hold: Hold | None) -> dict[str, int]:
        """host name -> cores taken there."""
        out: dict[str, int] = {}
        for path in self.taken(hold, "core"):
            host = path.split("/")[-2] if "socket" not in path else path.split("/")[-3]
            out[host] = out.get(host, 0) + 1
        return out


SOCKET_CORE = r("cluster", 1, r("rack", 1, r("node", 1, r("slot", 1, r("socket", 1,
                                                                          r("core", 1))))))


# -- fully specified, exclusive sockets --------------------------------------------------


def test_an_exclusive_socket_is_closed_to_others_but_holds_only_what_was_named() -> None:
    s = Session("tiny", "high")
    holds = [s.alloc(SOCKET_CORE) for _ in range(4)]
    tops = [s.taken(h, "socket") for h in holds]
    assert tops == [["/tiny0/rack0/node1/socket1"], ["/tiny0/rack0/node1/socket0"],
                    ["/tiny0/rack0/node0/socket1"], ["/tiny0/rack0/node0/socket0"]]
    first = holds[0]
    assert first is not None
    # one core (the one named), no gpu, no memory: the rest of the socket is closed
    assert s.taken(first, "core") == ["/tiny0/rack0/node1/socket1/core35"]
    assert s.taken(first, "memory") == [] and s.taken(first, "gpu") == []
    assert sum(1 for v in first.blocked if s.g.types[v] == "core") == 18
    assert all(excl for v, (_, excl) in first.shown.items() if s.g.types[v] in
               ("socket", "core"))
    assert not first.shown[0][1]  # the cluster is passed through, shared
    assert s.alloc(SOCKET_CORE) is None  # the fifth finds nothing


def test_low_and_first_policies_start_at_the_bottom() -> None:
    for policy in ("low", "first"):
        s = Session("tiny", policy)
        hold = s.alloc(r("slot", 1, r("core", 1)))
        assert s.taken(hold, "core") == ["/tiny0/rack0/node0/socket0/core0"]


def test_simple_listing_is_deepest_first_with_dashes_per_depth() -> None:
    s = Session("tiny", "high")
    hold = s.alloc(r("node", 1, r("slot", 1, r("core", 2))))
    assert hold is not None
    assert simple_lines(s.g, hold) == [
        "      ---------------core34[1:x]",
        "      ---------------core35[1:x]",
        "      ------------socket1[1:s]",
        "      ---------node1[1:s]",
        "      ------rack0[1:s]",
        "      ---tiny0[1:s]",
    ]
    assert pretty_lines(s.g, hold)[0] == "      ---tiny0[1:shared]"
    assert pretty_lines(s.g, hold)[-1] == "      ---------------core34[1:exclusive]"


# -- V1 shapes --------------------------------------------------------------------------


def test_shared_node_with_slots_of_cores() -> None:
    s = Session("tiny")
    hold = s.alloc(r("node", 1, r("slot", 2, r("core", 4))))
    assert s.hosts(hold) == {"node0": 8}
    # the node and its socket stay shared: another job may use the rest of node0, but
    # only socket1 there still holds 14 cores, so two slots of 14 go to node1
    assert s.hosts(s.alloc(r("node", 1, r("slot", 2, r("core", 14))))) == {"node1": 28}
    assert s.hosts(s.alloc(r("node", 1, r("slot", 1, r("core", 14))))) == {"node0": 14}
    # a slot copy lives below one vertex holding cores (a socket): 19 never fit
    assert s.alloc(r("node", 1, r("slot", 1, r("core", 19)))) is None
    assert not s.t.satisfiable(s.needs(r("node", 1, r("slot", 1, r("core", 19)))))


def test_slots_without_nodes_each_stay_below_one_socket_filling_one_first() -> None:
    s = Session("tiny")
    assert s.alloc(r("slot", 1, r("core", 16))) is not None  # socket0 of node0 keeps 2
    hold = s.alloc(r("slot", 3, r("core", 6)))
    # socket0 holds none, socket1 of node0 three: never a slot across sockets
    assert s.hosts(hold) == {"node0": 18}
    assert s.alloc(r("slot", 1, r("core", 19))) is None


def test_slot_of_whole_nodes() -> None:
    s = Session("tiny")
    assert s.alloc(r("slot", 1, r("core", 1))) is not None  # node0 is touched
    hold = s.alloc(r("slot", 1, r("node", 1)))
    assert s.taken(hold, "node") == ["/tiny0/rack0/node1"]
    # a node named with nothing below it is held (and listed) whole
    assert hold is not None and len(hold.amounts) == len(hold.blocked) == 1 + 2 + 36 + 2 + 8
    assert s.alloc(r("slot", 1, r("node", 1))) is None


def test_exclusive_flag_outside_a_slot_and_shared_inside() -> None:
    s = Session("tiny")
    hold = s.alloc(r("node", 1, r("slot", 1, r("socket", 1, r("core", 2)), exclusive=False)))
    # exclusive: false on the slot is meaningless; the socket in the slot is exclusive
    assert hold is not None and len(s.taken(hold, "core")) == 2
    assert sum(1 for v in hold.blocked if s.g.types[v] == "core") == 18
    shared = s.alloc(r("node", 1, r("slot", 1, r("socket", 1, r("core", 2),
                                                  exclusive=False))))
    assert len(s.taken(shared, "core")) == 2
    whole = s.alloc(r("node", 1, r("slot", 1, r("core", 1)), exclusive=True))
    assert s.taken(whole, "node") == ["/tiny0/rack0/node1"]


# -- beyond V1 ------------------------------------------------------------------------


def test_nodes_under_one_switch() -> None:
    s = Session("medium")
    for _ in range(3):
        assert s.alloc(r("slot", 1, r("node", 1))) is not None  # node0-2 of switch0
    hold = s.alloc(r("switch", 1, r("node", 2, r("slot", 1, r("core", 8)))))
    assert hold is not None
    assert s.hosts(hold) == {"node4": 8, "node5": 8}  # switch0 has one node left
    assert s.taken(hold, "switch") == []
    assert {s.g.names[v] for v in hold.shown if s.g.types[v] == "switch"} == {"switch1"}


def test_ssd_shared_by_a_rack_is_taken_in_parts() -> None:
    s = Session("medium")
    rabbit = (r("rack", 1, r("slot", 1, r("node", 1, r("socket", 1, r("core", 2)),
                                          exclusive=False)),
                r("ssd", 1000, unit="GB")),)
    first = s.alloc(*rabbit)
    assert first is not None
    ssd = {s.g.names[v]: a for v, a in first.amounts.items() if s.g.types[v] == "ssd"}
    assert ssd == {"ssd0": 800, "ssd1": 200}
    second = s.alloc(*rabbit)
    assert second is not None
    assert {s.g.names[v]: a for v, a in second.amounts.items()
            if s.g.types[v] == "ssd"} == {"ssd1": 600, "ssd2": 400}
    assert s.alloc(*rabbit) is not None  # 1200 GB left in rack0
    fourth = s.alloc(*rabbit)  # only 200 GB left in rack0: rack1 holds the whole job
    assert fourth is not None
    assert {s.g.path(v) for v in fourth.shown if s.g.types[v] == "rack"} == {"/medium0/rack1"}
    # in GB, MB or TB the same amount is asked
    mb = s.needs(r("ssd", 1024 * 1000, unit="MB"))
    assert mb[0].lo == 1000


def test_count_range_takes_the_most_that_fits() -> None:
    s = Session("medium")
    for _ in range(11):  # 5 of the 16 nodes stay idle
        assert s.alloc(r("slot", 1, r("node", 1))) is not None
    hold = s.alloc(r("slot", 1, r("node", {"min": 2, "max": 8, "operator": "*",
                                           "operand": 2})))
    assert len(s.taken(hold, "node")) == 4  # 2, 4 or 8: four of the five
    assert s.alloc(r("slot", 1, r("node", {"min": 2}))) is None  # one idle node left
    ranged = s.alloc(r("node", 1, r("slot", {"min": 1, "max": 100}, r("core", 3))))
    # two slots per 8-core socket: a slot never spans sockets
    assert ranged is not None and len(s.taken(ranged, "core")) == 12


def test_memory_pool_part_of_a_vertex_when_shared_whole_vertices_in_a_slot() -> None:
    s = Session("medium")
    shared = s.alloc(r("node", 1, r("socket", 1, r("memory", 20), r("slot", 1, r("core", 1)))))
    assert shared is not None
    assert sorted(a for v, a in shared.amounts.items() if s.g.types[v] == "memory") == [4, 16]
    whole = s.alloc(r("node", 1, r("socket", 1, r("slot", 1, r("memory", 20), r("core", 1)))))
    assert whole is not None
    # exclusive memory is taken by whole 16 GB vertices: two of them
    assert sorted(a for v, a in whole.amounts.items() if s.g.types[v] == "memory") == [16, 16]


def test_gpus_tied_to_sockets() -> None:
    s = Session("tiny")
    hold = s.alloc(r("node", 1, r("slot", 2, r("socket", 1, r("core", 4), r("gpu", 1),
                                                exclusive=False))))
    assert hold is not None
    sockets = {s.g.path(s.g.parent[v]) for v in hold.amounts if s.g.types[v] == "gpu"}
    assert sockets == {"/tiny0/rack0/node0/socket0", "/tiny0/rack0/node0/socket1"}


def test_slots_at_any_level() -> None:
    s = Session("medium")
    hold = s.alloc(r("rack", 1, r("slot", 2, r("node", 1, r("socket", 2, r("core", 8))))))
    assert s.hosts(hold) == {"node0": 16, "node1": 16}
    deep = s.alloc(r("node", 1, r("socket", 2, r("slot", 1, r("core", 8)))))
    assert s.hosts(deep) == {"node2": 16}
    # cores are no children of a node: levels below a match are never skipped
    assert s.alloc(r("node", 1, r("core", 1))) is None
    assert s.alloc(r("slot", 27, r("socket", 1, r("core", 8)))) is None  # 13 nodes left
    assert s.alloc(r("slot", 26, r("socket", 1, r("core", 8)))) is not None


def test_best_and_worst_fit_pack_and_spread() -> None:
    s = Session("tiny")
    assert s.alloc(r("slot", 1, r("core", 16))) is not None  # node0: 20 cores left
    best = s.alloc(r("slot", 1, r("core", 2)), policy="best")
    worst = s.alloc(r("slot", 1, r("core", 2)), policy="worst")
    assert s.hosts(best) == {"node0": 2} and s.hosts(worst) == {"node1": 2}


# -- time ---------------------------------------------------------------------------------


def test_allocate_orelse_reserve_finds_the_earliest_window() -> None:
    s = Session("resv")
    node = r("slot", 1, r("node", 1))
    assert s.reserve(node, length=100.0).start == 0.0  # type: ignore[union-attr]
    assert s.reserve(node, length=300.0).start == 0.0  # type: ignore[union-attr]
    third = s.reserve(node, length=50.0)
    assert third is not None and third.reserved and third.start == 100.0
    # a short job backfills now on the cores no reservation needs... there are none
    assert s.alloc(r("slot", 1, r("core", 1)), length=10.0) is None
    # ...but one that ends by 300 fits node1 after 150
    four = s.reserve(r("slot", 1, r("core", 4)), length=100.0)
    assert four is not None and four.start == 150.0
    assert s.reserve(r("slot", 1, r("node", 2))).start == 300.0  # type: ignore[union-attr]


def test_reservations_are_kept_free_and_cancel_gives_them_back() -> None:
    s = Session("resv")
    node = r("slot", 1, r("node", 1))
    assert s.alloc(node, length=100.0) is not None  # job 1 on node0
    resv = s.reserve(r("slot", 1, r("node", 2)), length=100.0)  # job 2 at 100
    assert resv is not None and resv.start == 100.0
    assert s.alloc(node, length=200.0) is None  # would run into job 2's window
    assert s.alloc(node, length=100.0) is not None  # ends as job 2 starts: fits
    assert s.t.cancel(2) is not None
    assert s.alloc(node, length=500.0) is None  # node1 is held by job 3 now
    assert s.t.cancel(99) is None


def test_unlimited_jobs_leave_no_time_to_reserve() -> None:
    s = Session("resv")
    assert s.alloc(r("slot", 2, r("node", 1)), length=INF) is not None
    assert s.reserve(r("slot", 1, r("core", 1))) is None


def test_satisfiability_ignores_what_is_held_and_drained() -> None:
    s = Session("tiny")
    assert s.alloc(r("slot", 2, r("node", 1))) is not None
    s.t.state.set_down(s.g.rank_host[0], True)
    assert s.t.satisfiable(s.needs(r("slot", 2, r("node", 1))))
    assert not s.t.satisfiable(s.needs(r("slot", 3, r("node", 1))))
    assert not s.t.satisfiable(s.needs(r("switch", 1, r("node", 1))))
    assert not s.t.satisfiable(s.needs(r("node", 1, r("slot", 1, r("core", 37)))))
    assert s.t.missing(s.needs(r("switch", 1, r("node", 1)))) == ["switch"]


def test_drained_hosts_get_no_new_work() -> None:
    s = Session("tiny")
    s.t.state.set_down(s.g.rank_host[0], True)
    assert s.hosts(s.alloc(r("node", 1, r("slot", 2, r("core", 18))))) == {"node1": 36}
    assert s.alloc(r("slot", 1, r("core", 1))) is None
    assert s.t.earliest(s.needs(r("slot", 1, r("core", 1))), 9, 0.0, 10.0, "low") \
        is not None  # node1's cores come back at 3600
    s.t.state.set_down(s.g.rank_host[0], False)
    assert s.hosts(s.alloc(r("slot", 1, r("core", 1)))) == {"node0": 1}


def test_constraint_limits_the_hosts() -> None:
    s = Session("tiny")
    needs = s.needs(r("slot", 1, r("core", 1)))
    hold = s.t.allocate(needs, 1, 0.0, 10.0, "low", allowed=frozenset({1}))
    assert s.hosts(hold) == {"node1": 1}


def test_r_lists_cores_and_gpus_per_rank_with_the_subgraph() -> None:
    s = Session("tiny", "high")
    hold = s.alloc(SOCKET_CORE)
    assert hold is not None
    doc = rset_of(s.g, hold, scheduling=True).encode()
    # the socket is closed to others, but R holds the one core the jobspec named
    assert doc["execution"]["R_lite"] == [{"rank": "1", "children": {"core": "35"}}]
    assert doc["execution"]["nodelist"] == ["node1"]
    assert doc["execution"]["expiration"] == 3600.0
    nodes = doc["scheduling"]["graph"]["nodes"]
    assert len(nodes) == len(hold.shown) == 3 + 1 + 1
    assert "scheduling" not in rset_of(s.g, hold).encode()


# -- jobspecs the graph pool refuses --------------------------------------------------------


def test_wants_parsing() -> None:
    wants = parse_resources([r("node", 1, r("slot", 2, r("core", 4), r("gpu", 0)))])
    assert describe(wants) == "node[1]->slot[2]->core[4]"  # a count of 0 asks for nothing
    assert wants[0].children[0].children[0].exclusive and not wants[0].exclusive
    with pytest.raises(InfeasibleRequest, match=r"resources\[0\]: requesting specific"):
        parse_resources([{"type": "node", "count": 1, "id": 3}])
    with pytest.raises(InfeasibleRequest, match="unsupported unit 'parsecs'"):
        parse_resources([r("memory", 1, unit="parsecs")])
    with pytest.raises(ValueError, match=r"resources\[0\].count: "):
        parse_resources([r("node", "x")])
    with pytest.raises(InfeasibleRequest, match="an empty slot"):
        parse_resources([{"type": "slot", "count": 1}])


def test_a_type_the_graph_lacks_matches_nothing() -> None:
    s = Session("resv")  # no gpus
    gpus = s.needs(r("slot", 1, r("core", 1), r("gpu", 1)))
    assert s.t.allocate(gpus, 1, 0.0, 10.0, "low") is None
    assert s.t.earliest(gpus, 1, 0.0, 10.0, "low") is None
    assert not s.t.satisfiable(gpus)
