"""Tests for fluxes.domain.jm.priority: the plugin interface, flux's default plugin, urgency rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.jm.priority import (
    DEFAULT_URGENCY,
    MAX_PRIORITY,
    MAX_URGENCY,
    MIN_PRIORITY,
    MIN_URGENCY,
    URGENCY_EXPEDITE,
    URGENCY_HOLD,
    DefaultPriority,
    PriorityInput,
    PriorityPlugin,
    check_urgency_change,
    job_priority,
    needs_reprioritize_all,
    parse_urgency,
)
from fluxes.domain.job import model
from fluxes.errors import PolicyError


def job(urgency: int = DEFAULT_URGENCY, userid: int = 1000) -> PriorityInput:
    return PriorityInput(jobid=42, urgency=urgency, userid=userid, t_submit=100.0)


class Constant:
    """A plugin that ignores urgency (as a fair-share plugin mostly would)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def priority(self, job: PriorityInput) -> int:
        return self.value  # type: ignore[return-value]


class Drifting(Constant):
    def reprioritize_all(self) -> bool:
        return True


def test_constants_match_flux() -> None:
    assert (MIN_PRIORITY, MAX_PRIORITY) == (0, 2**32 - 1)
    assert (MIN_URGENCY, DEFAULT_URGENCY, MAX_URGENCY) == (0, 16, 31)
    assert (URGENCY_HOLD, URGENCY_EXPEDITE) == (0, 31)
    assert model.DEFAULT_URGENCY == DEFAULT_URGENCY


def test_default_plugin_maps_urgency_like_flux() -> None:
    plugin = DefaultPriority()
    assert isinstance(plugin, PriorityPlugin)
    assert job_priority(plugin, job(URGENCY_HOLD)) == 0
    assert job_priority(plugin, job(URGENCY_EXPEDITE)) == 4294967295
    assert job_priority(plugin, job(16)) == 16
    assert job_priority(plugin, job(1)) == 1
    assert job_priority(plugin, job(30)) == 30
    # The plugin alone copies urgency, like flux's priority-default.
    assert plugin.priority(job(31)) == 31


@given(st.integers(1, 30))
def test_default_priority_is_urgency(urgency: int) -> None:
    assert job_priority(DefaultPriority(), job(urgency)) == urgency


@given(st.integers(0, MAX_PRIORITY), st.integers(0, 31))
def test_hold_and_expedite_override_any_plugin(value: int, urgency: int) -> None:
    result = job_priority(Constant(value), job(urgency))
    if urgency == URGENCY_HOLD:
        assert result == MIN_PRIORITY
    elif urgency == URGENCY_EXPEDITE:
        assert result == MAX_PRIORITY
    else:
        assert result == value


