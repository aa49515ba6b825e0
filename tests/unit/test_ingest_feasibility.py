"""Feasibility at submission, pure: :mod:`fluxes.domain.jm.feasibility` and :func:`fluxes.domain.jm.submission.prepare_job`.

A job no configured node could ever run is refused with the scheduler's own
note; the queue's ``requires`` and the job's RFC 31 constraints count,
drained nodes do not (the check never sees node states). The dependencies
that name a job are returned for the worker to look up, and a missing
target is worded as the job manager words it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.jm.depend import Dependency
from fluxes.domain.jm.feasibility import (
    Feasibility,
    dependency_targets,
    inventory_table,
    load_inventory,
    unknown_target,
)
from fluxes.domain.jm.submission import prepare_job
from fluxes.domain.sched.errors import InfeasibleRequest
from fluxes.domain.sched.pool import ResourcePool
from fluxes.domain.sched.request import Request
from fluxes.errors import ConfigError, PolicyError
from fluxes.formats.jobid import encode
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.requires import parse_requires

OWNER = 1000

#: Two 4-core nodes, node1 with an ssd; a default queue and one whose
#: ``requires`` no node has, one whose ``requires`` node1 has.
CONFIG = """
[policy.jobspec.defaults.system]
queue = "batch"

[queues.batch]

[queues.gpu]
requires = ["gpu"]

[queues.fast]
requires = ["ssd"]

[[resource.config]]
hosts = "node[0-1]"
cores = "0-3"

