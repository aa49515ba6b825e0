"""fluxes.proc.metrics (and the XINFO GROUPS parsing it is fed by): port checks, gauges from counters, the HTTP server."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from fluxes.proc import metrics
from fluxes.proc.metrics import check_port, heartbeat_age, job_counts
from fluxes.store.groups import GroupLag, parse_groups


@pytest.mark.parametrize("port", [0, 1, 9102, 65535])
def test_check_port_accepts_ports_and_zero(port: int) -> None:
    assert check_port(port) == port


@pytest.mark.parametrize("port", [-1, 65536, True, "9102", 1.5, None])
def test_check_port_refuses_anything_else_in_one_line(port: object) -> None:
    with pytest.raises(ValueError, match="metrics port") as info:
        check_port(port)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_parse_groups_reads_redis_py_replies() -> None:
    # as redis-py returns XINFO GROUPS without decoding: str keys, bytes name
    reply = [{"name": b"jm", "consumers": 1, "pending": 3, "last-delivered-id": b"1-0",
              "entries-read": 7, "lag": 2},
             {"name": b"other", "consumers": 0, "pending": 0, "last-delivered-id": b"0-0",
              "entries-read": None, "lag": None}]
    groups = parse_groups("{fx}:jm:new", reply)
    assert groups == [GroupLag("{fx}:jm:new", "jm", 1, 3, 2),
                      GroupLag("{fx}:jm:new", "other", 0, 0, None)]
    assert groups[0].lag == 5
    assert groups[1].lag is None


def test_parse_groups_takes_bytes_keys_and_text_counts() -> None:
    [group] = parse_groups("s", [{b"name": "g", b"consumers": b"2", b"pending": b"0",
                                  b"lag": b"4"}])
    assert group == GroupLag("s", "g", 2, 0, 4)


@pytest.mark.parametrize("bad", [{"consumers": 1},
                                 {"name": b"g", "pending": -1},
                                 {"name": b"g", "lag": "many"}])
def test_parse_groups_refuses_malformed_entries(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="XINFO GROUPS") as info:
        parse_groups("s", [bad])
    assert "\n" not in str(info.value)


@given(st.integers(0, 10**9), st.one_of(st.none(), st.integers(0, 10**9)))
def test_lag_is_pending_plus_undelivered(pending: int, undelivered: int | None) -> None:
    [group] = parse_groups("s", [{"name": b"g", "pending": pending, "lag": undelivered}])
    assert group.lag == (None if undelivered is None else pending + undelivered)


def test_set_lags_publishes_both_gauges_and_nan_when_unknown() -> None:
    metrics.set_lags([GroupLag("{t}:a", "g", 1, 2, 3), GroupLag("{t}:b", "g", 0, 4, None)])
    value = REGISTRY.get_sample_value
    assert value("fluxes_stream_lag", {"stream": "{t}:a", "group": "g"}) == 5
    assert value("fluxes_stream_pending", {"stream": "{t}:a", "group": "g"}) == 2
    unknown = value("fluxes_stream_lag", {"stream": "{t}:b", "group": "g"})
    assert unknown is not None and math.isnan(unknown)
    assert value("fluxes_stream_pending", {"stream": "{t}:b", "group": "g"}) == 4


def test_job_counts_reports_every_state_and_result() -> None:
    states, results = job_counts({"state:RUN": 2, "state:INACTIVE": 5, "result:FAILED": 1,
                                  "queue:batch:state:RUN": 2, "user:1000": 7})
    assert states == {"NEW": 0, "DEPEND": 0, "PRIORITY": 0, "SCHED": 0, "RUN": 2,
                      "CLEANUP": 0, "INACTIVE": 5}
    assert results == {"COMPLETED": 0, "FAILED": 1, "CANCELED": 0, "TIMEOUT": 0}


def test_set_job_counts_resets_states_that_went_to_zero() -> None:
    metrics.set_job_counts({"state:SCHED": 3})
    assert REGISTRY.get_sample_value("fluxes_jobs", {"state": "SCHED"}) == 3
    metrics.set_job_counts({"state:RUN": 3})
    assert REGISTRY.get_sample_value("fluxes_jobs", {"state": "SCHED"}) == 0
    assert REGISTRY.get_sample_value("fluxes_jobs", {"state": "RUN"}) == 3
    assert REGISTRY.get_sample_value("fluxes_job_results", {"result": "TIMEOUT"}) == 0


@pytest.mark.parametrize(("record", "age"), [
    ({"heartbeat": 95.0}, 5.0),
    ({"heartbeat": 100}, 0.0),
    ({"heartbeat": 120.0}, 0.0),  # a clock ahead of ours: not negative
    ({}, None),
    ({"heartbeat": "95"}, None),
    ({"heartbeat": True}, None),
])
def test_heartbeat_age(record: dict[str, object], age: float | None) -> None:
    assert heartbeat_age(record, 100.0) == age


@pytest.fixture
def server() -> Iterator[int]:
    """A metrics server on a free local port, closed afterwards."""
    port = metrics.serve(0, addr="127.0.0.1")
    try:
        yield port
    finally:
        metrics.stop()


def test_serve_on_port_zero_binds_a_free_port_and_exposes_fluxes_metrics(server: int) -> None:
    assert server > 0 and metrics.served_port() == server
    metrics.EVENTS_INGEST.inc(3)
    with urllib.request.urlopen(f"http://127.0.0.1:{server}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"fluxes_jobs", "fluxes_events_appended", "fluxes_stream_lag",
            "fluxes_alloc_latency_seconds", "fluxes_sched_pass_seconds",
            "fluxes_recovery_seconds", "fluxes_exec_jobs_started",
            "fluxes_exec_jobs_finished", "fluxes_dead_letters", "fluxes_leader"} <= names
    assert "_created" not in text  # one series per counter, not two


def test_stop_forgets_the_port(server: int) -> None:
    metrics.stop()
    assert metrics.served_port() is None
    metrics.stop()  # a second stop is harmless


# ----------------------------------------------------------------------------- --metrics-port


def test_metrics_port_option_of_python_m_workers() -> None:
    from fluxes.cli.util import UsageError
    from fluxes.cli.worker_args import build_parser

    assert build_parser().parse_args(["ingest"]).metrics_port is None
    assert build_parser().parse_args(["ingest", "--metrics-port", "0"]).metrics_port == 0
    # "off" turns a default given on the command line (a systemd unit's) off
    assert build_parser().parse_args(["ingest", "--metrics-port", "off"]).metrics_port is None
    with pytest.raises(UsageError, match="from 0 to 65535 or 'off'"):  # one line, no usage
        build_parser().parse_args(["ingest", "--metrics-port", "65536"])


@pytest.mark.parametrize(("argv", "uri"), [
    (["--uri", "redis://a", "worker", "scheduler"], "redis://a"),
    (["worker", "scheduler", "--uri", "redis://b"], "redis://b"),
    (["worker", "scheduler"], None),
])
def test_fluxes_worker_takes_the_workers_options_and_either_uri(argv: list[str],
                                                                uri: str | None) -> None:
    from fluxes.cli.main import build_parser

    args = build_parser().parse_args([*argv, "--metrics-port", "9102", "--name", "s1"])
    assert (args.kind, args.metrics_port, args.name, args.uri) == ("scheduler", 9102, "s1", uri)


def test_fluxes_worker_refuses_a_bad_port_in_one_line() -> None:
    from fluxes.cli.main import main

    assert main(["worker", "ingest", "--metrics-port", "-1"]) == 2
