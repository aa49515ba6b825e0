"""``fluxes update``, pure: keys, values, relative durations and the submission checks."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.jm.update import (
    DURATION,
    NAME,
    QUEUE,
    current_jobspec,
    current_r,
    full_key,
    parse_pairs,
    plan_update,
    resolve,
    updated_jobspec,
)
from fluxes.domain.sched.request import Request
from fluxes.errors import PolicyError
from fluxes.formats.jobspec import Jobspec

CONFIG = InstanceConfig.from_toml("""
[policy.jobspec.defaults.system]
queue = "batch"
[queues.batch]
[queues.short]
policy.limits.duration = "10m"
policy.limits.job-size.max.ncores = 2
[queues.closed]
policy.access.allow-user = ["somebody-else"]
""")


def test_pairs_take_json_values_and_text_otherwise() -> None:
    assert parse_pairs(["duration=60", "name=foo", "queue=\"q\"", "duration=+1h"]) == \
        {"duration": "+1h", "name": "foo", "queue": "q"}
    assert parse_pairs(["name=a=b"]) == {"name": "a=b"}
    for bad in ("name", "=1"):
        with pytest.raises(ValueError, match="expected KEY=VALUE"):
            parse_pairs([bad])


@pytest.mark.parametrize(("key", "path"), [
    ("duration", DURATION), ("queue", QUEUE), ("name", NAME), (DURATION, DURATION),
    ("job.name", NAME),
])
def test_aliases_and_prefixes(key: str, path: str) -> None:
    assert full_key(key) == path


@pytest.mark.parametrize("key", ["urgency", "attributes.user.x", "tasks.0.command",
                                 "resources", "cwd"])
def test_other_keys_are_refused(key: str) -> None:
    with pytest.raises(PolicyError, match="is not supported"):
        full_key(key)


@pytest.mark.parametrize(("value", "current", "new"), [
    ("1h", 60.0, 3600.0), (90, 60.0, 90.0), ("+1m", 60.0, 120.0), ("-30s", 60.0, 30.0),
    (0, 60.0, 0.0), ("+1.5m", 600.0, 690.0),
])
def test_durations(value: Any, current: float, new: float) -> None:
    assert resolve({"duration": value}, current) == {DURATION: new}


@pytest.mark.parametrize(("value", "current", "error"), [
    ("-1m", 60.0, "must stay > 0"), ("-2m", 60.0, "must stay > 0"),
    ("+1m", 0.0, "no duration limit"), ("inf", 60.0, "must be finite"),
    ("1x", 60.0, "unknown unit"), (True, 60.0, "bool"), ("+", 60.0, "empty"),
])
def test_bad_durations(value: Any, current: float, error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        resolve({"duration": value}, current)


def test_names_and_queues_are_text() -> None:
    assert resolve({"name": 123}, 0) == {NAME: "123"}
    for bad in ("", None, [1], {"a": 1}):
        with pytest.raises(PolicyError, match="expected a non-empty string"):
            resolve({"name": bad}, 0)
    with pytest.raises(PolicyError, match="given twice"):
        resolve({"name": "a", "job.name": "b"}, 0)
    with pytest.raises(PolicyError, match="no updates"):
        resolve({}, 0)


def test_updated_jobspec_sets_nested_paths_on_a_copy() -> None:
    spec = {"attributes": {"system": {"duration": 1}}}
    out = updated_jobspec(spec, {NAME: "n", DURATION: 5})
    assert out == {"attributes": {"system": {"duration": 5, "job": {"name": "n"}}}}
    assert spec == {"attributes": {"system": {"duration": 1}}}


def plan(updates: dict[str, Any], earlier: dict[str, Any] | None = None,
         running: bool = False, ncores: int = 1, **kw: Any) -> Any:
    spec = Jobspec.from_command(["app"], ntasks=ncores, duration=300).to_dict()
    return plan_update(spec, spec, earlier or {}, updates, running=running, config=CONFIG,
                       userid=1000, username="me", **kw)


def test_a_pending_jobs_update_gets_the_new_request() -> None:
    got = plan({"duration": "+5m", "queue": "short"})
    assert got.updates == {DURATION: 600.0, QUEUE: "short"}
    assert got.request is not None
    assert Request.from_wire(got.request).duration == 600.0


def test_relative_durations_start_from_earlier_updates() -> None:
    assert plan({"duration": "+1m"}, earlier={DURATION: 60.0}).updates == {DURATION: 120.0}


@pytest.mark.parametrize(("updates", "ncores", "error"), [
    ({"queue": "short", "duration": "1h"}, 1, "duration"),
    ({"queue": "short"}, 4, "cores"),
    ({"queue": "nosuch"}, 1, "invalid queue"),
    ({"queue": "closed"}, 1, "not allowed"),
])
def test_a_pending_jobs_update_passes_the_submission_checks(
        updates: dict[str, Any], ncores: int, error: str) -> None:
    with pytest.raises(PolicyError, match=error):
        plan(updates, ncores=ncores)


def test_the_instance_owner_may_pass_the_limits() -> None:
    got = plan({"queue": "short", "duration": "1h"}, check_limits=False)
    assert got.updates == {QUEUE: "short", DURATION: 3600.0}
    with pytest.raises(PolicyError, match="invalid queue"):
        plan({"queue": "nosuch"}, check_limits=False)  # the rest still holds


def test_a_running_job_may_only_change_its_duration() -> None:
    assert plan({"duration": "+1h"}, running=True).updates == {DURATION: 3900.0}
    assert plan({"duration": "+1h"}, running=True).request is None
    with pytest.raises(PolicyError, match="only the duration"):
        plan({"duration": "+1h", "name": "x"}, running=True)
    with pytest.raises(PolicyError, match="cannot become unlimited"):
        plan({"duration": 0}, running=True)


def test_current_jobspec_applies_each_update_in_order() -> None:
    spec: dict[str, Any] = {"version": 1, "attributes": {"system": {"duration": 300.0, "queue": "batch"}},
            "tasks": [{"command": ["true"]}]}
    current = current_jobspec(spec, [
        {DURATION: 420.0, NAME: "first"},
        {NAME: "renamed", QUEUE: "short"}])
    assert current["attributes"]["system"] == {
        "duration": 420.0, "queue": "short", "job": {"name": "renamed"}}
    assert current["tasks"] == spec["tasks"]
    assert spec["attributes"]["system"] == {"duration": 300.0, "queue": "batch"}  # untouched
    assert current_jobspec(spec, []) == spec
    with pytest.raises(ValueError, match="bad key"):
        current_jobspec(spec, [{"attributes..x": 1}])


def test_current_r_takes_the_last_expiration() -> None:
    r: dict[str, Any] = {"version": 1, "execution": {"R_lite": [], "starttime": 10.0, "expiration": 110.0}}
    assert current_r(r, [{"expiration": 1010.0}, {}, {"expiration": 510.0}]) == {
        "version": 1, "execution": {"R_lite": [], "starttime": 10.0, "expiration": 510.0}}
    assert r["execution"]["expiration"] == 110.0  # untouched
    with pytest.raises(ValueError, match="no execution"):
        current_r({"version": 1}, [{"expiration": 5.0}])
