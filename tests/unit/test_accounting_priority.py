"""The multi-factor priority plugin, its configuration, and fair share converging to the
shares in a simulated saturated machine."""

from __future__ import annotations

import heapq
import math

import pytest

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import BankAdd, UserAdd, replay
from fluxes.domain.accounting.config import AccountingConfig, Weights
from fluxes.domain.accounting.fairshare import FairShareTable, fair_share
from fluxes.domain.accounting.priority import (
    FACTORS,
    JobFacts,
    MultiFactorPriority,
    ReprioritizeTimer,
    facts_from_info,
)
from fluxes.domain.accounting.usage import (
    Billing,
    JobCharge,
    UsageState,
    decayed_usage,
    window_usage,
)
from fluxes.domain.jm.priority import (
    MAX_PRIORITY,
    PriorityInput,
    PriorityPlugin,
    job_priority,
    needs_reprioritize_all,
)
from fluxes.errors import ConfigError
from tests.unit.test_accounting_fairshare import docs_example

DAY = 86400.0
NOW = 10 * DAY


def plugin(table: FairShareTable | None = None, weights: Weights | None = None,
           facts: JobFacts | None = None) -> MultiFactorPriority:
    return MultiFactorPriority(weights or Weights(), table, facts=lambda _j: facts,
                               clock=lambda: NOW, total_cores=64, total_nodes=4)


def test_it_is_a_priority_plugin_that_asks_for_periodic_recomputation() -> None:
    mf = plugin()
    assert isinstance(mf, PriorityPlugin) and needs_reprioritize_all(mf)


def test_the_worked_example_of_docs_accounting() -> None:
    table = fair_share(docs_example(), {(1001, ""): 600.0, (1002, "physics"): 150.0,
                                        (1003, ""): 250.0})
    mf = plugin(table, facts=JobFacts(None, ncores=4, nnodes=1))
    job = PriorityInput(1, 16, 1001, NOW - DAY)
    factors = mf.factors(job)
    assert factors == pytest.approx({"fairshare": 2 ** -1.8, "age": 1 / 7,
                                     "job_size": 0.25, "queue": 0.0, "urgency": 16 / 31})
    # job size: the larger of 4/64 cores and 1/4 nodes
    expected = round(100_000 * 2 ** -1.8 + 1000 / 7 + 250 + 1000 * 16 / 31)
    assert expected == 29_626  # 28717.46 + 142.86 + 250 + 516.13, as docs/accounting.md
    assert mf.priority(job) == expected
    shown = mf.breakdown(job)
    assert shown.computed == shown.priority == expected
    assert sum(shown.parts.values()) == pytest.approx(expected, abs=0.5)
    listed = shown.to_dict()["factors"]
    assert isinstance(listed, dict)
    assert set(listed) == {"fairshare", "age", "job_size", "queue", "urgency"}


def test_facts_come_from_the_submit_extras() -> None:
    assert facts_from_info({"bank": "chem", "ncores": 8, "nnodes": 2, "name": "x"}) == \
        JobFacts("chem", 8, 2)
    assert facts_from_info({"bank": "", "ncores": True}) == JobFacts(None, 1, 0)


def test_queue_age_and_size_factors() -> None:
    weights = Weights(queue_priority={"debug": 10, "batch": 1}, max_age=DAY, favor_small=True)
    mf = plugin(weights=weights, facts=JobFacts("x", ncores=64, nnodes=1))
    assert mf.factors(PriorityInput(1, 16, 1, NOW - 3 * DAY, "debug"))["queue"] == 1.0
    got = mf.factors(PriorityInput(1, 16, 1, NOW + 5, "batch"))
    assert got["queue"] == 0.1 and got["age"] == 0.0  # a clock behind the submit time
    assert mf.factors(PriorityInput(1, 16, 1, NOW - 3 * DAY, "other"))["age"] == 1.0
    assert got["job_size"] == 0.0  # the whole machine, with favor-small


