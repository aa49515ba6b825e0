"""``fluxes resource-query``: commands on stdin, Fluxion's output, exactly."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fluxes.cli.main import main
from fluxes.domain.graph.grug import load_grug
from fluxes.domain.graph.jgf import write_jgf

CASES = Path(__file__).resolve().parents[1] / "cases" / "graph"
TINY = str(CASES / "tiny.graphml")
RESV = str(CASES / "resv.graphml")
BAR = "INFO: ============================="

SPEC = """version: 9999
resources:
{resources}
attributes:
  system:
    duration: {duration}
tasks:
  - command: [ "app" ]
    slot: task
    count:
      per_slot: 1
"""


def jobspec(tmp_path: Path, name: str, resources: str, duration: int = 100) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(resources=resources, duration=duration))
    return str(path)


def cores(tmp_path: Path, n: int, duration: int = 100) -> str:
    """slot[1] -> core[n]."""
    return jobspec(tmp_path, f"cores{n}-{duration}", f"""  - type: slot
    count: 1
    label: task
    with:
      - type: core
        count: {n}""", duration)


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str], commands: list[str]) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{c}\n" for c in commands)))
    code = main(["resource-query", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def allocated(jobid: int, at: int | None = None) -> list[str]:
    return [BAR, f"INFO: JOBID={jobid}",
            f"INFO: RESOURCES={'ALLOCATED' if at is None else 'RESERVED'}",
            f"INFO: SCHEDULED AT={'Now' if at is None else at}", BAR]


def test_allocate_prints_the_vertices_deepest_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    two = cores(tmp_path, 2)
    code, out, err = run(monkeypatch, capsys, ["-L", RESV, "-P", "low"],
                         [f"match allocate {two}", f"match allocate {two}", "quit"])
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "      ---------core0[1:x]",
        "      ---------core1[1:x]",
        "      ------node0[1:s]",
        "      ---resv0[1:s]",
        *allocated(1),
        "      ---------core2[1:x]",
        "      ---------core3[1:x]",
        "      ------node0[1:s]",
        "      ---resv0[1:s]",
        *allocated(2),
    ]


def test_high_policy_and_a_failed_match_using_up_its_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    four = cores(tmp_path, 4)
    code, out, _ = run(monkeypatch, capsys, ["-L", RESV, "-P", "high"],
                       [f"match allocate {four}"] * 3 + [f"match allocate {cores(tmp_path, 1)}"])
    lines = out.splitlines()
    assert lines[:6] == ["      ---------core0[1:x]", "      ---------core1[1:x]",
                         "      ---------core2[1:x]", "      ---------core3[1:x]",
                         "      ------node1[1:s]", "      ---resv0[1:s]"]
    assert lines[-8:] == [BAR, "INFO: No matching resources found", "INFO: JOBID=3", BAR,
                          BAR, "INFO: No matching resources found", "INFO: JOBID=4", BAR]
    assert lines.count("INFO: No matching resources found") == 2 and code == 0


def test_allocate_orelse_reserve_schedules_in_whole_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    node = jobspec(tmp_path, "node", """  - type: slot
    count: 1
    label: task
    with:
      - type: node
        count: 1""", 1800)
    code, out, _ = run(monkeypatch, capsys, ["-L", RESV],
                       [f"match allocate_orelse_reserve {node}"] * 5)
    infos = [line for line in out.splitlines() if line.startswith("INFO")]
    assert infos == [*allocated(1), *allocated(2), *allocated(3, 1800), *allocated(4, 1800),
                     *allocated(5, 3600)]
    # the node, named with nothing below it, shows exclusive and whole, with its memory
    assert "      ------node1[1:x]" in out and "      ---------memory0[8:x]" in out
    assert code == 0


def test_satisfiability_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    huge = cores(tmp_path, 5)  # a node has 4 cores: never
    small = cores(tmp_path, 4)
    code, out, _ = run(monkeypatch, capsys, ["-L", RESV], [
        f"match allocate_with_satisfiability {huge}",
        f"match satisfiability {huge}",
        f"match satisfiability {small}",
        f"match allocate {huge}",
        f"match allocate_orelse_reserve {huge}",
    ])
    assert out.splitlines() == [
        BAR, "INFO: No matching resources found", "INFO: Unsatisfiable request",
        "INFO: JOBID=1", BAR,
        BAR, "INFO: Unsatisfiable request", BAR,
        BAR, "INFO: Satisfiable request", BAR,
        BAR, "INFO: No matching resources found", "INFO: JOBID=2", BAR,
        BAR, "INFO: No matching resources found", "INFO: Unsatisfiable request",
        "INFO: JOBID=3", BAR,
    ]
    assert code == 0


def test_cancel_gives_resources_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    eight = jobspec(tmp_path, "all", """  - type: slot
    count: 2
    label: task
    with:
      - type: core
        count: 4""")
    code, out, err = run(monkeypatch, capsys, ["-L", RESV], [
        f"match allocate {eight}", f"match allocate {eight}", "cancel 1",
        f"match allocate {eight}", "cancel 7", "quit", f"match allocate {eight}"])
    infos = [line for line in out.splitlines() if line.startswith("INFO: JOBID")]
    assert infos == ["INFO: JOBID=1", "INFO: JOBID=2", "INFO: JOBID=3"]
    assert out.count("RESOURCES=ALLOCATED") == 2
    assert err == "ERROR: nonexistent job 7\n" and code == 1


def test_pretty_simple_prints_the_root_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(monkeypatch, capsys, ["-L", RESV, "-F", "pretty_simple"],
                       [f"match allocate {cores(tmp_path, 1)}"])
    # high ids first is the default policy, as in Fluxion
    assert out.splitlines()[:3] == ["      ---resv0[1:shared]", "      ------node1[1:shared]",
                                    "      ---------core3[1:exclusive]"]
    assert code == 0


def test_a_jgf_graph_answers_as_its_grug_recipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    jgf = tmp_path / "tiny.json"
    jgf.write_text(json.dumps(write_jgf(load_grug(Path(TINY).read_text()))))
    spec = jobspec(tmp_path, "sock", """  - type: node
    count: 1
    with:
      - type: slot
        count: 1
        label: task
        with:
          - type: socket
            count: 1
            with:
              - type: core
                count: 1""")
    commands = [f"match allocate_orelse_reserve {spec}"] * 6
    from_grug = run(monkeypatch, capsys, ["-L", TINY, "-P", "high"], commands)
    from_jgf = run(monkeypatch, capsys, ["-L", str(jgf), "-f", "jgf", "-P", "high"], commands)
    assert from_grug == from_jgf
    assert "      ------------socket1[1:x]\n      ---------node1[1:s]\n" in from_grug[1]
    assert from_grug[1].count("SCHEDULED AT=100") == 2


@pytest.mark.parametrize(("args", "message"), [
    (["-L", "/nonexistent/g.graphml"], "fluxes: /nonexistent/g.graphml: No such file"),
    (["-L", RESV, "-S", "PA"], "fluxes: -S PA: only CA (the containment subsystem)"),
    (["-L", RESV, "-f", "jgf"], "fluxes: " + RESV + ": jgf: invalid JSON"),
    (["-L", RESV, "-p", "ALL"], "fluxes: prune filter 'ALL': expected HL:LL"),
])
def test_bad_options_are_one_line(args: list[str], message: str,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(monkeypatch, capsys, args, [])
    assert code == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_bad_commands_are_reported_and_the_session_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nresources: 5\n")
    code, out, err = run(monkeypatch, capsys, ["-L", RESV], [
        "# a comment", "", "frobnicate", "match allocate", "match deallocate x.yaml",
        f"match allocate {tmp_path / 'missing.yaml'}", f"match allocate {bad}",
        f"match allocate {cores(tmp_path, 1)}"])
    assert code == 1
    assert "INFO: JOBID=1" in out  # errors used up no job id
    lines = err.splitlines()
    assert lines[0] == "ERROR: unknown command 'frobnicate' (try 'help')"
    assert lines[1] == "ERROR: malformed command: match SUBCOMMAND JOBSPEC"
    assert lines[2].startswith("ERROR: unknown subcommand 'deallocate'")
    assert lines[3] == f"ERROR: {tmp_path / 'missing.yaml'}: No such file or directory"
    assert lines[4].startswith(f"ERROR: {bad}: ") and len(lines) == 5


def test_jobspec_files_of_every_shape_on_the_medium_graph(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    specs = CASES / "jobspecs"
    code, out, err = run(monkeypatch, capsys, ["-L", str(CASES / "medium.graphml"), "-P", "low"], [
        f"match allocate {specs / 'socket1core.yaml'}",  # cluster > rack > node > slot > socket
        f"match allocate {specs / 'switch.yaml'}",  # 2 nodes under one switch
        f"match allocate {specs / 'rabbit.yaml'}",  # a node and 1000 GB of its rack's ssd
        f"match allocate {specs / 'memory_pool.yaml'}",  # 20 GB from 16 GB memory vertices
        f"match allocate_orelse_reserve {specs / 'node_range.yaml'}",  # 2, 4 or 8 whole nodes
        f"match allocate_orelse_reserve {specs / 'whole_rack.yaml'}",  # an exclusive rack
        f"match allocate_with_satisfiability {specs / 'gpu_socket.yaml'}",
    ])
    assert (code, err) == (0, "")
    lines = out.splitlines()
    scheduled = [line for line in lines if line.startswith("INFO: SCHEDULED")]
    assert scheduled == ["INFO: SCHEDULED AT=Now"] * 7
    for line in ("      ---------ssd0[800:s]", "      ---------ssd1[200:s]",
                 "      ------------------memory2[16:s]", "      ------------------memory3[4:s]",
                 "      ------rack1[1:x]", "      ---------------socket0[1:x]"):
        assert line in lines
    # the slot of the range lives below one switch (whose children are nodes): switch0
    # has 2 idle nodes left, so 2 of "2, 4 or 8"
    fifth = lines[lines.index("INFO: JOBID=4") + 3:lines.index("INFO: JOBID=5")]
    assert [line for line in fifth if "node" in line] == ["      ------------node2[1:x]",
                                                          "      ------------node3[1:x]"]


def test_update_and_partial_cancel_read_r_files_and_prune_filters_change_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = cores(tmp_path, 2)
    out_file = tmp_path / "out"
    code, _, _ = run(monkeypatch, capsys, ["-L", TINY, "-F", "jgf", "-t", str(out_file)],
                     [f"match allocate {spec}"] * 2)
    assert code == 0
    rs = [line for line in out_file.read_text().splitlines() if not line.startswith("INFO")]
    for i, r in enumerate(rs):
        (tmp_path / f"r{i}.json").write_text(r)
    replay = [f"update allocate jgf {tmp_path / f'r{i}.json'} {i + 1} 0 100" for i in range(2)]
    code, out, err = run(monkeypatch, capsys, ["-L", TINY, "-F", "jgf"], replay)
    assert (code, err) == (0, "") and out == out_file.read_text()
    rank1 = tmp_path / "rank1.json"
    rank1.write_text(json.dumps({"version": 1, "execution": {"R_lite": [
        {"rank": "1", "children": {"core": "0"}}]}}))
    code, out, err = run(monkeypatch, capsys, ["-L", TINY], [
        *replay, f"partial-cancel 1 rv1exec {rank1}", "info 1", "info 2",
        f"partial-cancel 2 rv1exec {tmp_path / 'nowhere.json'}"])
    assert code == 1
    assert out.splitlines()[-1].startswith("INFO: 2, ALLOCATED, 0, ")
    assert err.splitlines() == ["ERROR: nonexistent job 1",
                                f"ERROR: {tmp_path / 'nowhere.json'}: No such file or directory"]
    commands = [f"match allocate_orelse_reserve {spec}"] * 40
    pruned = run(monkeypatch, capsys, ["-L", TINY, "-P", "low"], commands)
    for filters in ("none", "ALL:core", "ALL:core,node:socket"):
        assert run(monkeypatch, capsys, ["-L", TINY, "-P", "low", "-p", filters],
                   commands) == pruned


def test_info_list_stat_and_elapsed_times_go_to_stdout_not_the_test_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = cores(tmp_path, 1)
    out_file = tmp_path / "out"
    code, out, _ = run(monkeypatch, capsys, ["-L", TINY, "-e", "-t", str(out_file)],
                       [f"match allocate {spec}", "info 1", "list", "stat"])
    assert code == 0
    assert out_file.read_text().splitlines()[-5:] == allocated(1)
    lines = out.splitlines()
    assert lines[0].startswith("INFO: ELAPSE=")
    assert lines[1:3] == [f"INFO: 1, ALLOCATED, 0, {spec}, {lines[0].split('=')[1]}"] * 2
    assert lines[3] == "INFO: Num. of Jobs Matched: 1"
