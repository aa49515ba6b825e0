"""``fluxes account``: banks, associations, usage and fair share (flux-accounting's names).

Changes (``add-bank``, ``edit-bank``, ``delete-bank``, ``add-user``,
``edit-user``, ``delete-user``) are events appended to the instance's
accounting stream, each checked against the state the stream folds to
(:func:`fluxes.store.accounting.append_admin`); only the instance owner may
make them, as only flux's instance owner may change flux-accounting's
database. Everyone may look: ``view-user``, ``view-bank``, ``list-banks``,
``list-users``, ``usage`` (sreport-like: raw usage over a period) and
``share`` (sshare-like: the fair-share tree), ``view-job-records``. The handlers of
the other flux-accounting commands (weights, CSV files, queues, projects,
``clear-usage``, ``update-usage``) are in :mod:`fluxes.cli.account_admin`. See
docs/accounting.md.

Why one module: it is one command group, and the CLI keeps one module per group; most of
it is the argparse table and one short handler per subcommand (the accounting rules
themselves are in fluxes/domain/accounting/, the newer handlers in account_admin).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import (
    UsageError,
    add_subcommands,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
)
from fluxes.service.usage import usage_report, user_names

if TYPE_CHECKING:
    from fluxes.domain.accounting.banks import AccountEvent, Accounts, Association, Bank
    from fluxes.store.instance import Instance

#: The limit options of add-user, edit-user, add-bank and edit-bank.
_LIMIT_OPTIONS = (("--max-running-jobs", "max_running_jobs", "jobs running at once"),
                  ("--max-active-jobs", "max_active_jobs", "jobs pending or running"),
                  ("--max-nodes", "max_nodes", "nodes held by running jobs"),
                  ("--max-cores", "max_cores", "cores held by running jobs"))


def register(subparsers: Any) -> None:
    """Add ``account`` and its subcommands."""
    from fluxes.cli import account_admin
    parser = subparsers.add_parser("account", **help_with_example(
        "Banks, users, usage and fair share (flux-accounting's 'flux account').",
        ["fluxes account add-bank root 1", "fluxes account add-bank --parent-bank=root "
         "physics 3", "fluxes account add-user --username=alice --bank=physics",
         "fluxes account share", "fluxes account usage --since=-7d --csv"]))
    sub = add_subcommands(parser, "account commands")

    p = sub.add_parser("add-bank", **help_with_example(
        "Add a bank holding SHARES of its parent. The bank added without --parent-bank is\n"
        "the root; there is one. Instance owner only.",
        ["fluxes account add-bank root 1",
         "fluxes account add-bank --parent-bank=root physics 3 --max-running-jobs=100"]))
    p.add_argument("--parent-bank", default=None, metavar="BANK")
    p.add_argument("bank", metavar="BANK")
    p.add_argument("shares", type=int, metavar="SHARES")
    _limit_options(p)
    p.set_defaults(func=_owner_only(_add_bank))

    p = sub.add_parser("edit-bank", **help_with_example(
        "Change a bank's shares, parent or limits (-1: no limit). Instance owner only.",
        ["fluxes account edit-bank physics --shares=5",
         "fluxes account edit-bank physics --max-nodes=-1"]))
    p.add_argument("bank", metavar="BANK")
    p.add_argument("--shares", type=int, default=None)
    p.add_argument("--parent-bank", default=None, metavar="BANK")
    _limit_options(p)
    p.set_defaults(func=_owner_only(_edit_bank))

    p = sub.add_parser("delete-bank", **help_with_example(
        "Deactivate a bank, the banks below it and their users (their usage stays;\n"
        "adding them again reactivates them). Instance owner only.",
        ["fluxes account delete-bank physics"]))
    p.add_argument("bank", metavar="BANK")
    p.set_defaults(func=_owner_only(_delete_bank))

    p = sub.add_parser("add-user", **help_with_example(
        "Let USERNAME charge jobs to BANK (an association). The user's first bank\n"
        "becomes their default bank. Instance owner only.",
        ["fluxes account add-user --username=alice --bank=physics",
         "fluxes account add-user --username=bob --userid=5002 --bank=chem --shares=2 "
         "--max-running-jobs=4"]))
    p.add_argument("--username", required=True)
    p.add_argument("--bank", required=True)
    p.add_argument("--userid", type=int, default=None,
                   help="the user's uid (default: from 'fluxes admin users' or this machine)")
    p.add_argument("--shares", type=int, default=1, help="shares of the bank (default 1)")
    p.add_argument("--queues", type=_queue_list, default=None, metavar="Q1,Q2",
                   help="the queues its jobs may use (default: every queue)")
    p.add_argument("--projects", type=_queue_list, default=None, metavar="P1,P2",
                   help="its projects, the first its default ('*' is always one)")
    _limit_options(p)
    p.set_defaults(func=_owner_only(_add_user))

    p = sub.add_parser("edit-user", **help_with_example(
        "Change a user's associations: with --bank only that one, else all of them\n"
        "(limits: -1 for no limit). Instance owner only.",
        ["fluxes account edit-user alice --max-running-jobs=4",
         "fluxes account edit-user alice --bank=physics --shares=2",
         "fluxes account edit-user alice --default-bank=chem"]))
    p.add_argument("username", metavar="USERNAME")
    p.add_argument("--bank", default=None)
    p.add_argument("--userid", type=int, default=None)
    p.add_argument("--shares", type=int, default=None)
    p.add_argument("--default-bank", default=None, metavar="BANK")
    p.add_argument("--queues", type=_queue_list, default=None, metavar="Q1,Q2",
                   help="the queues its jobs may use ('': every queue)")
    p.add_argument("--projects", type=_queue_list, default=None, metavar="P1,P2",
                   help="its projects, the first its default ('*' is always one)")
    _limit_options(p)
    p.set_defaults(func=_owner_only(_edit_user))

    p = sub.add_parser("delete-user", **help_with_example(
        "Deactivate the association of USERNAME with BANK. Instance owner only.",
        ["fluxes account delete-user alice physics"]))
    p.add_argument("username", metavar="USERNAME")
    p.add_argument("bank", metavar="BANK")
    p.set_defaults(func=_owner_only(_delete_user))

    p = sub.add_parser("view-user", **help_with_example(
        "Show a user's associations: bank, shares, limits, default bank.",
        ["fluxes account view-user alice", "fluxes account view-user alice --json"]))
    p.add_argument("username", metavar="USERNAME")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_view_user)

    p = sub.add_parser("view-bank", **help_with_example(
        "Show a bank; -t the banks below it as a tree, -u its users.",
        ["fluxes account view-bank root -t", "fluxes account view-bank physics -u"]))
    p.add_argument("bank", metavar="BANK")
    p.add_argument("-t", "--tree", action="store_true", help="the banks below, as a tree")
    p.add_argument("-u", "--users", action="store_true", help="the bank's users")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_view_bank)

    p = sub.add_parser("list-banks", **help_with_example(
        "List the banks.", ["fluxes account list-banks", "fluxes account list-banks --json"]))
    p.add_argument("--inactive", action="store_true", help="deleted banks too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list_banks)

    p = sub.add_parser("list-users", **help_with_example(
        "List every association (user, bank).",
        ["fluxes account list-users", "fluxes account list-users --json"]))
    p.add_argument("--inactive", action="store_true", help="deleted associations too")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list_users)

    p = sub.add_parser("usage", **help_with_example(
        "Raw (not decayed) usage per user and bank over a period, like sreport: the\n"
        "part of each allocation inside [SINCE, UNTIL), jobs still running up to now.\n"
        "TIME: a UNIX time, an ISO 8601 date/time, or -FSD (that long ago).",
        ["fluxes account usage", "fluxes account usage --since=-7d --json",
         "fluxes account usage --since=2026-11-01 --until=2026-12-01 --csv"]))
    p.add_argument("--since", default=None, metavar="TIME", help="default: the beginning")
    p.add_argument("--until", default=None, metavar="TIME", help="default: now")
    p.add_argument("--by-project", action="store_true",
                   help="per project (--setattr=system.project) instead of user and bank")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true")
    p.set_defaults(func=_usage)

    p = sub.add_parser("edit-factor", **help_with_example(
        "Set the weight of a multi-factor priority factor (fairshare, age, job_size,\n"
        "queue, urgency), over [accounting.weights]. Instance owner only.",
        ["fluxes account edit-factor --factor=fairshare --weight=50000"]))
    p.add_argument("--factor", required=True, metavar="FACTOR")
    p.add_argument("--weight", required=True, type=int, metavar="N")
    p.set_defaults(func=_owner_only(account_admin.edit_factor))

    p = sub.add_parser("view-factor", **help_with_example(
        "Show the weight of a priority factor in effect (every factor without FACTOR)\n"
        "and where it comes from: edit-factor or the configuration.",
        ["fluxes account view-factor fairshare", "fluxes account view-factor --json"]))
    p.add_argument("factor", nargs="?", default=None, metavar="FACTOR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=account_admin.view_factor)

    p = sub.add_parser("export-db", **help_with_example(
        "Write the banks and users as CSV files (flux-accounting's columns, then fluxes's\n"
        "limits), which pop-db reads back; '-' writes to stdout.",
        ["fluxes account export-db", "fluxes account export-db -u /tmp/u.csv -b /tmp/b.csv"]))
    p.add_argument("-u", "--users", default="users.csv", metavar="FILE",
                   help="default: users.csv")
    p.add_argument("-b", "--banks", default="banks.csv", metavar="FILE",
                   help="default: banks.csv")
    p.set_defaults(func=account_admin.export_db)

    p = sub.add_parser("pop-db", **help_with_example(
        "Add the banks and users of CSV files (export-db's columns; blank shares: 1,\n"
        "blank limits: none), all or none: a bad row changes nothing. Instance owner only.",
        ["fluxes account pop-db -b banks.csv -u users.csv"]))
    p.add_argument("-u", "--users", default=None, metavar="FILE")
    p.add_argument("-b", "--banks", default=None, metavar="FILE")
    p.set_defaults(func=_owner_only(account_admin.pop_db))

    p = sub.add_parser("clear-usage", **help_with_example(
        "Reset the usage fair share counts for the banks, the banks below them and their\n"
        "users to 0 (usage reports keep the history). Instance owner only.",
        ["fluxes account clear-usage physics", "fluxes account clear-usage root"]))
    p.add_argument("banks", nargs="+", metavar="BANK")
    p.add_argument("--ignore-older-than", type=_time_arg, default=None, metavar="TIME",
                   help="keep the usage held from TIME on (default: now, keep none)")
    p.set_defaults(func=_owner_only(account_admin.clear_usage))

    p = sub.add_parser("update-usage", **help_with_example(
        "Wait until the usage includes every job that ended so far (flux-accounting's\n"
        "update-usage; here the accounting worker folds the journal continuously).",
        ["fluxes account update-usage", "fluxes account update-usage --timeout=60"]))
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="give up after SECONDS (default 10)")
    p.set_defaults(func=account_admin.update_usage)

    p = sub.add_parser("add-queue", **help_with_example(
        "Give QUEUE a priority: the multi-factor queue factor's value (over\n"
        "[accounting.queue-priority]), and limits. Instance owner only.",
        ["fluxes account add-queue debug --priority=10",
         "fluxes account add-queue debug --max-nodes-per-job=1 --max-running-jobs=2"]))
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--priority", type=int, default=0, metavar="N", help="default 0")
    _queue_limit_options(p)
    p.set_defaults(func=_owner_only(account_admin.queue_change), queue_change="add-queue")

    p = sub.add_parser("edit-queue", **help_with_example(
        "Change a queue's priority or limits (-1: no limit). Instance owner only.",
        ["fluxes account edit-queue debug --priority=20",
         "fluxes account edit-queue debug --max-time-per-job=30m"]))
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--priority", type=int, default=None, metavar="N")
    _queue_limit_options(p)
    p.set_defaults(func=_owner_only(account_admin.queue_change), queue_change="edit-queue")

    p = sub.add_parser("delete-queue", **help_with_example(
        "Remove a queue's priority (the configuration's applies again). Instance owner only.",
        ["fluxes account delete-queue debug"]))
    p.add_argument("queue", metavar="QUEUE")
    p.set_defaults(func=_owner_only(account_admin.queue_change), queue_change="delete-queue")

    for name, what in (("view-queue", "one queue's"), ("list-queues", "every queue's")):
        p = sub.add_parser(name, **help_with_example(
            f"Show {what} priority in effect and its source (add-queue or the configuration).",
            [f"fluxes account {name}" + (" debug" if name == "view-queue" else ""),
             f"fluxes account {name} --json" + (" debug" if name == "view-queue" else "")]))
        if name == "view-queue":
            p.add_argument("queue", metavar="QUEUE")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=account_admin.view_queues)

    p = sub.add_parser("add-project", **help_with_example(
        "Add a project associations may list (--projects) and jobs name\n"
        "(--setattr=system.project=NAME). Instance owner only.",
        ["fluxes account add-project bronze"]))
    p.add_argument("project", metavar="PROJECT")
    p.set_defaults(func=_owner_only(account_admin.project_change), project_change="add-project")

    p = sub.add_parser("delete-project", **help_with_example(
        "Remove a project no association lists. Instance owner only.",
        ["fluxes account delete-project bronze"]))
    p.add_argument("project", metavar="PROJECT")
    p.set_defaults(func=_owner_only(account_admin.project_change), project_change="delete-project")

    p = sub.add_parser("list-projects", **help_with_example(
        "List the projects ('*', every association's, first).",
        ["fluxes account list-projects", "fluxes account list-projects --json"]))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=account_admin.list_projects)

    p = sub.add_parser("view-job-records", **help_with_example(
        "The ended jobs accounting charged (flux-accounting's view-job-records): id, user,\n"
        "bank, queue, start and end times, nodes, cores. TIME: a UNIX time, an ISO 8601\n"
        "date/time, or -FSD (that long ago).",
        ["fluxes account view-job-records --user=alice",
         "fluxes account view-job-records -B physics --after-start-time=-1d --json"]))
    p.add_argument("-u", "--user", default=None, metavar="USERNAME")
    p.add_argument("-B", "--bank", default=None, metavar="BANK")
    p.add_argument("--project", default=None, metavar="PROJECT")
    p.add_argument("-j", "--jobid", type=job_id_arg, default=None, metavar="ID")
    p.add_argument("-a", "--after-start-time", type=_time_arg, default=None, metavar="TIME",
                   help="jobs that started at or after TIME")
    p.add_argument("-b", "--before-end-time", type=_time_arg, default=None, metavar="TIME",
                   help="jobs that ended at or before TIME")
    for short, long, what in (("-d", "--requested-duration", "the time limit asked for"),
                              ("-e", "--actual-duration", "the time run"),
                              ("-D", "--duration-delta", "the time limit asked for less "
                               "the time run")):
        p.add_argument(short, long, type=_duration_test, nargs="+", action="extend",
                       default=[], metavar="EXPR",
                       help=f"jobs whose {what} passes every EXPR: an operator <, <=, =, "
                            ">=, > and seconds ('< 60')")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--csv", action="store_true")
    out.add_argument("-o", "--format", default=None, metavar="FORMAT",
                     help="one line per job in Python's format syntax, with a header: "
                          f"{{{'}, {'.join(_FORMAT_FIELDS)}}}")
    p.set_defaults(func=_view_job_records)

    p = sub.add_parser("share", **help_with_example(
        "The fair-share tree, like sshare: shares, decayed usage (billing units) and\n"
        "the factor, F = 2^(-effective usage / normalized shares).",
        ["fluxes account share", "fluxes account share --json"]))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_share)


def _queue_list(text: str) -> list[str]:
    """argparse type of ``--queues``: comma-separated queue names ('' for none)."""
    return [q.strip() for q in text.split(",") if q.strip()]


def _limit_options(parser: argparse.ArgumentParser) -> None:
    for option, dest, what in _LIMIT_OPTIONS:
        parser.add_argument(option, dest=dest, type=int, default=None, metavar="N",
                            help=f"at most N {what} (-1: no limit; add-user: 5 running and 7 "
                        "active jobs unless given)")


#: The limit options of add-queue and edit-queue (flux-accounting's).
_QUEUE_LIMIT_OPTIONS = (
    ("--min-nodes-per-job", "min_nodes_per_job", "at least N nodes per job"),
    ("--max-nodes-per-job", "max_nodes_per_job", "at most N nodes per job"),
    ("--max-time-per-job", "max_time_per_job", "a time limit of at most FSD per job "
     "(e.g. 30m; a job without one is refused)"),
    ("--max-running-jobs", "max_running_jobs", "at most N jobs of an association "
     "running in the queue at once"))


def _queue_limit_options(parser: argparse.ArgumentParser) -> None:
    for option, dest, what in _QUEUE_LIMIT_OPTIONS:
        parser.add_argument(option, dest=dest, default=None,
                            metavar="FSD" if "time" in dest else "N",
                            help=f"{what} (-1: no limit; default none)")


def queue_limits(args: argparse.Namespace) -> dict[str, int | None]:
    """The queue limits ``args`` gives (name -> value, None: no limit); dies on a bad
    one."""
    from fluxes.formats.fsd import parse_duration

    out: dict[str, int | None] = {}
    for option, dest, _what in _QUEUE_LIMIT_OPTIONS:
        text = getattr(args, dest)
        if text is None:
            continue
        if text.strip() == "-1":
            out[dest] = None
            continue
        try:
            value = parse_duration(text) if "time" in dest else int(text)
        except ValueError:
            die(f"{option}: expected {'a duration (FSD)' if 'time' in dest else 'a count'} "
                f"or -1 (no limit), got {text!r:.40}")
        if value < 0 or value == float("inf"):
            die(f"{option}: expected a finite value >= 0 or -1 (no limit), got {text!r:.40}")
        out[dest] = math.ceil(value)
    return out


def _limits(args: argparse.Namespace) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for option, dest, _what in _LIMIT_OPTIONS:
        value = getattr(args, dest)
        if value is None:
            continue
        if value < -1:
            die(f"{option}: expected a count or -1 (no limit), got {value}")
        out[dest] = None if value == -1 else value
    return out


def _owner_only(handler: Callable[[argparse.Namespace], int]
                ) -> Callable[[argparse.Namespace], int]:
    """``handler``, for the instance owner only (a credentials file's user is refused, and
    Redis's refusal becomes one line)."""

    def run(args: argparse.Namespace) -> int:
        from fluxes.store.errors import NoPermissionError

        inst = instance(args)
        if inst.user is not None and inst.user != inst.owner()[0]:
            die("only the instance owner can change accounting")
        try:
            return handler(args)
        except NoPermissionError:
            die("only the instance owner can change accounting")

    run.__doc__ = handler.__doc__
    return run


def _append(args: argparse.Namespace, make: Callable[[Accounts], AccountEvent]) -> Accounts:
    from fluxes.store.accounting import append_admin

    inst = instance(args)
    _event, after = append_admin(inst.redis, inst.keys, make)
    return after


# ---------------------------------------------------------------- changes


def _add_bank(args: argparse.Namespace) -> int:
    """Append add-bank."""
    from fluxes.domain.accounting.banks import BankAdd

    _append(args, lambda _a: BankAdd(timestamp=time.time(), bank=args.bank,
                                     parent=args.parent_bank, shares=args.shares,
                                     limits=_limits(args)))
    return 0


def _edit_bank(args: argparse.Namespace) -> int:
    """Append edit-bank."""
    from fluxes.domain.accounting.banks import BankEdit

    limits = _limits(args)
    if args.shares is None and args.parent_bank is None and not limits:
        die("edit-bank: nothing to change (give --shares, --parent-bank or a limit)")
    _append(args, lambda _a: BankEdit(timestamp=time.time(), bank=args.bank,
                                      shares=args.shares, parent=args.parent_bank,
                                      limits=limits))
    return 0


def _delete_bank(args: argparse.Namespace) -> int:
    """Append delete-bank."""
    from fluxes.domain.accounting.banks import BankDelete

    _append(args, lambda _a: BankDelete(timestamp=time.time(), bank=args.bank))
    return 0


def user_id(inst: Instance, name: str) -> int | None:
    """``name``'s uid: from ``fluxes admin adduser``'s users, the owner, or this machine."""
    import pwd

    from fluxes.store.users import UserTable

    found = UserTable(inst.redis, inst.keys).uid(name)
    if found is not None:
        return found
    owner, owner_uid = inst.owner()
    if name == owner:
        return owner_uid
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _add_user(args: argparse.Namespace) -> int:
    """Append add-user (the uid found when not given)."""
    from fluxes.domain.accounting.banks import DEFAULT_USER_LIMITS, UserAdd, check_user_name

    check_user_name(args.username)
    userid = args.userid
    if userid is None:
        userid = user_id(instance(args), args.username)
        if userid is None:
            die(f"add-user: user {args.username} is not known here: give --userid")
    # flux-accounting's defaults, unless given (-1: no limit)
    limits = {**DEFAULT_USER_LIMITS, **_limits(args)}
    _append(args, lambda _a: UserAdd(timestamp=time.time(), username=args.username,
                                     userid=userid, bank=args.bank, shares=args.shares,
                                     limits=limits, queues=args.queues,
                                     projects=args.projects))
    return 0


def _edit_user(args: argparse.Namespace) -> int:
    """Append edit-user."""
    from fluxes.domain.accounting.banks import UserEdit

    limits = _limits(args)
    if args.userid is None and args.shares is None and args.default_bank is None \
            and args.queues is None and args.projects is None and not limits:
        die("edit-user: nothing to change (give --userid, --shares, --default-bank, "
            "--queues, --projects or a limit)")
    _append(args, lambda _a: UserEdit(timestamp=time.time(), username=args.username,
                                      bank=args.bank, userid=args.userid, shares=args.shares,
                                      default_bank=args.default_bank, limits=limits,
                                      queues=args.queues, projects=args.projects))
    return 0


def _delete_user(args: argparse.Namespace) -> int:
    """Append delete-user."""
    from fluxes.domain.accounting.banks import UserDelete

    _append(args, lambda _a: UserDelete(timestamp=time.time(), username=args.username,
                                        bank=args.bank))
    return 0


# ---------------------------------------------------------------- views


def _accounts(args: argparse.Namespace) -> Accounts:
    from fluxes.store.accounting import load_accounts

    inst = instance(args)
    return load_accounts(inst.redis, inst.keys)


def _limit_text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _assoc_obj(accounts: Accounts, assoc: Association) -> dict[str, Any]:
    return {"username": assoc.username, "userid": assoc.userid, "bank": assoc.bank,
            "default_bank": accounts.default_banks.get(assoc.username), "active": assoc.active,
            "shares": assoc.shares, "limits": dict(assoc.limits.items()),
            "queues": list(assoc.queues), "projects": [*assoc.projects, "*"],
            "default_project": assoc.default_project}


def _bank_obj(bank: Bank) -> dict[str, Any]:
    return {"bank": bank.name, "parent_bank": bank.parent, "active": bank.active,
            "shares": bank.shares, "limits": dict(bank.limits.items())}


_LIMIT_HEADERS = ("MAX-RUN", "MAX-ACTIVE", "MAX-NODES", "MAX-CORES")


def _assoc_rows(accounts: Accounts, assocs: Iterable[Association]) -> list[list[str]]:
    rows = []
    for a in assocs:
        default = "*" if accounts.default_banks.get(a.username) == a.bank else ""
        rows.append([a.username, str(a.userid), a.bank + default, str(a.shares),
                     *(_limit_text(v) for _n, v in a.limits.items()),
                     *([] if a.active else ["(inactive)"])])
    return rows


def _print_assocs(accounts: Accounts, assocs: list[Association]) -> None:
    from fluxes.cli.display import table

    headers = ("USERNAME", "UID", "BANK", "SHARES", *_LIMIT_HEADERS, "")
    rows = [r + [""] * (len(headers) - len(r)) for r in _assoc_rows(accounts, assocs)]
    for line in table(headers, rows, right=frozenset({1, 3, 4, 5, 6, 7})):
        print(line)
    if assocs:
        print("(* default bank)")


def _view_user(args: argparse.Namespace) -> int:
    """A user's associations."""
    accounts = _accounts(args)
    mine = sorted((a for a in accounts.associations.values() if a.username == args.username),
                  key=lambda a: a.bank)
    if not mine:
        die(f"no user {args.username}")
    if args.json:
        print_json({"username": args.username,
                    "default_bank": accounts.default_banks.get(args.username),
                    "associations": [_assoc_obj(accounts, a) for a in mine]})
        return 0
    _print_assocs(accounts, mine)
    return 0


def _view_bank(args: argparse.Namespace) -> int:
    """A bank, its tree, its users."""
    from fluxes.cli.display import table

    accounts = _accounts(args)
    bank = accounts.bank(args.bank)
    tree = accounts.subtree(bank.name) if args.tree else [bank]
    users = accounts.members(bank.name) if args.users else []
    if args.json:
        out: dict[str, Any] = _bank_obj(bank)
        if args.tree:
            out["tree"] = [{**_bank_obj(b), "depth": len(accounts.path(b.name))
                            - len(accounts.path(bank.name))} for b in tree]
        if args.users:
            out["users"] = [_assoc_obj(accounts, a) for a in users]
        print_json(out)
        return 0
    base = len(accounts.path(bank.name))
    rows = [["  " * (len(accounts.path(b.name)) - base) + b.name, b.parent or "",
             str(b.shares), *(_limit_text(v) for _n, v in b.limits.items())] for b in tree]
    for line in table(("BANK", "PARENT", "SHARES", *_LIMIT_HEADERS), rows,
                      right=frozenset({2, 3, 4, 5, 6})):
        print(line)
    if args.users:
        print()
        _print_assocs(accounts, users)
    return 0


def _list_banks(args: argparse.Namespace) -> int:
    """Every bank, root first then depth first."""
    from fluxes.cli.display import table

    accounts = _accounts(args)
    banks = accounts.subtree(accounts.root.name) if accounts.root is not None else []
    if args.inactive:
        banks += sorted((b for b in accounts.banks.values() if not b.active),
                        key=lambda b: b.name)
    if args.json:
        print_json({"banks": [_bank_obj(b) for b in banks]})
        return 0
    rows = [[b.name, b.parent or "", str(b.shares),
             *(_limit_text(v) for _n, v in b.limits.items()),
             "" if b.active else "(inactive)"] for b in banks]
    for line in table(("BANK", "PARENT", "SHARES", *_LIMIT_HEADERS, ""), rows,
                      right=frozenset({2, 3, 4, 5, 6})):
        print(line)
    return 0


def _list_users(args: argparse.Namespace) -> int:
    """Every association."""

    accounts = _accounts(args)
    assocs = sorted((a for a in accounts.associations.values() if a.active or args.inactive),
                    key=lambda a: (a.username, a.bank))
    if args.json:
        print_json({"users": [_assoc_obj(accounts, a) for a in assocs]})
        return 0
    _print_assocs(accounts, assocs)
    return 0


# ---------------------------------------------------------------- usage and share


def _usage(args: argparse.Namespace) -> int:
    """Raw usage over a period."""
    from fluxes.cli.display import parse_time, table

    now = time.time()
    since = parse_time(args.since) if args.since else 0.0
    until = parse_time(args.until) if args.until else now
    if until < since:
        die("--until is before --since")
    report = usage_report(instance(args), since, until, now)
    if args.json:
        print_json(report)
        return 0
    fields = ("jobs", "core_seconds", "gpu_seconds", "node_seconds")
    if args.by_project:
        return _project_usage(report["projects"], fields, args.csv)
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(("user", "userid", "bank", *fields))
        for row in report["usage"]:
            writer.writerow([row["user"], row["userid"], row["bank"] or "",
                             *(_num(row[f]) for f in fields)])
        return 0
    rows = [[row["user"], row["bank"] or "-", *(_num(row[f]) for f in fields)]
            for row in report["usage"]]
    for line in table(("USER", "BANK", "JOBS", "CORE-SECONDS", "GPU-SECONDS", "NODE-SECONDS"),
                      rows, right=frozenset({2, 3, 4, 5})):
        print(line)
    return 0


def _project_usage(projects: list[dict[str, Any]], fields: tuple[str, ...], as_csv: bool
                   ) -> int:
    """``usage --by-project``: a row per project (``-``: from before projects)."""
    from fluxes.cli.display import table

    if as_csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(("project", *fields))
        for row in projects:
            writer.writerow([row["project"] or "", *(_num(row[f]) for f in fields)])
        return 0
    for line in table(("PROJECT", "JOBS", "CORE-SECONDS", "GPU-SECONDS", "NODE-SECONDS"),
                      [[row["project"] or "-", *(_num(row[f]) for f in fields)]
                       for row in projects], right=frozenset({1, 2, 3, 4})):
        print(line)
    return 0


def _time_arg(text: str) -> float:
    """argparse type: a UNIX time, an ISO 8601 date/time or -FSD (a usage error if not)."""
    from fluxes.cli.display import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_RECORD_FIELDS = ("jobid", "username", "userid", "bank", "queue", "t_run", "t_inactive",
                  "nnodes", "ncores", "ngpus", "project")
#: the fields ``view-job-records -o`` knows: flux-accounting's and fluxes's
_FORMAT_FIELDS = ("jobid", "username", "userid", "t_submit", "t_run", "t_inactive", "nnodes",
                  "project", "bank", "queue", "ncores", "ngpus", "requested_duration",
                  "actual_duration", "duration_delta")


def _duration_test(text: str) -> Any:
    from fluxes.domain.accounting.records import DurationTest

    try:
        return DurationTest.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _format_lines(fmt: str, rows: list[dict[str, Any]]) -> list[str]:
    """``-o FORMAT``: a header (each field's name in the field's width and alignment),
    then a line per row; UsageError naming an unknown field or a bad format."""
    import re
    import string

    header = []
    try:
        for literal, name, spec, _conv in string.Formatter().parse(fmt):
            header.append(literal)
            if name is None:
                continue
            if name not in _FORMAT_FIELDS:
                raise UsageError(f"-o: unknown field {name!r} (fields: "
                                 f"{', '.join(_FORMAT_FIELDS)})")
            # a name is text: keep the field's fill, alignment and width, not its type
            shape = re.match(r"(?:(.?)([<>^=]))?[+\- ]?#?0?(\d*)", spec or "")
            assert shape is not None  # every part of that pattern may be empty
            align = "<" if shape[2] == "=" else (shape[2] or "")
            if not align and spec and spec[-1] in "bcdeEfFgGnoxX%":
                align = ">"  # a number's default alignment
            header.append(format(name, f"{(shape[1] or '') if align else ''}{align}"
                                       f"{shape[3]}"))
        return ["".join(header), *(fmt.format(**row) for row in rows)]
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise UsageError(f"-o: bad format {fmt!r:.60}: {exc}") from None


def _view_job_records(args: argparse.Namespace) -> int:
    """The ended allocations, filtered."""
    from fluxes.cli.display import fmt_id, table
    from fluxes.domain.accounting.records import job_records
    from fluxes.store.accounting import UsageStore, load_accounts

    after, before = args.after_start_time, args.before_end_time
    inst = instance(args)
    accounts = load_accounts(inst.redis, inst.keys)
    userid = None
    if args.user is not None:
        # associations name users first, as everywhere in accounting
        known = [a.userid for a in accounts.associations.values() if a.username == args.user]
        userid = known[0] if known else user_id(inst, args.user)
        if userid is None:
            die(f"no user {args.user}")

    # an allocation that started at or after TIME also ended after it: fewer to read
    charges = UsageStore(inst.redis, inst.keys).charges(after if after is not None else 0.0)
    found = job_records(charges, userid=userid, bank=args.bank, project=args.project,
                        after_start=after, before_end=before,
                        jobid=None if args.jobid is None else int(args.jobid),
                        requested=args.requested_duration, actual=args.actual_duration,
                        delta=args.duration_delta)
    names = user_names(inst, accounts, {c.userid for c in found})
    rows: list[dict[str, Any]] = [
        {"jobid": c.jobid, "username": names[c.userid], "userid": c.userid,
             "bank": c.bank or None, "queue": c.queue or None, "t_run": c.t_alloc,
             "t_inactive": c.t_free, "nnodes": c.nnodes, "ncores": c.ncores,
             "ngpus": c.ngpus, "project": c.project or None} for c in found]
    if args.format is not None:
        for line in _format_lines(args.format, [
                {**row, "jobid": fmt_id(c.jobid), "project": c.project or "",
                 "bank": c.bank or "", "queue": c.queue or "", "t_submit": c.t_submit,
                 "requested_duration": c.duration, "actual_duration": c.actual_duration,
                 "duration_delta": c.duration_delta} for row, c in zip(rows, found,
                                                                       strict=True)]):
            print(line)
        return 0
    if args.json:
        print_json({"jobs": rows})
        return 0
    if args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(_RECORD_FIELDS)
        for row in rows:
            writer.writerow(["" if row[f] is None else row[f] for f in _RECORD_FIELDS])
        return 0
    text = [[fmt_id(c.jobid), names[c.userid], str(c.userid), c.bank or "-",
             c.queue or "-", f"{c.t_alloc:.2f}", f"{c.t_free:.2f}", str(c.nnodes),
             str(c.ncores)] for c in found]
    for line in table(("JOBID", "USERNAME", "USERID", "BANK", "QUEUE", "T_RUN",
                       "T_INACTIVE", "NNODES", "NCORES"), text,
                      right=frozenset({2, 5, 6, 7, 8})):
        print(line)
    return 0


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def _share(args: argparse.Namespace) -> int:
    """The fair-share tree."""
    from fluxes.cli.display import table
    from fluxes.store.accounting import fair_share_now

    inst = instance(args)
    share = fair_share_now(inst.redis, inst.keys, inst.config(), time.time())
    if args.json:
        print_json({"total_usage": share.total_usage,
                    "rows": [row.to_dict() for row in share.rows]})
        return 0
    if not share.enabled:
        print("no banks yet: 'fluxes account add-bank ROOT SHARES' adds the root bank")
        return 0
    rows = [["  " * row.depth + (row.name if row.kind == "bank" else ""),
             row.name if row.kind == "user" else "", str(row.raw_shares),
             f"{row.norm_shares:.6f}", f"{row.raw_usage:.0f}", f"{row.norm_usage:.6f}",
             f"{row.effective_usage:.6f}", f"{row.factor:.6f}"] for row in share.rows]
    for line in table(("BANK", "USER", "RAW-SHARES", "NORM-SHARES", "RAW-USAGE",
                       "NORM-USAGE", "EFFECTV-USAGE", "FAIRSHARE"), rows,
                      right=frozenset({2, 3, 4, 5, 6, 7})):
        print(line)
    return 0


# ---------------------------------------------------------------- fluxes job priority


def register_job_priority(sub: Any) -> None:
    """Add ``fluxes job priority`` to the ``job`` command group."""
    from fluxes.cli.util import job_id_arg

    p = sub.add_parser("priority", **help_with_example(
        "Show why a job has its priority: each multi-factor factor (fair share, age,\n"
        "job size, queue, urgency), its weight from [accounting.weights] and its part.",
        ["fluxes job priority ƒ2t6V2H", "fluxes job priority --json ƒ2t6V2H"]))
    p.add_argument("jobid", type=job_id_arg, metavar="ID")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_job_priority)


