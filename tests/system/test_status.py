"""``fluxes status`` and the workers' Prometheus metrics on a real instance."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fluxes.cli.main import main
from fluxes.proc.launcher import Launcher

pytestmark = pytest.mark.system

KINDS = {"ingest", "job-manager", "scheduler", "job-list", "exec"}


def status(uri: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["--uri", uri, "status", "--json"])
    out = capsys.readouterr().out
    return code, orjson.loads(out)


def wait_status(uri: str, capsys: pytest.CaptureFixture[str],
                ready: Callable[[int, dict[str, Any]], bool],
                timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``fluxes status --json`` until ``ready(code, status)``."""
    deadline = time.monotonic() + timeout
    while True:
        code, doc = status(uri, capsys)
        if ready(code, doc):
            return doc
        assert time.monotonic() < deadline, f"status never got ready: {code} {doc}"
        time.sleep(0.3)


def healthy(code: int, doc: dict[str, Any]) -> bool:
    kinds = [w["kind"] for w in doc["workers"] if w["alive"]]
    return (code == 0 and set(kinds) >= KINDS and kinds.count("exec") == 2
            and doc["resources"] is not None
            and all(lease["holder"] for lease in doc["leases"]))


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a worker's /metrics, keyed by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def wait_samples(port: int, ready: Callable[[dict[Any, float]], bool],
                 timeout: float = 15.0) -> dict[Any, float]:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if ready(samples):
            return samples
        assert time.monotonic() < deadline, f"metrics never got there: {samples}"
        time.sleep(0.3)


