"""Banks and users as CSV, flux-accounting's ``export-db`` / ``pop-db`` files.

``banks.csv``: ``Bank,ParentBank,Shares`` (flux-accounting's columns), then
fluxes's bank limits ``MaxRunningJobs,MaxActiveJobs,MaxNodes,MaxCores``.
``users.csv``: ``Username,UserID,Bank,Shares,MaxRunningJobs,MaxActiveJobs,MaxNodes,Queues``
(flux-accounting's), then ``MaxCores``. A header row is written and, when a
file has one, passed over; the columns after the required ones may be left out
or blank (a blank shares: 1; a blank limit: none for a bank, flux-accounting's default
for a user, 5 running and 7 active jobs; ``-1``: no limit, what export writes). A user's first
row names their default bank, as a user's first ``add-user`` does.

Reading gives the ``add-bank`` / ``add-user`` events the rows stand for, each
with its line number for the error message; the caller appends them all or none.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from fluxes.domain.accounting.banks import (
    DEFAULT_USER_LIMITS,
    AccountError,
    AccountEvent,
    Accounts,
    BankAdd,
    UserAdd,
    apply,
)

BANK_COLUMNS: Final = ("Bank", "ParentBank", "Shares", "MaxRunningJobs", "MaxActiveJobs",
                       "MaxNodes", "MaxCores")
USER_COLUMNS: Final = ("Username", "UserID", "Bank", "Shares", "MaxRunningJobs",
                       "MaxActiveJobs", "MaxNodes", "Queues", "MaxCores")
_BANK_LIMITS: Final = (("max_running_jobs", 3), ("max_active_jobs", 4), ("max_nodes", 5),
                       ("max_cores", 6))
_USER_LIMITS: Final = (("max_running_jobs", 4), ("max_active_jobs", 5), ("max_nodes", 6),
                       ("max_cores", 8))


def _limit(value: int | None, blank: str = "") -> str:
    return blank if value is None else str(value)


def _write(rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows(rows)
    return out.getvalue()


def export_banks(accounts: Accounts) -> str:
    """The active banks as CSV, root first then depth first (parents before children)."""
    root = accounts.root
    banks = accounts.subtree(root.name) if root is not None else []
    rows: list[Sequence[object]] = [BANK_COLUMNS]
    for bank in banks:
        rows.append([bank.name, bank.parent or "", bank.shares,
                     *(_limit(value) for _name, value in bank.limits.items())])
    return _write(rows)


def export_users(accounts: Accounts) -> str:
    """The active associations as CSV, by user; a user's default bank first."""
    rows: list[Sequence[object]] = [USER_COLUMNS]
    assocs = sorted((a for a in accounts.associations.values() if a.active),
                    key=lambda a: (a.username, accounts.default_banks.get(a.username) != a.bank,
                                   a.bank))
    for a in assocs:
        limits = dict(a.limits.items())
        # -1, not blank, for no limit: a blank is flux-accounting's default to pop-db
        rows.append([a.username, a.userid, a.bank, a.shares,
                     *(_limit(limits[name], "-1") for name, _i in _USER_LIMITS[:3]),
                     ",".join(a.queues),
                     _limit(limits["max_cores"], "-1")])
    return _write(rows)


def _rows(text: str, what: str, first: str) -> list[tuple[int, list[str]]]:
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise AccountError(f"{what}: not CSV ({exc})") from None
    out = []
    for number, row in enumerate(rows, 1):
        cells = [cell.strip() for cell in row]
        if not any(cells):
            continue  # a blank line
        if number == 1 and cells[0].lower() == first:
            continue  # the header
        out.append((number, cells))
    return out


def _int(text: str, where: str, what: str, default: int | None) -> int | None:
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise AccountError(f"{where}: {what}: expected an integer, got {text[:40]!r}") \
            from None


def _limits(cells: list[str], where: str, columns: Sequence[tuple[str, int]],
            defaults: Mapping[str, int] | None = None) -> dict[str, int | None]:
    out: dict[str, int | None] = dict(defaults or {})
    for name, index in columns:
        value = _int(cells[index] if index < len(cells) else "", where,
                     name.replace("_", "-"), None)
        if value is not None:
            out[name] = None if value == -1 else value
    return out


#: How many leading columns a row must have, by the word the message uses.
_REQUIRED = {"two": 2, "three": 3}


def _checked_rows(text: str, what: str, columns: Sequence[str], required: str
                  ) -> list[tuple[int, str, list[str]]]:
    """The data rows of a file whose header starts with ``columns[0]``: (line number,
    ``FILE line N``, cells); AccountError for a row with too few or too many cells."""
    out = []
    for number, cells in _rows(text, what, columns[0].lower()):
        where = f"{what} line {number}"
        if len(cells) < _REQUIRED[required] or len(cells) > len(columns):
            raise AccountError(f"{where}: expected {len(columns)} columns at most "
                               f"({','.join(columns)}), the first {required} required")
        out.append((number, where, cells))
    return out


def bank_events(text: str, what: str, timestamp: float) -> list[tuple[int, AccountEvent]]:
    """The ``add-bank`` events of a banks file, with their line numbers; AccountError
    naming the file and line of the first bad row."""
    out: list[tuple[int, AccountEvent]] = []
    for number, where, cells in _checked_rows(text, what, BANK_COLUMNS, "two"):
        shares = _int(cells[2] if len(cells) > 2 else "", where, "shares", 1)
        assert shares is not None
        out.append((number, BankAdd(timestamp=timestamp, bank=cells[0],
                                    parent=cells[1] or None, shares=shares,
                                    limits=_limits(cells, where, _BANK_LIMITS))))
    return out


def user_events(text: str, what: str, timestamp: float) -> list[tuple[int, AccountEvent]]:
    """The ``add-user`` events of a users file, with their line numbers; AccountError
    naming the file and line of the first bad row."""
    out: list[tuple[int, AccountEvent]] = []
    for number, where, cells in _checked_rows(text, what, USER_COLUMNS, "three"):
        userid = _int(cells[1], where, "userid", None)
        if userid is None:
            raise AccountError(f"{where}: userid is required")
        queues = [q.strip() for q in cells[7].split(",") if q.strip()] \
            if len(cells) > 7 else []
        shares = _int(cells[3] if len(cells) > 3 else "", where, "shares", 1)
        assert shares is not None
        out.append((number, UserAdd(timestamp=timestamp, username=cells[0], userid=userid,
                                    bank=cells[2], shares=shares,
                                    limits=_limits(cells, where, _USER_LIMITS,
                                                   DEFAULT_USER_LIMITS),
                                    queues=queues or None)))
    return out


def check_events(accounts: Accounts, events: Iterable[tuple[str, AccountEvent]]) -> Accounts:
    """The state after every event (each given with where it came from, ``FILE line N``);
    AccountError naming where the first that does not apply came from."""
    state = accounts
    for where, event in events:
        try:
            state = apply(event, state)
        except AccountError as exc:
            raise AccountError(f"{where}: {exc}") from None
    return state
