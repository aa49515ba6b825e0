"""What flux users expect of the CLI, without an instance: usage errors that name the
command, ``help``, count and time-limit messages, ``jobs`` fields and INFO texts."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.domain.jm.queues import QueueConfig, QueueState
from fluxes.domain.job.model import FatalException, Job
from fluxes.domain.job.record import JobRecord
from fluxes.domain.job.states import JobState

NOW = time.time()

# ---------------------------------------------------------------- usage


@pytest.mark.parametrize(("argv", "prog"), [
    (["submit", "--frobnicate", "true"], "fluxes submit"),
    (["jobs", "--frobnicate"], "fluxes jobs"),
    (["job", "info", "--frobnicate", "123"], "fluxes job info"),
    (["queue", "list", "--frobnicate"], "fluxes queue list"),
])
def test_unknown_option_names_the_command(argv: list[str], prog: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"{prog}: unrecognized arguments: --frobnicate\n"


def test_bare_fluxes_prints_usage_and_fails_as_flux(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("usage: fluxes ") and "submit" in captured.err


@pytest.mark.parametrize(("topic", "usage"), [
    ([], "usage: fluxes "), (["submit"], "usage: fluxes submit "),
    (["job", "attach"], "usage: fluxes job attach ")])
def test_help_prints_a_command_help(topic: list[str], usage: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", *topic]) == 0
    assert capsys.readouterr().out.startswith(usage)


def test_help_of_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "job", "frob"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fluxes help: ") and "'frob'" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["submit"], ["submit", "--"], ["submit", "-n2"], ["run"]])
def test_submit_without_a_command_is_a_usage_error(argv: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fluxes {argv[0]}: no command") and "usage:" in err
    assert err.count("\n") == 1


# ---------------------------------------------------------------- counts, --cc, -t


@pytest.mark.parametrize(("argv", "message"), [
    (["-N", "-1"], "nnodes: must be an integer >= 1, got -1"),
    (["-N", "0"], "nnodes: must be an integer >= 1, got 0"),
    (["-N", "-1", "-n", "2"], "nnodes: must be an integer >= 1, got -1"),
    (["-n", "0"], "ntasks: must be an integer >= 1, got 0"),
    (["-c", "0"], "cores_per_task: must be an integer >= 1, got 0"),
    (["-g", "-1"], "gpus_per_task: must be an integer >= 0, got -1"),
    (["--cc="], "--cc: '' names no id (e.g. --cc=1-10)"),
    (["--cc=5-1"], "--cc: invalid idset '5-1': range '5-1' is descending"),
    (["--cc=0-1000000000"], "--cc: '0-1000000000' is 1000000001 copies, at most 1000000 "
                            "per submit"),
])
def test_count_errors_name_the_option_given(argv: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--dry-run", "--env=-*", *argv, "true"]) == 1
    assert capsys.readouterr().err == f"fluxes: {message}\n"


def _duration(capsys: pytest.CaptureFixture[str], limit: str) -> float:
    assert main(["submit", "--dry-run", "--env=-*", "-t", limit, "true"]) == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return float(doc["attributes"]["system"].get("duration", 0.0))


@pytest.mark.parametrize(("limit", "seconds"), [
    ("10", 600.0), ("30s", 30.0), ("2h", 7200.0), ("01:00:00", 3600.0), ("10:00", 600.0),
    ("1-0", 86400.0), ("1-2:30", 95400.0), ("1-02:03:04", 93784.0)])
def test_time_limit_takes_flux_and_slurm_forms(limit: str, seconds: float,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _duration(capsys, limit) == seconds


@pytest.mark.parametrize(("limit", "message"), [
    ("-5", "time limit '-5' is negative"),
    ("5x", "invalid time limit '5x': "),
])
def test_time_limit_errors_quote_what_was_typed(limit: str, message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--dry-run", "-t", limit, "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fluxes submit: argument -t/--time-limit: {message}")
    assert "300" not in err and err.count("\n") == 1


def test_a_jobspec_file_takes_a_slurm_time_limit(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "spec-data" / "rfc14" / "example1.yaml"
    assert main(["submit", "--dry-run", "-t", "1:00:00", str(path)]) == 0
    assert orjson.loads(capsys.readouterr().out)["attributes"]["system"]["duration"] == 3600


# ---------------------------------------------------------------- fluxes jobs


def _record(jobid: int, state: JobState = JobState.INACTIVE, queue: str | None = None,
            **fields: Any) -> JobRecord:
    job = Job(jobid, state=state, userid=0, t_submit=NOW - 10, **{"priority": 16, **fields})
    info: dict[str, Any] = {"name": f"job{jobid}", "ntasks": 1}
    if queue is not None:
        info["queue"] = queue
    return JobRecord(job, info)


@pytest.fixture
def jobs_env(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """``fluxes jobs`` without an instance: the records, the queues and the ids asked for."""
    from fluxes.cli import cmd_jobs

    env = SimpleNamespace(records=[], queues={None: QueueState()}, asked=[])

    def by_id(inst: Any, ids: list[int]) -> tuple[list[JobRecord], list[int]]:
        env.asked.append(list(ids))
        known = {rec.id: rec for rec in env.records}
        wanted = list(dict.fromkeys(ids))
        return [known[i] for i in wanted if i in known], [i for i in wanted if i not in known]

    monkeypatch.setattr(cmd_jobs, "instance", lambda args: SimpleNamespace())
    monkeypatch.setattr(cmd_jobs, "select_jobs", lambda *a, **k: list(env.records))
    # raising=False: the tests must run (and fail) on a CLI without these too
    monkeypatch.setattr(cmd_jobs, "jobs_by_id", by_id, raising=False)
    monkeypatch.setattr(cmd_jobs, "queue_states", lambda inst: env.queues, raising=False)
    monkeypatch.setattr(cmd_jobs, "_row_queues", lambda inst: env.queues, raising=False)
    return env


def _cancel(t: float = NOW) -> FatalException:
    return FatalException("cancel", "", t)


@pytest.mark.parametrize(("fields", "returncode", "waitstatus"), [
    ({"wait_status": 0}, "0", "0"),
    ({"wait_status": 3 << 8}, "3", "768"),
    ({"wait_status": 9}, "-9", "9"),  # a task killed by SIGKILL
    ({"wait_status": 15, "fatal": FatalException("timelimit", "", NOW)}, "-15", "15"),
    ({"fatal": _cancel()}, "-128", ""),  # canceled before it ran
    ({"fatal": FatalException("exec", "no such command", NOW)}, "", ""),
])
def test_jobs_returncode_and_waitstatus_as_flux(
        fields: dict[str, Any], returncode: str, waitstatus: str, jobs_env: SimpleNamespace,
        capsys: pytest.CaptureFixture[str]) -> None:
    jobs_env.records.append(_record(1, **fields))
    assert main(["jobs", "-a", "-o", "{id.dec}|{returncode}|{waitstatus}"]) == 0
    assert capsys.readouterr().out.splitlines() == ["JOBID|RC|WSTATUS",
                                                    f"1|{returncode}|{waitstatus}"]
    assert main(["jobs", "-a", "--json"]) == 0
    [row] = orjson.loads(capsys.readouterr().out)["jobs"]
    assert str(row.get("returncode", "")) == returncode
    assert str(row.get("waitstatus", "")) == waitstatus


def test_active_jobs_have_no_returncode(jobs_env: SimpleNamespace,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    jobs_env.records.append(_record(1, state=JobState.RUN))
    assert main(["jobs", "-o", "{id.dec}|{returncode}|{waitstatus}"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "1||"


def test_jobs_lists_the_ids_given_and_names_unknown_ones_as_typed(
        jobs_env: SimpleNamespace, capsys: pytest.CaptureFixture[str]) -> None:
    jobs_env.records += [_record(1, state=JobState.RUN), _record(2, wait_status=0)]
    assert main(["jobs", "-n", "-o", "{id.dec}", "2", "0x1", "12345", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out.split() == ["2", "1"]
    assert captured.err == "fluxes: job 12345 not found\n"
    assert jobs_env.asked == [[2, 1, 12345, 2]]
    # an explicit filter still narrows the list
    assert main(["jobs", "-n", "-o", "{id.dec}", "-f", "running", "1", "2"]) == 0
    assert capsys.readouterr().out.split() == ["1"]


def test_jobs_refuses_an_unknown_queue_as_queue_status_does(
        jobs_env: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli import cmd_queue

    jobs_env.queues = {"batch": QueueState(), "debug": QueueState()}
    monkeypatch.setattr(cmd_queue, "instance", lambda args: SimpleNamespace())
    monkeypatch.setattr(cmd_queue, "queue_states", lambda inst: jobs_env.queues)
    assert main(["queue", "status", "nosuch"]) == 1
    expected = capsys.readouterr().err
    assert main(["jobs", "-q", "nosuch"]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", expected)
    assert expected == "fluxes: unknown queue 'nosuch'\n"


def _info_of(capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["jobs", "-a", "-n", "-o", "{id.dec}|{contextual_info}"]) == 0
    return capsys.readouterr().out.splitlines()


def test_jobs_in_a_stopped_queue_say_so(jobs_env: SimpleNamespace,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    jobs_env.queues = {"batch": QueueState(started=False, stop_reason="maintenance"),
                       "debug": QueueState(started=False), "open": QueueState()}
    jobs_env.records += [_record(1, state=JobState.SCHED, queue="batch"),
                         _record(2, state=JobState.SCHED, queue="debug"),
                         _record(3, state=JobState.SCHED, queue="open"),
                         _record(4, state=JobState.SCHED, queue="batch", priority=0)]
    assert _info_of(capsys) == ["1|queue stopped: maintenance", "2|queue stopped", "3|",
                                "4|held"]


def test_jobs_in_the_stopped_anonymous_queue_say_so(jobs_env: SimpleNamespace,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    jobs_env.queues = {None: QueueState(started=False, stop_reason="upgrade")}
    jobs_env.records.append(_record(1, state=JobState.SCHED))
    assert _info_of(capsys) == ["1|queue stopped: upgrade"]


def test_a_failed_dependency_is_not_named_twice(jobs_env: SimpleNamespace,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    note = "dependency: afterok: job ƒ2t6V2H failed"
    jobs_env.records += [_record(1, fatal=FatalException("dependency", note, NOW)),
                         _record(2, fatal=FatalException("exec", "no such file", NOW)),
                         _record(3, fatal=FatalException("cancel", "", NOW))]
    assert _info_of(capsys) == [f"1|{note}", "2|exec: no such file", "3|cancel"]


# ---------------------------------------------------------------- queue list, cancel


def test_queue_list_json_marks_the_anonymous_queue_default(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli import cmd_queue

    for text, expected in (("", {"(default)": True}),
                           ('[queues.a]\n[queues.b]\n[policy.jobspec.defaults.system]\n'
                            'queue = "b"\n', {"a": False, "b": True})):
        config = QueueConfig.from_toml(text)
        inst = SimpleNamespace(config=lambda c=config: SimpleNamespace(queues=c))
        monkeypatch.setattr(cmd_queue, "instance", lambda args, i=inst: i)
        monkeypatch.setattr(cmd_queue, "queue_states",
                            lambda i, c=config: {n: QueueState() for n in c.queue_names})
        assert main(["queue", "list", "--json"]) == 0
        rows = orjson.loads(capsys.readouterr().out)["queues"]
        assert {r["queue"]: r["default"] for r in rows} == expected
        assert main(["queue", "list"]) == 0
        assert "(default)*" not in capsys.readouterr().out


def test_cancel_errors_name_the_job_as_typed(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli import cmd_submit
    from fluxes.formats.jobid import encode

    sent: list[list[int]] = []

    class FakeClient:
        def __init__(self, inst: Any) -> None:
            pass

        def cancel(self, ids: list[int], note: str = "") -> dict[str, Any]:
            sent.append(ids)
            return {"ok": [], "errors": [f"{encode(i, 'f58')}: job is inactive or unknown"
                                         for i in ids]}

    monkeypatch.setattr(cmd_submit, "instance", lambda args: SimpleNamespace())
    monkeypatch.setattr("fluxes.store.client.Client", FakeClient)
    assert main(["cancel", "12345", "0x10"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "fluxes: 12345: job is inactive or unknown", "fluxes: 0x10: job is inactive or unknown"]
    assert sent == [[12345, 16]] and all(type(i) is int for i in sent[0])
