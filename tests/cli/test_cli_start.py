"""``fluxes start`` refused before it starts leaves no state directory behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from fluxes.cli.main import main


@pytest.mark.parametrize("argv", [
    ["--nodes", "0", "--", "true"],
    ["--cores-per-node", "0", "--", "true"],
    ["--partitions", "0", "--", "true"],
    ["--web", "0", "--", "true"],
    ["--detach", "--", "true"],
])
def test_a_refused_start_leaves_no_temporary_directory(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["start", *argv]) != 0
    err = capsys.readouterr().err
    assert err.startswith("fluxes") and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
