"""``fluxes batch --dry-run``: the jobspec a batch script becomes (no instance needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main


def dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["batch", "--dry-run", *args]) == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return doc


def test_directives_shape_the_job_and_the_command_line_overrides_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 10:00\n#FLUX: -N2\n#FLUX: --job-name=x\n"
                      "#FLUX: --setattr=user.tag=a\necho hi\n")
    doc = dry_run(capsys, str(script), "arg1")
    system = doc["attributes"]["system"]
    assert doc["resources"][0]["count"] == 2 and doc["resources"][0]["exclusive"] is True
    assert system["job"]["name"] == "x" and system["duration"] == 600
    assert system["batch"]["script"] == script.read_text()
    assert doc["attributes"]["user"]["tag"] == "a"
    assert doc["tasks"][0]["command"][-3:] == ["--batch", "--", "arg1"]
    assert system["shell"]["options"]["output"]["stdout"]["path"] == "fluxes-{{id}}.out"
    doc = dry_run(capsys, "-N3", "--job-name=y", "-t", "1m", "--setattr=user.more=b",
                  str(script))
    assert doc["resources"][0]["count"] == 3
    assert doc["attributes"]["system"]["job"]["name"] == "y"
    assert doc["attributes"]["system"]["duration"] == 60
    assert doc["attributes"]["user"] == {"tag": "a", "more": "b"}


def test_slots_spread_over_the_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run(capsys, "-N2", "-n4", "-c3", "--wrap", "hostname")
    node = doc["resources"][0]
    assert node["count"] == 2 and "exclusive" not in node
    assert node["with"][0]["with"][0] == {"type": "core", "count": 6}
    assert doc["attributes"]["system"]["batch"]["script"] == "#!/bin/sh\nhostname\n"


def test_bad_scripts_are_one_line_errors(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mem=4G\n")
    assert main(["batch", "--dry-run", str(script)]) != 0
    assert capsys.readouterr().err == \
        "fluxes: s.sh: line 2: #SBATCH --mem is not supported (fluxes reads -N -n -c -t -J " \
        "-o -e -p --gpus-per-task)\n"
    script.write_text("echo no shebang\n")
    assert main(["batch", "--dry-run", str(script)]) != 0
    assert "does not start with #!" in capsys.readouterr().err
    script.write_text("#!/bin/sh\n#FLUX: --bogus\n")
    assert main(["batch", "--dry-run", str(script)]) == 2
    assert "--bogus" in capsys.readouterr().err
