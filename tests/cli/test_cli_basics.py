"""The CLI driven in-process: version, help, jobspec validate, job id, error handling."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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


def test_jobspec_validate_names_an_unreadable_file_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexist.yaml"
    assert main(["jobspec", "validate", str(missing), str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{missing}: No such file or directory",
        f"{tmp_path}: Is a directory",
    ]


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


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes, encoding: str = "utf-8") -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding=encoding))


def test_job_id_reads_stdin_without_ids(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, "ƒuzzybunny\n\n  0x181d0d4d850fbe \n"
                        "job.0018.1d0d.4d85.0fbe\n123".encode())
    assert main(["job", "id"]) == 0
    assert capsys.readouterr().out.splitlines() == ["6787342413402046"] * 3 + ["123"]
    _stdin(monkeypatch, b"")
    assert main(["job", "id", "--to=f58"]) == 0
    assert capsys.readouterr().out == ""


def test_job_id_stdin_stops_at_the_first_bad_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, b"1\nnot-an-id!\n2\n")
    assert main(["job", "id", "--to=hex"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "0x1\n"
    assert captured.err.startswith("fluxes: ") and captured.err.count("\n") == 1


def test_job_id_arguments_win_over_stdin(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, b"1\n")
    assert main(["job", "id", "2"]) == 0
    assert capsys.readouterr().out == "2\n"


def _ascii_stdout(monkeypatch: pytest.MonkeyPatch) -> io.TextIOWrapper:
    """What stdout is under PYTHONIOENCODING=ascii."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    return out


def _written(out: io.TextIOWrapper) -> str:
    out.flush()
    buffer = out.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("ascii")


def test_job_id_f58_falls_back_to_ascii_f(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _ascii_stdout(monkeypatch)
    assert main(["job", "id", "--to=f58", "6787342413402046", "ƒuzzybunny"]) == 0
    assert _written(out) == "fuzzybunny\nfuzzybunny\n"
    # stdin is read as UTF-8 whatever the locale, so ƒ ids still come in
    out = _ascii_stdout(monkeypatch)
    _stdin(monkeypatch, "ƒuzzybunny\n".encode(), encoding="ascii")
    assert main(["job", "id", "--to=f58"]) == 0
    assert _written(out) == "fuzzybunny\n"


def test_job_id_f58_keeps_the_real_prefix_when_stdout_can_write_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["job", "id", "--to=f58", "6787342413402046"]) == 0
    out.flush()
    assert isinstance(out.buffer, io.BytesIO)
    assert out.buffer.getvalue().decode() == "ƒuzzybunny\n"


def test_job_id_bad_input_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "id", "not-an-id!"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fluxes: ") and err.count("\n") == 1


def test_jobs_format_knows_every_output_encoding() -> None:
    from fluxes.cli.cmd_jobs import _check_format
    from fluxes.service.jobrows import JobId

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


