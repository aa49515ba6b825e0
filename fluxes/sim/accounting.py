"""Accounting in simulation: banks, usage, fair share, periodic priorities, running limits.

An instance's accounting is the ingest charging each job to an association
(``check_submit``), the accounting worker folding the journal into decayed
usage (:class:`~fluxes.domain.accounting.usage.UsageState`), the job
manager installing a fair-share table and recomputing pending priorities
every ``[accounting] reprioritize-interval``, and the scheduler holding back
jobs over a running limit (:class:`~fluxes.domain.accounting.limits.LimitGate`).
:class:`SimAccounting` holds those same pure pieces for one run; the driver
(:mod:`fluxes.sim.drive`) calls them where the workers do, on the virtual
clock. The one difference is the fold's lag: the simulator folds each event
as it is committed, where the accounting worker reads the journal a fraction
of a second later.

The banks come from a file (``fluxes simulate --banks FILE``, :func:`read_banks`):
one change per line, either a ``fluxes account`` command (``add-bank root 1``,
``add-user --username=alice --userid=1 --bank=physics --max-running-jobs=2``)
or an event object as the instance's accounting stream holds it
(``{"kind": "add-bank", "timestamp": 0, "bank": "root", ...}``); blank lines
and ``#`` comments are skipped. They are folded in order, all before the run:
the banks do not change during it.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NoReturn

from fluxes.domain.accounting.banks import (
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
)
from fluxes.domain.accounting.config import AccountingConfig
from fluxes.domain.accounting.fairshare import fair_share
from fluxes.domain.accounting.limits import (
    HeldJob,
    Holdings,
    LimitGate,
    check_submit,
    limits_active_jobs,
    start_refusal,
)
from fluxes.domain.accounting.priority import MultiFactorPriority, facts_from_info
from fluxes.domain.accounting.usage import UsageError, UsageState, decayed_usage
from fluxes.domain.jm.priority import PriorityPlugin
from fluxes.domain.job import events as ev
from fluxes.errors import FluxesError
from fluxes.sim.invariants import Checked

__all__ = ["LIMITS_INVARIANT", "SimAccounting", "read_banks"]

#: The limit options of the account commands, and their event keys.
_LIMITS: Final = (("--max-running-jobs", "max_running_jobs"),
                  ("--max-active-jobs", "max_active_jobs"),
                  ("--max-nodes", "max_nodes"), ("--max-cores", "max_cores"))


class _Parser(argparse.ArgumentParser):
    """argparse that raises ValueError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise the message."""
        raise ValueError(message)


def _command_parser() -> _Parser:
    parser = _Parser(prog="account", add_help=False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("add-bank", add_help=False)
    p.add_argument("--parent-bank", default=None)
    p.add_argument("bank")
    p.add_argument("shares", type=int)
    p = sub.add_parser("edit-bank", add_help=False)
    p.add_argument("bank")
    p.add_argument("--shares", type=int, default=None)
    p.add_argument("--parent-bank", default=None)
    p = sub.add_parser("delete-bank", add_help=False)
    p.add_argument("bank")
    p = sub.add_parser("add-user", add_help=False)
    p.add_argument("--username", required=True)
    p.add_argument("--bank", required=True)
    # required here: there is no instance to look the uid up in, and the workload's
    # jobs name their users by uid (the SWF user number)
    p.add_argument("--userid", type=int, required=True)
    p.add_argument("--shares", type=int, default=1)
    p = sub.add_parser("edit-user", add_help=False)
    p.add_argument("username")
    p.add_argument("--bank", default=None)
    p.add_argument("--userid", type=int, default=None)
    p.add_argument("--shares", type=int, default=None)
    p.add_argument("--default-bank", default=None)
    p = sub.add_parser("delete-user", add_help=False)
    p.add_argument("username")
    p.add_argument("bank")
    for name in ("add-bank", "edit-bank", "add-user", "edit-user"):
        for option, dest in _LIMITS:
            sub.choices[name].add_argument(option, dest=dest, type=int, default=None)
    return parser


def _limits(args: argparse.Namespace) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for option, dest in _LIMITS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if value < -1:
            raise ValueError(f"{option}: expected a count or -1 (no limit), got {value}")
        out[dest] = None if value == -1 else value
    return out


def _event_of_command(words: list[str], parser: _Parser) -> AccountEvent:
    """The event a ``fluxes account`` change command appends (timestamp 0)."""
    if words[:2] in (["fluxes", "account"], ["flux", "account"]):
        words = words[2:]
    args = parser.parse_args(words)
    c = args.command
    if c == "add-bank":
        return BankAdd(timestamp=0.0, bank=args.bank, parent=args.parent_bank,
                       shares=args.shares, limits=_limits(args))
    if c == "edit-bank":
        return BankEdit(timestamp=0.0, bank=args.bank, shares=args.shares,
                        parent=args.parent_bank, limits=_limits(args))
    if c == "delete-bank":
        return BankDelete(timestamp=0.0, bank=args.bank)
    if c == "add-user":
        return UserAdd(timestamp=0.0, username=args.username, userid=args.userid,
                       bank=args.bank, shares=args.shares, limits=_limits(args))
    if c == "edit-user":
        return UserEdit(timestamp=0.0, username=args.username, bank=args.bank,
                        userid=args.userid, shares=args.shares,
                        default_bank=args.default_bank, limits=_limits(args))
    return UserDelete(timestamp=0.0, username=args.username, bank=args.bank)


def read_banks(lines: Iterable[str], source: str = "--banks") -> Accounts:
    """The accounts a banks file folds to (see the module); ValueError naming the line."""
    parser = _command_parser()
    accounts = Accounts()
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            if text.startswith("{"):
                event = event_from_dict(json.loads(text))
            else:
                event = _event_of_command(shlex.split(text, comments=True), parser)
            accounts = apply(event, accounts)
        except (ValueError, FluxesError) as exc:  # AccountError, JSON, argparse, shlex
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{source}: line {number}: {first}") from None
    return accounts


class SimAccounting:
    """The accounting of one simulated run (see the module)."""

    def __init__(self, config: AccountingConfig, accounts: Accounts, *, cores: int,
                 nodes: int, clock: Callable[[], float]) -> None:
        self.config = config
        self.accounts = accounts
        self.usage = UsageState(config.half_life)
        self.gate = LimitGate(accounts)
        #: the multi-factor plugin (None: the default plugin; no reprioritizing)
        self.plugin: MultiFactorPriority | None = None
        if config.priority_plugin == "multifactor":
            self.plugin = MultiFactorPriority(config.weights, clock=clock, total_cores=cores,
                                              total_nodes=nodes)
        self.interval = config.reprioritize_interval
        #: the next reprioritization (set at the run's first instant)
        self.next_tick = math.nan
        #: what every association holds (active jobs), for max-active-jobs
        self._active = Holdings() if limits_active_jobs(accounts) else None
        self._charged: dict[int, HeldJob] = {}
        #: the bank each job was charged to, kept when running limits are to be checked
        self.banks: dict[int, str] | None = {} if _running_limits(accounts) else None

    @property
    def priority(self) -> PriorityPlugin | None:
        """The job manager's priority plugin."""
        return self.plugin

    def use_records(self, info_of: Callable[[int], Mapping[str, Any] | None]) -> None:
        """Read each job's bank and size from its submit extras, as the job manager's
        plugin does (``info_of``: the core's job record)."""
        if self.plugin is not None:
            def facts(jobid: int) -> Any:
                """The job's facts, from its record."""
                info = info_of(jobid)
                return facts_from_info(info) if info is not None else None

            self.plugin.facts = facts

    # -- the ingest -------------------------------------------------------------------

    def charge(self, jobid: int, userid: int, user: str, info: Mapping[str, Any]
               ) -> dict[str, Any] | str:
        """The ingest's charging (``check_submit``): the submit extras with the bank the
        job is charged to, or the one-line refusal."""
        accounts = self.accounts
        if not accounts.enabled:
            return dict(info)
        want = info.get("bank")
        pending = HeldJob(userid, want if isinstance(want, str) else None, False,
                          _int(info.get("nnodes")), _int(info.get("ncores")))
        username = accounts.username_of(userid) or user
        try:
            assoc = check_submit(accounts, self._active or Holdings(), username, pending)
        except (ValueError, FluxesError) as exc:
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if assoc is None:
            return dict(info)
        charged = pending._replace(bank=assoc.bank)
        if self.banks is not None:
            self.banks[jobid] = assoc.bank
        if self._active is not None:
            self._active.add(accounts, charged)
            self._charged[jobid] = charged
        return {**info, "bank": assoc.bank}

    def retired(self, jobid: int) -> None:
        """The job is inactive: it no longer counts against max-active-jobs."""
        charged = self._charged.pop(jobid, None)
        if charged is not None and self._active is not None:
            self._active.remove(self.accounts, charged)

    # -- the accounting worker's fold -------------------------------------------------------

    def fold(self, jobid: int, event: ev.Event, extra: Mapping[str, Any] | None) -> None:
        """Fold a committed journal event into the usage (what the accounting worker reads)."""
        name = event.name
        if name not in _FOLDED:
            return
        try:
            self.usage.feed(jobid, name, event.timestamp, event.context(), extra or {})
        except UsageError as exc:  # the cores wrote an event the fold cannot read: a bug
            raise RuntimeError(f"accounting fold: job {jobid}: {exc}") from None

    # -- the job manager's reprioritizing -----------------------------------------------------

    def due(self, now: float) -> float | None:
        """The last reprioritization time <= ``now`` not made yet (None: none due); the
        next one is then scheduled ``interval`` later, in phase with the first."""
        if self.plugin is None:
            return None
        if math.isnan(self.next_tick):
            self.next_tick = now + self.interval
            self.refresh(now)  # as the job manager does when it starts leading
            return None
        if now < self.next_tick:
            return None
        steps = math.floor((now - self.next_tick) / self.interval)
        tick = self.next_tick + steps * self.interval
        self.next_tick = tick + self.interval
        return tick

    def refresh(self, when: float) -> None:
        """Install the fair-share table as of ``when`` (``fair_share_now``'s figures)."""
        if self.plugin is None:
            return
        cfg = self.config
        figures = decayed_usage(self.usage.accums, self.usage.open.values(), cfg.half_life,
                                when)
        usage = {key: f.billing(cfg.billing) for key, f in figures.items()}
        self.plugin.update(fair_share(self.accounts, usage))


    # -- the check ------------------------------------------------------------------------

    def check(self, runs: Iterable[tuple[int, int, float, float, int, int]],
              checked: Checked) -> None:
        """The running limits held over the whole run: ``runs`` are (jobid, userid, start,
        end, nodes, cores) as the exec side ran them; a start that ``start_refusal``
        refuses given what was running then is a violation. Counted from what ran,
        not from the gate's own books. The starting job is asked about with no size:
        the gate weighs its request's minimum, which R may exceed (a job of cores
        anywhere spans nodes), so only a start while the running jobs already fill a
        limit is sure to be one the gate should have held back."""
        banks = self.banks
        if banks is None:
            return
        accounts = self.accounts
        points: list[tuple[float, int, int, HeldJob]] = []
        for jobid, userid, start, end, nnodes, ncores in runs:
            job = HeldJob(userid, banks.get(jobid), True, nnodes, ncores)
            points.append((start, 1, jobid, job))
            points.append((end, 0, jobid, job))
        points.sort(key=lambda p: (p[0], p[1], p[2]))  # ends before starts at one time
        held = Holdings()
        for when, kind, jobid, job in points:
            if not kind:
                held.remove(accounts, job)
                continue
            reason = start_refusal(accounts, held, job._replace(nnodes=0, ncores=0))
            if reason is not None:
                checked.fail(LIMITS_INVARIANT, f"job {jobid} starts at {when:.3f}: {reason}")
            held.add(accounts, job)


#: The invariant the running limits' check reports.
LIMITS_INVARIANT: Final = "running limits never exceeded"


def _running_limits(accounts: Accounts) -> bool:
    """Whether some association or bank has a running limit."""
    def has(limits: Limits) -> bool:
        return (limits.max_running_jobs is not None or limits.max_nodes is not None
                or limits.max_cores is not None)

    return any(has(a.limits) for a in accounts.associations.values()) or any(
        has(b.limits) for b in accounts.banks.values())


#: Journal events the usage fold reads.
_FOLDED: Final = frozenset({"submit", "alloc", "free", "clean", "invalidate",
                            "jobspec-update"})


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
