"""resource-query's ``update`` and ``partial-cancel`` on graphs of our own.

``update allocate|reserve READER FILE JOBID AT DURATION`` records an R
given (a JGF subgraph, an R with its ``scheduling`` key, or R_lite alone)
as a job's hold, as Fluxion's does when a scheduler is restarted: replaying
the R a session printed gives the same output, and the same state, as the
matches did.  ``partial-cancel JOBID READER FILE`` releases what a job holds
on the ranks an R names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.query import QuerySession
from fluxes.domain.graph.recipe import generate, parse_recipe
from fluxes.domain.graph.rv1exec import load_rv1exec

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "graph"
JS = "tests/cases/graph/jobspecs"


def load(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


class Files:
    """R files kept in memory, read by the session as files."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def put(self, name: str, doc: object) -> str:
        self.data[name] = doc if isinstance(doc, bytes) else orjson.dumps(doc)
        return name

    def read(self, name: str) -> bytes:
        try:
            return self.data[name]
        except KeyError:
            raise OSError(2, "No such file or directory") from None


def session(files: Files, fmt: str = "jgf", graph: str = "tiny") -> QuerySession:
    g = load_grug((CASES / f"{graph}.graphml").read_text())
    return QuerySession(g, load, "high", fmt, read=files.read)


def run(s: QuerySession, line: str) -> list[str]:
    reply = s.execute(line)
    assert not reply.err, reply.err
    return reply.out + reply.console


def matches(s: QuerySession, lines: list[str]) -> list[str]:
    """Run *lines*; the non-INFO lines each printed (one R per match in JSON formats)."""
    out: list[str] = []
    for line in lines:
        out += run(s, line)
    return out


MIXED = [f"match allocate {JS}/one_core.yaml",
         f"match allocate {JS}/excl_socket.yaml",
         f"match allocate_orelse_reserve {JS}/whole_node.yaml",
         f"match allocate_orelse_reserve {JS}/whole_node.yaml",
         f"match allocate_orelse_reserve {JS}/whole_node.yaml"]


def test_update_replays_what_matches_printed_line_for_line() -> None:
    for fmt in ("jgf", "rv1"):
        files = Files()
        first = session(files, fmt)
        printed = matches(first, MIXED)
        rs = [line for line in printed if not line.startswith("INFO")]
        assert len(rs) == 5
        starts = [0 if "ALLOCATED" in line else int(printed[i + 1].split("=")[1])
                  for i, line in enumerate(printed) if line.startswith("INFO: RESOURCES")]
        assert starts == [0, 0, 0, 3600, 7200]
        second = session(files, fmt)
        replay = []
        for jobid, (r, at, line) in enumerate(zip(rs, starts, MIXED, strict=True), start=1):
            name = files.put(f"r{jobid}.json", r.encode())
            sub = "allocate" if at == 0 else "reserve"
            length = load(line.split()[-1])["attributes"]["system"]["duration"]
            replay += run(second, f"update {sub} jgf {name} {jobid} {at} {length}")
        assert replay == printed, fmt
        # the state is the same too: the next match lands where it would have
        assert run(second, MIXED[0]) == run(first, MIXED[0])
        assert ([line.split(", ")[:3] for line in run(second, "list")]
                == [line.split(", ")[:3] for line in run(first, "list")])


def test_update_refuses_what_another_job_holds_and_an_existing_jobid() -> None:
    files = Files()
    s = session(files)
    r = run(s, f"match allocate {JS}/excl_socket.yaml")[0]
    name = files.put("r.json", r.encode())
    reply = s.execute(f"update allocate jgf {name} 5 0 3600")
    assert reply.out[1:3] == ["INFO: No matching resources found", "INFO: JOBID=5"]
    assert reply.err == ["ERROR: update: /tiny0/rack0/node1/socket1 is not free for job 5"]
    # later, once job 1 ends, it fits: a reservation at 3600
    assert run(s, f"update reserve jgf {name} 6 3600 60")[-3:-1] == [
        "INFO: RESOURCES=RESERVED", "INFO: SCHEDULED AT=3600"]
    assert s.execute(f"update allocate jgf {name} 1 0 3600").err == ["ERROR: existing job 1"]
    # the next match takes the id after the last update's
    assert "INFO: JOBID=7" in run(s, f"match allocate {JS}/one_core.yaml")
    for bad, why in ((f"update allocate jgf {name} 9 0 0", "invalid job or time"),
                     (f"update allocate hwloc {name} 9 0 10", "unsupported reader"),
                     ("update allocate jgf nowhere.json 9 0 10", "nowhere.json: No such"),
                     (f"update grow jgf {name} 9 0 10", "unknown subcommand"),
                     ("update allocate jgf", "malformed command")):
        assert why in s.execute(bad).err[0], bad


def rv1(ranks: str, cores: str, gpus: str | None = None) -> dict[str, Any]:
    children = {"core": cores} | ({"gpu": gpus} if gpus else {})
    return {"version": 1, "execution": {"R_lite": [{"rank": ranks, "children": children}],
                                        "starttime": 0, "expiration": 0}}


