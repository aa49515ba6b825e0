"""Banks and associations: the admin events and their fold (``apply(event, accounts)``).

A *bank* (Slurm's account) sits in a tree under the one root bank, the bank
added without a parent, and holds *shares* of its parent. An *association*
is a (user, bank) pair: the user may charge jobs to the bank, with shares of
the bank and limits of its own. Each user has a *default bank*, the first
bank they were added to unless changed, which jobs submitted without
``--bank`` are charged to.

Every change is an event (``add-bank``, ``edit-bank``, ``delete-bank``,
``add-user``, ``edit-user``, ``delete-user``, ``edit-factor``, ``clear-usage``,
``add-queue``, ``edit-queue``, ``delete-queue``, ``add-project``,
``delete-project``, flux-accounting's command names) kept in the instance's admin
stream; :func:`apply` is the transition, a pure function that returns new
:class:`Accounts` or raises :class:`AccountError` (leaving the old state
untouched), so the stream replays (:func:`replay`) to the same state everywhere.
Deleting marks banks
and associations inactive, as flux-accounting does: usage stays attributed,
and adding them again reactivates them.

Why one module: the events, the state and the fold are one transition system; each
event's check and its transition are read together, and the state's invariants
(one root, a default bank among the active ones) hold across all of them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Final, NamedTuple

from fluxes.domain.accounting.config import MAX_WEIGHT
from fluxes.domain.accounting.queuelimits import (
    NO_QUEUE_LIMITS,
    QueueLimits,
    check_queue_limit_changes,
)
from fluxes.errors import PolicyError
from fluxes.formats.shown import shown as _show

#: Bank names: what a command line, a key field and ``user/bank`` can carry.
BANK_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
#: User names, as ``fluxes admin adduser`` accepts them.
USER_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: Largest uid (2**32 - 1 is "no uid" to the kernel).
MAX_UID: Final = 2**32 - 2
#: Largest number of shares or limit (keeps sums exact in a float).
MAX_COUNT: Final = 2**31 - 1
#: The limit names, as the options spell them (``--max-running-jobs``...).
LIMIT_NAMES: Final = ("max_running_jobs", "max_active_jobs", "max_nodes", "max_cores")
#: What ``add-user`` (and ``pop-db``'s blank columns) give a new association, as
#: flux-accounting does; ``-1`` on the command line is no limit.
DEFAULT_USER_LIMITS: Final = {"max_running_jobs": 5, "max_active_jobs": 7}
#: The project every association has (flux-accounting's ``*``).
ANY_PROJECT: Final = "*"
#: The multi-factor priority factors whose weight ``edit-factor`` sets.
FACTOR_NAMES: Final = ("fairshare", "age", "job_size", "queue", "urgency")

class AccountError(PolicyError):
    """An accounting change that cannot be made (unknown bank, duplicate user...)."""


def check_bank_name(name: object) -> str:
    """``name`` if it can name a bank; AccountError if not."""
    if not isinstance(name, str) or not BANK_NAME.fullmatch(name):
        raise AccountError(f"bad bank name {_show(name)}: use letters, digits, '_', '.', "
                           "'+', '-' (at most 64, not starting with '.', '+' or '-')")
    return name


def check_user_name(name: object) -> str:
    """``name`` if it can name a user; AccountError if not."""
    if not isinstance(name, str) or not USER_NAME.fullmatch(name):
        raise AccountError(f"bad user name {_show(name)}: use letters, digits, '_', '.', "
                           "'-' (at most 64, not starting with '.' or '-')")
    return name


def check_count(value: object, what: str) -> int:
    """``value`` if it is an integer 0..MAX_COUNT (shares, a limit); AccountError if not."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise AccountError(f"{what}: expected an integer 0-{MAX_COUNT}, got {_show(value)}")
    return value