def test_hold_and_expedite_stay_outside_and_nothing_else_looks_held() -> None:
    zero = Weights(fairshare=0, age=0, job_size=0, queue=0, urgency=0)
    mf = plugin(weights=zero)
    assert job_priority(mf, PriorityInput(1, 0, 1, NOW)) == 0
    assert job_priority(mf, PriorityInput(1, 31, 1, NOW)) == MAX_PRIORITY
    assert job_priority(mf, PriorityInput(1, 16, 1, NOW)) == 1  # not 0: that means held
    big = Weights(fairshare=2**29, age=2**29, job_size=2**29, queue=2**29, urgency=2**29)
    assert plugin(weights=big).priority(PriorityInput(1, 30, 1, 0)) < MAX_PRIORITY
    assert plugin(weights=big).breakdown(PriorityInput(1, 31, 1, 0)).priority == MAX_PRIORITY


def test_update_says_when_factors_changed() -> None:
    accounts = docs_example()
    mf = plugin()
    assert mf.update(fair_share(accounts, {(1001, ""): 5.0}))
    assert not mf.update(fair_share(accounts, {(1001, ""): 5.0}))
    assert mf.update(fair_share(accounts, {(1001, ""): 5.0, (1003, ""): 1.0}))


def test_accounting_configuration() -> None:
    config = InstanceConfig.from_toml("""
[accounting]
half-life = "60s"
priority-plugin = "multifactor"
reprioritize-interval = "10s"
reprioritize-min-interval = "2s"
[accounting.billing]
cores = 1.0
gpus = 10
[accounting.weights]
fairshare = 5
max-age = "1d"
favor-small = true
[accounting.queue-priority]
debug = 3
""").accounting
    assert config == AccountingConfig(
        half_life=60.0, priority_plugin="multifactor", reprioritize_interval=10.0,
        reprioritize_min_interval=2.0, billing=Billing(1.0, 10.0, 0.0),
        weights=Weights(fairshare=5, max_age=DAY, favor_small=True,
                        queue_priority={"debug": 3}))
    assert InstanceConfig.from_toml("").accounting == AccountingConfig()


@pytest.mark.parametrize(("text", "message"), [
    ("[accounting]\nhalf-lives = 1", "accounting.half-lives: unknown key"),
    ("[accounting]\nhalf-life = \"inf\"", "accounting.half-life: must be finite"),
    ("[accounting]\npriority-plugin = \"fair\"", "accounting.priority-plugin"),
    ("[accounting]\nreprioritize-interval = 0", "must be > 0"),
    ("[accounting]\nreprioritize-min-interval = \"-1s\"", "reprioritize-min-interval"),
    ("[accounting.billing]\nmemory = 1", "accounting.billing.memory: unknown key"),
    ("[accounting.billing]\ncores = -1", "accounting.billing.cores"),
    ("[accounting.weights]\nage = 1.5", "accounting.weights.age"),
    ("[accounting.weights]\nfavor-small = 1", "favor-small"),
    ("[accounting.queue-priority]\ndebug = \"high\"", "accounting.queue-priority.debug"),
    ("accounting = 3", "accounting: expected a table"),
])
def test_bad_accounting_configuration_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        InstanceConfig.from_toml(text)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- convergence


