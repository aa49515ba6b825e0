"""The everyday CLI without an instance: help, progress, jobs formats, option checks."""

from __future__ import annotations

import datetime as dt
import io
import re
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.domain.jm.queues import QueueState
from fluxes.domain.job.model import Job
from fluxes.domain.job.record import JobRecord
from fluxes.domain.job.states import JobState

NOW = time.time()


def test_top_level_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "  fluxes start -- " in out


# ---------------------------------------------------------------- progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_prints_its_final_line_once_off_a_terminal() -> None:
    from fluxes.cli.progress import Progress

    out = io.StringIO()
    bar = Progress("wait", 3, stream=out)
    for done in (1, 2, 3):
        bar.update(done)
    bar.done()
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("wait: 3/3") for line in lines) == 1
    assert lines[-1].startswith("wait: 3/3")


def test_progress_shows_the_last_count_when_updates_were_throttled() -> None:
    from fluxes.cli.progress import Progress

    out = io.StringIO()
    bar = Progress("submit", 10, stream=out, interval=3600)
    bar.update(1)
    bar.update(5)  # within the interval: not shown yet
    bar.done()
    assert out.getvalue().splitlines()[-1].startswith("submit: 5/10")


def test_progress_message_keeps_the_bar_below_it() -> None:
    from fluxes.cli.progress import Progress

    out = _Terminal()
    bar = Progress("wait", 2, stream=out)
    bar.update(1)
    bar.message("fluxes: job x failed")
    bar.update(2)
    bar.done()
    text = out.getvalue()
    before, after = text.split("\r\033[Kfluxes: job x failed\n")
    assert "1/2" in before and "1/2" in after  # the bar comes back under the message
    assert text.rsplit("\r", 1)[1].startswith("wait [") and "2/2" in text.rsplit("\r", 1)[1]
    assert text.endswith("\n")


def test_disabled_progress_prints_nothing() -> None:
    from fluxes.cli.progress import Progress

    out = io.StringIO()
    bar = Progress("wait", 2, enabled=False, stream=out)
    bar.update(2)
    bar.done()
    assert out.getvalue() == ""


# ---------------------------------------------------------------- fluxes jobs


def _record(jobid: int, state: JobState = JobState.RUN, queue: str | None = None,
            annotations: dict[str, Any] | None = None, t_run: float | None = None,
            t_cleanup: float | None = None, **info: Any) -> JobRecord:
    job = Job(jobid, state=state, userid=0, t_submit=NOW - 100, priority=16,
              t_run=t_run, t_cleanup=t_cleanup, annotations=annotations)
    facts: dict[str, Any] = {"name": f"job{jobid}", "ntasks": 1, **info}
    if queue is not None:
        facts["queue"] = queue
    return JobRecord(job, facts)


@pytest.fixture
def queues() -> dict[str | None, QueueState]:
    """The queue states ``fluxes jobs`` sees (the anonymous queue, started, unless a test
    changes them)."""
    return {None: QueueState()}


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch,
           queues: dict[str | None, QueueState]) -> list[JobRecord]:
    """The records ``fluxes jobs`` lists (no instance needed)."""
    from fluxes.cli import cmd_jobs

    monkeypatch.setattr(cmd_jobs, "queue_states", lambda inst: queues)
    monkeypatch.setattr(cmd_jobs, "_row_queues", lambda inst: queues, raising=False)
    records: list[JobRecord] = []
    asked: list[int | None] = []

    def select(inst: Any, states: str = "active", user: str | None = None,
               queue: str | None = None, everyone: bool = False,
               limit: int | None = None, window: Any = None) -> list[JobRecord]:
        asked.append(limit)
        return records[:limit] if limit else list(records)

    monkeypatch.setattr(cmd_jobs, "instance", lambda args: SimpleNamespace())
    monkeypatch.setattr(cmd_jobs, "select_jobs", select)
    monkeypatch.setattr(cmd_jobs, "stats_line", lambda inst: "1 running, 0 pending")
    monkeypatch.setattr(cmd_jobs, "_active", lambda inst: sum(
        1 for r in records if r.job.state & JobState.ACTIVE))
    return records