def test_update_rv1exec_holds_cores_and_gpus_and_the_host_when_all_are_listed() -> None:
    files = Files()
    g = generate(parse_recipe("cluster[1] -> node[2] -> core[4], gpu[1]"))
    s = QuerySession(g, load, "high", "simple", read=files.read)
    part = files.put("part.json", rv1("0", "0-1"))
    out = run(s, f"update allocate rv1exec {part} 1 0 100")
    assert [line.strip() for line in out[:3]] == ["---------core0[1:x]", "---------core1[1:x]",
                                                  "------node0[1:s]"]
    # every leaf of rank 1 listed: its node is held exclusively too
    whole = files.put("whole.json", rv1("1", "0-3", "0"))
    out = run(s, f"update allocate rv1exec {whole} 2 0 100")
    assert "------node1[1:x]" in [line.strip() for line in out]
    assert s.execute(f"update allocate rv1exec {part} 3 0 100").err  # cores 0-1 are held
    # what is left free: cores 2-3 and the gpu of rank 0
    free = [line.strip() for line in run(s, "find sched-now=free and type=core or "
                                            "sched-now=free and type=gpu")]
    assert free[:3] == ["---------core2[1:x]", "---------core3[1:x]", "---------gpu0[1:x]"]
    assert not any("node1" in line for line in free)
    bad = files.put("bad.json", rv1("5", "0"))
    assert s.execute(f"update allocate rv1exec {bad} 4 0 100").err == [
        "ERROR: update: bad.json: rank 5 is not in the graph"]


def _ids(g: Any, rank: int, kind: str) -> str:
    ids = sorted(g.ids[v] for v in g.subtree(g.rank_host[rank]) if g.types[v] == kind)
    return ",".join(str(i) for i in ids)


TWO_NODES = {"version": 1, "resources": [{"type": "node", "count": 2, "with": [
    {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 2}]}]}],
    "attributes": {"system": {"duration": 600}}}


def test_partial_cancel_releases_the_ranks_an_r_names_then_the_job() -> None:
    files = Files()
    g = load_grug((CASES / "tiny.graphml").read_text())
    specs = {"two.yaml": TWO_NODES}
    s = QuerySession(g, lambda p: specs[p] if p in specs else load(p), "high", "simple",
                     read=files.read)
    run(s, "match allocate two.yaml")
    rank1 = files.put("rank1.json", rv1("1", "0"))
    out = run(s, f"partial-cancel 1 rv1exec {rank1} stats")
    assert out[1] == 'INFO: PARTIAL CANCEL PREORDER COUNT="4"'  # node1, socket, 2 cores
    assert run(s, "info 1")[0].startswith("INFO: 1, ALLOCATED")
    free = run(s, "find sched-now=allocated and type=core")
    assert {line.split("core")[0].count("-") for line in free[:2]} == {15}
    assert all("node1" not in line for line in free)
    # the JGF of what is left names rank 0: releasing it ends the job
    left = {"graph": {"nodes": [{"id": "1", "metadata": {
        "type": "node", "rank": 0, "id": 0, "paths": {"containment": "/tiny0/rack0/node0"}}}],
        "edges": []}}
    run(s, f"partial-cancel 1 jgf {files.put('rank0.json', left)}")
    assert s.execute("info 1").err == ["ERROR: nonexistent job 1"]
    assert run(s, "find sched-now=allocated") == [
        "INFO: =============================", 'INFO: EXPRESSION="sched-now=allocated"',
        "INFO: ============================="]
    assert s.execute(f"partial-cancel 1 rv1exec {rank1}").err == ["ERROR: nonexistent job 1"]


def test_partial_cancel_refuses_reservations_and_bad_input() -> None:
    files = Files()
    s = session(files, "simple")
    for _ in range(3):
        run(s, f"match allocate_orelse_reserve {JS}/whole_node.yaml")
    rank0 = files.put("rank0.json", rv1("0", "0"))
    assert s.execute(f"partial-cancel 3 rv1exec {rank0}").err == [
        "ERROR: reservations not currently supported by partial cancel"]
    assert "unsupported reader" in s.execute(f"partial-cancel 1 hwloc {rank0}").err[0]
    bad = files.put("bad.json", b"{\"version\": 1}")
    assert "R_lite must be a list" in s.execute(f"partial-cancel 1 rv1exec {bad}").err[0]
    assert "malformed" in s.execute(f"partial-cancel 1 rv1exec {rank0} x").err[0]


def nodes_job(n: int) -> dict[str, Any]:
    return {"version": 1, "resources": [{"type": "node", "count": n, "exclusive": True, "with": [
        {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 1}]}]}],
        "attributes": {"system": {"duration": 60}}}


def nodes_of(out: list[str]) -> list[str]:
    return [line.strip(" -").split("[")[0] for line in out if "node" in line]