[[resource.config]]
hosts = "node1"
properties = ["ssd"]
"""


@pytest.fixture
def config() -> InstanceConfig:
    return InstanceConfig.from_toml(CONFIG)


@pytest.fixture
def feasibility(config: InstanceConfig) -> Feasibility:
    return Feasibility(load_inventory(None, config))


def spec(command: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    """A small jobspec document, as the CLI builds it."""
    return Jobspec.from_command(command or ["true"], **kw).to_dict()


def prepare(doc: dict[str, Any], config: InstanceConfig, feasibility: Feasibility | None
            ) -> Any:
    return prepare_job({"jobspec": doc}, OWNER, "owner", config, is_owner=True,
                       feasibility=feasibility)


# -- infeasible jobs are refused with the scheduler's note ------------------------------


@pytest.mark.parametrize(("kw", "note"), [
    # fluxes submit -N 5 true (whole nodes, as -N without -n asks)
    ({"nnodes": 5, "ntasks": 5, "exclusive": True}, "job requests 5 nodes, only 2 exist"),
    ({"cores_per_task": 100}, "job requests 100 cores per slot, nodes have at most 4"),
    ({"ntasks": 9}, "job requests 9 cores, only 8 exist"),
    ({"queue": "gpu"}, "no node matches [gpu]"),
    ({"constraints": parse_requires(["bigmem"])}, "no node matches [bigmem]"),
    ({"queue": "fast", "nnodes": 2, "ntasks": 2},
     "job requests 2 nodes, only 1 match [ssd]"),
])
def test_infeasible_job_is_refused_with_the_scheduler_note(
        config: InstanceConfig, feasibility: Feasibility, kw: dict[str, Any],
        note: str) -> None:
    doc = spec(**kw)
    with pytest.raises(InfeasibleRequest) as info:
        prepare(doc, config, feasibility)
    assert str(info.value) == note
    # the very note the scheduler denies the job with (its jobspec_full)
    full = config.queues.admit(Jobspec.from_dict(doc), OWNER, "owner").jobspec
    with pytest.raises(InfeasibleRequest) as denied:
        ResourcePool(load_inventory(None, config)).check(Request.from_jobspec(full))
    assert str(denied.value) == note
    # without the check (no inventory) the job passes: the scheduler alone judges
    assert prepare(doc, config, None).jobspec == orjson.dumps(doc)


@pytest.mark.parametrize("kw", [
    {"nnodes": 2, "ntasks": 2, "exclusive": True},
    {"ntasks": 8},
    {"cores_per_task": 4},
    {"queue": "fast"},
    {"constraints": parse_requires(["ssd"])},
    {"constraints": parse_requires(["host:node0"])},
])
def test_feasible_job_passes(config: InstanceConfig, feasibility: Feasibility,
                             kw: dict[str, Any]) -> None:
    assert prepare(spec(**kw), config, feasibility).info["ncores"] >= 1


def test_queue_limits_are_checked_before_the_inventory() -> None:
    cfg = InstanceConfig.from_toml(CONFIG.replace(
        "[queues.batch]\n", "[queues.batch]\npolicy.limits.job-size.max.nnodes = 1\n"))
    with pytest.raises(PolicyError, match=r"^job requests 5 nodes, queue batch allows at most 1$"):
        prepare(spec(nnodes=5, ntasks=5, exclusive=True), cfg,
                Feasibility(load_inventory(None, cfg)))


def test_verdicts_are_cached_by_shape_not_by_command(
        feasibility: Feasibility, monkeypatch: pytest.MonkeyPatch) -> None:
    planned: list[Request] = []
    real = Request.from_jobspec

    def counting(jobspec: Any, requires: Any = ()) -> Request:
        request = real(jobspec, requires)
        planned.append(request)
        return request

    monkeypatch.setattr("fluxes.domain.jm.feasibility.Request.from_jobspec", counting)
    # a --cc array whose {cc} lands in the command: every jobspec differs
    for i in range(50):
        assert feasibility.note(Jobspec.from_dict(spec(["echo", str(i)], ntasks=2))) is None
        assert feasibility.note(Jobspec.from_dict(spec(["echo", str(i)], ntasks=9))) == \
            "job requests 9 cores, only 8 exist"
    assert len(planned) == 2


def test_cache_tells_constraints_and_queues_apart(config: InstanceConfig,
                                                  feasibility: Feasibility) -> None:
    # same resources, different constraints: a key without them would reuse a verdict
    two: dict[str, Any] = {"nnodes": 2, "ntasks": 2, "exclusive": True}
    assert prepare(spec(**two), config, feasibility)
    with pytest.raises(InfeasibleRequest, match=r"^job requests 2 nodes, only 1 match \[ssd\]$"):
        prepare(spec(constraints=parse_requires(["ssd"]), **two), config, feasibility)
    assert prepare(spec(queue="batch"), config, feasibility)
    with pytest.raises(InfeasibleRequest, match=r"^no node matches \[gpu\]$"):
        prepare(spec(queue="gpu"), config, feasibility)


def test_unsupported_shape_is_refused_as_the_scheduler_denies_it(
        config: InstanceConfig, feasibility: Feasibility) -> None:
    doc = spec()
    doc["resources"] = [{"type": "slot", "count": 1, "label": "task", "with": [
        {"type": "core", "count": 1, "with": [{"type": "gpu", "count": 1}]}]}]
    note = None
    try:
        Request.from_jobspec(doc)
    except (InfeasibleRequest, ValueError) as exc:
        note = str(exc)
    assert note is not None
    with pytest.raises(InfeasibleRequest) as info:
        prepare(doc, config, feasibility)
    assert str(info.value) == note


# -- the inventory, loaded as the scheduler loads it ----------------------------------------


def test_inventory_from_the_record_before_the_configuration(config: InstanceConfig) -> None:
    recorded = orjson.dumps({"config": [{"hosts": "big[0-9]", "cores": "0-63"}]})
    assert len(load_inventory(recorded, config)) == 10
    assert len(load_inventory(None, config)) == 2
    assert inventory_table(b"", config) == config.resource


@pytest.mark.parametrize(("recorded", "message"), [
    (b"{}", "the instance has no resources configured ([resource] table)"),
    (b"not json", "the recorded resources are not JSON"),
    (b"[1]", "the recorded resources are not a table"),
    (orjson.dumps({"path": "/nonexistent/R.json"}),
     "resource.path: cannot read /nonexistent/R.json: No such file or directory"),
])
def test_unusable_inventory_is_a_config_error(recorded: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_inventory(recorded, InstanceConfig())
    assert str(info.value) == message


def test_no_resources_at_all() -> None:
    with pytest.raises(ConfigError, match=r"no resources configured"):
        load_inventory(None, InstanceConfig())


# -- dependencies naming a job ---------------------------------------------------------------


def test_only_job_id_schemes_are_targets(config: InstanceConfig) -> None:
    shown = encode(12345, "f58")
    doc = spec(dependencies=[f"afterok:{shown}", "begin-time:+1h", "afterany:77",
                             "after:0x10", "afternotok:78", "afterexcept:79"])
    doc["attributes"]["system"]["dependencies"].append({"scheme": "singleton", "value": "x"})
    job = prepare(doc, config, None)
    assert [(d.scheme, d.value, d.target) for d in job.targets] == [
        ("afterok", shown, 12345), ("afterany", "77", 77), ("after", "0x10", 16),
        ("afternotok", "78", 78), ("afterexcept", "79", 79)]
    assert dependency_targets(Jobspec.from_dict(spec())) == ()


def test_unknown_target_names_the_id_as_typed() -> None:
    shown = encode(12345, "f58")
    deps = [Dependency("afterany", "77", "after-finish=77", target=77),
            Dependency("afterok", shown, f"after-success={shown}", target=12345)]
    assert unknown_target(deps, {77, 12345}) is None
    assert unknown_target(deps, {77}) == f"dependency: afterok: job {shown} not found"
    assert unknown_target(deps, set()) == "dependency: afterany: job 77 not found"
    assert unknown_target([], set()) is None
