"""The fair-share factor (Slurm's classic algorithm) against hand-computed tables."""

from __future__ import annotations

import pytest

from fluxes.domain.accounting.banks import (
    Accounts,
    BankAdd,
    UserAdd,
    UserDelete,
    replay,
)
from fluxes.domain.accounting.fairshare import FairShareTable, fair_share

T = 0.0


def docs_example() -> Accounts:
    """docs/accounting.md's tree: root -> physics (3: alice, bob), chemistry (1: carol)."""
    return replay([BankAdd(timestamp=T, bank="root", shares=1),
                   BankAdd(timestamp=T, bank="physics", parent="root", shares=3),
                   BankAdd(timestamp=T, bank="chemistry", parent="root", shares=1),
                   UserAdd(timestamp=T, username="alice", userid=1001, bank="physics"),
                   UserAdd(timestamp=T, username="bob", userid=1002, bank="physics"),
                   UserAdd(timestamp=T, username="carol", userid=1003, bank="chemistry")])


def rows(table: FairShareTable) -> dict[str, tuple[float, float, float, float]]:
    return {row.name: (row.norm_shares, row.norm_usage, row.effective_usage, row.factor)
            for row in table.rows}


def test_the_worked_example_of_docs_accounting() -> None:
    # usage in core-seconds; bank "" is the user's default bank
    table = fair_share(docs_example(), {(1001, ""): 600.0, (1002, "physics"): 150.0,
                                        (1003, ""): 250.0})
    # computed by hand in docs/accounting.md
    expected = {
        "physics": (0.75, 0.75, 0.75, 0.5),
        "chemistry": (0.25, 0.25, 0.25, 0.5),
        "alice": (0.375, 0.6, 0.675, 0.287175),
        "bob": (0.375, 0.15, 0.45, 0.435275),
        "carol": (0.25, 0.25, 0.25, 0.5),
    }
    got = rows(table)
    for name, values in expected.items():
        assert got[name] == pytest.approx(values, abs=1e-6), name
    assert table.total_usage == 1000.0
    assert table.factor(1001, None) == pytest.approx(0.287175, abs=1e-6)
    assert table.factor(1003, "chemistry") == pytest.approx(0.5)


def test_slurm_s_published_example() -> None:
    """The example of Slurm's classic fair-share page: accounts A (40: B 30, C 10) and
    D (60: E 25, F 35); user 1 in B, users 2 and 3 in C, user 4 in E, user 5 in F;
    usage 0.2, 0.25 and 0.25 of the machine (0.3 charged to nobody here)."""
    accounts = replay([BankAdd(timestamp=T, bank="root", shares=1),
                       BankAdd(timestamp=T, bank="A", parent="root", shares=40),
                       BankAdd(timestamp=T, bank="D", parent="root", shares=60),
                       BankAdd(timestamp=T, bank="B", parent="A", shares=30),
                       BankAdd(timestamp=T, bank="C", parent="A", shares=10),
                       BankAdd(timestamp=T, bank="E", parent="D", shares=25),
                       BankAdd(timestamp=T, bank="F", parent="D", shares=35)]
                      + [UserAdd(timestamp=T, username=f"u{n}", userid=n, bank=bank)
                         for n, bank in ((1, "B"), (2, "C"), (3, "C"), (4, "E"), (5, "F"))])
    table = fair_share(accounts, {(1, ""): 0.2, (2, ""): 0.25, (4, ""): 0.25, (99, ""): 0.3})
    got = rows(table)
    effective = {"B": 0.3875, "C": 0.3, "E": 0.25, "F": 0.1458,
                 "u1": 0.3875, "u2": 0.275, "u3": 0.15, "u4": 0.25, "u5": 0.1458}
    for name, value in effective.items():
        assert got[name][2] == pytest.approx(value, abs=1e-4), name
    factors = {"u1": 0.408479, "u2": 0.022097, "u3": 0.125, "u4": 0.5, "u5": 0.749154}
    for name, value in factors.items():
        assert got[name][3] == pytest.approx(value, abs=1e-6), name


def test_no_usage_gives_everyone_1_and_no_shares_gives_0() -> None:
    accounts = replay([BankAdd(timestamp=T, bank="root", shares=1),
                       UserAdd(timestamp=T, username="a", userid=1, bank="root"),
                       UserAdd(timestamp=T, username="z", userid=2, bank="root", shares=0)])
    table = fair_share(accounts, {})
    assert table.factor(1, None) == 1.0 and table.factor(2, None) == 0.0


def test_before_any_bank_fair_share_means_nothing() -> None:
    table = fair_share(Accounts(), {(1, ""): 50.0})
    assert not table.enabled and table.factor(1, None) == 1.0 and table.rows == ()


def test_unknown_users_get_0_once_banks_exist() -> None:
    table = fair_share(docs_example(), {})
    assert table.factor(4242, None) == 0.0 and table.factor(1001, "chemistry") == 0.0


def test_usage_of_a_deleted_association_still_counts_for_its_bank() -> None:
    accounts = replay([BankAdd(timestamp=T, bank="root", shares=1),
                       BankAdd(timestamp=T, bank="x", parent="root", shares=1),
                       BankAdd(timestamp=T, bank="y", parent="root", shares=1),
                       UserAdd(timestamp=T, username="a", userid=1, bank="x"),
                       UserAdd(timestamp=T, username="a", userid=1, bank="y"),
                       UserAdd(timestamp=T, username="b", userid=2, bank="x"),
                       UserDelete(timestamp=T, username="a", bank="x")])
    got = rows(fair_share(accounts, {(1, "x"): 100.0}))
    assert got["x"][1] == 1.0  # the bank used everything
    # and drags its one remaining member down: UE = 0 + (1 - 0) * 1/1, F = 2**(-1/0.5)
    assert got["b"][2:] == pytest.approx((1.0, 0.25))