def test_status_json_reports_workers_leases_streams_queues_resources(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = wait_status(uri, capsys, healthy)
    assert doc["problems"] == []
    assert doc["instance"]["partitions"] == 1
    by_kind = {w["kind"]: w for w in doc["workers"]}
    assert by_kind["job-manager"]["role"] == "leader"
    assert by_kind["scheduler"]["role"] == "leader"
    assert by_kind["ingest"]["role"] is None
    for worker in doc["workers"]:
        assert worker["pid"] > 0 and worker["host"] and 0 <= worker["age_s"] < 10
        assert worker.get("metrics_port") is None  # not asked for
    leases = {(lease["lease"], lease["partition"]): lease for lease in doc["leases"]}
    assert leases["job-manager", 0]["holder"] == by_kind["job-manager"]["name"]
    assert leases["scheduler", 0]["holder"] == by_kind["scheduler"]["name"]
    assert all(0 < lease["ttl_ms"] <= 10_000 and lease["epoch"] >= 1
               for lease in leases.values())
    groups = {(s["stream"].split("}:", 1)[1], s["group"]): s for s in doc["streams"]}
    assert {("jm:new", "jm"), ("sched:resp", "jm"), ("exec:events", "jm"), ("jm:ctl", "jm"),
            ("journal", "joblist"), ("exec:rank:0", "exec"), ("exec:rank:1", "exec")} \
        <= set(groups)
    assert any(stream.startswith("submit:") and group == "ingest" for stream, group in groups)
    assert all(s["lag"] is None or s["lag"] == s["pending"] + s["undelivered"]
               for s in doc["streams"])
    assert doc["queues"] == [{"queue": None, "enabled": True, "disable_reason": None,
                              "started": True, "stop_reason": None}]
    resources = doc["resources"]
    assert resources["free"]["ncores"] + resources["allocated"]["ncores"] == 8
    assert resources["down"]["nnodes"] == 0
    assert "running" in doc["jobs"]["summary"]
    assert set(doc["jobs"]["states"]) >= {"SCHED", "RUN", "INACTIVE"}
    assert doc["dead_letters"]["count"] >= 0


def test_status_human_output_has_every_section(uri: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    wait_status(uri, capsys, healthy)
    assert main(["--uri", uri, "status"]) == 0
    out = capsys.readouterr().out
    for section in ("WORKERS", "LEASES", "STREAMS", "QUEUES", "RESOURCES", "JOBS",
                    "DEAD LETTERS"):
        assert f"\n{section}" in out
    assert "job-manager" in out and "leader" in out and "(default)" in out


def test_metrics_of_workers_restarted_with_a_metrics_port(
        uri: str, launcher: Launcher, capsys: pytest.CaptureFixture[str]) -> None:
    wait_status(uri, capsys, healthy)
    names = ("scheduler", "job-manager-0", "job-list")
    specs = [launcher.worker(name) for name in names]
    for spec in specs:
        assert spec.proc is not None
        spec.args = [*spec.args, "--metrics-port", "0"]
        spec.proc.terminate()
    for spec in specs:
        assert spec.proc is not None
        spec.proc.wait(15)

    # with no scheduler and no job manager the summary is printed and the exit code says so
    code, doc = status(uri, capsys)
    assert code == 1
    assert set(doc["problems"]) == {"no job manager alive for partition 0", "no scheduler alive"}
    assert doc["queues"] and doc["leases"]

    deadline = time.monotonic() + 15
    while any(s.proc is None or s.proc.poll() is not None for s in specs):
        assert time.monotonic() < deadline, "the launcher did not restart the workers"
        launcher.supervise_once()
        time.sleep(0.1)

    def ported(code: int, doc: dict[str, Any]) -> bool:
        kinds = {w["kind"] for w in doc["workers"] if w["alive"] and w.get("metrics_port")}
        return healthy(code, doc) and kinds >= {"scheduler", "job-manager", "job-list"}

    doc = wait_status(uri, capsys, ported)
    port = {w["kind"]: w["metrics_port"] for w in doc["workers"] if w.get("metrics_port")}

    for _ in range(2):
        assert main(["--uri", uri, "run", "true"]) == 0
    capsys.readouterr()

    sched = wait_samples(port["scheduler"], lambda s: (
        (sample(s, "fluxes_alloc_latency_seconds_count") or 0) >= 2))
    assert (sample(sched, "fluxes_sched_pass_seconds_count") or 0) >= 1
    # taking the lead, then again for the restarted job manager's new epoch
    assert (sample(sched, "fluxes_recovery_seconds_count", worker="scheduler") or 0) >= 1
    assert sample(sched, "fluxes_leader", worker="scheduler") == 1
    assert sample(sched, "fluxes_dead_letters_total", worker="scheduler") == 0

    jm = wait_samples(port["job-manager"], lambda s: (
        sample(s, "fluxes_stream_lag", stream="{fx}:jm:new", group="jm") is not None))
    assert (sample(jm, "fluxes_events_appended_total", writer="job-manager") or 0) >= 10
    assert sample(jm, "fluxes_recovery_seconds_count", worker="job-manager") == 1
    assert sample(jm, "fluxes_leader", worker="job-manager") == 1
    assert sample(jm, "fluxes_stream_pending", stream="{fx}:exec:events", group="jm") == 0

    joblist = wait_samples(port["job-list"], lambda s: (
        (sample(s, "fluxes_jobs", state="INACTIVE") or 0) >= 2))
    assert (sample(joblist, "fluxes_job_results", result="COMPLETED") or 0) >= 2
    assert sample(joblist, "fluxes_stream_lag", stream="{fx}:journal", group="joblist") \
        is not None


def test_fluxes_worker_runs_a_standby_that_reports_its_metrics_port(
        uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    wait_status(uri, capsys, healthy)
    proc = subprocess.Popen([sys.executable, "-m", "fluxes.cli.main", "--uri", uri, "worker",
                             "job-manager", "--name", "standby-jm", "--metrics-port", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        def standing_by(code: int, doc: dict[str, Any]) -> bool:
            return any(w["name"] == "standby-jm" and w.get("metrics_port")
                       for w in doc["workers"])

        doc = wait_status(uri, capsys, standing_by)
        [standby] = [w for w in doc["workers"] if w["name"] == "standby-jm"]
        assert standby["role"] == "standby" and standby["alive"]
        samples = scrape(standby["metrics_port"])
        assert sample(samples, "fluxes_leader", worker="job-manager") == 0
        assert ("process_cpu_seconds_total", frozenset()) in samples
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert b'"serving metrics"' in err  # the structured log names the port it took
    code, doc = status(uri, capsys)
    assert code == 0 and all(w["name"] != "standby-jm" for w in doc["workers"])
