"""``fluxes account``'s administration beyond banks and users: priority weights
(``edit-factor``, ``view-factor``), CSV files (``export-db``, ``pop-db``), queues and
projects, ``clear-usage`` and ``update-usage``, as flux-accounting names them.

The argparse table stays in :mod:`fluxes.cli.cmd_account` (one command group, one
table); these are its handlers, kept apart so that neither module grows past what one
reads at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from fluxes.cli import cmd_account as base
from fluxes.cli.util import die, instance, print_json

if TYPE_CHECKING:
    from fluxes.domain.accounting.banks import AccountEvent, Accounts


def edit_factor(args: argparse.Namespace) -> int:
    """Append edit-factor."""
    from fluxes.domain.accounting.banks import FactorEdit, check_factor

    factor = check_factor(args.factor)
    base._append(args, lambda _a: FactorEdit(timestamp=time.time(), factor=factor,
                                        weight=args.weight))
    return 0


def view_factor(args: argparse.Namespace) -> int:
    """The weights in effect: edit-factor's over the configuration's."""
    from fluxes.cli.display import table
    from fluxes.domain.accounting.banks import FACTOR_NAMES, check_factor

    names = FACTOR_NAMES if args.factor is None else (check_factor(args.factor),)
    inst = instance(args)
    edited = base._accounts(args).weights
    configured = inst.config().accounting.weights.as_dict()
    rows: list[dict[str, Any]] = [{"factor": name, "weight": edited.get(name, configured[name]),
             "source": "edit-factor" if name in edited else "config"} for name in names]
    if args.json:
        print_json(rows[0] if args.factor is not None else {"factors": rows})
        return 0
    for line in table(("FACTOR", "WEIGHT", "SOURCE"),
                      [[r["factor"], str(r["weight"]), r["source"]] for r in rows],
                      right=frozenset({1})):
        print(line)
    return 0


def export_db(args: argparse.Namespace) -> int:
    """Banks and users as CSV files."""
    from fluxes.domain.accounting.dbfile import export_banks, export_users

    accounts = base._accounts(args)
    for path, text in ((args.banks, export_banks(accounts)),
                       (args.users, export_users(accounts))):
        if path == "-":
            sys.stdout.write(text)
            continue
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            die(f"export-db: cannot write {path}: {exc.strerror}")
    return 0


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        die(f"pop-db: cannot read {path}: {getattr(exc, 'strerror', None) or exc}")


def pop_db(args: argparse.Namespace) -> int:
    """Add the banks, then the users, of CSV files: all or none."""
    from fluxes.domain.accounting.dbfile import bank_events, check_events, user_events
    from fluxes.store.accounting import append_admin_many

    if args.banks is None and args.users is None:
        die("pop-db: give -b/--banks FILE, -u/--users FILE or both")
    now = time.time()
    rows = []
    for path, read in ((args.banks, bank_events), (args.users, user_events)):
        if path is not None:
            rows += [(f"{path} line {n}", event)
                     for n, event in read(_read_text(path), path, now)]

    def make(accounts: Accounts) -> list[AccountEvent]:
        check_events(accounts, rows)  # names the file and line of a row that cannot apply
        return [event for _where, event in rows]

    inst = instance(args)
    added, _after = append_admin_many(inst.redis, inst.keys, make)
    print(f"added {sum(e.kind == 'add-bank' for e in added)} banks and "
          f"{sum(e.kind == 'add-user' for e in added)} users")
    return 0


def queue_change(args: argparse.Namespace) -> int:
    """Append add-queue, edit-queue or delete-queue."""
    from fluxes.domain.accounting.banks import QueueAdd, QueueDelete, QueueEdit

    now = time.time()
    event: AccountEvent
    if args.queue_change == "add-queue":
        event = QueueAdd(timestamp=now, queue=args.queue, priority=args.priority,
                         queue_limits=base.queue_limits(args))
    elif args.queue_change == "edit-queue":
        limits = base.queue_limits(args)
        if args.priority is None and not limits:
            die("edit-queue: give --priority or a limit to change")
        event = QueueEdit(timestamp=now, queue=args.queue, priority=args.priority,
                          queue_limits=limits)
    else:
        event = QueueDelete(timestamp=now, queue=args.queue)
    base._append(args, lambda _a: event)
    return 0


def view_queues(args: argparse.Namespace) -> int:
    """Queue priorities in effect: add-queue's over the configuration's."""
    from fluxes.cli.display import table
    from fluxes.domain.accounting.queuelimits import NO_QUEUE_LIMITS
    from fluxes.formats.fsd import format_duration

    inst = instance(args)
    accounts = base._accounts(args)
    added = accounts.queues
    configured = inst.config().accounting.weights.queue_priority
    rows: list[dict[str, Any]] = [
        {"queue": q, "priority": added.get(q, configured.get(q)),
         "source": "add-queue" if q in added else "config",
         "limits": accounts.queue_limits.get(q, NO_QUEUE_LIMITS).to_dict()}
        for q in sorted({*added, *configured})]
    if getattr(args, "queue", None) is not None:
        rows = [r for r in rows if r["queue"] == args.queue]
        if not rows:
            die(f"no queue {args.queue!r}")
        if args.json:
            print_json(rows[0])
            return 0
    elif args.json:
        print_json({"queues": rows})
        return 0
    def shown(value: int | None, time_limit: bool = False) -> str:
        if value is None:
            return "-"
        return format_duration(value) if time_limit else str(value)

    for line in table(("QUEUE", "PRIORITY", "SOURCE", "MIN-NODES", "MAX-NODES", "MAX-TIME",
                       "MAX-RUN"),
                      [[r["queue"], str(r["priority"]), r["source"],
                        shown(r["limits"]["min_nodes_per_job"]),
                        shown(r["limits"]["max_nodes_per_job"]),
                        shown(r["limits"]["max_time_per_job"], True),
                        shown(r["limits"]["max_running_jobs"])] for r in rows],
                      right=frozenset({1, 3, 4, 5, 6})):
        print(line)
    return 0


def project_change(args: argparse.Namespace) -> int:
    """Append add-project or delete-project."""
    from fluxes.domain.accounting.banks import ProjectAdd, ProjectDelete

    now = time.time()
    cls = ProjectAdd if args.project_change == "add-project" else ProjectDelete
    base._append(args, lambda _a: cls(timestamp=now, project=args.project))
    return 0


def list_projects(args: argparse.Namespace) -> int:
    """Every project, '*' first."""
    from fluxes.domain.accounting.banks import ANY_PROJECT

    projects = [ANY_PROJECT, *sorted(base._accounts(args).projects)]
    if args.json:
        print_json({"projects": projects})
        return 0
    print("PROJECT")
    for name in projects:
        print(name)
    return 0


def clear_usage(args: argparse.Namespace) -> int:
    """Append clear-usage with the usage of the banks' associations as of now."""
    from fluxes.domain.accounting.banks import UsageClear
    from fluxes.domain.accounting.usage import NO_USAGE, Figures, decayed_since
    from fluxes.store.accounting import UsageStore

    inst = instance(args)
    half_life = inst.config().accounting.half_life
    store = UsageStore(inst.redis, inst.keys)

    def make(accounts: Accounts) -> UsageClear:
        now = time.time()
        gone = {b.name for name in args.banks for b in accounts.subtree(name)}
        kept: dict[tuple[int, str], Figures] = {}
        if args.ignore_older_than is not None:
            kept = decayed_since(store.charges(args.ignore_older_than),
                                 store.open_jobs().values(), args.ignore_older_than, now,
                                 half_life)
        usage: dict[str, list[float]] = {}
        for (uid, bank), figures in store.decayed(now).items():
            # a job that named no bank: fair share reads it as the default bank's
            name = bank or accounts.default_banks.get(accounts.username_of(uid) or "")
            if name in gone:
                keep = kept.get((uid, bank), NO_USAGE)
                usage[f"{uid}:{bank}"] = [max(a - b, 0.0) for a, b in zip(figures, keep,
                                                                          strict=True)]
        return UsageClear(timestamp=now, banks=list(args.banks), half_life=half_life,
                          usage=usage)

    base._append(args, make)
    return 0


def update_usage(args: argparse.Namespace) -> int:
    """Wait for the accounting fold to reach the end of every journal."""
    from fluxes.store.accounting import UsageStore

    if not args.timeout >= 0:
        die("update-usage: --timeout must be a number of seconds >= 0")
    inst = instance(args)
    store = UsageStore(inst.redis, inst.keys)
    deadline = time.monotonic() + args.timeout
    while behind := store.behind():
        if time.monotonic() >= deadline:
            idle = [p for p in behind if store.lease_holder(p) is None]
            why = (f"no accounting worker folds partition {idle[0]}: is the instance "
                   "running? 'fluxes admin rebuild-accounting' folds now" if idle else
                   f"the accounting worker is still folding partition {behind[0]}")
            die(f"update-usage: usage not up to date after {args.timeout:g} s ({why})")
        time.sleep(0.05)
    print(f"usage is up to date ({inst.keys.partitions} partition"
          f"{'s' if inst.keys.partitions != 1 else ''})")
    return 0
