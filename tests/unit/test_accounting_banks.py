"""Banks and associations: the admin events, their fold, and their replay."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxes.domain.accounting.banks import (
    AccountError,
    AccountEvent,
    Accounts,
    BankAdd,
    BankDelete,
    BankEdit,
    Limits,
    UserAdd,
    UserDelete,
    UserEdit,
    apply,
    event_from_dict,
    replay,
)

T = 1000.0


def build(*events: AccountEvent) -> Accounts:
    state = Accounts()
    for event in events:
        state = apply(event, state)
    return state


def tree() -> Accounts:
    """root(1) -> physics(3) -> theory(1); root -> chem(1); alice in physics and chem."""
    return build(BankAdd(timestamp=T, bank="root", shares=1),
                 BankAdd(timestamp=T, bank="physics", parent="root", shares=3),
                 BankAdd(timestamp=T, bank="chem", parent="root", shares=1),
                 BankAdd(timestamp=T, bank="theory", parent="physics", shares=1),
                 UserAdd(timestamp=T, username="alice", userid=1001, bank="physics"),
                 UserAdd(timestamp=T, username="alice", userid=1001, bank="chem", shares=2),
                 UserAdd(timestamp=T, username="bob", userid=1002, bank="theory",
                         limits={"max_running_jobs": 4}))


def test_the_first_bank_is_the_root_and_there_is_one() -> None:
    state = build(BankAdd(timestamp=T, bank="root", shares=1))
    assert state.root is not None and state.root.name == "root" and state.enabled
    with pytest.raises(AccountError, match="root bank already: give --parent-bank"):
        apply(BankAdd(timestamp=T, bank="other", shares=1), state)
    with pytest.raises(AccountError, match="no bank 'nope'"):
        apply(BankAdd(timestamp=T, bank="b", parent="nope", shares=1), state)
    assert not Accounts().enabled


def test_bad_names_and_counts_are_refused_with_one_line() -> None:
    state = build(BankAdd(timestamp=T, bank="root", shares=1))
    for event in (BankAdd(timestamp=T, bank="-x", parent="root", shares=1),
                  BankAdd(timestamp=T, bank="a b", parent="root", shares=1),
                  BankAdd(timestamp=T, bank="ok", parent="root", shares=-1),
                  UserAdd(timestamp=T, username="a/b", userid=1, bank="root"),
                  UserAdd(timestamp=T, username="a", userid=-1, bank="root"),
                  BankEdit(timestamp=T, bank="root", limits={"max_nodes": -2}),
                  BankEdit(timestamp=T, bank="root", limits={"max_gpus": 1})):
        with pytest.raises(AccountError) as info:
            apply(event, state)
        assert "\n" not in str(info.value)


def test_users_default_to_their_first_bank_and_may_change_it() -> None:
    state = tree()
    assert state.default_banks == {"alice": "physics", "bob": "theory"}
    assert state.resolve(1001, None) == state.association("alice", "physics")
    assert state.resolve(1001, "chem") == state.association("alice", "chem")
    assert state.resolve(1001, "theory") is None and state.resolve(9, None) is None
    state = apply(UserEdit(timestamp=T, username="alice", default_bank="chem"), state)
    assert state.default_banks["alice"] == "chem"
    with pytest.raises(AccountError, match="user alice is not in bank theory"):
        apply(UserEdit(timestamp=T, username="alice", default_bank="theory"), state)


def test_edit_user_changes_one_association_or_all_of_them() -> None:
    state = apply(UserEdit(timestamp=T, username="alice", shares=5,
                           limits={"max_cores": 8}), tree())
    assert {a.shares for a in state.user_associations("alice")} == {5}
    assert all(a.limits.max_cores == 8 for a in state.user_associations("alice"))
    state = apply(UserEdit(timestamp=T, username="alice", bank="chem", shares=1,
                           limits={"max_cores": None}), state)
    assert state.association("alice", "chem").shares == 1
    assert state.association("alice", "chem").limits == Limits()
    assert state.association("alice", "physics").limits == Limits(max_cores=8)


def test_a_uid_belongs_to_one_user() -> None:
    state = tree()
    with pytest.raises(AccountError, match="uid 1001 is user alice's"):
        apply(UserAdd(timestamp=T, username="carol", userid=1001, bank="chem"), state)
    with pytest.raises(AccountError, match="user alice has uid 1001, not 7"):
        apply(UserAdd(timestamp=T, username="alice", userid=7, bank="theory"), state)
    state = apply(UserEdit(timestamp=T, username="alice", userid=7), state)
    assert {a.userid for a in state.user_associations("alice")} == {7}
    assert state.username_of(7) == "alice" and state.username_of(1001) is None


def test_duplicates_are_refused_and_a_deleted_association_comes_back() -> None:
    state = tree()
    with pytest.raises(AccountError, match="in bank chem already"):
        apply(UserAdd(timestamp=T, username="alice", userid=1001, bank="chem"), state)
    with pytest.raises(AccountError, match="bank chem already exists"):
        apply(BankAdd(timestamp=T, bank="chem", parent="root", shares=1), state)
    state = apply(UserDelete(timestamp=T, username="alice", bank="physics"), state)
    # the default moves to the user's remaining bank
    assert state.default_banks["alice"] == "chem"
    assert not state.associations[("alice", "physics")].active
    state = apply(UserAdd(timestamp=T, username="alice", userid=1001, bank="physics",
                          shares=9), state)
    assert state.association("alice", "physics").shares == 9


def test_delete_bank_deactivates_its_subtree_and_their_users() -> None:
    state = apply(BankDelete(timestamp=T, bank="physics"), tree())
    assert {b.name for b in state.banks.values() if not b.active} == {"physics", "theory"}
    assert not state.associations[("bob", "theory")].active
    assert state.default_banks == {"alice": "chem"}  # bob has no bank left
    with pytest.raises(AccountError, match="no bank 'theory'"):
        apply(UserAdd(timestamp=T, username="bob", userid=1002, bank="theory"), state)


def test_edit_bank_moves_a_bank_but_never_under_itself() -> None:
    state = tree()
    with pytest.raises(AccountError, match="theory is below physics"):
        apply(BankEdit(timestamp=T, bank="physics", parent="theory"), state)
    with pytest.raises(AccountError, match="root bank: it has no parent"):
        apply(BankEdit(timestamp=T, bank="root", parent="chem"), state)
    state = apply(BankEdit(timestamp=T, bank="theory", parent="chem", shares=7), state)
    assert state.path("theory") == ["root", "chem", "theory"]
    assert state.banks["theory"].shares == 7


def test_apply_leaves_the_old_state_alone() -> None:
    state = tree()
    before = (dict(state.banks), dict(state.associations), dict(state.default_banks))
    apply(BankDelete(timestamp=T, bank="root"), state)
    with pytest.raises(AccountError):
        apply(UserDelete(timestamp=T, username="zed", bank="root"), state)
    assert (dict(state.banks), dict(state.associations), dict(state.default_banks)) == before


def test_every_event_survives_its_json_form() -> None:
    events: list[AccountEvent] = [
        BankAdd(timestamp=T, bank="root", shares=1, limits={"max_nodes": 4}),
        BankEdit(timestamp=T, bank="root", shares=2, limits={"max_nodes": None}),
        BankDelete(timestamp=T, bank="x"),
        UserAdd(timestamp=T, username="u", userid=5, bank="root", shares=3),
        UserEdit(timestamp=T, username="u", default_bank="root"),
        UserDelete(timestamp=T, username="u", bank="root")]
    for event in events:
        assert event_from_dict(orjson.loads(orjson.dumps(event.to_dict()))) == event


@pytest.mark.parametrize("obj", [
    [], {"kind": "grow-bank", "timestamp": T}, {"kind": "delete-bank", "bank": "x"},
    {"kind": "delete-bank", "timestamp": T, "bank": "x", "extra": 1},
    {"kind": "delete-bank", "timestamp": -1, "bank": "x"},
    {"kind": "delete-bank", "timestamp": T},
    {"kind": "add-user", "timestamp": T, "username": "u", "userid": "5", "bank": "b"},
])
def test_malformed_events_are_refused(obj: object) -> None:
    with pytest.raises(AccountError):
        event_from_dict(obj)


def test_replay_passes_over_refused_events_and_says_which() -> None:
    refused: list[str] = []
    state = replay([BankAdd(timestamp=T, bank="root", shares=1),
                    UserAdd(timestamp=T, username="u", userid=5, bank="nope"),
                    UserAdd(timestamp=T, username="u", userid=5, bank="root")],
                   on_refused=lambda event, exc: refused.append(str(exc)))
    assert refused == ["no bank 'nope'"]
    assert state.association("u", "root").userid == 5


_names = st.sampled_from(["root", "a", "b", "c"])
_users = st.sampled_from(["u", "v"])
_limits = st.dictionaries(st.sampled_from(["max_running_jobs", "max_nodes"]),
                          st.one_of(st.none(), st.integers(0, 5)), max_size=2)
_events = st.one_of(
    st.builds(BankAdd, timestamp=st.just(T), bank=_names,
              parent=st.one_of(st.none(), _names), shares=st.integers(0, 5), limits=_limits),
    st.builds(BankEdit, timestamp=st.just(T), bank=_names,
              parent=st.one_of(st.none(), _names), shares=st.one_of(st.none(),
                                                                    st.integers(0, 5))),
    st.builds(BankDelete, timestamp=st.just(T), bank=_names),
    st.builds(UserAdd, timestamp=st.just(T), username=_users, userid=st.sampled_from([1, 2]),
              bank=_names, shares=st.integers(0, 3), limits=_limits),
    st.builds(UserEdit, timestamp=st.just(T), username=_users,
              bank=st.one_of(st.none(), _names), default_bank=st.one_of(st.none(), _names),
              shares=st.one_of(st.none(), st.integers(0, 3))),
    st.builds(UserDelete, timestamp=st.just(T), username=_users, bank=_names))


@settings(max_examples=150, deadline=None)
@given(st.lists(_events, max_size=30), st.integers(0, 30))
def test_the_stream_replays_to_the_same_state_in_any_pieces(events: list[AccountEvent],
                                                            cut: int) -> None:
    whole = replay(events)
    stored = [event_from_dict(orjson.loads(orjson.dumps(e.to_dict()))) for e in events]
    assert replay(stored[cut:], replay(stored[:cut])) == whole
    # what every state holds: one root at most, defaults among active associations,
    # active associations only in active banks
    assert sum(1 for b in whole.banks.values() if b.parent is None and b.active) <= 1
    for user, bank in whole.default_banks.items():
        assert whole.associations[(user, bank)].active
    for assoc in whole.associations.values():
        if assoc.active:
            assert whole.banks[assoc.bank].active
    for node in whole.banks.values():
        if node.active and node.parent is not None:
            assert whole.banks[node.parent].active