def simulate(shares: tuple[int, int], cores: int = 8, runtime: float = 10.0,
             seconds: float = 1200.0, half_life: float = 60.0) -> float:
    """Two users in two banks keep a machine of ``cores`` with one-core jobs saturated; the
    job started next is the one the plugin ranks first. The second user's part of the
    core-seconds allocated after a warm-up of a fifth of the run. (Jobs long next to the
    half-life shift the split towards the smaller share: a start commits a whole job.)"""
    accounts = replay([BankAdd(timestamp=0, bank="root", shares=1),
                       BankAdd(timestamp=0, bank="a", parent="root", shares=shares[0]),
                       BankAdd(timestamp=0, bank="b", parent="root", shares=shares[1]),
                       UserAdd(timestamp=0, username="ua", userid=1, bank="a"),
                       UserAdd(timestamp=0, username="ub", userid=2, bank="b")])
    now = 0.0
    mf = MultiFactorPriority(Weights(), facts=lambda _j: JobFacts(None, 1, 1),
                             clock=lambda: now, total_cores=cores, total_nodes=cores)
    usage = UsageState(half_life)
    charges: list[JobCharge] = []
    ends: list[tuple[float, int]] = []
    waiting = {1: (1, 0.0), 2: (2, 0.0)}  # each user's next job: (jobid, submitted)
    next_id = 3
    while now < seconds:
        while len(ends) < cores:
            table = fair_share(accounts, {k: f.billing(Billing()) for k, f in decayed_usage(
                usage.accums, usage.open.values(), half_life, now).items()})
            mf.update(table)
            ranked = sorted(waiting.items(), key=lambda kv: (
                -mf.priority(PriorityInput(kv[1][0], 16, kv[0], kv[1][1])), kv[1][0]))
            uid, (jobid, submitted) = ranked[0]
            usage.feed(jobid, "submit", submitted, {"userid": uid}, {"ncores": 1})
            usage.feed(jobid, "alloc", now, {}, {"ranks": "0"})
            heapq.heappush(ends, (now + runtime, jobid))
            waiting[uid] = (next_id, now)
            next_id += 1
        now, jobid = heapq.heappop(ends)
        usage.feed(jobid, "free", now, {}, {})
        usage.feed(jobid, "clean", now, {}, {})
        charges += usage.take_changes().charges
    used = window_usage(charges, [], seconds / 5, seconds, seconds)
    a, b = (sum(u.figures.core_seconds for (uid, _b), u in used.items() if uid == n)
            for n in (1, 2))
    return b / (a + b)


@pytest.mark.parametrize(("shares", "part"), [((1, 3), 0.75), ((1, 1), 0.5)])
def test_two_saturating_users_converge_to_their_shares(shares: tuple[int, int],
                                                       part: float) -> None:
    got = simulate(shares)
    assert math.isclose(got, part, abs_tol=0.10), got


def test_reprioritizing_follows_usage_changes_at_most_every_min_interval() -> None:
    timer = ReprioritizeTimer(interval=60.0, min_interval=5.0)
    assert timer.due(0.0)  # never done yet
    timer.done(0.0, ("10-0", None))
    assert not timer.should_look(4.0) and not timer.due(4.0, ("11-0", None))  # too soon
    assert timer.should_look(5.0)
    assert not timer.due(5.0, ("10-0", None))  # usage did not move
    assert timer.due(5.0, ("11-0", None))  # it moved: at once
    assert timer.due(5.0, ("10-0", "3-0"))  # in any partition
    timer.done(5.0, ("11-0", None))
    assert not timer.due(30.0, ("11-0", None)) and not timer.due(30.0)
    assert timer.due(65.0)  # the periodic one, moved or not
    quick = ReprioritizeTimer(interval=1.0, min_interval=5.0)
    quick.done(0.0, None)
    assert quick.should_look(1.0) and quick.due(1.0)  # the interval wins when shorter


def test_edit_factor_weights_reach_the_plugin_and_survive_later_events() -> None:
    from fluxes.domain.accounting.banks import FACTOR_NAMES, FactorEdit, UserEdit

    assert FACTOR_NAMES == FACTORS
    accounts = replay([BankAdd(timestamp=0, bank="root"),
                       UserAdd(timestamp=0, username="a", userid=1, bank="root"),
                       FactorEdit(timestamp=1, factor="urgency", weight=31),
                       FactorEdit(timestamp=2, factor="job-size", weight=0),
                       UserEdit(timestamp=3, username="a", shares=2)])
    assert accounts.weights == {"urgency": 31, "job_size": 0}
    plugin = MultiFactorPriority(Weights(), clock=lambda: 0.0)
    assert plugin.weights.urgency == 1000
    assert plugin.update(fair_share(accounts, {}))  # new weights: reprioritize
    assert (plugin.weights.urgency, plugin.weights.job_size, plugin.weights.fairshare) == \
        (31, 0, 100000)
    assert plugin.priority(PriorityInput(1, 31, 1, 0.0, None)) == 100000 + 31
    assert not plugin.update(fair_share(accounts, {}))
    assert plugin.update(fair_share(replay([BankAdd(timestamp=0, bank="root")]), {}))
    assert plugin.weights.urgency == 1000  # edits gone: the configuration's again
