"""``fluxes.job``: flux's ``flux.job`` Python API on a fluxes instance.

A script written for flux runs here after ``import flux`` becomes
``import fluxes as flux`` (and ``from flux.job import ...`` becomes
``from fluxes.job import ...``); docs/python-api.md lists every name and
how it compares with flux's bindings.
"""

from __future__ import annotations

from fluxes.job.api import (
    JOBID_ANY,
    JobInfo,
    JobList,
    JobWaitResult,
    cancel,
    cancel_async,
    event_wait,
    event_watch,
    event_watch_async,
    get_job,
    job_list,
    job_raise,
    job_raise_async,
    kill,
    kill_async,
    raise_job,
    result,
    result_async,
    submit,
    submit_async,
    submit_get_id,
    wait,
    wait_async,
)
from fluxes.job.executor import FluxExecutor, FluxExecutorFuture
from fluxes.job.future import EventLogEvent, JobException
from fluxes.job.jobid import JobID, id_encode, id_parse
from fluxes.job.jobspec import Jobspec, JobspecV1

__all__ = [
    "JOBID_ANY",
    "EventLogEvent",
    "FluxExecutor",
    "FluxExecutorFuture",
    "JobException",
    "JobID",
    "JobInfo",
    "JobList",
    "JobWaitResult",
    "Jobspec",
    "JobspecV1",
    "cancel",
    "cancel_async",
    "event_wait",
    "event_watch",
    "event_watch_async",
    "get_job",
    "id_encode",
    "id_parse",
    "job_list",
    "job_raise",
    "job_raise_async",
    "kill",
    "kill_async",
    "raise_job",
    "result",
    "result_async",
    "submit",
    "submit_async",
    "submit_get_id",
    "wait",
    "wait_async",
]
