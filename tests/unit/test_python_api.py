"""The pure parts of the Python API: JobspecV1, JobID, events; ``import fluxes`` stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fluxes.job import EventLogEvent, JobException, JobID, JobspecV1


def test_import_fluxes_loads_neither_the_api_nor_redis() -> None:
    code = ("import sys, fluxes; print('fluxes.job' in sys.modules, 'redis' in sys.modules); "
            "fluxes.job; print('fluxes.job' in sys.modules, callable(fluxes.Flux))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True", "True"]


def test_jobspec_setters_write_flux_attributes() -> None:
    spec = JobspecV1.from_command(["app", "x"], num_tasks=4, cores_per_task=2, num_nodes=2)
    spec.cwd = "/tmp"
    spec.environment = {"A": "1"}
    spec.duration = "2m"
    spec.stdout = "out.{{id}}"
    spec.queue = "batch"
    spec.setattr("user.tag", "x")
    spec.setattr("exec.test.run_duration", "1s")
    spec.setattr_shell_option("verbose", 1)
    system = spec.attributes["system"]
    assert (system["cwd"], system["environment"], system["duration"]) == ("/tmp", {"A": "1"},
                                                                          120.0)
    assert system["shell"]["options"]["output"]["stdout"] == {"type": "file",
                                                              "path": "out.{{id}}"}
    assert system["exec"]["test"]["run_duration"] == "1s"
    assert spec.attributes["user"] == {"tag": "x"}
    assert (spec.stdout, spec.queue, spec.duration) == ("out.{{id}}", "batch", 120.0)
    assert spec.resources[0]["type"] == "node" and spec.resources[0]["count"] == 2
    spec.validate()
    assert JobspecV1.from_yaml_stream(spec.dumps()) == spec


@pytest.mark.parametrize("bad", [dict(num_tasks=0), dict(cores_per_task=-1),
                                 dict(command=[]), dict(duration="soon")])
def test_bad_jobspecs_raise_value_error(bad: dict[str, object]) -> None:
    args = {"command": ["true"], **bad}
    with pytest.raises(ValueError):
        JobspecV1.from_command(**args)  # type: ignore[arg-type]


def test_jobid_parses_and_prints_every_form() -> None:
    jobid = JobID(1010727254797321216)
    for form in (jobid.f58, jobid.hex, jobid.dothex, jobid.kvs, jobid.words, jobid.dec,
                 jobid.f58plain):
        assert JobID(form) == jobid
    assert str(jobid) == jobid.f58 and jobid.dec == "1010727254797321216"
    with pytest.raises(ValueError):
        JobID("not-a-jobid")


def test_events_and_job_exceptions() -> None:
    event = EventLogEvent("exception", 1.5, b'{"type":"cancel","severity":0,"note":"x"}')
    assert event.context["type"] == "cancel" and event["name"] == "exception"
    exc = JobException(event)
    assert (exc.type, exc.severity, exc.note) == ("cancel", 0, "x")
    assert str(exc) == "job.exception: type=cancel: x"


def test_batch_jobspec_runs_the_script_in_a_child_instance() -> None:
    spec = JobspecV1.from_batch_command("#!/bin/sh\necho hi\n", "nightly", args=["x"],
                                        num_nodes=2, duration=60)
    system = spec.attributes["system"]
    assert system["job"]["name"] == "nightly" and system["duration"] == 60.0
    assert "echo hi" in spec.dumps()
    assert spec.tasks[0]["command"][-1] == "x"
    assert spec.resources[0]["type"] == "node" and spec.resources[0]["count"] == 2
    with pytest.raises(ValueError):
        JobspecV1.from_batch_command("echo no shebang", "x")


def test_jobinfo_names_the_user_as_flux_does() -> None:
    import os
    import pwd

    from fluxes.job.api import JobInfo

    me = JobInfo({"id": 1, "userid": os.getuid()})
    assert me.username == pwd.getpwuid(os.getuid()).pw_name
    # a uid the host does not know is shown as its number
    assert JobInfo({"id": 2, "userid": 4_000_000_000}).username == "4000000000"
    with pytest.raises(AttributeError):
        _ = JobInfo({"id": 3}).username
