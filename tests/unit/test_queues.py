"""Tests for fluxes.domain.jm.queues: RFC 33 queue configuration, admission and queue state."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.jm.queues import (
    UNLIMITED,
    Admission,
    JobSize,
    Policy,
    QueueConfig,
    QueueEvent,
    QueueState,
    SchedulerPolicy,
    apply_queue_event,
    initial_states,
)
from fluxes.errors import ConfigError, FluxesError, PolicyError
from fluxes.formats.jobspec import Jobspec

SITE = """
[policy.jobspec.defaults.system]
duration = "1h"
queue = "batch"

[policy.limits]
duration = "1d"
job-size.max.nnodes = 16
job-size.max.ncores = 512

[policy.scheduler]
policy = "easy"
queue-depth = 32

[queues.batch]
requires = ["batch"]

[queues.debug]
requires = ["debug"]
policy.jobspec.defaults.system.duration = "10m"
policy.limits.duration = "30m"
policy.limits.job-size.max.nnodes = 2
policy.limits.job-size.max.ngpus = 0
policy.access.allow-group = ["devs"]
policy.scheduler.policy = "fcfs"

[queues.big]
policy.limits.job-size.min.nnodes = 4
policy.limits.job-size.max.nnodes = -1
policy.limits.duration = "0"

[resource]
noverify = true
"""


def spec(**kwargs: Any) -> Jobspec:
    """A small jobspec; keyword arguments go to Jobspec.from_command."""
    return Jobspec.from_command(["true"], **kwargs)


@pytest.fixture
def site() -> QueueConfig:
    return QueueConfig.from_toml(SITE)


# -- configuration ----------------------------------------------------------------------


def test_no_config_is_one_anonymous_queue() -> None:
    cfg = QueueConfig.from_dict({})
    assert not cfg.named
    assert cfg.queue_names == (None,)
    assert cfg.default_queue is None
    assert cfg.effective_policy() == Policy()
    assert cfg.effective_policy(None) is cfg.global_policy
    assert cfg.requires(None) == ()


def test_empty_queues_table_is_anonymous() -> None:
    cfg = QueueConfig.from_toml("[queues]\n")
    assert cfg.queue_names == (None,)


def test_other_tables_are_ignored() -> None:
    cfg = QueueConfig.from_toml("[resource]\nnoverify = true\n[exec]\nx = 1\n")
    assert cfg.queue_names == (None,)


def test_site_config(site: QueueConfig) -> None:
    assert site.named
    assert site.queue_names == ("batch", "debug", "big")
    assert site.default_queue == "batch"
    assert "batch" in repr(site)
    assert site.requires("debug") == ("debug",)
    assert site.requires("big") == ()


def test_queue_policy_overrides_key_by_key(site: QueueConfig) -> None:
    batch = site.effective_policy("batch")
    assert batch.default_duration == 3600.0
    assert batch.max_duration == 86400.0
    assert batch.max_size == JobSize(nnodes=16, ncores=512)
    assert batch.min_size == JobSize()
    assert batch.scheduler == SchedulerPolicy(policy="easy", queue_depth=32)
    assert not batch.restricts_access

    debug = site.effective_policy("debug")
    assert debug.default_duration == 600.0
    assert debug.max_duration == 1800.0
    # nnodes and ngpus from the queue, ncores inherited from [policy].
    assert debug.max_size == JobSize(nnodes=2, ncores=512, ngpus=0)
    assert debug.allow_groups == ("devs",)
    assert debug.allow_users is None
    assert debug.scheduler == SchedulerPolicy(policy="fcfs", queue_depth=32)

    big = site.effective_policy("big")
    assert big.max_size.nnodes == UNLIMITED  # -1 overrides the global 16
    assert big.min_size.nnodes == 4
    assert big.max_duration is None  # "0" means unlimited


def test_global_policy_alone(site: QueueConfig) -> None:
    assert site.effective_policy(None) == site.global_policy
    assert site.global_policy.default_queue == "batch"
    assert site.global_policy.max_size.nnodes == 16


def test_single_named_queue_is_the_default() -> None:
    cfg = QueueConfig.from_toml("[queues.only]\n")
    assert cfg.default_queue == "only"
    assert cfg.queue_names == ("only",)


def test_durations_may_be_numbers_or_inf() -> None:
    cfg = QueueConfig.from_dict({"policy": {"limits": {"duration": 90},
                                            "jobspec": {"defaults": {"system": {"duration": 1.5}}}}})
    assert cfg.global_policy.max_duration == 90.0
    assert cfg.global_policy.default_duration == 1.5
    cfg = QueueConfig.from_toml('[policy.limits]\nduration = "inf"\n')
    assert cfg.global_policy.max_duration is None


def test_zero_default_duration_means_none() -> None:
    cfg = QueueConfig.from_toml("""
