"""``fluxes simulate --journal`` of a real instance's history keeps every invariant.

A history from real workers holds what a synthetic trace rarely does: jobs
whose ``start`` and ``finish`` share a timestamp (``fluxes run true``
finishes within the clock's resolution), multi-node jobs and jobs back to
back on the same cores. Replayed, such a history must schedule without one
core used twice and with every job ended (issue 25).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests.system.clitools import cli

pytestmark = pytest.mark.system


def _history(uri: str, path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """The instance's journal exported to ``path``, as records."""
    assert cli(uri, "eventlog", "export", str(path)) == 0, capsys.readouterr().err
    capsys.readouterr()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_real_history_with_zero_length_and_multi_node_jobs_replays_cleanly(
        uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(3):
        assert cli(uri, "run", "-N2", "hostname") == 0, capsys.readouterr().err
        for _ in range(4):
            assert cli(uri, "run", "true") == 0, capsys.readouterr().err
        assert cli(uri, "run", "-N2", "-n4", "true") == 0, capsys.readouterr().err
    # a burst: jobs back to back on the same cores at the same instants
    assert cli(uri, "submit", "--cc", "1-12", "--wait", "true") == 0, capsys.readouterr().err
    capsys.readouterr()
    records = _history(uri, tmp_path / "history.jsonl", capsys)
    times: dict[int, dict[str, float]] = defaultdict(dict)
    nodes: dict[int, int] = {}
    for rec in records:
        if rec["n"] in ("start", "finish"):
            times[rec["j"]][rec["n"]] = rec["t"]
        elif rec["n"] == "submit":
            nodes[rec["j"]] = int((rec.get("x") or {}).get("nnodes") or 0)
    # the history holds what the replay must cope with, or this test proves nothing
    assert any(t.get("start") == t.get("finish") for t in times.values()), times
    assert any(n >= 2 for n in nodes.values()), nodes
    assert cli(uri, "simulate", "--journal", str(tmp_path / "history.jsonl"),
               "--nodes", "2", "--cores-per-node", "4", "--no-progress", "--json") == 0, \
        capsys.readouterr()
    report = json.loads(capsys.readouterr().out)
    assert report["invariants"]["ok"], report["invariants"]
    assert report["jobs"]["ran"] == len(times)
