"""The CLI driven in-process: version, help, jobspec validate, job id, error handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxes.cli.main import main

SPEC = Path(__file__).resolve().parents[1] / "spec-data"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("fluxes ")


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "jobspec" in out and "job" in out


def test_unknown_command_is_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice" in err


def test_jobspec_validate_all_rfc_examples(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (SPEC / "rfc14").glob("*.yaml"))
    assert main(["jobspec", "validate", *files]) == 0
    assert capsys.readouterr().out.count(": valid") == len(files)


def test_jobspec_validate_reports_each_invalid_file(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    good = SPEC / "rfc14" / "example1.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nresources: 5\ntasks: []\n")
    missing = tmp_path / "missing.yaml"
    assert main(["jobspec", "validate", str(good), str(bad), str(missing)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith(f"{bad}: ") and err[1].startswith(f"{missing}: ")


def test_jobspec_validate_v1_refuses_canonical_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobspec", "validate", "--v1", str(SPEC / "rfc14" / "example2.yaml")]) == 1


@pytest.mark.parametrize(("form", "expected"), [
    ("dec", "6787342413402046"), ("hex", "0x181d0d4d850fbe"),
    ("dothex", "0018.1d0d.4d85.0fbe"), ("kvs", "job.0018.1d0d.4d85.0fbe"), ("f58", "ƒuzzybunny"),
    ("f58plain", "fuzzybunny"),
])
def test_job_id_conversions(form: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "id", f"--to={form}", "ƒuzzybunny"]) == 0
    assert capsys.readouterr().out.strip() == expected


def test_job_id_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "id", "not-an-id!"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fluxes: ") and err.count("\n") == 1


def test_jobs_format_knows_every_output_encoding() -> None:
    from fluxes.cli.cmd_jobs import JobId, _check_format

    _check_format("{id.f58plain} {id.words} {id.kvs}")
    assert JobId(6787342413402046).f58plain == "fuzzybunny"


def test_submit_file_takes_attribute_options(capsys: pytest.CaptureFixture[str]) -> None:
    import orjson

    path = str(SPEC / "rfc14" / "example1.yaml")
    assert main(["submit", "--dry-run", "-t", "5", "-q", "batch", "--job-name", "hi",
                 "--dependency", "afterok:123", "--setattr", "user.x=1", path]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    system = doc["attributes"]["system"]
    assert system["duration"] == 300.0 and system["queue"] == "batch"
    assert system["job"]["name"] == "hi"
    assert system["dependencies"] == [{"scheme": "afterok", "value": "123"}]
    assert doc["attributes"]["user"] == {"x": 1}
    assert doc["resources"][0]["count"] == 4  # the file's shape is kept


@pytest.mark.parametrize("option", [["-N2"], ["-n", "3"], ["--cwd", "/"], ["-x"],
                                    ["--requires", "gpu"], ["--output", "o.txt"]])
def test_submit_file_refuses_reshaping_options(option: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SPEC / "rfc14" / "example1.yaml")
    assert main(["submit", "--dry-run", *option, path]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot change a jobspec file" in err