def _job_priority(args: argparse.Namespace) -> int:
    """The job's priority in effect, then the multi-factor breakdown computed now.

    Two numbers, named apart: the priority the job has (its eventlog's last
    ``priority`` event, which the job list folds and ``jobs -o {priority}``
    shows, and the scheduler orders by) and the one the plugin would give it
    now; they differ until the job manager's next reprioritization
    (``[accounting] reprioritize-interval``) posts the new one.
    """
    from fluxes.cli.display import fmt_id, shown_id, table
    from fluxes.domain.accounting.priority import (
        FACTORS,
        MultiFactorPriority,
        facts_from_info,
    )
    from fluxes.domain.jm.priority import PriorityInput
    from fluxes.service.jobs import caught_up
    from fluxes.store.accounting import fair_share_now

    inst = instance(args)
    # read-your-writes: the record has every priority event posted before this call;
    # a plain int: redis-py refuses the command line's int subclass
    [summary] = caught_up(inst).get_many([int(args.jobid)])
    if summary is None:
        die(f"job {shown_id(args.jobid)} not found")
    config = inst.config()
    now = time.time()
    cores, nodes = _instance_size(inst)
    plugin = MultiFactorPriority(config.accounting.weights,
                                 fair_share_now(inst.redis, inst.keys, config, now),
                                 clock=lambda: now, total_cores=cores, total_nodes=nodes)
    job, info = summary.job, summary.info
    facts = facts_from_info(info)
    queue = info.get("queue")
    shown = plugin.breakdown(PriorityInput(job.id, job.urgency, job.userid, job.t_submit,
                                           queue if isinstance(queue, str) else None), facts)
    if args.json:
        print_json({**shown.to_dict(), "priority": job.priority, "computed_now": shown.priority,
                    "plugin": config.accounting.priority_plugin,
                    "job_priority": job.priority})
        return 0
    held = "none yet (not past its dependencies)" if job.priority is None else str(job.priority)
    print(f"job {fmt_id(job.id)}: priority {held} (its last priority event; "
          "the scheduler orders by it)")
    print(f"computed now: multi-factor priority {shown.priority}"
          + (f" (bank {shown.bank})" if shown.bank else " (default bank)"))
    rows = [[name, f"{shown.factors[name]:.6f}", str(shown.weights[name]),
             f"{shown.parts[name]:.1f}"] for name in FACTORS]
    for line in table(("FACTOR", "VALUE", "WEIGHT", "PRIORITY"), rows,
                      right=frozenset({1, 2, 3})):
        print(line)
    if config.accounting.priority_plugin != "multifactor":
        print("note: the instance uses the default priority plugin ([accounting] "
              "priority-plugin); its priority is the urgency")
    elif job.priority is not None and job.priority != shown.priority:
        print("note: the job manager posts the computed priority at its next "
              "reprioritization ([accounting] reprioritize-interval)")
    return 0


def _instance_size(inst: Instance) -> tuple[int, int]:
    """Cores and nodes of the instance's inventory ((0, 0) when there is none)."""
    from fluxes.errors import FluxesError
    from fluxes.store.resources import load_inventory

    try:
        inventory = load_inventory(inst)
    except (FluxesError, ValueError):
        return 0, 0
    return inventory.ncores, len(inventory)
