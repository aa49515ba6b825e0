"""``fluxes simulate`` and ``fluxes eventlog export`` / ``replay --file`` end to end."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes.cli.main import main
from fluxes.config import InstanceConfig
from fluxes.domain.job import events as ev
from fluxes.proc.redis_server import RedisServer
from fluxes.sim.engine import Simulation
from fluxes.sim.journal import Writer, read_records
from fluxes.sim.run import load_swf
from fluxes.sim.workload import Machine
from fluxes.store.eventstore import EventStore
from fluxes.store.keys import Keys

CASES = Path(__file__).resolve().parents[1] / "cases" / "swf"
T0 = 1_700_000_000
KEYS = Keys("t")


def _json_out(capsys: pytest.CaptureFixture[str]) -> Any:
    return orjson.loads(capsys.readouterr().out)


def test_simulate_swf_report_schedule_and_journal(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out, journal = tmp_path / "s.swf", tmp_path / "j.jsonl"
    assert main(["simulate", "--swf", str(CASES / "tiny.swf"), "--policy", "easy", "--json",
                 "--out", str(out), "--journal-out", str(journal), "--no-progress"]) == 0
    doc = _json_out(capsys)
    assert doc["jobs"]["simulated"] == 5 and doc["invariants"]["ok"]
    assert doc["makespan"] == 350 and doc["wait"]["max"] == 170
    assert doc["machine"]["description"] == "1 node x 4 cores"
    lines = [line.split() for line in out.read_text().splitlines() if not line.startswith(";")]
    assert [(cols[0], cols[2], cols[3], cols[4]) for cols in lines] == [
        ("1", "0", "100", "2"), ("2", "90", "100", "4"), ("3", "0", "50", "2"),
        ("4", "170", "150", "2"), ("5", "160", "40", "1")]
    assert main(["eventlog", "replay", "--file", str(journal)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["JOBID", "USER", "ST", "RESULT", "SUBMITTED"]
    assert [row.split()[2:4] for row in listing[1:]] == [["I", "CD"]] * 5


def test_simulate_text_report_and_compare(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    assert main(["simulate", "--swf", str(CASES / "messy.swf"), "--policy", "fcfs",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "10 skipped: 4 malformed line (not 18 numbers)" in text
    assert "refused: 1 job requests 16 cores, only 8 exist" in text
    assert "invariants  ok" in text
    # a comparison says what the ingest refused as the single report does
    assert main(["simulate", "--swf", str(CASES / "messy.swf"), "--compare", "fcfs,easy",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert ", 1 refused by the ingest" in text
    assert "refused: 1 job requests 16 cores, only 8 exist" in text
    assert main(["simulate", "--swf", str(CASES / "conservative.swf"), "--compare",
                 "easy,conservative", "--json", "--no-progress",
                 "--out", str(tmp_path / "c.swf")]) == 0
    runs = _json_out(capsys)["runs"]
    assert [r["label"] for r in runs] == ["easy", "conservative"]
    assert runs[0]["wait"]["max"] == 1001 and runs[1]["wait"]["max"] == 117
    assert (tmp_path / "c-easy.swf").exists() and (tmp_path / "c-conservative.swf").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--swf", "/nonexistent.swf"], "No such file"),
    (["--swf", str(CASES / "tiny.swf"), "--compare", "easy,lottery"], "unknown policy"),
    (["--swf", str(CASES / "tiny.swf"), "--gantt-window", "5"], "FROM:TO"),
    (["--swf", str(CASES / "tiny.swf"), "--queue-map", "x=batch"], "NUMBER=QUEUE"),
    (["--swf", str(CASES / "tiny.swf"), "--since=-1d"], "--journal only"),
    (["--journal", str(CASES / "tiny.swf"), "--nodes", "1"], "no job to simulate (14 skipped"),
])
def test_bad_input_is_one_line(argv: list[str], message: str,
                               capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["simulate", "--no-progress", *argv])
    err = capsys.readouterr().err
    assert code != 0
    assert message in err and len(err.strip().splitlines()) == 1


def test_simulate_on_a_graph_with_banks(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--config with a GRUG graph runs on the graph pool; --banks charges the jobs (the
    user of no bank is refused with the ingest's message)."""
    config = tmp_path / "graph.toml"
    graph = CASES.parent / "graph" / "racks.graphml"
    config.write_text(f'[resource]\ngraph = "{graph}"\n[accounting]\n'
                      'priority-plugin = "multifactor"\n')
    banks = tmp_path / "banks"
    banks.write_text("add-bank root 1\nadd-user --username=a --userid=1 --bank=root "
                     "--max-running-jobs=1\nadd-user --username=b --userid=2 --bank=root\n")
    argv = ["simulate", "--swf", str(CASES / "tiny.swf"), "--config", str(config),
            "--policy", "easy", "--json", "--no-progress"]
    assert main(argv) == 0
    doc = _json_out(capsys)
    assert doc["machine"]["description"] == "4 nodes, 16 cores (a resource graph)"
    assert doc["jobs"]["ran"] == 5 and doc["invariants"]["ok"]
    assert main([*argv, "--banks", str(banks)]) == 0
    doc = _json_out(capsys)
    assert doc["jobs"]["ran"] == 4 and doc["invariants"]["ok"]
    assert list(doc["jobs"]["refused_by_reason"]) == [
        "user 3 belongs to no bank: the instance owner adds them with 'fluxes account "
        "add-user --username=3 --bank=BANK'"]
    banks.write_text("add-bank root 1\nadd-user --username=a --bank=root\n")
    assert main([*argv, "--banks", str(banks)]) == 1
    assert "line 2: the following arguments are required: --userid" in capsys.readouterr().err