[policy.jobspec.defaults.system]
duration = "1h"
[queues.q]
policy.jobspec.defaults.system.duration = 0
""")
    assert cfg.effective_policy("q").default_duration is None
    assert cfg.global_policy.default_duration == 3600.0


def test_negated_requires_is_allowed() -> None:
    cfg = QueueConfig.from_toml('[queues.q]\nrequires = ["^login", "amd-mi50@gpu"]\n')
    assert cfg.requires("q") == ("^login", "amd-mi50@gpu")


def test_bytes_toml() -> None:
    assert QueueConfig.from_toml(b"[queues.a]\n").queue_names == ("a",)


INVALID = [
    ('[queues.debug.policy.limits]\nduration = "1x"',
     "queues.debug.policy.limits.duration: invalid duration '1x'"),
    ("[policy.limits]\nduration = true",
     "policy.limits.duration: expected a duration string or number, got a boolean"),
    ('[policy.limits]\nduration = "-1h"', "policy.limits.duration: duration '-1h' is negative"),
    ('[policy.jobspec.defaults.system]\nqueue = "batch"',
     "policy.jobspec.defaults.system.queue: 'batch' is not a configured queue"),
    ('[policy.jobspec.defaults.system]\nqueue = "batch"\n[queues.debug]',
     "policy.jobspec.defaults.system.queue: 'batch' is not a configured queue"),
    ("[policy.jobspec.defaults.system]\nqueue = 3",
     "policy.jobspec.defaults.system.queue: invalid queue name 3"),
    ('[policy.jobspec.defaults.system]\nduration = "inf"',
     "policy.jobspec.defaults.system.duration: a default duration must be finite"),
    ('[policy.jobspec.defaults.system]\nname = "x"',
     "policy.jobspec.defaults.system.name: unknown key"),
    ('[policy.jobspec.defaults.user]\nx = 1', "policy.jobspec.defaults.user: unknown key"),
    ("[queues.debug]\nbogus = 1", "queues.debug.bogus: unknown key"),
    ("[queues.debug.policy]\nbogus = 1", "queues.debug.policy.bogus: unknown key"),
    ("[policy]\nbogus = 1", "policy.bogus: unknown key"),
    ("[policy.limits.job-size.max]\nnnodes = -2",
     "policy.limits.job-size.max.nnodes: must be -1 (unlimited) or >= 0, got -2"),
    ('[policy.limits.job-size.max]\nnnodes = "2"',
     "policy.limits.job-size.max.nnodes: expected an integer, got a string"),
    ("[policy.limits.job-size.min]\nngpus = 1.5",
     "policy.limits.job-size.min.ngpus: expected an integer, got a float"),
    ("[policy.limits.job-size.max]\nnsockets = 1",
     "policy.limits.job-size.max.nsockets: unknown key"),
    ("[policy.limits.job-size]\nmax = 3",
     "policy.limits.job-size.max: expected a table, got an integer"),
    ("[policy.limits]\njob-size = 1979-05-27",
     "policy.limits.job-size: expected a table, got a date/time"),
    ("[policy.limits.job-size.min]\nnnodes = 4\n[policy.limits.job-size.max]\nnnodes = 2",
     "policy.limits.job-size.min.nnodes: minimum 4 is greater than the maximum 2 "
     "(policy.limits.job-size.max.nnodes)"),
    ("[policy.limits.job-size.min]\nncores = 4\n[queues.q.policy.limits.job-size.max]\nncores = 2",
     "policy.limits.job-size.min.ncores: minimum 4 is greater than the maximum 2 "
     "(queues.q.policy.limits.job-size.max.ncores)"),
    ('[policy.jobspec.defaults.system]\nduration = "2h"\n'
     '[queues.debug.policy.limits]\nduration = "1h"',
     "policy.jobspec.defaults.system.duration: default 2h exceeds the duration limit 1h "
     "(queues.debug.policy.limits.duration)"),
    ('[policy.access]\nallow-user = "alice"',
     "policy.access.allow-user: expected an array of names, got a string"),
    ('[policy.access]\nallow-user = ["alice", 3]',
     "policy.access.allow-user[1]: expected a non-empty name, got 3"),
    ('[policy.access]\nallow-group = [""]',
     "policy.access.allow-group[0]: expected a non-empty name, got ''"),
    ('[policy.access]\nallow-group = [" devs"]',
     "policy.access.allow-group[0]: expected a non-empty name, got ' devs'"),
    ('[policy.access]\ndeny-user = ["bob"]', "policy.access.deny-user: unknown key"),
    ('[policy.scheduler]\npolicy = "lifo"',
     "policy.scheduler.policy: expected one of fcfs, easy, conservative, got 'lifo'"),
    ("[policy.scheduler]\nqueue-depth = 0", "policy.scheduler.queue-depth: must be >= 1, got 0"),
    ("[policy.scheduler]\nreservation-depth = -1",
     "policy.scheduler.reservation-depth: must be >= 0, got -1"),
    ('[policy.scheduler]\nplacement = "random"',
     "policy.scheduler.placement: expected one of first-fit, best-fit, worst-fit, lonode, "
     "hinode, got 'random'"),
    ("[policy.scheduler]\nbackfill = true", "policy.scheduler.backfill: unknown key"),
    ("[queues.a]\n[queues.b]",
     "policy.jobspec.defaults.system.queue: required when more than one queue is configured"),
    ('[queues.debug.policy.jobspec.defaults.system]\nqueue = "debug"',
     "queues.debug.policy.jobspec.defaults.system.queue: only the global [policy] may set "
     "the default queue"),
    ("queues = 5", "queues: expected a table, got an integer"),
    ("policy = 5", "policy: expected a table, got an integer"),
    ("[queues]\ndebug = 5", "queues.debug: expected a table, got an integer"),
    ("[queues.debug]\npolicy = []", "queues.debug.policy: expected a table, got an array"),
    ('[queues.debug]\nrequires = "x"',
     "queues.debug.requires: expected an array of property names, got a string"),
    ('[queues.debug]\nrequires = ["a&b"]',
     "queues.debug.requires[0]: invalid character '&' in property name 'a&b'"),
    ("[queues.debug]\nrequires = [1]", "queues.debug.requires[0]: expected a property name"),
    ('[queues.debug]\nrequires = ["ok", "a b"]',
     "queues.debug.requires[1]: property name 'a b' contains whitespace"),
    ('[queues.debug]\nrequires = [""]', "queues.debug.requires[0]: property name is empty"),
    ('[queues.debug]\nrequires = ["^"]', "queues.debug.requires[0]: property name is empty"),
    ('[queues."a.b"]', "queues.a.b: invalid queue name 'a.b'"),
    ('[queues."-x"]', "invalid queue name '-x'"),
    ('[queues.""]', "invalid queue name ''"),
    ('[queues.' + "q" * 65 + "]", "invalid queue name"),
    ("x = [", "invalid TOML: "),
    ("[queues.a]\n[queues.a]", "invalid TOML: "),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_config(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        QueueConfig.from_toml(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_invalid_config_inputs() -> None:
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        QueueConfig.from_toml(b"\xff")
    with pytest.raises(ConfigError, match="config must be TOML text"):
        QueueConfig.from_toml(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config: expected a table"):
        QueueConfig.from_dict([])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"max.nnodes: .* is too large"):
        QueueConfig.from_dict({"policy": {"limits": {"job-size": {"max": {"nnodes": 2**64}}}}})


def test_effective_policy_unknown_queue(site: QueueConfig) -> None:
    with pytest.raises(PolicyError, match=r"^invalid queue 'nope' specified$"):
        site.effective_policy("nope")
    with pytest.raises(PolicyError, match="no queues are configured"):
        QueueConfig.from_dict({}).effective_policy("nope")
    with pytest.raises(PolicyError, match="invalid queue 'nope'"):
        site.requires("nope")


def test_check_queue(site: QueueConfig) -> None:
    assert site.check_queue("debug") == "debug"
    with pytest.raises(PolicyError, match="a queue name is required"):
        site.check_queue(None)
    assert QueueConfig.from_dict({}).check_queue(None) is None


def test_policy_is_frozen(site: QueueConfig) -> None:
    policy = site.effective_policy("debug")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.max_duration = 5.0  # type: ignore[misc]
    hash(policy)


def test_policy_dict_round_trip(site: QueueConfig) -> None:
    for name in site.queue_names:
        policy = site.effective_policy(name)
        assert Policy.from_dict(policy.to_dict()) == policy
    assert Policy().to_dict() == {}


def test_policy_from_dict_names_where() -> None:
    with pytest.raises(ConfigError, match=r"^queues\.x\.policy\.limits\.bogus: unknown key$"):
        Policy.from_dict({"limits": {"bogus": 1}}, where="queues.x.policy")


# -- hypothesis: configs ----------------------------------------------------------------

_LEAF_VALUES: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    # Chosen so that no merge can break a cross-key rule: every minimum is
    # <= every maximum, every default duration <= every duration limit.
    ("jobspec", "defaults", "system", "duration"): st.sampled_from([0, 30, "1m", 45.5]),
    ("limits", "duration"): st.sampled_from(["0", "1h", 3600, "inf", 120]),
    **{("limits", "job-size", "max", k): st.sampled_from([-1, 10, 20])
       for k in ("nnodes", "ncores", "ngpus")},
    **{("limits", "job-size", "min", k): st.sampled_from([-1, 0, 3, 10])
       for k in ("nnodes", "ncores", "ngpus")},
    ("access", "allow-user"): st.lists(st.sampled_from(["alice", "bob"]), max_size=2),
    ("access", "allow-group"): st.lists(st.sampled_from(["devs", "ops"]), max_size=2),
    ("scheduler", "policy"): st.sampled_from(["fcfs", "easy", "conservative"]),
    ("scheduler", "queue-depth"): st.integers(1, 1000),
    ("scheduler", "reservation-depth"): st.integers(0, 10),
    ("scheduler", "placement"): st.sampled_from(["first-fit", "best-fit"]),
}


@st.composite
def policy_leaves(draw: st.DrawFn) -> dict[tuple[str, ...], Any]:
    paths = draw(st.sets(st.sampled_from(sorted(_LEAF_VALUES))))
    return {path: draw(_LEAF_VALUES[path]) for path in paths}


def nest(leaves: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in leaves.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def seconds(value: Any) -> float:
    table = {"1m": 60.0, "1h": 3600.0, "0": 0.0, "inf": math.inf}
    return table[value] if isinstance(value, str) else float(value)


def expected_policy(leaves: dict[tuple[str, ...], Any], default_queue: str | None) -> Policy:
    """The Policy the merged leaves should give, computed independently."""

    def size(bound: str) -> JobSize:
        return JobSize(*(leaves.get(("limits", "job-size", bound, k), -1)
                         for k in ("nnodes", "ncores", "ngpus")))

    limit = seconds(leaves.get(("limits", "duration"), 0))
    default = seconds(leaves.get(("jobspec", "defaults", "system", "duration"), 0))
    users = leaves.get(("access", "allow-user"))
    groups = leaves.get(("access", "allow-group"))
    return Policy(
        default_duration=default or None,
        default_queue=default_queue,
        max_size=size("max"),
        min_size=size("min"),
        max_duration=None if limit in (0.0, math.inf) else limit,
        allow_users=None if users is None else tuple(users),
        allow_groups=None if groups is None else tuple(groups),
        scheduler=SchedulerPolicy(
            leaves.get(("scheduler", "policy")),
            leaves.get(("scheduler", "queue-depth")),
            leaves.get(("scheduler", "reservation-depth")),
            leaves.get(("scheduler", "placement")),
        ),
    )


@settings(max_examples=150)
@given(glob=policy_leaves(), queues=st.dictionaries(
    st.sampled_from(["batch", "debug", "q_1", "x-y"]), policy_leaves(), max_size=3))
def test_random_configs_merge_key_by_key(glob: dict[tuple[str, ...], Any],
                                         queues: dict[str, dict[tuple[str, ...], Any]]) -> None:
    default = sorted(queues)[0] if queues else None
    if len(queues) > 1:
        glob = {**glob, ("jobspec", "defaults", "system", "queue"): default}
    config = {"policy": nest(glob), "queues": {name: {"policy": nest(leaves)}
                                               for name, leaves in queues.items()}}
    cfg = QueueConfig.from_dict(config)
    assert cfg.default_queue == default
    declared = glob.get(("jobspec", "defaults", "system", "queue"))
    assert cfg.global_policy == expected_policy(glob, declared)
    for name, leaves in queues.items():
        policy = cfg.effective_policy(name)
        assert policy == expected_policy({**glob, **leaves}, declared)
        assert Policy.from_dict(policy.to_dict()) == policy


_FUZZ_KEYS = st.sampled_from([
    "policy", "queues", "jobspec", "defaults", "system", "duration", "queue", "limits",
    "job-size", "max", "min", "nnodes", "ncores", "ngpus", "access", "allow-user",
    "allow-group", "scheduler", "queue-depth", "requires", "debug", "batch", "x",
])
_FUZZ_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True),
    st.text(max_size=8), st.sampled_from(["1h", "0", "inf", "fcfs", "debug", "-1"]),
)
_FUZZ_VALUES = st.recursive(
    _FUZZ_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(_FUZZ_KEYS, children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.dictionaries(_FUZZ_KEYS, _FUZZ_VALUES, max_size=3))
def test_fuzzed_config_dicts_only_raise_config_error(obj: dict[str, Any]) -> None:
    try:
        cfg = QueueConfig.from_dict(obj)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    for name in cfg.queue_names:
        cfg.effective_policy(name)


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from(list('[]."=\n -_#{},0123456789abdeiloqstuy')),
               max_size=60))
def test_garbage_toml_only_raises_config_error(text: str) -> None:
    try:
        QueueConfig.from_toml(text)
    except ConfigError:
        pass


@given(st.text(max_size=40))
def test_arbitrary_text_only_raises_config_error(text: str) -> None:
    try:
        QueueConfig.from_toml(text)
    except ConfigError:
        pass


# -- admission --------------------------------------------------------------------------


def test_admit_anonymous_queue() -> None:
    cfg = QueueConfig.from_dict({})
    js = spec(ntasks=2)
    admission = cfg.admit(js, 1000, "alice", [])
    assert isinstance(admission, Admission)
    assert admission.queue is None
    assert admission.jobspec == js
    assert admission.jobspec.queue is None
    assert admission.policy == Policy()


def test_admit_anonymous_applies_default_duration() -> None:
    cfg = QueueConfig.from_toml('[policy.jobspec.defaults.system]\nduration = "5m"\n')
    admission = cfg.admit(spec(), 1000, "alice")
    assert admission.jobspec.duration == 300.0
    assert admission.jobspec.queue is None
    assert cfg.admit(spec(duration=60), 1000, "alice").jobspec.duration == 60.0


def test_admit_anonymous_refuses_a_queue_name() -> None:
    with pytest.raises(PolicyError) as info:
        QueueConfig.from_dict({}).admit(spec(queue="foo"), 1000, "alice")
    assert str(info.value) == "invalid queue 'foo' specified: no queues are configured"


def test_admit_default_queue(site: QueueConfig) -> None:
    admission = site.admit(spec(), 1000, "alice", [])
    assert admission.queue == "batch"
    assert admission.jobspec.queue == "batch"
    assert admission.jobspec.duration == 3600.0
    assert admission.jobspec.constraints == {"properties": ["batch"]}
    assert admission.policy == site.effective_policy("batch")


def test_admit_named_queue_defaults_and_requires(site: QueueConfig) -> None:
    admission = site.admit(spec(queue="debug"), 1000, "alice", ["devs"])
    assert admission.queue == "debug"
    assert admission.jobspec.duration == 600.0
    assert admission.jobspec.constraints == {"properties": ["debug"]}
    assert admission.jobspec.queue == "debug"


def test_admit_keeps_explicit_duration(site: QueueConfig) -> None:
    admission = site.admit(spec(queue="debug", duration="20m"), 1000, "alice", ["devs"])
    assert admission.jobspec.duration == 1200.0


def test_requires_is_anded_into_existing_constraints(site: QueueConfig) -> None:
    js = spec(queue="debug", constraints={"properties": ["ssd"]})
    admission = site.admit(js, 1000, "alice", ["devs"])
    assert admission.jobspec.constraints == {"properties": ["ssd", "debug"]}
    js = spec(queue="debug", constraints={"hostlist": ["node[0-3]"]})
    admission = site.admit(js, 1000, "alice", ["devs"])
    assert admission.jobspec.constraints == {
        "and": [{"hostlist": ["node[0-3]"]}, {"properties": ["debug"]}]
    }


def test_admit_does_not_modify_the_jobspec(site: QueueConfig) -> None:
    js = spec()
    before = js.to_dict()
    site.admit(js, 1000, "alice")
    assert js.to_dict() == before


def test_admit_unknown_queue(site: QueueConfig) -> None:
    with pytest.raises(PolicyError) as info:
        site.admit(spec(queue="foo"), 1000, "alice")
    assert str(info.value) == "invalid queue 'foo' specified"


def test_admit_long_queue_name_is_shortened(site: QueueConfig) -> None:
    with pytest.raises(PolicyError) as info:
        site.admit(spec(queue="q" * 500), 1000, "alice")
    assert len(str(info.value)) < 80


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(queue="debug", nnodes=8, ntasks=8),
         "job requests 8 nodes, queue debug allows at most 2"),
        (dict(queue="batch", ntasks=600),
         "job requests 600 cores, queue batch allows at most 512"),
        (dict(queue="debug", ntasks=600),
         "job requests 600 cores, queue debug allows at most 512"),
        (dict(queue="debug", ntasks=1, gpus_per_task=1),
         "job requests 1 gpu, queue debug allows at most 0"),
        (dict(queue="big", nnodes=1, ntasks=1),
         "job requests 1 node, queue big requires at least 4"),
        (dict(queue="big", ntasks=1),
         "job requests 0 nodes, queue big requires at least 4"),
        (dict(queue="debug", duration="2h"),
         "job duration 2h exceeds the limit of 30m for queue debug"),
        (dict(queue="batch", duration="1.5d"),
         "job duration 1.5d exceeds the limit of 1d for queue batch"),
    ],
)
def test_admit_limits(site: QueueConfig, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        site.admit(spec(**kwargs), 1000, "alice", ["devs"])
    assert str(info.value) == message


def test_admit_limits_at_the_boundary(site: QueueConfig) -> None:
    site.admit(spec(queue="debug", nnodes=2, ntasks=2, duration="30m"), 1, "a", ["devs"])
    site.admit(spec(queue="big", nnodes=4, ntasks=4, duration="100d"), 1, "a")


@pytest.mark.parametrize(
    ("table", "kwargs", "message"),
    [
        ("[policy.limits.job-size.min]\nncores = 4", dict(ntasks=2),
         "job requests 2 cores, the instance requires at least 4"),
        ("[policy.limits.job-size.min]\nngpus = 2", dict(ntasks=1, gpus_per_task=1),
         "job requests 1 gpu, the instance requires at least 2"),
        ("[policy.limits.job-size.max]\nngpus = 2", dict(ntasks=3, gpus_per_task=1),
         "job requests 3 gpus, the instance allows at most 2"),
        ("[policy.limits.job-size.max]\nnnodes = 0", dict(nnodes=1),
         "job requests 1 node, the instance allows at most 0"),
        ('[policy.limits]\nduration = "1h"', dict(duration="61m"),
         "job duration 1.01667h exceeds the limit of 1h"),
        ('[policy.limits]\nduration = "1h"', dict(),
         "job duration unlimited exceeds the limit of 1h"),
    ],
)
def test_admit_limits_anonymous(table: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError) as info:
        QueueConfig.from_toml(table).admit(spec(**kwargs), 1000, "alice")
    assert str(info.value) == message


def test_default_duration_satisfies_the_limit() -> None:
    cfg = QueueConfig.from_toml("""