def test_variation_policy_takes_the_lowest_performance_class_first() -> None:
    g = generate(parse_recipe("cluster[1] -> rack[2] -> node[4] -> core[4]"))
    specs = {f"{n}N": nodes_job(n) for n in (1, 2, 3)}
    s = QuerySession(g, specs.__getitem__, "variation", "simple")
    paths = {g.names[v]: g.path(v) for v in g.hosts}
    # across both racks: classes decide, not the rack; unreadable ones are the worst
    for node, cls in (("node0", "2"), ("node1", "3"), ("node2", "1"), ("node3", "bad"),
                      ("node4", "7x"), ("node5", "1"), ("node6", "-4"), ("node7", "2")):
        run(s, f"set-property {paths[node]} perf_class={cls}")
    assert nodes_of(run(s, "match allocate 3N")) == ["node0", "node2", "node5"]
    assert nodes_of(run(s, "match allocate 2N")) == ["node1", "node7"]
    assert nodes_of(run(s, "match allocate 2N")) == ["node3", "node4"]
    assert nodes_of(run(s, "match allocate 1N")) == ["node6"]
    # below a node, cores without classes come in graph order
    t = QuerySession(g, specs.__getitem__, "variation", "simple")
    assert [line.strip(" -") for line in run(t, "match allocate 1N")][:2] == [
        "core0[1:x]", "node2[1:x]"]  # the classes set above stay on the graph


def test_locality_policy_takes_the_longest_run_of_free_ids_first() -> None:
    g = generate(parse_recipe("cluster[1] -> node[8] -> core[2]"))
    specs = {f"{n}N": nodes_job(n) for n in (1, 2, 3)}
    s = QuerySession(g, specs.__getitem__, "locality", "simple")
    high = QuerySession(g, specs.__getitem__, "high", "simple")
    for q in (s, high):
        for node in ("node1", "node4"):
            run(q, f"set-status {g.path(g.hosts[int(node[4:])])} down")
    # free runs: [0], [2-3], [5-7]
    assert nodes_of(run(s, "match allocate 2N")) == ["node6", "node7"]
    assert nodes_of(run(high, "match allocate 2N")) == ["node6", "node7"]
    # left: [0], [2-3], [5]: the run of two, where high would split the job
    assert nodes_of(run(s, "match allocate 2N")) == ["node2", "node3"]
    assert nodes_of(run(high, "match allocate 2N")) == ["node3", "node5"]
    # ties between runs of one: the higher ids
    assert nodes_of(run(s, "match allocate 1N")) == ["node5"]


def test_an_r_alone_loads_as_fluxion_rv1exec_reader_builds_it() -> None:
    r = {"version": 1, "execution": {"R_lite": [
        {"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}},
        {"rank": "2", "children": {"core": "0-1"}}],
        "nodelist": ["big[7-8]", "small"], "properties": {"fast": "1"},
        "starttime": 0, "expiration": 0}}
    g = load_rv1exec(orjson.dumps(r))
    assert g.describe() == "cluster0: 1 cluster, 3 node, 10 core, 2 gpu"
    assert [(g.names[h], g.basenames[h], g.ids[h], g.ranks[h]) for h in g.hosts] == [
        ("big7", "big", 7, 0), ("big8", "big", 8, 1), ("small", "small", 2, 2)]
    assert g.path(g.find(1, "gpu", 0) or 0) == "/cluster0/big8/gpu0"
    assert g.props[g.hosts[1]] == {"fast": ""} and g.props[g.hosts[0]] is None
    files = Files()
    s = QuerySession(g, load, "low", "rv1_nosched", read=files.read)
    out = run(s, f"update allocate rv1exec {files.put('r.json', rv1('1', '0-3', '0'))} 4 0 9")
    assert orjson.loads(out[0])["execution"]["R_lite"] == [
        {"rank": "1", "children": {"core": "0-3", "gpu": "0"}}]
    for bad, why in ((b"[]", "rv1exec: "), (b"{", "invalid JSON"),
                     (orjson.dumps({"version": 1, "execution": {"R_lite": []}}),
                      "holds no resources")):
        with pytest.raises(ValueError, match=why):
            load_rv1exec(bad)


def test_find_by_job() -> None:
    files = Files()
    s = session(files, "simple")
    run(s, f"match allocate {JS}/excl_socket.yaml")
    for _ in range(3):
        run(s, f"match allocate_orelse_reserve {JS}/whole_node.yaml")

    def found(expr: str) -> list[str]:
        return [line.strip(" -") for line in run(s, f"find {expr}")[:-3]]

    assert found("jobid-alloc=1") == ["core35[1:x]", "socket1[1:x]", "node1[1:x]",
                                      "rack0[1:x]", "tiny0[1:x]"]
    assert found("jobid-span=1 and type=socket") == found("jobid-alloc=1 type=socket")
    assert "node1[1:x]" in found("jobid-reserved=3 and type=node")
    assert found("jobid-reserved=1") == [] and found("jobid-alloc=3") == []
    # the tag covers what the job passes through too
    assert found("jobid-tag=1 and type=rack") == ["rack0[1:x]", "tiny0[1:x]"]
    assert "not a job id" in s.execute("find jobid-tag=x").err[0]