def test_journal_input_needs_a_machine(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "h.jsonl"
    history.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in _history()[0]))
    assert main(["simulate", "--journal", str(history), "--no-progress"]) == 1
    assert "no machine" in capsys.readouterr().err


def test_plots_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert main(["simulate", "--swf", str(CASES / "tiny.swf"), "--compare", "fcfs,easy",
                 "--plot", str(tmp_path), "--no-progress", "--json"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gantt.png", "queue.png", "utilization.png", "wait_cdf.png"]


# -- export: an instance's journal out, and back into a simulation ----------------------


@pytest.fixture
def uri(redis_server: RedisServer, real_redis: redis.Redis) -> str:
    real_redis.set(KEYS.jm_fence(0), "1")
    return f"{redis_server.url}?ns=t"


def _history() -> tuple[list[dict[str, Any]], dict[int, tuple[Any, ...]]]:
    """A simulated run's journal, to be written into a real instance."""
    with open(CASES / "ends.swf", encoding="utf-8") as f:
        workload = load_swf(f)
    out = io.BytesIO()
    outcome = Simulation(workload.jobs, Machine.uniform(1, 4), InstanceConfig(),
                         overrides={"policy": "easy"}, writer=Writer(out)).run()
    schedule = {r.job.id: (r.start, r.end, r.result) for r in outcome.runs}
    return list(read_records(out.getvalue().splitlines())), schedule


def test_export_round_trip(uri: str, real_redis: redis.Redis, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    records, schedule = _history()
    store = EventStore(real_redis, KEYS)
    for jobid in sorted({r["j"] for r in records}):
        mine = [r for r in records if r["j"] == jobid]
        batch = store.batch()
        batch.append(KEYS.eventlog(jobid), jobid, 0,
                     [ev.decode(r["n"], r["t"], r.get("c")) for r in mine],
                     [r.get("x") for r in mine])
        if jobid == 1:  # the others are rebuilt from their submit's summary
            batch.hset(KEYS.job(jobid), {"request": '{"d":60.0}'})
        store.commit(batch, token="1")
    path = tmp_path / "history.jsonl"
    assert main(["--uri", uri, "eventlog", "export", str(path)]) == 0
    assert "journal entries written" in capsys.readouterr().err
    exported = list(read_records(path.read_bytes().splitlines()))
    assert len(exported) == len(records)
    by_job = sorted(exported, key=lambda r: (r["j"], r["s"]))
    for got, want in zip(by_job, sorted(records, key=lambda r: (r["j"], r["s"])),
                         strict=True):
        extra = dict(got.get("x") or {})
        if got["n"] == "submit" and got["j"] == 1:
            assert extra.pop("request") == '{"d":60.0}'  # the job hash's request
        assert (got["j"], got["s"], got["n"], got["t"], got.get("c"), extra or None) == \
            (want["j"], want["s"], want["n"], want["t"], want.get("c"), want.get("x"))
    # the file lists the jobs the instance lists
    until = str(T0 + 10**6)
    assert main(["--uri", uri, "eventlog", "replay", "--json", "--until", until]) == 0
    live = capsys.readouterr().out
    assert main(["eventlog", "replay", "--json", "--file", str(path)]) == 0
    assert capsys.readouterr().out == live
    # and the history simulates the schedule it came from
    assert main(["simulate", "--journal", str(path), "--nodes", "1", "--cores-per-node", "4",
                 "--policy", "easy", "--json", "--no-progress",
                 "--out", str(tmp_path / "again.swf")]) == 0
    doc = _json_out(capsys)
    assert doc["jobs"]["results"] == {"CANCELED": 1, "COMPLETED": 2, "FAILED": 1,
                                      "TIMEOUT": 1}
    assert doc["makespan"] == max(end for _s, end, _r in schedule.values()) - T0
    rows = [line.split() for line in (tmp_path / "again.swf").read_text().splitlines()
            if not line.startswith(";")]
    # job, submit from the log's start, wait, run time, processors (the history's)
    assert [r[:5] for r in rows] == [["1", "0", "0", "60", "1"], ["2", "0", "0", "20", "1"],
                                     ["3", "0", "0", "30", "1"], ["4", "0", "0", "60", "1"],
                                     ["5", "70", "0", "10", "4"]]
    # straight from the instance's journal
    assert main(["--uri", uri, "simulate", "--journal", "--nodes", "1", "--cores-per-node", "4",
                 "--policy", "easy", "--json", "--no-progress"]) == 0
    assert _json_out(capsys)["makespan"] == doc["makespan"]
    # --since/--until choose jobs by submit time
    assert main(["--uri", uri, "eventlog", "export", "--since", str(T0 + 1),
                 str(tmp_path / "late.jsonl")]) == 0
    late = list(read_records((tmp_path / "late.jsonl").read_bytes().splitlines()))
    assert {r["j"] for r in late} == {5}


def test_bench_simulate_compares_policies_on_a_trace(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert main(["bench", "simulate", "--trace", str(CASES / "conservative.swf"),
                 "--compare", "fcfs,easy", "--json"]) == 0
    doc = _json_out(capsys)
    runs = doc["runs"]
    assert list(runs) == ["fcfs", "easy"] and runs["fcfs"]["vs_fcfs"] == 1.0
    assert all(run["simulation_s"] > 0 and run["invariants_ok"] for run in runs.values())
    # the same schedules as fluxes simulate makes of that trace
    assert runs["easy"]["mean_wait_s"] != runs["fcfs"]["mean_wait_s"]
    assert doc["jobs"] == len(load_swf((CASES / "conservative.swf").read_text().splitlines()
                                       ).jobs)
    assert main(["bench", "simulate", "--compare", "fcfs,lottery"]) == 2
    assert "unknown policy 'lottery'" in capsys.readouterr().err
