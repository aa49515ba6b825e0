"""Size limits at submission: each one refuses with its own clear message, and is configurable.

The limits live in ``[ingest]`` of the instance configuration
(:class:`fluxes.config.IngestLimits`); :func:`fluxes.domain.jm.submission.prepare_job`
checks every one of them but ``max-jobs-per-request``, which the ingest
worker checks on the whole request before looking at any job.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from fluxes import messages as proto
from fluxes.config import IngestLimits, InstanceConfig
from fluxes.domain.ingest.checks import SubmitRules, check_jobs
from fluxes.domain.jm.submission import MAX_TOTAL, prepare_job
from fluxes.errors import ConfigError, JobspecError, PolicyError
from fluxes.formats.jobspec import Jobspec

OWNER = 1000

KEYS = {
    "max-jobspec-bytes": "max_jobspec_bytes",
    "max-jobs-per-request": "max_jobs_per_request",
    "max-tasks": "max_tasks",
    "max-command-bytes": "max_command_bytes",
    "max-environment-bytes": "max_environment_bytes",
}


def config(**limits: int) -> InstanceConfig:
    """An instance configuration whose ``[ingest]`` table sets ``limits`` (underscores ok)."""
    lines = [f"{key.replace('_', '-')} = {value}" for key, value in limits.items()]
    return InstanceConfig.from_toml("[ingest]\n" + "\n".join(lines) + "\n")


def prepare(item: dict[str, Any], cfg: InstanceConfig) -> Any:
    """prepare_job as the ingest worker calls it for the instance owner."""
    return prepare_job(item, OWNER, "owner", cfg, is_owner=True)


def spec(command: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    """A small V1 jobspec as a dict."""
    return Jobspec.from_command(command or ["true"], **kw).to_dict()


# -- configuration -------------------------------------------------------------------


def test_defaults() -> None:
    limits = IngestLimits()
    assert limits == IngestLimits(max_jobspec_bytes=1 << 20, max_jobs_per_request=10_000,
                                  max_tasks=1_000_000, max_command_bytes=1 << 17,
                                  max_environment_bytes=1 << 20)
    assert InstanceConfig.from_toml("").ingest == limits
    assert InstanceConfig.from_toml("[ingest]\n").ingest == limits


@pytest.mark.parametrize("key", sorted(KEYS))
def test_each_limit_is_configurable(key: str) -> None:
    limits = InstanceConfig.from_toml(f"[ingest]\n{key} = 7\n").ingest
    assert getattr(limits, KEYS[key]) == 7
    for other, attr in KEYS.items():
        if other != key:
            assert getattr(limits, attr) == getattr(IngestLimits(), attr)


def test_all_limits_at_once() -> None:
    text = "\n".join(f"{key} = {i + 1}" for i, key in enumerate(sorted(KEYS)))
    limits = InstanceConfig.from_toml("[ingest]\n" + text + "\n").ingest
    assert [getattr(limits, KEYS[k]) for k in sorted(KEYS)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("text", "message"), [
    ("[ingest]\nmax-tasks = 0\n", "ingest.max-tasks: expected a positive integer, got 0"),
    ("[ingest]\nmax-tasks = -5\n", "ingest.max-tasks: expected a positive integer, got -5"),
    ("[ingest]\nmax-tasks = true\n", "ingest.max-tasks: expected a positive integer, got True"),
    ("[ingest]\nmax-tasks = 1.5\n", "ingest.max-tasks: expected a positive integer, got 1.5"),
    ('[ingest]\nmax-tasks = "10"\n', "ingest.max-tasks: expected a positive integer, got '10'"),
    ("[ingest]\nmax-task = 5\n", "ingest.max-task: unknown key"),
    ('[ingest]\n"max\\ntasks" = 5\n', "ingest.'max\\ntasks': unknown key"),
    ("ingest = 5\n", "ingest: expected a table"),
    ("[ingest]\nmax-tasks = " + "9" * 5000 + "\n", "invalid TOML: Exceeds the limit"),
])
def test_bad_ingest_table(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        InstanceConfig.from_toml(text)
    assert str(info.value).startswith(message)
    assert len(str(info.value).splitlines()) == 1


# -- jobspec size ----------------------------------------------------------------------


def test_jobspec_bytes_limit_for_json() -> None:
    doc = spec(environment={"X": "a" * 1000})
    size = len(orjson.dumps(doc))
    assert prepare({"jobspec": doc}, config(max_jobspec_bytes=size))
    with pytest.raises(JobspecError) as info:
        prepare({"jobspec": doc}, config(max_jobspec_bytes=size - 1))
    assert str(info.value) == f"jobspec is {size} bytes, the limit is {size - 1}"


def test_jobspec_bytes_limit_for_yaml() -> None:
    text = yaml.safe_dump(spec(environment={"X": "é" * 500}), allow_unicode=True)
    size = len(text.encode())
    assert size > len(text)  # the limit counts bytes, not characters
    assert prepare({"yaml": text}, config(max_jobspec_bytes=size))
    with pytest.raises(JobspecError) as info:
        prepare({"yaml": text}, config(max_jobspec_bytes=size - 1))
    assert str(info.value) == f"jobspec is larger than {size - 1} bytes ({size})"


def test_huge_yaml_is_refused_before_parsing() -> None:
    text = "x: " + "[" * 2_000_000
    with pytest.raises(JobspecError, match=r"^jobspec is larger than 1048576 bytes$"):
        prepare({"yaml": text}, InstanceConfig())


# -- tasks ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "ntasks"), [
    ({"ntasks": 8}, 8),  # 8 slots, per_slot 1
    ({"ntasks": 7, "nnodes": 2}, 7),  # total: 7
])
def test_tasks_limit(kw: dict[str, Any], ntasks: int) -> None:
    doc = spec(**kw)
    assert prepare({"jobspec": doc}, config(max_tasks=ntasks))
    with pytest.raises(PolicyError) as info:
        prepare({"jobspec": doc}, config(max_tasks=ntasks - 1))
    assert str(info.value) == f"job requests {ntasks} tasks, the limit is {ntasks - 1}"


def test_tasks_limit_counts_per_resource_tasks() -> None:
    doc = spec(ntasks=4, cores_per_task=16)  # 4 slots of 16 cores
    doc["tasks"][0]["count"] = {"per_resource": {"type": "core", "count": 2}}
    with pytest.raises(PolicyError) as info:
        prepare({"jobspec": doc}, config(max_tasks=100))
    assert str(info.value) == "job requests 128 tasks, the limit is 100"
    assert prepare({"jobspec": doc}, config(max_tasks=128))


def test_resource_totals_beyond_64_bits_are_refused() -> None:
    n = 4294967294
    doc = {"version": 1, "resources": [{"type": "node", "count": n, "with": [
        {"type": "socket", "count": n, "with": [
            {"type": "slot", "count": n, "label": "t", "with": [{"type": "core", "count": n}]}]}]}],
        "tasks": [{"command": ["x"], "slot": "t", "count": {"total": 1}}],
        "attributes": {"system": {}}}
    with pytest.raises(PolicyError) as info:
        prepare({"jobspec": doc}, InstanceConfig())
    assert str(info.value) == "job requests more than 2^63-1 slots"
    assert MAX_TOTAL == 2**63 - 1


# -- command line and environment ----------------------------------------------------------


def test_command_bytes_limit() -> None:
    doc = spec(["echo", "é" * 50])
    size = len("echo") + 1 + 100 + 1  # UTF-8 bytes plus a separator per argument
    assert prepare({"jobspec": doc}, config(max_command_bytes=size))
    with pytest.raises(PolicyError) as info:
        prepare({"jobspec": doc}, config(max_command_bytes=size - 1))
    assert str(info.value) == f"command line is {size} bytes, the limit is {size - 1}"


def test_command_bytes_limit_applies_to_every_task() -> None:
    doc = spec(["true"])
    second = {**doc["tasks"][0], "command": ["echo", "x" * 1000]}
    doc["tasks"].append(second)
    with pytest.raises(PolicyError, match=r"^command line is 1006 bytes, the limit is 100$"):
        prepare({"jobspec": doc}, config(max_command_bytes=100))


def test_environment_bytes_limit() -> None:
    doc = spec(environment={"A": "é" * 10, "B": None})
    size = (1 + 20 + 2) + (1 + 0 + 2)  # UTF-8 bytes of name and value, plus two each
    assert prepare({"jobspec": doc}, config(max_environment_bytes=size))
    with pytest.raises(PolicyError) as info:
        prepare({"jobspec": doc}, config(max_environment_bytes=size - 1))
    assert str(info.value) == f"environment is {size} bytes, the limit is {size - 1}"


# -- jobs per request (checked by the ingest worker on the whole request) ---------------------


def _check(cfg: InstanceConfig, request: proto.SubmitJobs) -> proto.Reply | None:
    """The ingest's check of a whole request (:func:`fluxes.domain.ingest.checks.check_jobs`),
    which answers before any job is looked at: its request-wide answer."""
    return check_jobs(request, "owner", OWNER, SubmitRules(cfg, {}, None, OWNER)).answer


def test_jobs_per_request_limit() -> None:
    request = proto.SubmitJobs(req="r1", jobs=[proto.SubmitItem(jobspec=spec())] * 4)
    answer = _check(config(max_jobs_per_request=3), request)
    assert answer == proto.Reply(errors=["request has 4 jobs, the limit is 3"])


def test_jobs_per_request_default() -> None:
    request = proto.SubmitJobs(req="r1", jobs=[proto.SubmitItem()] * 10_001)
    answer = _check(InstanceConfig(), request)
    assert answer == proto.Reply(errors=["request has 10001 jobs, the limit is 10000"])


# -- a jobspec file over the limit (read by the client, only max_bytes + 1 of it) ------------


@pytest.mark.parametrize("size", [10 << 20, (1 << 20) + 1])
def test_jobspec_file_over_the_limit_gives_its_real_size(tmp_path: Any, size: int) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"x: " + b"a" * (size - 3))
    with pytest.raises(JobspecError) as info:
        Jobspec.from_file(path)
    assert str(info.value) == f"jobspec is larger than 1048576 bytes ({size})"


def test_jobspec_stream_over_the_limit_does_not_guess_its_size(tmp_path: Any) -> None:
    import os
    import threading

    fifo = tmp_path / "spec.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as out:
            try:
                out.write(b"x: " + b"a" * (2 << 20))
            except BrokenPipeError:
                pass  # the reader stops after the limit

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        with pytest.raises(JobspecError) as info:
            Jobspec.from_file(fifo)
    finally:
        writer.join()
    assert str(info.value) == "jobspec is larger than 1048576 bytes"
