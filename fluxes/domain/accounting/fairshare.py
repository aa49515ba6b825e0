"""The fair-share factor: Slurm's classic fair-share algorithm, down the bank tree.

We follow the algorithm Slurm documents as "Classic Fairshare"
(https://slurm.schedmd.com/classic_fair_share.html, selected in Slurm with
``PriorityFlags=NO_FAIR_TREE``), written from its description:

* **Normalized shares** ``S``: the product, from the association up to the
  root, of each node's shares over the shares of all its siblings (the
  sub-banks and associations of the same parent bank).
* **Normalized usage** ``U``: the node's decayed usage over the decayed usage
  of the whole instance (a bank's usage is everything charged to it and below).
* **Effective usage** ``UE``: ``U`` for a node directly under the root bank;
  below, ``UE = U + (UE_parent - U) * shares / shares_of_all_siblings``, so a
  bank that used more than its share drags its members down with it.
* **Factor** ``F = 2**(-UE/S)``: 1 with no usage, 0.5 for usage exactly equal
  to the share, towards 0 beyond; 0 for no shares.

We chose it over flux-accounting's weighted tree (Slurm's Fair Tree, which
ranks associations) because its factor is a closed formula a table can be
checked against by hand (docs/accounting.md has a worked example), and because
two users saturating a machine converge to usage in the ratio of their shares:
the one with the higher factor gets the next job, and the factors are equal
exactly when ``U1/S1 == U2/S2``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from fluxes.domain.accounting.banks import Accounts, Association, Bank
from fluxes.domain.accounting.usage import AssocKey

#: The factor of a job whose user has no association while banks exist (the
#: ingest refuses such jobs; this covers those submitted before the first bank).
UNKNOWN_FACTOR: Final = 0.0
#: The factor of every job before any bank exists: fair share then means nothing.
NO_BANKS_FACTOR: Final = 1.0


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One line of ``fluxes account share``: a bank or an association."""

    #: "bank" or "user"
    kind: str
    #: the bank name (bank rows) or the user name (user rows)
    name: str
    #: the parent bank (bank rows; "" for the root) or the association's bank
    bank: str
    depth: int
    raw_shares: int
    norm_shares: float
    #: decayed usage, in billing units (core-seconds with the default weights)
    raw_usage: float
    norm_usage: float
    effective_usage: float
    factor: float
    userid: int | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (``--json``)."""
        return {"kind": self.kind, "name": self.name, "bank": self.bank, "depth": self.depth,
                "shares": self.raw_shares, "norm_shares": self.norm_shares,
                "usage": self.raw_usage, "norm_usage": self.norm_usage,
                "effective_usage": self.effective_usage, "fairshare": self.factor,
                "userid": self.userid}


@dataclass(frozen=True, slots=True)
class FairShareTable:
    """Every association's factor, and the tree it came from."""

    rows: tuple[ShareRow, ...] = ()
    factors: Mapping[AssocKey, float] = field(default_factory=dict)
    #: uid -> default bank, for jobs that name none
    default_banks: Mapping[int, str] = field(default_factory=dict)
    #: False before any bank exists
    enabled: bool = False
    #: decayed usage of the whole instance, in billing units
    total_usage: float = 0.0
    #: factor -> weight set by ``fluxes account edit-factor`` (over the configuration's)
    weights: Mapping[str, int] = field(default_factory=dict)
    #: queue -> priority set by ``fluxes account add-queue`` (over the configuration's)
    queue_priority: Mapping[str, int] = field(default_factory=dict)

    def factor(self, userid: int, bank: str | None) -> float:
        """The factor of a job of ``userid`` charged to ``bank`` (None or "": the default)."""
        if not self.enabled:
            return NO_BANKS_FACTOR
        name = bank or self.default_banks.get(userid)
        if name is None:
            return UNKNOWN_FACTOR
        return self.factors.get((userid, name), UNKNOWN_FACTOR)


def fair_share(accounts: Accounts, usage: Mapping[AssocKey, float]) -> FairShareTable:
    """The fair-share table of ``accounts`` given each association's decayed usage
    (``usage``: (uid, bank) -> billing units; bank "" is the user's default bank)."""
    root = accounts.root
    if root is None:
        return FairShareTable(weights=dict(accounts.weights),
                              queue_priority=dict(accounts.queues))
    defaults = {a.userid: accounts.default_banks[a.username]
                for a in accounts.associations.values()
                if a.active and a.username in accounts.default_banks}
    by_assoc: dict[tuple[str, str], float] = {}
    # usage charged to a bank whose association is gone still counts for the bank
    by_bank: dict[str, float] = {}
    total = 0.0
    for (userid, bank), amount in usage.items():
        total += amount
        name = bank or defaults.get(userid)
        if name is None:
            continue
        assoc = accounts.resolve(userid, name)
        if assoc is not None:
            key = (assoc.username, assoc.bank)
            by_assoc[key] = by_assoc.get(key, 0.0) + amount
        elif name in accounts.banks and accounts.banks[name].active:
            by_bank[name] = by_bank.get(name, 0.0) + amount
    bank_usage: dict[str, float] = {}

    def used(bank: Bank) -> float:
        amount = by_bank.get(bank.name, 0.0)
        amount += sum(by_assoc.get((a.username, a.bank), 0.0)
                      for a in accounts.members(bank.name))
        amount += sum(used(b) for b in accounts.sub_banks(bank.name))
        bank_usage[bank.name] = amount
        return amount

    used(root)
    rows: list[ShareRow] = []
    factors: dict[AssocKey, float] = {}

    def norm(amount: float) -> float:
        return amount / total if total > 0 else 0.0

    root_row = ShareRow("bank", root.name, "", 0, root.shares, 1.0, bank_usage[root.name],
                        norm(bank_usage[root.name]), norm(bank_usage[root.name]), 1.0)
    rows.append(root_row)

    def walk(bank: Bank, row: ShareRow) -> None:
        members = accounts.members(bank.name)
        subs = accounts.sub_banks(bank.name)
        siblings = sum(a.shares for a in members) + sum(b.shares for b in subs)
        first_tier = bank.parent is None

        def child(shares: int, amount: float) -> tuple[float, float, float, float]:
            part = shares / siblings if siblings else 0.0
            norm_shares = row.norm_shares * part
            norm_usage = norm(amount)
            effective = norm_usage if first_tier else \
                norm_usage + (row.effective_usage - norm_usage) * part
            factor = math.exp2(-effective / norm_shares) if norm_shares > 0 else 0.0
            return norm_shares, norm_usage, effective, factor

        for assoc in members:
            amount = by_assoc.get((assoc.username, assoc.bank), 0.0)
            s, u, e, f = child(assoc.shares, amount)
            rows.append(ShareRow("user", assoc.username, bank.name, row.depth + 1,
                                 assoc.shares, s, amount, u, e, f, assoc.userid))
            factors[(assoc.userid, assoc.bank)] = f
        for sub in subs:
            amount = bank_usage[sub.name]
            s, u, e, f = child(sub.shares, amount)
            sub_row = ShareRow("bank", sub.name, bank.name, row.depth + 1, sub.shares, s,
                               amount, u, e, f)
            rows.append(sub_row)
            walk(sub, sub_row)

    walk(root, root_row)
    return FairShareTable(tuple(rows), factors, defaults, True, total, dict(accounts.weights),
                          dict(accounts.queues))


def association_row(table: FairShareTable, assoc: Association) -> ShareRow | None:
    """The table's row of ``assoc`` (None when it is not in the tree)."""
    for row in table.rows:
        if row.kind == "user" and row.name == assoc.username and row.bank == assoc.bank:
            return row
    return None
