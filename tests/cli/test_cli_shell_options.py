"""flux's per-resource options (--cores, --tasks-per-node, --tasks-per-core,
--gpus-per-node), --input and --signal: the jobspec they build and the task
layout that follows from it."""

from __future__ import annotations

import argparse
import base64
import signal
from typing import Any

import orjson
import pytest

from fluxes.cli.cmd_batch import allocation_jobspec
from fluxes.cli.main import build_parser, main
from fluxes.domain.exec.layout import compute_layout
from fluxes.errors import FluxesError
from fluxes.formats.rset import ResourceSet
from fluxes.formats.shellopts import input_option, parse_signal_option, stdin_data


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["submit", "--dry-run", "--env=-*", *argv]) == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return doc


def _R(cores: dict[int, int]) -> ResourceSet:
    return ResourceSet.from_ranks({rank: (f"0-{n - 1}", None) for rank, n in cores.items()})


def _tasks(doc: dict[str, Any], cores: dict[int, int]) -> dict[int, int]:
    layout = compute_layout(doc, _R(cores))
    return {s.rank: s.ntasks for s in layout.shares}


def _options(doc: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = doc["attributes"]["system"].get("shell", {}).get("options", {})
    return opts


def test_tasks_per_node_runs_that_many_on_every_node(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-N2", "--tasks-per-node=3", "./app")
    # as flux: whole nodes (no --cores), one slot of one core each, the shell counts tasks
    assert doc["resources"] == [{"type": "node", "count": 2, "exclusive": True, "with": [
        {"type": "slot", "count": 1, "label": "task", "with": [{"type": "core", "count": 1}]}]}]
    assert doc["tasks"][0]["count"] == {"per_slot": 1}
    assert _options(doc)["per-resource"] == {"type": "node", "count": 3}
    assert _tasks(doc, {0: 4, 1: 4}) == {0: 3, 1: 3}


def test_cores_alone_is_one_task_per_core(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "--cores=6", "./app")
    assert doc["resources"] == [{"type": "slot", "count": 6, "label": "task",
                                 "with": [{"type": "core", "count": 1}]}]
    assert "per-resource" not in _options(doc)
    assert _tasks(doc, {0: 4, 1: 2}) == {0: 4, 1: 2}


def test_cores_over_nodes_is_one_slot_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-N2", "--cores=8", "--tasks-per-core=2", "./app")
    node = doc["resources"][0]
    assert node["type"] == "node" and node["count"] == 2 and "exclusive" not in node
    assert node["with"][0]["count"] == 1 and node["with"][0]["with"] == [
        {"type": "core", "count": 4}]
    assert _options(doc)["per-resource"] == {"type": "core", "count": 2}
    assert _tasks(doc, {0: 4, 1: 4}) == {0: 8, 1: 8}
    # without --tasks-per-*: one task per slot, i.e. per node
    assert _tasks(_dry_run(capsys, "-N2", "--cores=8", "./app"), {0: 4, 1: 4}) == {0: 1, 1: 1}


def test_exclusive_with_cores(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-N1", "-x", "--cores=2", "--tasks-per-node=2", "./app")
    assert doc["resources"][0]["exclusive"] is True


@pytest.mark.parametrize(("argv", "why"), [
    (["-n4", "--tasks-per-node=2"], "per-resource and per-task options do not mix"),
    (["-c2", "--cores=4"], "-c"),
    (["--cores=4", "-g1"], "-g"),
    (["-N2", "--tasks-per-node=1", "--tasks-per-core=1"], "cannot be combined"),
    (["--tasks-per-node=2"], "need -N/--nodes or --cores"),
    (["-N2", "--tasks-per-node=0"], ">= 1"),
    (["-N3", "--cores=4"], "does not divide evenly"),
    (["-N4", "--cores=2"], "fewer than"),
    (["--cores=0"], ">= 1"),
    (["--cores=4", "-x"], "exclusive"),
    (["--signal=NOPE@1m"], "unknown signal"),
    (["--signal=@soon"], "--signal=@soon"),
])
def test_refusals_are_one_line(argv: list[str], why: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--dry-run", *argv, "true"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err, err


def test_signal_option_as_flux(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_signal_option(None) == {"signum": int(signal.SIGUSR1), "timeleft": 60.0}
    assert parse_signal_option("") == {"signum": int(signal.SIGUSR1), "timeleft": 60.0}
    assert parse_signal_option("TERM@2m") == {"signum": int(signal.SIGTERM), "timeleft": 120.0}
    assert parse_signal_option("@30") == {"signum": int(signal.SIGUSR1), "timeleft": 30.0}
    assert parse_signal_option("sigusr2") == {"signum": int(signal.SIGUSR2), "timeleft": 60.0}
    doc = _dry_run(capsys, "-t", "10m", "--signal=HUP@5s", "./app")
    assert _options(doc)["signal"] == {"signum": int(signal.SIGHUP), "timeleft": 5.0}


def test_input_file_and_data(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "--input=in.txt", "cat")
    assert _options(doc)["input"] == {"stdin": {"type": "file", "path": "in.txt"}}
    opt = input_option(data=b"\x00\xffline\n")
    assert opt["stdin"]["type"] == "data"
    assert base64.b64decode(opt["stdin"]["data"]) == b"\x00\xffline\n"
    assert stdin_data(opt["stdin"]) == b"\x00\xffline\n"
    assert stdin_data({"type": "file", "path": "x"}) is None
    with pytest.raises(ValueError, match="base64"):
        stdin_data({"type": "data", "data": "!!"})
    with pytest.raises(ValueError, match="--input=FILE"):
        input_option(data=b"x" * (1 << 20))


def test_batch_and_alloc_take_cores_and_gpus_per_node() -> None:
    parser = build_parser()
    args = parser.parse_args(["batch", "-N2", "--cores=4", "--gpus-per-node=1", "x.sh"])
    doc = allocation_jobspec(args, [], "#!/bin/sh\n").to_dict()
    node = doc["resources"][0]
    assert node["count"] == 2
    assert node["with"][0]["with"] == [{"type": "core", "count": 2}, {"type": "gpu", "count": 1}]
    args = parser.parse_args(["alloc", "-N2", "--tasks-per-node=2"])
    with pytest.raises(FluxesError, match="one broker per node"):
        allocation_jobspec(args, [], None)


def test_run_parses_the_new_options() -> None:
    ns = build_parser().parse_args(["run", "-N2", "--tasks-per-node=2", "--signal=USR2@10",
                                    "--input=f", "true"])
    assert isinstance(ns, argparse.Namespace) and ns.tasks_per_node == 2


def test_gpus_per_node_with_tasks_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-N2", "--gpus-per-node=2", "--tasks-per-node=2", "./app")
    assert doc["resources"][0]["with"][0]["with"] == [{"type": "core", "count": 1},
                                                      {"type": "gpu", "count": 2}]
    rset = ResourceSet.from_ranks({0: ("0-3", "0-1"), 1: ("0-3", "0-1")})
    layout = compute_layout(doc, rset)
    assert [s.ntasks for s in layout.shares] == [2, 2]
    # each task of a node gets its own GPU of the node's two
    assert [t.gpus for t in layout.share(1).tasks()] == [(0,), (1,)]