def check_uid(value: object) -> int:
    """``value`` if it is a valid uid; AccountError if not."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UID:
        raise AccountError(f"userid: expected an integer 0-{MAX_UID}, got {_show(value)}")
    return value


def check_queue_name(name: object) -> str:
    """``name`` if it can name a queue (as a bank name); AccountError if not."""
    if not isinstance(name, str) or not BANK_NAME.fullmatch(name):
        raise AccountError(f"bad queue name {_show(name)}: use letters, digits, '_', '.', "
                           "'+', '-' (at most 64, not starting with '.', '+' or '-')")
    return name


def check_project_name(name: object) -> str:
    """``name`` if it can name a project (``*`` or as a bank name); AccountError if not."""
    if name != ANY_PROJECT and (not isinstance(name, str) or not BANK_NAME.fullmatch(name)):
        raise AccountError(f"bad project name {_show(name)}: use letters, digits, '_', '.', "
                           "'+', '-' (at most 64, not starting with '.', '+' or '-')")
    assert isinstance(name, str)
    return name


def check_factor(name: object) -> str:
    """``name`` if it names a priority factor (``job-size`` for ``job_size`` too);
    AccountError if not."""
    text = name.replace("-", "_") if isinstance(name, str) else name
    if text not in FACTOR_NAMES:
        raise AccountError(f"unknown priority factor {_show(name)} "
                           f"(known: {', '.join(FACTOR_NAMES)})")
    assert isinstance(text, str)
    return text


def check_weight(value: object) -> int:
    """``value`` if it is a factor's weight 0..MAX_WEIGHT; AccountError if not."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WEIGHT:
        raise AccountError(f"weight: expected an integer 0-{MAX_WEIGHT}, got {_show(value)}")
    return value


def _cleared_usage(value: object) -> dict[tuple[int, str], tuple[float, float, float]]:
    """``clear-usage``'s usage: ``uid:bank`` -> three numbers >= 0; AccountError if not."""
    if not isinstance(value, Mapping):
        raise AccountError(f"usage: expected an object, got {_show(value)}")
    out = {}
    for key, figures in value.items():
        uid, sep, bank = str(key).partition(":")
        if not sep or not uid.isdigit() or (bank and not BANK_NAME.fullmatch(bank)):
            raise AccountError(f"usage: bad association {_show(key)} (want UID:BANK)")
        if not isinstance(figures, list | tuple) or len(figures) != 3:
            raise AccountError(f"usage: expected three numbers for {key}, got "
                               f"{_show(figures)}")
        core, gpu, node = (_check_time(f) for f in figures)
        out[(check_uid(int(uid)), bank)] = (core, gpu, node)
    return out