def test_jobs_hides_the_queue_column_when_no_job_has_a_queue(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(1, t_run=NOW - 5, nodelist="node0"), _record(2, t_run=NOW - 5)]
    assert main(["jobs"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["JOBID", "USER", "NAME", "ST", "NTASKS", "NNODES", "TIME", "INFO"]
    assert len(rows) == 2 and "node0" in rows[0]


def test_jobs_shows_the_queue_column_when_some_job_has_one(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(1, queue="debug"), _record(2)]
    assert main(["jobs"]) == 0
    header, first, _second = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["JOBID", "QUEUE", "USER"]
    assert first.split()[1] == "debug"
    assert main(["jobs", "-o", "long"]) == 0
    assert "QUEUE" in capsys.readouterr().out.splitlines()[0]


def test_jobs_without_any_job_prints_the_header_without_queue(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs"]) == 0
    assert capsys.readouterr().out.split() == ["JOBID", "USER", "NAME", "ST", "NTASKS",
                                               "NNODES", "TIME", "INFO"]


@pytest.mark.parametrize("count", ["-1", "-5", "x"])
def test_jobs_refuses_a_bad_count(count: str, listed: list[JobRecord],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    listed.append(_record(1))
    assert main(["jobs", "-c", count]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "count" in captured.err


def test_jobs_count_zero_lists_every_job(listed: list[JobRecord],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(i) for i in range(1, 4)]
    assert main(["jobs", "-n", "-c", "0", "-o", "{id.dec}"]) == 0
    assert capsys.readouterr().out.split() == ["1", "2", "3"]
    assert main(["jobs", "-n", "-c", "2", "-o", "{id.dec}"]) == 0
    assert capsys.readouterr().out.split() == ["1", "2"]


@pytest.mark.parametrize("fmt", ["{name:d}", "{nosuch}", "{id.nosuch}", "{t_run!X}",
                                 "{name", "{ntasks:%Y}"])
def test_a_bad_format_prints_only_its_error(fmt: str, listed: list[JobRecord],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    listed.append(_record(1))
    for stats in ([], ["--stats"]):
        assert main(["jobs", *stats, "-o", fmt]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""  # no stats line, no header
        assert captured.err.startswith("fluxes: ") and captured.err.count("\n") == 1


def test_jobs_stats_come_first(listed: list[JobRecord],
                               capsys: pytest.CaptureFixture[str]) -> None:
    listed.append(_record(1))
    assert main(["jobs", "--stats", "-o", "{id.dec}"]) == 0
    assert capsys.readouterr().out.splitlines() == ["1 running, 0 pending", "JOBID", "1"]
    assert main(["jobs", "--stats-only", "-o", "{nosuch}"]) == 0
    assert capsys.readouterr().out == "1 running, 0 pending\n"


def test_jobs_stats_only_exits_1_without_active_jobs(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    # as flux's, for 'while fluxes jobs --stats-only; do sleep 1; done'
    listed.append(_record(1, state=JobState.INACTIVE))
    assert main(["jobs", "--stats-only"]) == 1
    assert capsys.readouterr().out == "1 running, 0 pending\n"


def _ended(jobid: int, status: int | None = None, fatal: tuple[str, str] | None = None,
           **info: Any) -> JobRecord:
    from fluxes.domain.job.model import FatalException

    rec = _record(jobid, state=JobState.INACTIVE, t_run=NOW - 50, t_cleanup=NOW - 10,
                  **info)
    exc = FatalException(fatal[0], fatal[1], NOW - 10) if fatal else None
    return JobRecord(rec.job.replace(wait_status=status, fatal=exc, t_inactive=NOW - 9),
                     rec.info)


def test_jobs_knows_flux_fields(listed: list[JobRecord],
                                capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_ended(1, 0, ranks="0-1", cwd="/tmp"), _ended(2, 9),
               _ended(3, None, ("cancel", "by hand")), _ended(4, 256, ("exec", "")),
               _ended(5, None, ("timelimit", "")), _record(6, state=JobState.SCHED)]
    fmt = ("{id.dec}|{state_single}|{result_abbrev}|{success}|{inactive_reason}|{ranks}|"
           "{cwd}|{exception.occurred}|{exception.type}|{username}|{t_sched!D}")
    assert main(["jobs", "-o", fmt]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header == ("JOBID|S|RS|SUCCESS|INACTIVE-REASON|RANKS|CWD|EXCEPTION-OCCURRED|"
                      "EXCEPTION-TYPE|USER|T_SCHED")
    assert [line.split("|")[:9] for line in lines] == [
        ["1", "I", "CD", "True", "Exit 0", "0-1", "/tmp", "False", ""],
        ["2", "I", "F", "False", "Killed", "", "", "False", ""],
        ["3", "I", "CA", "False", "Canceled: by hand", "", "", "True", "cancel"],
        ["4", "I", "F", "False", "Exit 1", "", "", "True", "exec"],
        ["5", "I", "TO", "False", "Timeout", "", "", "True", "timelimit"],
        ["6", "S", "", "", "", "", "", "False", ""]]


def test_jobs_name_include_sort(listed: list[JobRecord],
                                capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(1, name="a", ranks="0", nodelist="node0", ncores=4),
               _record(2, name="b", ranks="1-2", nodelist="node[1-2]", ncores=2),
               _record(3, name="a", ranks="3", nodelist="node3", ncores=8),
               _record(4, state=JobState.SCHED, name="a")]

    def ids(*argv: str) -> list[str]:
        assert main(["jobs", "-n", "-o", "{id.dec}", *argv]) == 0
        return capsys.readouterr().out.split()

    assert ids("--name", "a") == ["1", "3", "4"]
    assert ids("--name", "a", "-c", "2") == ["1", "3"]  # -c counts what passes
    assert ids("-i", "2,3") == ["2", "3"]
    assert ids("-i", "node[0,2]") == ["1", "2"]
    assert ids("--sort=-ncores") == ["3", "1", "2", "4"]
    assert ids("--sort", "name,-id") == ["4", "3", "1", "2"]
    assert main(["jobs", "--sort", "nosuch"]) == 2
    assert "unknown field 'nosuch'" in capsys.readouterr().err


def test_jobs_color(listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_ended(1, 0), _ended(2, 256), _record(3)]
    assert main(["jobs", "-n", "-o", "{id.dec}", "--color"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "\033[01;32m1\033[0;0m", "\033[01;31m2\033[0;0m", "3"]
    for when in ("never", "auto"):  # auto: stdout is no terminal here
        assert main(["jobs", "-n", "-o", "{id.dec}", f"--color={when}"]) == 0
        assert capsys.readouterr().out.split() == ["1", "2", "3"]


def test_jobs_conversions_D_H_F_d(listed: list[JobRecord],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    started = NOW - 4000
    listed += [_record(1, state=JobState.INACTIVE, t_run=started, t_cleanup=started + 3725.4),
               _record(2, state=JobState.SCHED)]
    fmt = "{id.dec}|{t_run!D}|{runtime!H}|{runtime!F}|{t_run!d:%H:%M}|{t_submit!D}"
    assert main(["jobs", "-o", fmt]) == 0
    header, ran, pending = capsys.readouterr().out.splitlines()
    assert header == "JOBID|T_RUN|RUNTIME|RUNTIME|T_RUN|T_SUBMIT"
    iso = dt.datetime.fromtimestamp(started).strftime("%Y-%m-%dT%H:%M:%S")
    hm = dt.datetime.fromtimestamp(started).strftime("%H:%M")
    fields = ran.split("|")
    assert fields[:2] == ["1", iso]
    assert fields[2] == "1:02:05"  # hours:minutes:seconds
    assert fields[3].endswith("h") and fields[4] == hm
    # a time that never came is empty, never a 1970 date
    assert pending.split("|")[:2] == ["2", ""] and pending.split("|")[4] == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", pending.split("|")[5])


def test_jobs_H_rounds_a_short_run_up_to_a_second(listed: list[JobRecord],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli.jobformat import JobFormat

    _header, lines = JobFormat("{runtime!H}|{runtime!H:>8h}").render(
        [{"runtime": 0.2}, {"runtime": ""}])
    assert lines == ["0:00:01| 0:00:01", "|       -"]


def test_jobs_annotation_fields(listed: list[JobRecord],
                                capsys: pytest.CaptureFixture[str]) -> None:
    annotations = {"sched": {"reason_pending": "insufficient resources",
                             "t_estimate": 1795000000.5, "resource_summary": None},
                   "user": {"note": "mine"}}
    listed += [_record(1, state=JobState.SCHED, annotations=annotations),
               _record(2, state=JobState.SCHED)]
    fmt = ("{id.dec}|{annotations.sched.reason_pending}|{sched.reason_pending}|"
           "{sched.t_estimate}|{user.note}|{sched.resource_summary}|{sched.nosuch.deeper}|"
           "{user}")
    assert main(["jobs", "-o", fmt]) == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert header == "JOBID|REASON|REASON|T_ESTIMATE|NOTE|RESOURCES|DEEPER|USER"
    assert first == ('1|insufficient resources|insufficient resources|1795000000.5|mine|||'
                     '{"note":"mine"}')
    assert second == "2|||||||"


def test_jobs_hides_an_optional_column_empty_for_every_job(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(1), _record(2)]
    assert main(["jobs", "-o", "{id.dec} ?:{sched.reason_pending:<10} {name}"]) == 0
    assert capsys.readouterr().out.splitlines() == ["JOBID NAME", "1 job1", "2 job2"]


def test_jobs_json_has_annotations_and_times(listed: list[JobRecord],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    listed += [_record(1, state=JobState.SCHED,
                       annotations={"sched": {"reason_pending": "held back"}}),
               _record(2, t_run=NOW - 1)]
    assert main(["jobs", "--json"]) == 0
    first, second = orjson.loads(capsys.readouterr().out)["jobs"]
    assert first["annotations"] == {"sched": {"reason_pending": "held back"}}
    assert "t_run" not in first
    assert second["annotations"] == {} and second["t_run"] == pytest.approx(NOW - 1)


# ---------------------------------------------------------------- option checks


def test_wait_event_refuses_an_empty_event_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "wait-event", "123", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty" in err


@pytest.mark.parametrize("argv", [["job", "wait"], ["job", "wait", "--all", "123"]])
def test_job_wait_needs_ids_or_all(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fluxes job wait: ") and err.count("\n") == 1


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["submit", "--dry-run", "--env=-*", *argv]) == 0
    doc: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return doc


def test_submit_gpus_per_node_builds_a_slot_per_node_with_its_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-N2", "--gpus-per-node=4", "./app")
    assert doc["resources"] == [{
        "type": "node", "count": 2, "exclusive": True,
        "with": [{"type": "slot", "count": 1, "label": "task",
                  "with": [{"type": "core", "count": 1}, {"type": "gpu", "count": 4}]}]}]
    assert doc["tasks"][0]["count"] == {"per_slot": 1}
    # the run form takes it too
    assert main(["run", "-N1", "--gpus-per-node=1", "--help"]) == 0


@pytest.mark.parametrize(("argv", "why"), [
    (["--gpus-per-node=2"], "requires -N"),
    (["-N2", "-n4", "--gpus-per-node=2"], "-n"),
    (["-N2", "-c2", "--gpus-per-node=2"], "-c"),
    (["-N2", "-g1", "--gpus-per-node=2"], "-g"),
    (["-N2", "--gpus-per-node=-1"], "gpus-per-node"),
])
def test_submit_gpus_per_node_refusals(argv: list[str], why: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--dry-run", *argv, "true"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err


def test_submit_cores_per_task_still_defaults_to_one(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _dry_run(capsys, "-n2", "true")
    assert doc["resources"][0]["with"] == [{"type": "core", "count": 1}]
    assert _dry_run(capsys, "-n2", "-c3", "true")["resources"][0]["with"] == [
        {"type": "core", "count": 3}]


def test_jobspec_file_refuses_gpus_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "spec-data" / "rfc14" / "example1.yaml"
    assert main(["submit", "--dry-run", "-N1", "--gpus-per-node=1", str(path)]) == 1
    assert "cannot change a jobspec file" in capsys.readouterr().err


def test_jobs_level_stops_recursion_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from fluxes.cli import cmd_batch, jobtree
    from fluxes.service import jobs as selection

    monkeypatch.setattr(cmd_batch, "child_instance", lambda inst, jobid: "child")
    monkeypatch.setattr(selection, "select_jobs", lambda child, states, everyone: [7])

    def under(level: int | None, depth: int) -> tuple[list[Any], Any]:
        args = SimpleNamespace(level=level, filter=None, a=False)
        return jobtree._child_jobs(SimpleNamespace(), 1, args, depth)  # type: ignore[arg-type]

    assert under(None, 5) == ([7], "child")  # no -L: every level
    assert under(0, 5) == ([7], "child")  # -L 0: no limit
    assert under(2, 2) == ([7], "child")
    assert under(2, 3) == ([], None)


def test_jobs_emoji_fields(listed: list[JobRecord], capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    from fluxes.domain.job.states import JobResult
    from fluxes.service.jobfields import RESULT_EMOJI, STATE_EMOJI

    listed += [_ended(1, 0), _ended(2, None, ("cancel", "")), _record(3, t_run=NOW - 5),
               _record(4, state=JobState.SCHED)]
    fmt = "{id.dec}|{state_emoji}|{result_emoji}|{status_emoji}"
    assert main(["jobs", "-o", fmt]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header == "JOBID|STATE|RESULT|STATUS"
    done, canceled = RESULT_EMOJI[JobResult.COMPLETED], RESULT_EMOJI[JobResult.CANCELED]
    assert lines == [f"1|{STATE_EMOJI[JobState.INACTIVE]}|{done}|{done}",
                     f"2|{STATE_EMOJI[JobState.INACTIVE]}|{canceled}|{canceled}",
                     f"3|{STATE_EMOJI[JobState.RUN]}||{STATE_EMOJI[JobState.RUN]}",
                     f"4|{STATE_EMOJI[JobState.SCHED]}||{STATE_EMOJI[JobState.SCHED]}"]
    # an output that cannot show them gets the abbreviations, as flux's
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    from fluxes.service.jobfields import _shown

    assert _shown(done, "CD") == "CD"


def test_jobs_instance_fields_are_empty_for_other_jobs(
        listed: list[JobRecord], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fluxes.cli import jobtree

    listed.append(_record(1, t_run=NOW - 5))
    monkeypatch.setattr(jobtree, "mark_instances", lambda inst, rows, threads=1: None)
    fmt = "{id.dec}|{instance.stats}|{instance.utilization!P}|{instance.resources.all.ncores}"
    assert main(["jobs", "-o", fmt]) == 0
    assert capsys.readouterr().out.splitlines() == ["JOBID|STATS|CORE%|ALL-CORES", "1|||"]
    assert main(["jobs", "-o", "{instance.nosuch}"]) == 1
    assert "unknown field 'instance.nosuch'" in capsys.readouterr().err
    for bad in ("0", "x"):
        assert main(["jobs", "--threads", bad]) == 2
        assert "thread" in capsys.readouterr().err


def test_instance_fields_from_the_childs_counters_and_resources() -> None:
    from fluxes.cli.jobformat import _percent
    from fluxes.service.jobfields import instance_fields

    counters = {"state:SCHED": 2, "state:RUN": 1, "state:INACTIVE": 5,
                "result:COMPLETED": 3, "result:FAILED": 1, "result:TIMEOUT": 1}
    summary = {"free": {"ncores": 6, "ngpus": 1}, "allocated": {"ncores": 2, "ngpus": 1},
               "down": {"ncores": 8, "ngpus": 2}}
    got = instance_fields(counters, summary)
    assert got["stats"] == "PD:2 R:1 CD:3 F:2" and got["stats.total"] == 8
    assert got["progress"] == 5 / 8
    assert (got["resources.up.ncores"], got["resources.all.ncores"],
            got["resources.all.ngpus"], got["resources.down.ngpus"]) == (8, 16, 4, 2)
    assert got["utilization"] == 2 / 16 and got["gpu_utilization"] == 1 / 4
    assert "utilization" not in instance_fields({}, None)  # no summary published yet
    assert instance_fields({}, None)["progress"] == 0.0
    assert [_percent(v) for v in (0.5, 0.015, 0.0005, 1.0, 0.123456, "")] == [
        "50%", "1.5%", "0.05%", "100%", "12.3%", ""]


def test_recursion_skips_other_users_instances_without_recurse_all() -> None:
    import argparse

    from fluxes.cli.jobtree import descends

    mine, theirs = _record(1), _record(2)
    theirs = JobRecord(theirs.job.replace(userid=theirs.job.userid + 1), theirs.info)
    args = argparse.Namespace(owner_uid=mine.job.userid, recurse_all=False)
    assert descends(args, mine) and not descends(args, theirs)
    args.recurse_all = True
    assert descends(args, theirs)
