"""The resource graph: building it, recipes, GRUG (GraphML) and JGF, read and written."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from fluxes.domain.graph.grug import load_grug, read_grug
from fluxes.domain.graph.jgf import load_jgf, read_jgf, subgraph, write_jgf
from fluxes.domain.graph.model import GraphBuilder, ResourceGraph
from fluxes.domain.graph.recipe import Level, from_config, from_rset, generate
from fluxes.formats.rset import ResourceSet

CASES = Path(__file__).resolve().parents[1] / "cases" / "graph"


def tiny() -> ResourceGraph:
    """Our tiny recipe: 1 cluster, 1 rack, 2 nodes, 2 sockets of 18 cores, gpu, memory."""
    return load_grug((CASES / "tiny.graphml").read_text())


def names_of(g: ResourceGraph, kind: str) -> list[str]:
    return [g.names[v] for v in range(len(g)) if g.types[v] == kind]


# -- GRUG ----------------------------------------------------------------------------


def test_tiny_recipe_generates_the_documented_graph() -> None:
    g = tiny()
    assert g.describe() == ("tiny0: 1 cluster, 1 rack, 2 node, 4 socket, 72 core, 4 gpu, "
                            "16 memory")
    assert g.name == "tiny0"
    # id_scope 1: cores, gpus and memory are numbered per node, not per socket
    node1 = g.by_path("/tiny0/rack0/node1")
    assert node1 is not None
    cores = [g.names[v] for v in g.subtree(node1) if g.types[v] == "core"]
    assert cores == [f"core{i}" for i in range(36)]
    assert g.by_path("/tiny0/rack0/node1/socket1/gpu1") is not None
    assert g.by_path("/tiny0/rack0/node1/socket1/memory7") is not None
    assert g.total("memory") == 32 and g.type_units["memory"] == "GB"


def test_grug_ranks_follow_the_nodes_and_hosts_hold_them() -> None:
    g = tiny()
    node0, node1 = (g.by_path(f"/tiny0/rack0/node{i}") for i in range(2))
    assert node0 is not None and node1 is not None
    assert [g.ranks[h] for h in g.hosts] == [0, 1]
    assert g.rank_host == {0: node0, 1: node1}
    core = g.find(1, "core", 35)
    assert core is not None and g.host[core] == node1 and g.rank_of(core) == 1
    assert g.rank_of(0) == -1 and "rack" in g.upper_types and "core" not in g.upper_types


def test_grug_skips_other_subsystems_and_associations() -> None:
    text = (CASES / "resv.graphml").read_text().replace("</graph>", """
    <node id="pdu"><data key="type">pdu</data><data key="subsystem">power</data></node>
    <edge id="p" source="cluster" target="pdu">
      <data key="e_subsystem">power</data><data key="multi_scale">3</data></edge>
    <edge id="a" source="node" target="core">
      <data key="gen_method">ASSOCIATE_IN</data></edge>
  </graph>""")
    assert load_grug(text).describe() == "resv0: 1 cluster, 2 node, 8 core, 2 memory"


@pytest.mark.parametrize(("text", "message"), [
    ("<nope/>", "grug: expected a <graphml> document, got <nope>"),
    ("<graphml", "grug: invalid XML"),
    ("<graphml><graph><node id='a'><data key='type'>x</data></node></graph></graphml>",
     "grug: expected one containment node with root=1, found 0"),
    ("<graphml><graph><node id='a'><data key='root'>1</data><data key='type'>c</data></node>"
     "<edge source='a' target='b'/></graph></graphml>",
     "grug: edge 'a' -> 'b' names unknown node 'b'"),
    ("<graphml><graph><node id='a'><data key='root'>1</data><data key='type'>c</data></node>"
     "<node id='b'><data key='type'>d</data></node><edge source='a' target='b'>"
     "<data key='multi_scale'>two</data></edge></graph></graphml>",
     "grug: edge to 'b': multi_scale: expected an integer, got 'two'"),
    ("<graphml><graph><node id='a'><data key='root'>1</data><data key='type'>c</data></node>"
     "<edge source='a' target='a'/></graph></graphml>",
     "grug: node 'a': recipe edges form a cycle"),
])
def test_bad_grug_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(
            ")", r"\)")) as info:
        read_grug(text)
    assert "\n" not in str(info.value)


# -- recipes and inventories -------------------------------------------------------------


def test_recipe_ids_by_scope_stride_and_start() -> None:
    g = generate(Level("cluster", children=(
        Level("node", 2, children=(
            Level("core", 2),  # per parent: 0, 1 on each node
            Level("gpu", 2, id_scope=5, id_start=10, id_stride=2),  # global: 10, 12, 14, 16
        )),)))
    assert names_of(g, "core") == ["core0", "core1", "core0", "core1"]
    assert names_of(g, "gpu") == ["gpu10", "gpu12", "gpu14", "gpu16"]
    assert [g.ranks[h] for h in g.hosts] == [0, 1]


def test_recipe_rejects_bad_levels() -> None:
    with pytest.raises(ValueError, match="the root level must have count 1"):
        generate(Level("cluster", 2))
    with pytest.raises(ValueError, match=r"cluster.children\[0\].count: expected an integer"):
        generate(Level("cluster", children=(Level("node", 0),)))
    # refused before anything is made
    with pytest.raises(ValueError, match="the recipe makes more than 4000000 vertices"):
        generate(Level("cluster", children=(Level("node", 100_000, children=(
            Level("core", 1000),)),)))
    deep = Level("core")
    for _ in range(70):
        deep = Level("group", children=(deep,))
    with pytest.raises(ValueError, match="recipe deeper than 64 levels"):
        generate(deep)


def test_a_grug_recipe_reusing_nodes_is_read_without_expanding_it() -> None:
    root = "<data key='root'>1</data>"
    nodes = "".join(f"<node id='n{i}'><data key='type'>t{i}</data>{root if i == 0 else ''}"
                    "</node>" for i in range(40))
    # two edges per level: 2**39 vertices, refused at once
    edges = "".join(f"<edge source='n{i}' target='n{i + 1}'/>"
                    f"<edge id='b{i}' source='n{i}' target='n{i + 1}'/>" for i in range(39))
    with pytest.raises(ValueError, match="the recipe makes more than 4000000 vertices"):
        load_grug(f"<graphml><graph>{nodes}{edges}</graph></graphml>")


def test_graph_from_an_instance_config_keeps_sockets_gpus_memory() -> None:
    g = from_config({"resource": {"config": [
        {"hosts": "n[0-1]", "cores": "0-3", "gpus": "0", "sockets": 2, "memory": "8G",
         "properties": ["big"]}]}})
    assert g.describe() == "cluster0: 1 cluster, 2 node, 4 socket, 8 core, 2 gpu, 2 memory"
    assert g.by_path("/cluster0/n1/socket1/core3") is not None
    n0 = g.rank_host[0]
    assert g.names[n0] == "n0" and g.props[n0] == {"big": ""}
    assert g.total("memory") == 16 and g.type_units["memory"] == "GB"


def test_graph_from_r() -> None:
    rset = ResourceSet.from_ranks({0: ("0-1", "0"), 3: ("0-3", None)},
                               hostnames={0: "a0", 3: "a3"})
    g = from_rset(rset)
    assert [g.names[h] for h in g.hosts] == ["a0", "a3"]
    assert [g.ranks[h] for h in g.hosts] == [0, 3]
    assert g.total("core") == 6 and g.total("gpu") == 1


def test_mixed_units_are_converted_to_the_smallest() -> None:
    b = GraphBuilder()
    root = b.add(None, "cluster", id=0)
    b.add(root, "memory", id=0, size=2, unit="GB")
    b.add(root, "memory", id=1, size=512, unit="MB")
    g = b.build()
    assert g.type_units["memory"] == "MB" and g.sizes[1:] == [2048, 512]
    b2 = GraphBuilder()
    r2 = b2.add(None, "cluster")
    b2.add(r2, "ssd", size=1, unit="GB")
    b2.add(r2, "ssd", size=1, unit="bananas")
    with pytest.raises(ValueError, match="ssd vertices mix units"):
        b2.build()


@pytest.mark.parametrize("bad", ["two roots", "cycle", "two parents", "size", "rank"])
def test_builder_refuses_what_is_not_one_tree(bad: str) -> None:
    b = GraphBuilder()
    root = b.add(None, "cluster")
    if bad == "two roots":
        b.add(None, "cluster")
        with pytest.raises(ValueError, match="expected one containment root, found 2"):
            b.build()
    elif bad == "cycle":
        x = b.add(None, "node")
        y = b.add(None, "node")
        b.attach(x, y)
        b.attach(y, x)
        with pytest.raises(ValueError, match="cycle"):
            b.build()
    elif bad == "two parents":
        x = b.add(root, "node")
        with pytest.raises(ValueError, match="two containment parents"):
            b.attach(root, x)
    elif bad == "size":
        with pytest.raises(ValueError, match=r"size: expected an integer >= 1, got 0"):
            b.add(root, "memory", size=0)
    else:
        n = b.add(root, "node", rank=1)
        b.add(n, "core", rank=2)
        with pytest.raises(ValueError, match="has rank 2 inside node of rank 1"):
            b.build()


def test_preorder_numbering_gives_subtree_ranges() -> None:
    b = GraphBuilder()
    root = b.add(None, "cluster", id=0)
    n0 = b.add(root, "node", id=0, rank=0)
    n1 = b.add(root, "node", id=1, rank=1)
    b.add(n1, "core", id=0, rank=1)  # added before n0's core: numbering is by tree
    b.add(n0, "core", id=0, rank=0)
    g = b.build()
    assert [g.path(v) for v in range(len(g))] == [
        "/cluster0", "/cluster0/node0", "/cluster0/node0/core0", "/cluster0/node1",
        "/cluster0/node1/core0"]
    assert list(g.subtree(1)) == [1, 2] and g.cap["core"][0] == 2 and g.depth[4] == 3


# -- JGF ----------------------------------------------------------------------------------


def test_jgf_round_trip_keeps_every_vertex() -> None:
    g = tiny()
    doc = write_jgf(g)
    again = read_jgf(doc)
    assert write_jgf(again) == doc
    assert [again.path(v) for v in range(len(again))] == [g.path(v) for v in range(len(g))]
    assert again.sizes == g.sizes and again.ranks == g.ranks and again.ids == g.ids


def test_jgf_reads_an_r_with_its_scheduling_key_and_older_edge_metadata() -> None:
    g = tiny()
    node = g.rank_host[1]
    held = {v: (g.sizes[v], True) for v in g.subtree(node)}
    held.update({0: (1, False), 1: (1, False)})
    doc = subgraph(g, held)
    for edge in doc["graph"]["edges"]:
        edge["metadata"] = {"name": {"containment": "contains"}}
    doc["graph"]["edges"].append({"source": "0", "target": "1",
                                  "metadata": {"name": {"power": "supplies_to"}}})
    part = read_jgf({"version": 1, "execution": {"R_lite": []}, "scheduling": doc})
    assert part.describe() == "tiny0: 1 cluster, 1 rack, 1 node, 2 socket, 36 core, 2 gpu, " \
                              "8 memory"
    assert part.ranks[part.hosts[0]] == 1


@pytest.mark.parametrize(("text", "message"), [
    ("[]", "jgf: expected a JSON object"),
    ("{\"graph\": {\"nodes\": {}}}", "jgf: graph.nodes and graph.edges must be lists"),
    ("{\"graph\": {\"nodes\": [{\"id\": \"0\"}]}}", r"jgf: nodes\[0\].metadata: expected"),
    ("{\"graph\": {\"nodes\": [{\"id\": \"0\", \"metadata\": {\"type\": \"c\", \"size\": "
     "\"x\"}}]}}", r"jgf: nodes\[0\].metadata.size: expected an integer"),
    ("{\"graph\": {\"nodes\": [{\"id\": \"0\", \"metadata\": {\"type\": \"c\"}}], "
     "\"edges\": [{\"source\": \"0\", \"target\": \"9\"}]}}",
     r"jgf: edges\[0\].target: unknown vertex '9'"),
    ("{", "jgf: invalid JSON"),
])
def test_bad_jgf_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_jgf(text)


def test_jgf_skips_vertices_of_other_subsystems_only() -> None:
    def node(key: str, kind: str, paths: dict[str, str]) -> dict[str, object]:
        return {"id": key, "metadata": {"type": kind, "name": f"{kind}0", "paths": paths}}

    doc = {"graph": {"nodes": [
        node("0", "cluster", {"containment": "/cluster0"}),
        node("1", "node", {"containment": "/cluster0/node0", "power": "/pdu0/node0"}),
        node("2", "pdu", {"power": "/pdu0"}),
    ], "edges": [
        {"source": "0", "target": "1",
         "metadata": {"subsystem": "containment", "relationship": "contains"}},
        {"source": "2", "target": "1", "metadata": {"subsystem": "power",
                                                    "relationship": "supplies"}},
    ]}}
    g = load_jgf(orjson.dumps(doc))
    assert sorted(g.types) == ["cluster", "node"]  # one containment root, the pdu skipped