def _check_time(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AccountError(f"timestamp: expected a number, got {_show(value)}")
    try:
        ok = math.isfinite(value) and value >= 0
    except OverflowError:
        ok = False
    if not ok:
        raise AccountError(f"timestamp: expected a finite number >= 0, got {_show(value)}")
    return float(value)


# ---------------------------------------------------------------- limits


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on what an association or a bank (with everything below it) may hold.

    None is "no limit" (flux-accounting's ``-1`` on the command line).
    """

    max_running_jobs: int | None = None
    max_active_jobs: int | None = None
    max_nodes: int | None = None
    max_cores: int | None = None

    def changed(self, changes: Mapping[str, int | None]) -> Limits:
        """These limits with ``changes`` (name -> value, None: no limit) applied."""
        if not changes:
            return self
        return replace(self, **check_limit_changes(changes))

    def to_dict(self) -> dict[str, int]:
        """The limits that are set, by name."""
        return {name: value for name in LIMIT_NAMES
                if (value := getattr(self, name)) is not None}

    def items(self) -> Iterator[tuple[str, int | None]]:
        """(name, value) of every limit, unset ones as None."""
        for name in LIMIT_NAMES:
            yield name, getattr(self, name)


NO_LIMITS: Final = Limits()


def check_limit_changes(changes: object) -> dict[str, int | None]:
    """``changes`` as a dict of limit name -> count or None; AccountError if malformed."""
    if not isinstance(changes, Mapping):
        raise AccountError(f"limits: expected an object, got {_show(changes)}")
    out: dict[str, int | None] = {}
    for name, value in changes.items():
        if name not in LIMIT_NAMES:
            raise AccountError(f"limits: unknown limit {_show(name)} "
                               f"(known: {', '.join(LIMIT_NAMES)})")
        out[name] = None if value is None else check_count(value, name.replace("_", "-"))
    return out


# ---------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Bank:
    """A bank: its parent (None for the root), its shares of the parent, its limits."""

    name: str
    parent: str | None
    shares: int
    limits: Limits = NO_LIMITS
    active: bool = True


@dataclass(frozen=True, slots=True)
class Association:
    """A user's membership of a bank: shares of the bank, limits, the user's uid."""

    username: str
    userid: int
    bank: str
    shares: int = 1
    limits: Limits = NO_LIMITS
    active: bool = True
    #: the queues its jobs may use (``--queues``; empty: every queue)
    queues: tuple[str, ...] = ()
    #: its projects (``--projects``), the first its default; ``*`` is always one
    projects: tuple[str, ...] = ()

    @property
    def default_project(self) -> str:
        """The project a job that names none is charged to (flux-accounting's)."""
        return self.projects[0] if self.projects else ANY_PROJECT

    @property
    def label(self) -> str:
        """``user/bank``, as limit messages name it."""
        return f"{self.username}/{self.bank}"


class Cleared(NamedTuple):
    """One association's usage as ``clear-usage`` found it (decayed as of ``at``)."""

    at: float
    half_life: float
    figures: tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class Accounts:
    """Every bank and association (inactive ones too) and each user's default bank."""

    banks: Mapping[str, Bank] = field(default_factory=dict)
    associations: Mapping[tuple[str, str], Association] = field(default_factory=dict)
    #: username -> default bank (always one of the user's active associations)
    default_banks: Mapping[str, str] = field(default_factory=dict)
    #: factor -> weight set by ``edit-factor``: over ``[accounting.weights]``
    weights: Mapping[str, int] = field(default_factory=dict)
    #: queue -> its ``add-queue --priority`` (active queues only; over
    #: ``[accounting.queue-priority]``)
    queues: Mapping[str, int] = field(default_factory=dict)
    #: the projects added with ``add-project`` (``*`` is always one)
    projects: frozenset[str] = frozenset()
    #: (uid, bank) -> the latest ``clear-usage`` of it: (time, half-life, its decayed
    #: core-, gpu- and node-seconds then), what fair share no longer counts
    cleared: Mapping[tuple[int, str], Cleared] = field(default_factory=dict)
    #: queue -> its ``add-queue``/``edit-queue`` limits (active queues only)
    queue_limits: Mapping[str, QueueLimits] = field(default_factory=dict)
    #: uid -> user name, built on first use (the plugin asks once per job)
    _names: dict[int, str] | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------ queries

    @property
    def root(self) -> Bank | None:
        """The active root bank (None before the first ``add-bank``)."""
        for bank in self.banks.values():
            if bank.parent is None and bank.active:
                return bank
        return None

    @property
    def enabled(self) -> bool:
        """True once a bank exists: jobs then need an association to be submitted."""
        return self.root is not None

    def bank(self, name: str) -> Bank:
        """The active bank ``name``; AccountError if there is none."""
        bank = self.banks.get(name)
        if bank is None or not bank.active:
            raise AccountError(f"no bank {name!r}")
        return bank

    def sub_banks(self, name: str) -> list[Bank]:
        """The active banks whose parent is ``name``, by name."""
        return sorted((b for b in self.banks.values() if b.parent == name and b.active),
                      key=lambda b: b.name)

    def members(self, name: str) -> list[Association]:
        """The active associations of bank ``name``, by user name."""
        return sorted((a for a in self.associations.values() if a.bank == name and a.active),
                      key=lambda a: a.username)

    def subtree(self, name: str) -> list[Bank]:
        """Bank ``name`` and every active bank below it, depth first."""
        out = [self.bank(name)]
        for child in self.sub_banks(name):
            out += self.subtree(child.name)
        return out

    def path(self, name: str) -> list[str]:
        """The banks from the root down to ``name`` (inclusive)."""
        out: list[str] = []
        current: str | None = name
        while current is not None and len(out) <= len(self.banks):
            out.append(current)
            current = self.banks[current].parent
        return out[::-1]

    def user_associations(self, username: str) -> list[Association]:
        """The user's active associations, by bank name."""
        return sorted((a for a in self.associations.values()
                       if a.username == username and a.active), key=lambda a: a.bank)

    def association(self, username: str, bank: str) -> Association:
        """The active association (username, bank); AccountError if there is none."""
        assoc = self.associations.get((username, bank))
        if assoc is None or not assoc.active:
            raise AccountError(f"user {username} is not in bank {bank}")
        return assoc

    def username_of(self, userid: int) -> str | None:
        """The user name associations give ``userid`` (None: no association names it)."""
        names = self._names
        if names is None:
            names = {a.userid: a.username for a in self.associations.values()}
            object.__setattr__(self, "_names", names)  # a cache: the state stays the same
        return names.get(userid)

    def resolve(self, userid: int, bank: str | None) -> Association | None:
        """The active association a job of ``userid`` charges: ``bank``, or the user's
        default bank when ``bank`` is None or empty (None: the user has none there)."""
        username = self.username_of(userid)
        if username is None:
            return None
        name = bank or self.default_banks.get(username)
        if name is None:
            return None
        assoc = self.associations.get((username, name))
        return assoc if assoc is not None and assoc.active else None


# ---------------------------------------------------------------- events


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountEvent:
    """Base of every admin event: a kind and a timestamp."""

    kind: ClassVar[str] = ""
    timestamp: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (:func:`event_from_dict` reads it back)."""
        out: dict[str, Any] = {"kind": self.kind, "timestamp": self.timestamp}
        out.update(self._fields())
        return out

    def _fields(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class BankAdd(AccountEvent):
    """``add-bank [--parent-bank=P] BANK SHARES``."""

    kind: ClassVar[str] = "add-bank"
    bank: str
    parent: str | None = None
    shares: int = 1
    limits: Mapping[str, int | None] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        return {"bank": self.bank, "parent": self.parent, "shares": self.shares,
                "limits": dict(self.limits)}


@dataclass(frozen=True, slots=True, kw_only=True)
class BankEdit(AccountEvent):
    """``edit-bank BANK [--shares=N] [--parent-bank=P] [limits]``."""

    kind: ClassVar[str] = "edit-bank"
    bank: str
    shares: int | None = None
    parent: str | None = None
    limits: Mapping[str, int | None] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        return {"bank": self.bank, "shares": self.shares, "parent": self.parent,
                "limits": dict(self.limits)}


@dataclass(frozen=True, slots=True, kw_only=True)
class BankDelete(AccountEvent):
    """``delete-bank BANK``: the bank, its sub-banks and their associations go inactive."""

    kind: ClassVar[str] = "delete-bank"
    bank: str

    def _fields(self) -> dict[str, Any]:
        return {"bank": self.bank}


@dataclass(frozen=True, slots=True, kw_only=True)
class UserAdd(AccountEvent):
    """``add-user --username=U --bank=B [--userid] [--shares=N] [limits]``."""

    kind: ClassVar[str] = "add-user"
    username: str
    userid: int
    bank: str
    shares: int = 1
    limits: Mapping[str, int | None] = field(default_factory=dict)
    queues: Sequence[str] | None = None
    projects: Sequence[str] | None = None

    def _fields(self) -> dict[str, Any]:
        return {"username": self.username, "userid": self.userid, "bank": self.bank,
                "shares": self.shares, "limits": dict(self.limits),
                "queues": None if self.queues is None else list(self.queues),
                "projects": None if self.projects is None else list(self.projects)}


@dataclass(frozen=True, slots=True, kw_only=True)
class UserEdit(AccountEvent):
    """``edit-user USERNAME [--bank=B] [--userid] [--shares] [--default-bank] [limits]``:
    with no bank, shares and limits change in every association of the user."""

    kind: ClassVar[str] = "edit-user"
    username: str
    bank: str | None = None
    userid: int | None = None
    shares: int | None = None
    default_bank: str | None = None
    limits: Mapping[str, int | None] = field(default_factory=dict)
    queues: Sequence[str] | None = None
    projects: Sequence[str] | None = None

    def _fields(self) -> dict[str, Any]:
        return {"username": self.username, "bank": self.bank, "userid": self.userid,
                "shares": self.shares, "default_bank": self.default_bank,
                "limits": dict(self.limits),
                "queues": None if self.queues is None else list(self.queues),
                "projects": None if self.projects is None else list(self.projects)}


@dataclass(frozen=True, slots=True, kw_only=True)
class UserDelete(AccountEvent):
    """``delete-user USERNAME BANK``: the association goes inactive."""

    kind: ClassVar[str] = "delete-user"
    username: str
    bank: str

    def _fields(self) -> dict[str, Any]:
        return {"username": self.username, "bank": self.bank}


@dataclass(frozen=True, slots=True, kw_only=True)
class FactorEdit(AccountEvent):
    """``edit-factor --factor=NAME --weight=N``: a multi-factor weight, over the
    configuration's ``[accounting.weights]``."""

    kind: ClassVar[str] = "edit-factor"
    factor: str
    weight: int

    def _fields(self) -> dict[str, Any]:
        return {"factor": self.factor, "weight": self.weight}


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageClear(AccountEvent):
    """``clear-usage BANK...``: fair share counts the usage of the banks' associations (and
    their sub-banks') from ``timestamp`` on. ``usage`` is each one's decayed usage then
    (``uid:bank`` -> core, gpu, node seconds; bank "" a job that named none), decayed
    with ``half_life``: what readers take off, decayed on to their own now."""

    kind: ClassVar[str] = "clear-usage"
    banks: Sequence[str]
    half_life: float
    usage: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        return {"banks": list(self.banks), "half_life": self.half_life,
                "usage": {k: list(v) for k, v in self.usage.items()}}


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueAdd(AccountEvent):
    """``add-queue QUEUE [--priority=N]``: the queue's priority, the multi-factor queue
    factor's value (over ``[accounting.queue-priority]``)."""

    kind: ClassVar[str] = "add-queue"
    queue: str
    priority: int = 0
    #: its limits (:mod:`fluxes.domain.accounting.queuelimits`), only those given
    queue_limits: Mapping[str, int | None] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queue": self.queue, "priority": self.priority}
        if self.queue_limits:  # only when given: events from before them stay the same
            out["queue_limits"] = dict(self.queue_limits)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueEdit(AccountEvent):
    """``edit-queue QUEUE [--priority=N] [limits]``."""

    kind: ClassVar[str] = "edit-queue"
    queue: str
    priority: int | None = None
    queue_limits: Mapping[str, int | None] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queue": self.queue, "priority": self.priority}
        if self.queue_limits:
            out["queue_limits"] = dict(self.queue_limits)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDelete(AccountEvent):
    """``delete-queue QUEUE``: its priority is the configuration's again."""

    kind: ClassVar[str] = "delete-queue"
    queue: str

    def _fields(self) -> dict[str, Any]:
        return {"queue": self.queue}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectAdd(AccountEvent):
    """``add-project PROJECT``: associations may then list it (``--projects``)."""

    kind: ClassVar[str] = "add-project"
    project: str

    def _fields(self) -> dict[str, Any]:
        return {"project": self.project}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectDelete(AccountEvent):
    """``delete-project PROJECT``: no association may list it any more."""

    kind: ClassVar[str] = "delete-project"
    project: str

    def _fields(self) -> dict[str, Any]:
        return {"project": self.project}


_KINDS: Final[dict[str, type[AccountEvent]]] = {
    cls.kind: cls for cls in (BankAdd, BankEdit, BankDelete, UserAdd, UserEdit, UserDelete,
                              FactorEdit, UsageClear, QueueAdd, QueueEdit, QueueDelete,
                              ProjectAdd, ProjectDelete)}
#: Every admin event kind.
EVENT_KINDS: Final = tuple(_KINDS)


def event_from_dict(obj: object) -> AccountEvent:
    """Decode :meth:`AccountEvent.to_dict` output; AccountError if malformed."""
    if not isinstance(obj, Mapping):
        raise AccountError(f"accounting event: expected an object, got {_show(obj)}")
    cls = _KINDS.get(obj.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise AccountError(f"accounting event: unknown kind {_show(obj.get('kind'))}")
    allowed = {"kind", "timestamp", *cls.__dataclass_fields__}
    extra = sorted(str(k) for k in obj if k not in allowed)
    if extra:
        raise AccountError(f"{cls.kind}: unknown key {_show(extra[0])}")
    values = {k: v for k, v in obj.items() if k != "kind"}
    if "timestamp" not in values:
        raise AccountError(f"{cls.kind}: timestamp is required")
    values["timestamp"] = _check_time(values["timestamp"])
    if "limits" in values:
        values["limits"] = check_limit_changes(values["limits"])
    if "queue_limits" in values:
        values["queue_limits"] = _check_queue_limits(values["queue_limits"])
    try:
        event = cls(**values)
    except TypeError as exc:
        raise AccountError(f"{cls.kind}: {exc}") from None
    _check_fields(event)
    return event


def _check_queue_limits(value: object) -> dict[str, int | None]:
    try:
        return check_queue_limit_changes(value)
    except PolicyError as exc:
        raise AccountError(str(exc)) from None


def _check_queue_list(value: object) -> None:
    if not isinstance(value, list | tuple):
        raise AccountError(f"queues: expected a list of queue names, got {_show(value)}")
    for queue in value:
        check_queue_name(queue)


def _known_queues(accounts: Accounts, queues: Sequence[str] | None) -> None:
    for queue in queues or ():
        if queue not in accounts.queues:
            raise AccountError(f"no queue {queue!r}: add it with 'fluxes account add-queue "
                               f"{queue}'")


def _check_project_list(value: object) -> None:
    if not isinstance(value, list | tuple):
        raise AccountError(f"projects: expected a list of project names, got {_show(value)}")
    for project in value:
        check_project_name(project)


def _known_projects(accounts: Accounts, projects: Sequence[str] | None) -> None:
    for project in projects or ():
        if project not in accounts.projects and project != ANY_PROJECT:
            raise AccountError(f"no project {project!r}: add it with 'fluxes account "
                               f"add-project {project}'")


def _check_bank_list(value: object) -> None:
    if not isinstance(value, list | tuple) or not value:
        raise AccountError(f"banks: expected a list of bank names, got {_show(value)}")
    for bank in value:
        check_bank_name(bank)


#: The check of each event field, by name.
_FIELD_CHECKS: Final[dict[str, Callable[[Any], object]]] = {
    "bank": check_bank_name, "parent": check_bank_name, "default_bank": check_bank_name,
    "username": check_user_name, "userid": check_uid,
    "shares": lambda value: check_count(value, "shares"), "limits": check_limit_changes,
    "factor": check_factor, "weight": check_weight, "queue": check_queue_name,
    "priority": check_weight, "banks": _check_bank_list, "queues": _check_queue_list,
    "half_life": _check_time, "usage": _cleared_usage, "project": check_project_name,
    "projects": _check_project_list, "queue_limits": _check_queue_limits}


def _check_fields(event: AccountEvent) -> None:
    """Types of every field (names, counts, uids); AccountError naming the bad one."""
    for name, value in event.to_dict().items():
        check = _FIELD_CHECKS.get(name)
        if value is not None and check is not None:
            check(value)


# ---------------------------------------------------------------- the fold


def apply(event: AccountEvent, accounts: Accounts) -> Accounts:
    """The accounts after ``event``; AccountError (and no change) if it cannot apply."""
    _check_fields(event)
    return _transition(event, accounts)


def replay(events: Iterable[AccountEvent], accounts: Accounts | None = None,
           on_refused: Any = None) -> Accounts:
    """Fold ``events`` in order. An event that does not apply is passed over (given to
    ``on_refused(event, error)`` when set): the stream is checked before every append,
    so only a foreign write or an older version's event can be refused."""
    state = accounts if accounts is not None else Accounts()
    for event in events:
        try:
            state = apply(event, state)
        except AccountError as exc:
            if on_refused is not None:
                on_refused(event, exc)
    return state


@functools.singledispatch
def _transition(event: AccountEvent, accounts: Accounts) -> Accounts:
    raise AccountError(f"unknown accounting event {type(event).__name__}")


def _with(accounts: Accounts, banks: Mapping[str, Bank] | None = None,
          associations: Mapping[tuple[str, str], Association] | None = None,
          default_banks: Mapping[str, str] | None = None) -> Accounts:
    return Accounts(banks if banks is not None else accounts.banks,
                    associations if associations is not None else accounts.associations,
                    default_banks if default_banks is not None else accounts.default_banks,
                    accounts.weights, accounts.queues, accounts.projects, accounts.cleared,
                    queue_limits=accounts.queue_limits)


def _defaults_after(associations: Mapping[tuple[str, str], Association],
                    defaults: Mapping[str, str], users: Iterable[str]) -> dict[str, str]:
    """Default banks once ``users``' associations changed: a default that went inactive
    moves to the user's first active bank by name (or goes, when none is left)."""
    out = dict(defaults)
    for user in set(users):
        current = out.get(user)
        assoc = associations.get((user, current)) if current is not None else None
        if assoc is not None and assoc.active:
            continue
        left = sorted(b for (u, b), a in associations.items() if u == user and a.active)
        if left:
            out[user] = left[0]
        else:
            out.pop(user, None)
    return out


@_transition.register
def _add_bank(event: BankAdd, accounts: Accounts) -> Accounts:
    name = event.bank
    old = accounts.banks.get(name)
    if old is not None and old.active:
        raise AccountError(f"bank {name} already exists")
    if event.parent is None:
        root = accounts.root
        if root is not None:
            raise AccountError(f"bank {root.name} is the root bank already: give "
                               "--parent-bank")
    else:
        if event.parent == name:
            raise AccountError(f"bank {name} cannot be its own parent")
        accounts.bank(event.parent)
    bank = Bank(name, event.parent, check_count(event.shares, "shares"),
                NO_LIMITS.changed(event.limits))
    return _with(accounts, banks={**accounts.banks, name: bank})


@_transition.register
def _edit_bank(event: BankEdit, accounts: Accounts) -> Accounts:
    bank = accounts.bank(event.bank)
    parent = bank.parent
    if event.parent is not None and event.parent != bank.parent:
        if bank.parent is None:
            raise AccountError(f"bank {bank.name} is the root bank: it has no parent")
        accounts.bank(event.parent)
        if event.parent in {b.name for b in accounts.subtree(bank.name)}:
            raise AccountError(f"bank {event.parent} is below {bank.name}: it cannot be "
                               "its parent")
        parent = event.parent
    shares = bank.shares if event.shares is None else event.shares
    new = replace(bank, parent=parent, shares=shares, limits=bank.limits.changed(event.limits))
    return _with(accounts, banks={**accounts.banks, bank.name: new})


@_transition.register
def _delete_bank(event: BankDelete, accounts: Accounts) -> Accounts:
    gone = {b.name for b in accounts.subtree(event.bank)}
    banks = dict(accounts.banks)
    for name in gone:
        banks[name] = replace(banks[name], active=False)
    associations = dict(accounts.associations)
    users = []
    for key, assoc in accounts.associations.items():
        if assoc.bank in gone and assoc.active:
            associations[key] = replace(assoc, active=False)
            users.append(assoc.username)
    return _with(accounts, banks, associations,
                 _defaults_after(associations, accounts.default_banks, users))


@_transition.register
def _add_user(event: UserAdd, accounts: Accounts) -> Accounts:
    accounts.bank(event.bank)
    key = (event.username, event.bank)
    old = accounts.associations.get(key)
    if old is not None and old.active:
        raise AccountError(f"user {event.username} is in bank {event.bank} already")
    for assoc in accounts.associations.values():
        if assoc.username == event.username and assoc.userid != event.userid and assoc.active:
            raise AccountError(f"user {event.username} has uid {assoc.userid}, not "
                               f"{event.userid}")
        if assoc.userid == event.userid and assoc.username != event.username:
            raise AccountError(f"uid {event.userid} is user {assoc.username}'s")
    _known_queues(accounts, event.queues)
    _known_projects(accounts, event.projects)
    assoc = Association(event.username, event.userid, event.bank, event.shares,
                        NO_LIMITS.changed(event.limits), queues=tuple(event.queues or ()),
                        projects=tuple(event.projects or ()))
    associations = {**accounts.associations, key: assoc}
    defaults = dict(accounts.default_banks)
    defaults.setdefault(event.username, event.bank)
    return _with(accounts, associations=associations, default_banks=defaults)


@_transition.register
def _edit_user(event: UserEdit, accounts: Accounts) -> Accounts:
    mine = accounts.user_associations(event.username)
    if not mine:
        raise AccountError(f"no user {event.username}")
    targets = [accounts.association(event.username, event.bank)] if event.bank else mine
    if event.default_bank is not None:
        accounts.association(event.username, event.default_bank)
    if event.userid is not None:
        for assoc in accounts.associations.values():
            if assoc.userid == event.userid and assoc.username != event.username:
                raise AccountError(f"uid {event.userid} is user {assoc.username}'s")
    _known_queues(accounts, event.queues)
    _known_projects(accounts, event.projects)
    associations = dict(accounts.associations)
    for assoc in targets:
        associations[(assoc.username, assoc.bank)] = replace(
            assoc, shares=assoc.shares if event.shares is None else event.shares,
            limits=assoc.limits.changed(event.limits),
            queues=assoc.queues if event.queues is None else tuple(event.queues),
            projects=assoc.projects if event.projects is None else tuple(event.projects))
    if event.userid is not None:
        # a uid is the user's, not the association's: every association follows
        for key, assoc in accounts.associations.items():
            if assoc.username == event.username:
                associations[key] = replace(associations[key], userid=event.userid)
    defaults = dict(accounts.default_banks)
    if event.default_bank is not None:
        defaults[event.username] = event.default_bank
    return _with(accounts, associations=associations, default_banks=defaults)


@_transition.register
def _delete_user(event: UserDelete, accounts: Accounts) -> Accounts:
    assoc = accounts.association(event.username, event.bank)
    associations = {**accounts.associations,
                    (assoc.username, assoc.bank): replace(assoc, active=False)}
    return _with(accounts, associations=associations,
                 default_banks=_defaults_after(associations, accounts.default_banks,
                                               [assoc.username]))


@_transition.register
def _edit_factor(event: FactorEdit, accounts: Accounts) -> Accounts:
    weights = {**accounts.weights, check_factor(event.factor): event.weight}
    return Accounts(accounts.banks, accounts.associations, accounts.default_banks, weights,
                    accounts.queues, accounts.projects, accounts.cleared,
                    queue_limits=accounts.queue_limits)


@_transition.register
def _clear_usage(event: UsageClear, accounts: Accounts) -> Accounts:
    for name in event.banks:
        accounts.bank(name)
    cleared = dict(accounts.cleared)
    for key, figures in _cleared_usage(event.usage).items():
        cleared[key] = Cleared(event.timestamp, event.half_life, figures)
    return Accounts(accounts.banks, accounts.associations, accounts.default_banks,
                    accounts.weights, accounts.queues, accounts.projects, cleared,
                    queue_limits=accounts.queue_limits)


def _with_queues(accounts: Accounts, queue: str, priority: int | None,
                 limits: QueueLimits | None) -> Accounts:
    """``accounts`` with ``queue``'s priority and limits (None priority: the queue goes)."""
    queues = {k: v for k, v in accounts.queues.items() if k != queue}
    queue_limits = {k: v for k, v in accounts.queue_limits.items() if k != queue}
    if priority is not None:
        queues[queue] = priority
        if limits is not None and limits != NO_QUEUE_LIMITS:
            queue_limits[queue] = limits
    return Accounts(accounts.banks, accounts.associations, accounts.default_banks,
                    accounts.weights, queues, accounts.projects, accounts.cleared,
                    queue_limits=queue_limits)


@_transition.register
def _add_queue(event: QueueAdd, accounts: Accounts) -> Accounts:
    if event.queue in accounts.queues:
        raise AccountError(f"queue {event.queue} already exists")
    return _with_queues(accounts, event.queue, event.priority,
                        NO_QUEUE_LIMITS.changed(event.queue_limits))


@_transition.register
def _edit_queue(event: QueueEdit, accounts: Accounts) -> Accounts:
    if event.queue not in accounts.queues:
        raise AccountError(f"no queue {event.queue!r}")
    limits = accounts.queue_limits.get(event.queue, NO_QUEUE_LIMITS)
    priority = event.priority if event.priority is not None else accounts.queues[event.queue]
    return _with_queues(accounts, event.queue, priority, limits.changed(event.queue_limits))


@_transition.register
def _delete_queue(event: QueueDelete, accounts: Accounts) -> Accounts:
    if event.queue not in accounts.queues:
        raise AccountError(f"no queue {event.queue!r}")
    return _with_queues(accounts, event.queue, None, None)


def _with_projects(accounts: Accounts, projects: frozenset[str]) -> Accounts:
    return Accounts(accounts.banks, accounts.associations, accounts.default_banks,
                    accounts.weights, accounts.queues, projects, accounts.cleared,
                    queue_limits=accounts.queue_limits)


@_transition.register
def _add_project(event: ProjectAdd, accounts: Accounts) -> Accounts:
    if event.project in accounts.projects or event.project == ANY_PROJECT:
        raise AccountError(f"project {event.project} already exists")
    return _with_projects(accounts, accounts.projects | {event.project})


@_transition.register
def _delete_project(event: ProjectDelete, accounts: Accounts) -> Accounts:
    if event.project not in accounts.projects:
        raise AccountError(f"no project {event.project!r}")
    users = sorted(a.label for a in accounts.associations.values()
                   if a.active and event.project in a.projects)
    if users:
        raise AccountError(f"project {event.project} is listed by {', '.join(users[:3])}"
                           + (" and more" if len(users) > 3 else "") + ": edit them first")
    return _with_projects(accounts, accounts.projects - {event.project})
