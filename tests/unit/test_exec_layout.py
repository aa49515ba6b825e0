"""Task layout, environment, output templates and statuses of the exec worker (pure)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.exec.layout import (
    RankResources,
    base_environment,
    command_error,
    compute_layout,
    distribute,
    expand_template,
    find_command,
    job_environment,
    job_name,
    output_spec,
    run_duration,
    slot_shape,
    task_command,
    task_environment,
    wait_status,
)
from fluxes.formats import jobid as fjobid
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet


def spec(*argv: str, **kw: Any) -> dict[str, Any]:
    return Jobspec.from_command(list(argv) or ["true"], **kw).to_dict()


def R(ranks: dict[int, str], gpus: dict[int, str] | None = None) -> ResourceSet:
    return ResourceSet.from_ranks({r: (c, (gpus or {}).get(r)) for r, c in ranks.items()})


def tasks_by_rank(jobspec: dict[str, Any], rset: ResourceSet) -> dict[int, list[int]]:
    layout = compute_layout(jobspec, rset)
    return {s.rank: list(s.task_ranks) for s in layout.shares}


# ----------------------------------------------------------------------------- distribute


@pytest.mark.parametrize(("caps", "n", "want"), [
    ([2, 2], 4, [2, 2]),
    ([2, 2], 3, [2, 1]),
    ([2, 2], 1, [1, 0]),
    ([1, 4], 3, [1, 2]),          # largest rank first
    ([4, 1], 3, [2, 1]),
    ([1, 1], 5, [3, 2]),          # oversubscribed: round robin again
    ([0, 2], 2, [0, 2]),
    ([3, 3, 3], 7, [3, 2, 2]),
    ([], 0, []),
    ([5], 0, [0]),
])
def test_distribute_examples(caps: list[int], n: int, want: list[int]) -> None:
    assert distribute(caps, n) == want


def test_distribute_refuses_impossible() -> None:
    with pytest.raises(ValueError, match="no ranks"):
        distribute([], 3)
    with pytest.raises(ValueError, match=">= 0"):
        distribute([1], -1)


@given(st.lists(st.integers(0, 16), min_size=1, max_size=12), st.integers(0, 400))
def test_distribute_properties(caps: list[int], n: int) -> None:
    counts = distribute(caps, n)
    assert sum(counts) == n
    if n <= sum(caps):
        assert all(c <= cap for c, cap in zip(counts, caps, strict=True))
    # A rank with more slots never gets fewer tasks than a smaller one.
    for i, a in enumerate(caps):
        for j, b in enumerate(caps):
            if a > b:
                assert counts[i] >= counts[j]
            if a == b and i < j:
                assert 0 <= counts[i] - counts[j] <= 1


# ----------------------------------------------------------------------------- layout


def test_two_nodes_four_tasks() -> None:
    assert tasks_by_rank(spec(nnodes=2, ntasks=4), R({0: "0-1", 1: "0-1"})) == \
        {0: [0, 1], 1: [2, 3]}


def test_uneven_total_fills_ranks_in_order() -> None:
    jobspec = spec(nnodes=2, ntasks=3)
    assert jobspec["tasks"][0]["count"] == {"total": 3}
    assert tasks_by_rank(jobspec, R({0: "0-1", 1: "0-1"})) == {0: [0, 1], 1: [2]}


def test_slot_size_groups_cores() -> None:
    jobspec = spec(ntasks=4, cores_per_task=2)
    assert slot_shape(jobspec).cores == 2
    layout = compute_layout(jobspec, R({3: "0-3", 7: "4-7"}))
    assert layout.size == 4 and layout.nnodes == 2
    assert [t.cores for t in layout.share(3).tasks()] == [(0, 1), (2, 3)]
    assert [t.cores for t in layout.share(7).tasks()] == [(4, 5), (6, 7)]
    assert layout.task_map() == {3: range(0, 2), 7: range(2, 4)}


def test_exclusive_allocation_runs_only_the_slots_asked_for() -> None:
    layout = compute_layout(spec(nnodes=1, ntasks=1, exclusive=True), R({0: "0-7"}))
    share = layout.share(0)
    assert layout.size == 1 and share.ntasks == 1
    assert share.tasks()[0].cores == tuple(range(8))


def test_per_resource_counts_follow_R() -> None:
    jobspec = spec(ntasks=2)
    jobspec["tasks"][0]["count"] = {"per_resource": {"type": "core", "count": 2}}
    assert tasks_by_rank(jobspec, R({0: "0-1", 1: "0-2"})) == {0: [0, 1, 2, 3],
                                                              1: [4, 5, 6, 7, 8, 9]}
    jobspec = spec(nnodes=2, ntasks=2)
    jobspec["tasks"][0]["count"] = {"per_resource": {"type": "node", "count": 3}}
    assert tasks_by_rank(jobspec, R({0: "0", 1: "0"})) == {0: [0, 1, 2], 1: [3, 4, 5]}
    jobspec["tasks"][0]["count"] = {"per_resource": {"type": "socket", "count": 1}}
    with pytest.raises(ValueError, match="socket"):
        compute_layout(jobspec, R({0: "0"}))


def test_per_slot_counts_multiply() -> None:
    jobspec = spec(ntasks=2)
    jobspec["tasks"][0]["count"] = {"per_slot": 3}
    assert compute_layout(jobspec, R({0: "0-1"})).size == 6


def test_oversubscribed_tasks_share_cores() -> None:
    jobspec = spec(ntasks=2)
    jobspec["tasks"][0]["count"] = {"total": 3}
    share = compute_layout(jobspec, R({0: "4-5"})).share(0)
    assert [t.cores for t in share.tasks()] == [(4,), (5,), (4,)]
    assert [t.local_id for t in share.tasks()] == [0, 1, 2]


def test_gpus_are_split_between_tasks() -> None:
    jobspec = spec(ntasks=2, gpus_per_task=1)
    share = compute_layout(jobspec, R({0: "0-1"}, {0: "2-3"})).share(0)
    assert [t.gpus for t in share.tasks()] == [(2,), (3,)]
    assert share.gpus == (2, 3)


def test_layout_from_rank_resources() -> None:
    layout = compute_layout(spec(ntasks=2), [RankResources(5, (0,), ()),
                                             RankResources(1, (0,), ())])
    assert [s.rank for s in layout.shares] == [1, 5]
    assert [s.node_rank for s in layout.shares] == [0, 1]


def test_layout_errors() -> None:
    with pytest.raises(ValueError, match="not in the job's R"):
        compute_layout(spec(), R({0: "0"})).share(1)
    bad = spec()
    bad["tasks"][0]["slot"] = "other"
    with pytest.raises(ValueError, match="no slot labelled 'other'"):
        compute_layout(bad, R({0: "0"}))
    two = spec()
    two["tasks"].append(two["tasks"][0])
    with pytest.raises(ValueError, match="only one"):
        compute_layout(two, R({0: "0"}))
    with pytest.raises(ValueError, match="no ranks"):
        compute_layout(spec(), [])


# ----------------------------------------------------------------------------- jobspec parts


def test_run_duration() -> None:
    assert run_duration(spec()) is None
    sim = spec(attributes={"system": {"exec": {"test": {"run_duration": "2ms"}}}})
    assert run_duration(sim) == 0.002
    sim["attributes"]["system"]["exec"]["test"]["run_duration"] = 5
    assert run_duration(sim) == 5.0
    sim["attributes"]["system"]["exec"]["test"]["run_duration"] = "soon"
    with pytest.raises(ValueError, match="run_duration"):
        run_duration(sim)


def test_command_and_name() -> None:
    jobspec = spec("/bin/echo", "hi")
    assert task_command(jobspec) == ["/bin/echo", "hi"]
    assert job_name(jobspec) == "echo"
    assert job_name(spec("x", name="mine")) == "mine"


# ----------------------------------------------------------------------------- environment


def test_base_environment_keeps_only_the_basics() -> None:
    env = base_environment({"PATH": "/p", "HOME": "/h", "SECRET": "x", "LANG": "C"})
    assert env == {"PATH": "/p", "HOME": "/h", "LANG": "C"}
    assert base_environment({})["PATH"]


def test_job_environment_overlay_and_unset() -> None:
    env = job_environment({"PATH": "/p", "HOME": "/h"}, {"HOME": None, "A": "1", "GONE": None})
    assert env == {"PATH": "/p", "A": "1"}
    assert job_environment({"X": "1"}, None) == {"X": "1"}
    with pytest.raises(ValueError, match="string or null"):
        job_environment({}, {"A": 1})
    with pytest.raises(ValueError, match="bad variable name"):
        job_environment({}, {"A=B": "1"})


def test_task_environment() -> None:
    jobspec = spec(nnodes=2, ntasks=4, gpus_per_task=1)
    layout = compute_layout(jobspec, R({0: "0-1", 4: "0-1"}, {0: "0-1", 4: "0-1"}))
    share = layout.share(4)
    task = share.tasks()[1]
    env = task_environment({"PATH": "/p", "FLUXES_TASK_RANK": "mine"}, jobid=1234,
                           layout=layout, share=share, task=task, cwd="/w", uri="unix:///s")
    assert env == {
        "PATH": "/p", "FLUXES_JOB_ID": fjobid.encode(1234, "f58"), "FLUXES_JOB_ID_DEC": "1234",
        "FLUXES_JOB_SIZE": "4", "FLUXES_JOB_NNODES": "2", "FLUXES_TASK_RANK": "3",
        "FLUXES_TASK_LOCAL_ID": "1", "FLUXES_NODE_RANK": "1", "FLUXES_EXEC_RANK": "4",
        "PWD": "/w", "FLUXES_URI": "unix:///s", "CUDA_VISIBLE_DEVICES": "0,1"}
    per_task = task_environment({}, jobid=1, layout=layout, share=share, task=task, cwd="/",
                                gpu_affinity="per-task")
    assert per_task["CUDA_VISIBLE_DEVICES"] == "1"
    off = task_environment({}, jobid=1, layout=layout, share=share, task=task, cwd="/",
                           gpu_affinity="off")
    assert "CUDA_VISIBLE_DEVICES" not in off


# ----------------------------------------------------------------------------- output


def test_output_spec() -> None:
    assert output_spec(spec()) == output_spec(spec()) and output_spec(spec()).stdout is None
    both = output_spec(spec(output="o.{{id}}", error="e.{{id}}"))
    assert (both.stdout, both.stderr) == ("o.{{id}}", "e.{{id}}")
    only_out = output_spec(spec(output="all.txt"))
    assert (only_out.stdout, only_out.stderr) == ("all.txt", "all.txt")
    only_err = output_spec(spec(error="err.txt"))
    assert (only_err.stdout, only_err.stderr) == (None, "err.txt")
    kvs = spec()
    kvs["attributes"]["system"]["shell"] = {"options": {"output": {"stdout": {"type": "kvs"}}}}
    assert output_spec(kvs).stdout is None


def test_expand_template() -> None:
    f58 = fjobid.encode(99, "f58")
    assert expand_template("{{id}}.out", jobid=99) == f"{f58}.out"
    assert expand_template("{{jobid}}-{{ id.dec }}-{{id.hex}}", jobid=99) == f"{f58}-99-0x63"
    assert expand_template("{{name}}.{{taskid}}.{{rank}}", jobid=1, name="a/b", taskid=3,
                           rank=7) == "a_b.3.7"
    assert expand_template("plain", jobid=1) == "plain"
    with pytest.raises(ValueError, match="unknown template"):
        expand_template("{{nope}}", jobid=1)
    with pytest.raises(ValueError, match="unknown template"):
        expand_template("{{taskid}}", jobid=1)
    with pytest.raises(ValueError, match="job id form"):
        expand_template("{{id.roman}}", jobid=1)


# ----------------------------------------------------------------------------- status, commands


@pytest.mark.parametrize(("code", "status"), [
    (0, 0), (1, 256), (3, 768), (126, 126 << 8), (127, 127 << 8), (128, 128 << 8),
    (130, 2), (137, 9), (143, 15), (255, 255 << 8),
])
def test_wait_status(code: int, status: int) -> None:
    assert wait_status(code) == status
    if code > 128 and status < 256:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == code - 128
    else:
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == code


def test_command_error(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("")
    plain.chmod(stat.S_IRUSR)
    assert command_error("tool", str(tmp_path), "/") is None
    assert command_error("./tool", None, str(tmp_path)) is None
    assert command_error(str(tool), None, "/") is None
    assert command_error("tool", ":/nonexistent", str(tmp_path)) is None  # empty entry = cwd
    assert command_error("sh", None, "/") is None
    assert command_error("nope", str(tmp_path), "/") == \
        "cannot execute 'nope': No such file or directory"
    assert command_error("./plain", None, str(tmp_path)) == \
        "cannot execute './plain': Permission denied"  # no x bit: not even root runs it
    assert command_error(str(tmp_path), None, "/") == \
        f"cannot execute {str(tmp_path)!r}: Permission denied"
    assert command_error("", None, "/") == "cannot execute '': No such file or directory"


def test_find_command_gives_the_file_the_spawner_runs(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert find_command("tool", f"/nonexistent:{tmp_path}", "/") == str(tool)
    assert find_command("./tool", None, str(tmp_path)) == f"{tmp_path}/./tool"
    assert find_command("tool", ":/nonexistent", str(tmp_path)) == f"{tmp_path}/./tool"
    assert find_command("nope", str(tmp_path), "/") == \
        "cannot execute 'nope': No such file or directory"