def test_priority_order_follows_urgency() -> None:
    plugin = DefaultPriority()
    values = [job_priority(plugin, job(u)) for u in range(32)]
    assert values == sorted(values)
    assert len(set(values)) == 32


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "priority plugin returned -1, outside 0..4294967295"),
        (2**32, "priority plugin returned 4294967296, outside 0..4294967295"),
        (1.5, "priority plugin returned float, not an integer"),
        (True, "priority plugin returned bool, not an integer"),
        (None, "priority plugin returned NoneType, not an integer"),
    ],
)
def test_bad_plugin_results(value: object, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        job_priority(Constant(value), job(10))
    assert str(info.value) == message


@pytest.mark.parametrize("urgency", [-1, 32, 1000])
def test_job_priority_refuses_bad_urgency(urgency: int) -> None:
    with pytest.raises(PolicyError, match="urgency value is out of range"):
        job_priority(DefaultPriority(), job(urgency))


def test_reprioritize_all() -> None:
    assert not needs_reprioritize_all(DefaultPriority())
    assert not needs_reprioritize_all(Constant(1))  # method is optional
    assert needs_reprioritize_all(Drifting(1))
    assert isinstance(Constant(1), PriorityPlugin)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("16", 16), ("31", 31), ("007", 7), ("hold", 0), ("expedite", 31),
     ("default", 16), ("HOLD", 0)],
)
def test_parse_urgency(text: str, value: int) -> None:
    assert parse_urgency(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("32", "urgency value is out of range"), ("99999", "urgency value is out of range"),
     ("-1", "invalid urgency '-1'"), ("", "invalid urgency ''"), ("1.5", "invalid urgency"),
     ("١٢", "invalid urgency"), ("soon", "expected 0-31, hold, expedite or default")],
)
def test_parse_urgency_errors(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_urgency(text)
    with pytest.raises(PolicyError, match="must be a string"):
        parse_urgency(5)  # type: ignore[arg-type]


# -- urgency change permissions ----------------------------------------------------------

OWNER_UID = 0  # the instance owner
ALICE, BOB = 1000, 1001


@pytest.mark.parametrize("urgency", [0, 1, 15, 16])
def test_guest_may_lower_or_restore_default(urgency: int) -> None:
    check_urgency_change(urgency, ALICE, ALICE, False)


@pytest.mark.parametrize("urgency", [17, 30, 31])
def test_guest_may_not_raise_above_default(urgency: int) -> None:
    with pytest.raises(PolicyError) as info:
        check_urgency_change(urgency, ALICE, ALICE, False)
    assert str(info.value) == "guests can only adjust urgency <= default"


def test_guest_may_go_back_to_a_raised_urgency() -> None:
    # The owner raised the job to 20; its user may keep (or restore) it...
    check_urgency_change(20, ALICE, ALICE, False, current_urgency=20)
    # ...but not go beyond.
    with pytest.raises(PolicyError, match="<= default"):
        check_urgency_change(21, ALICE, ALICE, False, current_urgency=20)


def test_guest_may_not_touch_others_jobs() -> None:
    with pytest.raises(PolicyError) as info:
        check_urgency_change(1, BOB, ALICE, False)
    assert str(info.value) == "guests can only reprioritize their own jobs"


@pytest.mark.parametrize("urgency", [0, 16, 17, 31])
def test_instance_owner_may_do_anything(urgency: int) -> None:
    check_urgency_change(urgency, OWNER_UID, ALICE, True)
    check_urgency_change(urgency, ALICE, ALICE, True)


@pytest.mark.parametrize("urgency", [-1, 32])
def test_urgency_range(urgency: int) -> None:
    with pytest.raises(PolicyError) as info:
        check_urgency_change(urgency, OWNER_UID, ALICE, True)
    assert str(info.value) == "urgency value is out of range"


def test_urgency_type() -> None:
    with pytest.raises(PolicyError, match="urgency must be an integer, not bool"):
        check_urgency_change(True, ALICE, ALICE, False)


def test_no_change_once_allocated() -> None:
    with pytest.raises(PolicyError) as info:
        check_urgency_change(10, OWNER_UID, ALICE, True, has_resources=True)
    assert str(info.value) == "urgency cannot be changed once resources are allocated"


def test_checks_run_in_flux_order() -> None:
    # Range first, then ownership, then the guest ceiling, then allocation.
    with pytest.raises(PolicyError, match="out of range"):
        check_urgency_change(99, BOB, ALICE, False, has_resources=True)
    with pytest.raises(PolicyError, match="their own jobs"):
        check_urgency_change(31, BOB, ALICE, False, has_resources=True)
    with pytest.raises(PolicyError, match="<= default"):
        check_urgency_change(31, ALICE, ALICE, False, has_resources=True)


@given(st.integers(-5, 40), st.booleans(), st.booleans(), st.integers(0, 31))
def test_urgency_rules_property(new: int, own_job: bool, owner: bool, current: int) -> None:
    requester = ALICE if own_job else BOB
    allowed = (0 <= new <= 31 and (owner or (own_job and new <= max(16, current))))
    try:
        check_urgency_change(new, requester, ALICE, owner, current_urgency=current)
    except PolicyError:
        assert not allowed
    else:
        assert allowed