[policy.jobspec.defaults.system]
duration = "1h"
[policy.limits]
duration = "1h"
""")
    assert cfg.admit(spec(), 1000, "alice").jobspec.duration == 3600.0


def test_access_by_group_and_user() -> None:
    cfg = QueueConfig.from_toml("""
[policy.jobspec.defaults.system]
queue = "open"
[queues.open]
[queues.debug.policy.access]
allow-user = ["alice"]
allow-group = ["devs"]
[queues.closed.policy.access]
allow-user = []
""")
    assert cfg.admit(spec(queue="debug"), 1, "alice", []).queue == "debug"
    assert cfg.admit(spec(queue="debug"), 2, "bob", ["users", "devs"]).queue == "debug"
    assert cfg.admit(spec(queue="open"), 3, "carol", []).queue == "open"
    with pytest.raises(PolicyError) as info:
        cfg.admit(spec(queue="debug"), 3, "carol", ["users"])
    assert str(info.value) == "user carol is not allowed to submit to queue debug"
    with pytest.raises(PolicyError) as info:
        cfg.admit(spec(queue="debug"), 4242, None, [])
    assert str(info.value) == "user 4242 is not allowed to submit to queue debug"
    with pytest.raises(PolicyError, match="user alice is not allowed to submit to queue closed"):
        cfg.admit(spec(queue="closed"), 1, "alice", ["devs"])


def test_access_anonymous_queue() -> None:
    cfg = QueueConfig.from_toml('[policy.access]\nallow-group = ["staff"]\n')
    assert cfg.admit(spec(), 1, "alice", ["staff"]).queue is None
    with pytest.raises(PolicyError) as info:
        cfg.admit(spec(), 1, "bob", ["users"])
    assert str(info.value) == "user bob is not allowed to submit jobs"


def test_policy_allows() -> None:
    assert Policy().allows(None)
    assert not Policy(allow_users=()).allows("alice", ["devs"])
    assert Policy(allow_users=("alice",)).allows("alice")
    assert not Policy(allow_users=("alice",)).allows(None, ["alice"])
    assert Policy(allow_groups=("devs",)).allows(None, iter(["x", "devs"]))


def test_admit_disabled_queue(site: QueueConfig) -> None:
    states = initial_states(site)
    states = apply_queue_event(QueueEvent("disable", "debug", 1.0, "maintenance"), states)
    with pytest.raises(PolicyError) as info:
        site.admit(spec(queue="debug"), 1, "alice", ["devs"], states)
    assert str(info.value) == "queue debug is disabled: maintenance"
    # Other queues are unaffected, and the default queue is checked too.
    assert site.admit(spec(), 1, "alice", [], states).queue == "batch"
    states = apply_queue_event(QueueEvent("disable", None, 2.0, "drain", all_queues=True), states)
    with pytest.raises(PolicyError, match=r"^queue batch is disabled: drain$"):
        site.admit(spec(), 1, "alice", [], states)


def test_admit_disabled_without_reason(site: QueueConfig) -> None:
    states: dict[str | None, QueueState] = {"debug": QueueState(enabled=False)}
    with pytest.raises(PolicyError) as info:
        site.admit(spec(queue="debug"), 1, "alice", ["devs"], states)
    assert str(info.value) == "queue debug is disabled"


def test_admit_disabled_anonymous_queue() -> None:
    cfg = QueueConfig.from_dict({})
    states = apply_queue_event(QueueEvent("disable", None, 1.0, "upgrade"), initial_states(cfg))
    with pytest.raises(PolicyError) as info:
        cfg.admit(spec(), 1, "alice", [], states)
    assert str(info.value) == "job submission is disabled: upgrade"


def test_stopped_queue_still_admits(site: QueueConfig) -> None:
    states = apply_queue_event(QueueEvent("stop", "batch", 1.0, "dat"), initial_states(site))
    assert site.admit(spec(), 1, "alice", [], states).queue == "batch"


def test_admission_checks_run_in_order(site: QueueConfig) -> None:
    # A disabled queue is reported before access, access before limits.
    states: dict[str | None, QueueState] = {
        "debug": QueueState(enabled=False, enable_reason="off")}
    big = spec(queue="debug", nnodes=8, ntasks=8)
    with pytest.raises(PolicyError, match="disabled"):
        site.admit(big, 1, "eve", [], states)
    with pytest.raises(PolicyError, match="not allowed"):
        site.admit(big, 1, "eve", [])


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(PolicyError, ValueError)
    assert issubclass(PolicyError, FluxesError)


# -- queue state ------------------------------------------------------------------------


def test_initial_states(site: QueueConfig) -> None:
    states = initial_states(site)
    assert list(states) == ["batch", "debug", "big"]
    assert all(s == QueueState(True, None, True, None) for s in states.values())
    assert initial_states(QueueConfig.from_dict({})) == {None: QueueState()}


def test_enable_disable_start_stop() -> None:
    states: dict[str | None, QueueState] = {"a": QueueState(), "b": QueueState()}
    before = dict(states)
    s1 = apply_queue_event(QueueEvent("disable", "a", 1.0, "maint"), states)
    assert states == before  # not modified
    assert s1["a"] == QueueState(False, "maint", True, None)
    assert s1["a"].disable_reason == "maint"
    assert s1["b"] == QueueState()
    s2 = apply_queue_event(QueueEvent("stop", "a", 2.0, "dat"), s1)
    assert s2["a"] == QueueState(False, "maint", False, "dat")
    s3 = apply_queue_event(QueueEvent("enable", "a", 3.0), s2)
    assert s3["a"] == QueueState(True, None, False, "dat")
    s4 = apply_queue_event(QueueEvent("start", "a", 4.0), s3)
    assert s4["a"] == QueueState()
    s5 = apply_queue_event(QueueEvent("stop", "b", 5.0), s4)
    assert s5["b"] == QueueState(True, None, False, None)


def test_all_queues_event() -> None:
    states: dict[str | None, QueueState] = {"a": QueueState(), "b": QueueState()}
    out = apply_queue_event(QueueEvent("stop", None, 1.0, "x", all_queues=True), states)
    assert out == {"a": QueueState(started=False, stop_reason="x"),
                   "b": QueueState(started=False, stop_reason="x")}


def test_unknown_queue_event() -> None:
    states: dict[str | None, QueueState] = {"a": QueueState()}
    event = QueueEvent("disable", "gone", 1.0, "x")
    assert apply_queue_event(event, states) == states
    with pytest.raises(PolicyError, match="queue 'gone' is not configured"):
        apply_queue_event(event, states, strict=True)
    with pytest.raises(PolicyError, match="the anonymous queue is not configured"):
        apply_queue_event(QueueEvent("stop", None, 1.0), states, strict=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("pause", "a", 1.0), "kind must be one of enable, disable, start, stop"),
        (("disable", "a", 1.0), "disable needs a reason"),
        (("disable", "a", 1.0, ""), "disable needs a reason"),
        (("enable", "a", 1.0, "why"), "enable takes no reason"),
        (("start", "a", 1.0, "why"), "start takes no reason"),
        (("stop", "a", 1.0, None, True), "not both"),
        (("stop", "a", math.nan), "invalid timestamp"),
        (("stop", "a", -1.0), "invalid timestamp"),
        (("stop", "a", True), "invalid timestamp"),
        (("stop", "a", "1"), "invalid timestamp"),
        (("stop", 3, 1.0), "queue must be a name or None"),
        (("stop", "a", 1.0, 5), "reason must be a string"),
        (("stop", None, 1.0, None, 1), "all_queues must be true or false"),
    ],
)
def test_invalid_queue_events(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        QueueEvent(*args)


def test_queue_event_dict_round_trip() -> None:
    for event in (QueueEvent("disable", "a", 1.5, "maint"),
                  QueueEvent("start", None, 2.0, all_queues=True),
                  QueueEvent("stop", None, 0)):
        assert QueueEvent.from_dict(event.to_dict()) == event
    assert QueueEvent("stop", "a", 1.0).to_dict() == {"kind": "stop", "timestamp": 1.0,
                                                       "queue": "a"}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected a mapping"),
        ({"kind": "stop"}, "kind and timestamp are required"),
        ({"kind": "stop", "timestamp": 1, "extra": 1}, "unknown key 'extra'"),
        ({"kind": "stop", "timestamp": 1, "all": "yes"}, "all_queues must be true or false"),
    ],
)
def test_queue_event_from_dict_errors(obj: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        QueueEvent.from_dict(obj)


_EVENTS = st.builds(
    lambda kind, queue, reason, everywhere: QueueEvent(
        kind, None if everywhere else queue, 1.0,
        reason if kind in ("disable", "stop") else None, all_queues=everywhere),
    st.sampled_from(["enable", "disable", "start", "stop"]),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["r1", "r2"]),
    st.booleans(),
)


@given(st.lists(_EVENTS, max_size=30))
def test_replay_matches_last_event_per_queue(events: list[QueueEvent]) -> None:
    states: dict[str | None, QueueState] = {"a": QueueState(), "b": QueueState()}
    for event in events:
        states = apply_queue_event(event, states)
    assert set(states) == {"a", "b"}
    for name, state in states.items():
        mine = [e for e in events if e.all_queues or e.queue == name]
        last_enable = next((e for e in reversed(mine) if e.kind in ("enable", "disable")), None)
        last_start = next((e for e in reversed(mine) if e.kind in ("start", "stop")), None)
        assert state.enabled == (last_enable is None or last_enable.kind == "enable")
        assert state.enable_reason == (None if last_enable is None else last_enable.reason)
        assert state.started == (last_start is None or last_start.kind == "start")
        assert state.stop_reason == (None if last_start is None else last_start.reason)