def _submitted(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[dict[str, Any]]:
    """Run ``fluxes submit ARGV``; return the job items the client put on the wire."""
    return [job for request in _requests(monkeypatch, argv) for job in request["jobs"]]


def _requests(monkeypatch: pytest.MonkeyPatch, argv: list[str],
              limit: int = 10_000) -> list[dict[str, Any]]:
    """Run ``fluxes submit ARGV`` on an instance whose per-request limit is ``limit``;
    return the requests the client put on the wire (job ids are handed out 1, 2, ...)."""
    import orjson

    from fluxes import messages as proto
    from fluxes.cli import cmd_submit
    from fluxes.formats.idset import IDSet
    from fluxes.store.client import Client
    from fluxes.store.keys import Keys

    sent: dict[str, dict[str, Any]] = {}
    given = [0]

    class Wire:
        """Redis as the ingest's side of it: XADDs recorded, each BLPOP answered."""

        def pipeline(self, transaction: bool = False) -> Wire:
            return self

        def execute(self) -> list[Any]:
            return []

        def xadd(self, stream: str, fields: dict[str, bytes]) -> bytes:
            request = orjson.loads(fields["d"])
            sent[request["req"]] = request
            return b"1-0"

        def blpop(self, keys: list[str], timeout: float = 0) -> tuple[bytes, bytes]:
            request = sent[keys[0].rsplit(":", 1)[1]]
            # an array request (--cc) stands for one job per id
            jobs = len(IDSet(request["cc"])) if "cc" in request else len(request["jobs"])
            given[0] += jobs
            reply = proto.Reply(jobs=[proto.JobResult(id=given[0] - jobs + 1 + i)
                                      for i in range(jobs)])
            return keys[0].encode(), proto.encode_reply(reply)

    instance = SimpleNamespace(redis=Wire(), keys=Keys("t"), user="alice")
    monkeypatch.setattr(cmd_submit, "instance", lambda args: instance)
    monkeypatch.setattr(Client, "jobs_per_request", lambda self: limit)
    assert main(["submit", *argv]) == 0
    return list(sent.values())


def test_submit_cc_sends_arrays_within_the_limit(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.formats.idset import IDSet

    sent = _requests(monkeypatch, ["--cc", "1-25000,30000", "--json", "true"], limit=7000)
    assert [len(IDSet(r["cc"])) for r in sent] == [7000, 7000, 7000, 4001]
    assert IDSet(",".join(r["cc"] for r in sent)) == IDSet("1-25000,30000")
    assert all(len(r["jobs"]) == 1 for r in sent)
    # every job's id printed, in order, as before
    assert capsys.readouterr().out.split() == [f'{{"id":{i}}}' for i in range(1, 25002)]


@pytest.mark.parametrize(("argv", "expected"), [
    ([], None),  # no --urgency: the instance's default applies
    (["--urgency", "5"], 5),
    (["--urgency", "hold"], 0),
    (["--urgency=default"], 16),
    (["--urgency", "7", "--cc", "1-3"], 7),
    (["--cc", "1-2"], None),
])
def test_submit_urgency_reaches_the_client(argv: list[str], expected: int | None,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _submitted(monkeypatch, [*argv, "true"])
    assert jobs and all(job.get("urgency") == expected for job in jobs)
    assert all(isinstance(job["jobspec"], dict) for job in jobs)
    assert ("urgency" in jobs[0]) == (expected is not None)


def test_submit_file_urgency(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    path = str(SPEC / "rfc14" / "example1.yaml")
    assert _submitted(monkeypatch, ["--urgency", "4", path])[0]["urgency"] == 4
    assert "urgency" not in _submitted(monkeypatch, [path])[0]


def test_submit_bank_option_sets_the_system_attribute(capsys: pytest.CaptureFixture[str]) -> None:
    import orjson

    from fluxes.config import InstanceConfig
    from fluxes.domain.jm.submission import prepare_job

    assert main(["submit", "--dry-run", "-B", "physics", "true"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["attributes"]["system"]["bank"] == "physics"
    # the ingest records it in the submit entry's extras, which accounting reads
    prepared = prepare_job({"jobspec": doc}, 1000, "u", InstanceConfig())
    assert prepared.info["bank"] == "physics"
    path = str(SPEC / "rfc14" / "example1.yaml")
    assert main(["submit", "--dry-run", "--bank=chem", path]) == 0
    assert orjson.loads(capsys.readouterr().out)["attributes"]["system"]["bank"] == "chem"


def test_setopt_and_taskmap_set_shell_options(capsys: pytest.CaptureFixture[str]) -> None:
    import orjson

    assert main(["submit", "--dry-run", "-o", "pmi=off", "--setopt", "cpu-affinity=per-task",
                 "-o", "verbose", "-o", "limit=3", "--taskmap=cyclic:2", "true"]) == 0
    options = orjson.loads(capsys.readouterr().out)["attributes"]["system"]["shell"]["options"]
    assert options == {"pmi": "off", "cpu-affinity": "per-task", "verbose": 1, "limit": 3,
                       "taskmap": {"scheme": "cyclic", "value": "2"}}
    path = str(SPEC / "rfc14" / "example1.yaml")
    assert main(["submit", "--dry-run", "-o", "pmi=off", path]) == 0  # on a file too
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["attributes"]["system"]["shell"]["options"] == {"pmi": "off"}
    for bad in (["--taskmap=spiral"], ["--taskmap=cyclic:0"], ["-o", "=1"]):
        assert main(["submit", "--dry-run", *bad, "true"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
