"""Nested instances, pure: a child's namespace and its inventory from the parent job's R.

A batch job or an allocation runs a child instance inside the job's
allocation, on the parent's Redis under a namespace of its own (so its own
hash tag: on a Redis Cluster the child's keys may live on another shard).
The child's execution targets are the job's ranks renumbered from 0, in
the parent's rank order, keeping hostnames, cores and GPUs, as a flux
child instance numbers its brokers (docs/nested.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fluxes.formats.rset import ResourceSet

#: Separates a parent namespace from the child's job id in the child's namespace.
CHILD_SEP = "."
#: The jobspec attribute (under ``attributes.system``) ``fluxes batch`` and ``fluxes
#: alloc`` set on a job that runs a child instance: its tasks get a Redis identity
#: scoped to the child's keys (docs/nested.md, "Credentials").
CHILD_ATTRIBUTE = "child-instance"
#: The attribute holding a batch script (``attributes.system.batch.script``): a job
#: carrying one runs a child too (jobspecs built without the CLI, ``fluxes bench``).
BATCH_ATTRIBUTE = "batch"
#: The command that runs a child instance as a job's tasks (``fluxes instance-child``).
CHILD_RUNNER = "instance-child"


def child_namespace(parent_ns: str, jobid: int) -> str:
    """The namespace of the child instance run by job ``jobid`` of instance ``parent_ns``."""
    if jobid < 0:
        raise ValueError(f"child namespace: job id must be >= 0, got {jobid}")
    return f"{parent_ns}{CHILD_SEP}{jobid}"


def parent_of(ns: str) -> tuple[str, int] | None:
    """The parent namespace and job id of a child namespace; None for a top instance."""
    head, sep, tail = ns.rpartition(CHILD_SEP)
    if not sep or not head or not tail.isdigit():
        return None
    return head, int(tail)


def child_resources(R: Mapping[str, Any] | str | bytes) -> tuple[dict[str, Any], list[int]]:  # noqa: N803
    """The child's ``[resource]`` table (one ``config`` entry per rank of the job's R, in
    rank order, so child rank i is the job's i-th rank) and, by child rank, the parent
    rank it stands for. Ranks keep their hostnames (``rank<N>`` when R has none, or
    when two ranks share one), cores and GPUs. ValueError for an R without ranks."""
    parent = ResourceSet(R)
    ranks = sorted(parent.ranks)
    if not ranks:
        raise ValueError("child instance: the job's R holds no ranks")
    names = [parent.hostname(r) for r in ranks]
    if None in names or len(set(names)) != len(names):
        names = [f"rank{r}" for r in ranks]
    entries: list[dict[str, Any]] = []
    for rank, name in zip(ranks, names, strict=True):
        entry: dict[str, Any] = {"hosts": name, "cores": parent.cores(rank).encode()}
        gpus = parent.gpus(rank)
        if gpus:
            entry["gpus"] = gpus.encode()
        entries.append(entry)
    return {"config": entries}, ranks


def runs_child_instance(jobspec: Mapping[str, Any]) -> bool:
    """True when the job runs a child instance: its jobspec carries
    ``attributes.system.child-instance`` (true) or a batch script, and its tasks run
    the child's runner (``fluxes instance-child``, what ``fluxes batch`` and ``fluxes
    alloc`` build). The attribute set by hand on a plain job gets it no identity."""
    attributes = jobspec.get("attributes")
    system = attributes.get("system") if isinstance(attributes, Mapping) else None
    if not isinstance(system, Mapping):
        return False
    marked = system.get(CHILD_ATTRIBUTE) is True or isinstance(system.get(BATCH_ATTRIBUTE),
                                                                Mapping)
    return marked and _runs_child_runner(jobspec)


def _runs_child_runner(jobspec: Mapping[str, Any]) -> bool:
    """True when every task of the jobspec runs ``fluxes instance-child`` (as the
    ``fluxes`` program, or ``python -m fluxes.cli.main``)."""
    tasks = jobspec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return False
    for task in tasks:
        command = task.get("command") if isinstance(task, Mapping) else None
        if not isinstance(command, list) or CHILD_RUNNER not in command[1:]:
            return False
        at = command.index(CHILD_RUNNER, 1)
        program = command[at - 1]
        if not isinstance(program, str) or not (
                program == "fluxes.cli.main" or program.rsplit("/", 1)[-1] == "fluxes"):
            return False
    return True


def child_credentials_name(jobid: int) -> str:
    """The name of the credentials file of job ``jobid``'s child identity (in the exec
    state directory; it starts with the job id, so the files of ended jobs are swept)."""
    return f"{jobid}.child-credentials.json"
