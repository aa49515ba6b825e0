"""``fluxes admin``: set up an instance on your own Redis, and manage its users.

``init`` records an instance on a Redis that ``fluxes start`` did not bring
up (a deployment's): the configuration, checked first so that a typo never
reaches the workers, the number of partitions and the owner.

``adduser`` gives a user a Redis ACL user that may only send requests on its
own submit stream, read its own replies, read what is public of every job
and the jobspecs and output of its own jobs only (rules from
:mod:`fluxes.store.security`), records the user for the ingest (and for a
root exec worker, which runs the user's jobs as that uid), and writes a
credentials file (mode 0600, owned by the user) holding the instance URI with
the user's name and password. Only the instance owner (full Redis access)
can run these commands.

``lost-jobs`` lists the acknowledged jobs a Redis crash lost
(:mod:`fluxes.cli.cmd_lostjobs`).

``rebuild-joblist`` refolds the job-list read model from the journals
(:mod:`fluxes.store.joblist_rebuild`), taking the partitions over from the running
job-list workers for the time it takes.
"""

from __future__ import annotations

import argparse
import pwd
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import add_subcommands, die, help_with_example, instance, print_json
from fluxes.store.users import UserTable

if TYPE_CHECKING:
    from fluxes.store.instance import Instance


def register(subparsers: Any) -> None:
    """Add the ``admin`` command group."""
    parser = subparsers.add_parser("admin", **help_with_example(
        "Set up an instance, manage the users of a multi-user instance, rebuild the job\n"
        "list (instance owner only).",
        ["fluxes admin adduser alice", "fluxes admin adduser bob --uid 5002 "
         "--credentials-dir /srv/fluxes/creds", "fluxes admin users",
         "fluxes admin deluser bob", "fluxes admin rebuild-joblist",
         "fluxes admin lost-jobs"]))
    sub = add_subcommands(parser, "admin commands")

    ip = sub.add_parser("init", **help_with_example(
        "Record an instance on your own Redis before its workers start: check the\n"
        "configuration (the same checks as 'fluxes start --config'), then store it with\n"
        "the number of partitions and the owner. Run it again to replace the\n"
        "configuration; restart the workers to pick it up. The partitions can never\n"
        "change once jobs exist, so a different number is refused.",
        ["fluxes admin init --uri redis://10.0.0.5:6379?ns=fx --config /etc/fluxes/instance.toml",
         "fluxes admin init --config instance.toml --partitions 4 --owner fluxes --owner-uid 990"]))
    ip.add_argument("--uri", default=argparse.SUPPRESS, metavar="URI",
                    help="the Redis to record the instance in (default $FLUXES_URI)")
    ip.add_argument("--config", required=True, metavar="FILE",
                    help="instance configuration (TOML), with its [[resource.config]] entries")
    ip.add_argument("--partitions", type=int, default=1, metavar="N",
                    help="job-manager partitions (default 1)")
    ip.add_argument("--owner", default=None, metavar="NAME",
                    help="the instance owner (default: you)")
    ip.add_argument("--owner-uid", type=int, default=None, metavar="UID",
                    help="the owner's uid (default: NAME's uid on this machine)")
    ip.add_argument("--json", action="store_true")
    ip.set_defaults(func=_init)

    ap = sub.add_parser("adduser", **help_with_example(
        "Create (or renew the password of) a user: a Redis ACL user allowed only its own\n"
        "requests and replies, read access to every job's public data and to its own\n"
        "jobs' jobspecs and output, and a credentials file. UID is the UNIX user its\n"
        "jobs run as under a root exec worker. Run it again after an upgrade to renew\n"
        "the user's ACL rules.\n"
        "The file goes to ~NAME/.config/fluxes/credentials.json (where the client looks)\n"
        "when NAME is a local user, else to DIR/NAME.json with --credentials-dir.",
        ["fluxes admin adduser alice",
         "fluxes admin adduser bob --uid 5002 --credentials-dir /srv/fluxes/creds"]))
    ap.add_argument("name", metavar="NAME")
    ap.add_argument("--uid", type=int, default=None, metavar="UID",
                    help="the user's uid (default: NAME's uid on this machine)")
    ap.add_argument("--credentials-dir", metavar="DIR", default=None,
                    help="write DIR/NAME.json instead of into NAME's home")
    ap.set_defaults(func=_owner_only(_adduser))

    dp = sub.add_parser("deluser", **help_with_example(
        "Remove a user: its Redis ACL user (and connections) and its entry in the\n"
        "users hash. Its jobs and its credentials file stay.",
        ["fluxes admin deluser bob"]))
    dp.add_argument("name", metavar="NAME")
    dp.set_defaults(func=_owner_only(_deluser))

    up = sub.add_parser("users", **help_with_example(
        "List the users the ingest accepts requests from, with their uid and whether\n"
        "they have a Redis ACL user.",
        ["fluxes admin users", "fluxes admin users --json"]))
    up.add_argument("--json", action="store_true")
    up.set_defaults(func=_owner_only(_users))

    rp = sub.add_parser("rebuild-joblist", **help_with_example(
        "Rebuild the job-list read model (what 'fluxes jobs' shows) from the journals.\n"
        "For each partition it takes the job-list lease from the worker folding it (that\n"
        "worker's writes are refused from then on and it stands by), empties the read\n"
        "model, refolds the whole journal and hands the lease back; the workers then go\n"
        "on from there. 'fluxes jobs' shows a partial list while it runs.",
        ["fluxes admin rebuild-joblist", "fluxes admin rebuild-joblist --json"]))
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(func=_owner_only(_rebuild_joblist))

    ra = sub.add_parser("rebuild-accounting", **help_with_example(
        "Rebuild the usage read model (what fair share and 'fluxes account usage' read)\n"
        "from the journals, as rebuild-joblist does for the job list.",
        ["fluxes admin rebuild-accounting", "fluxes admin rebuild-accounting --json"]))
    ra.add_argument("--json", action="store_true")
    ra.set_defaults(func=_owner_only(_rebuild_accounting))

    from fluxes.cli import cmd_lostjobs

    cmd_lostjobs.register(sub, _owner_only)


def _init(args: argparse.Namespace) -> int:
    """Check a configuration and record the instance in Redis."""
    from fluxes.config import InstanceConfig
    from fluxes.domain.graph.table import recorded_table
    from fluxes.domain.sched.inventory import Inventory
    from fluxes.errors import ConfigError
    from fluxes.store.connection import connect
    from fluxes.store.errors import NoPermissionError, StoreConnectionError
    from fluxes.store.instance import InstanceURI, current_user, record_instance
    from fluxes.store.security import apply_credentials, strip_password

    try:
        text = Path(args.config).read_bytes()
    except OSError as exc:
        die(f"cannot read {args.config}: {exc.strerror}")
    config = InstanceConfig.from_toml(text)
    if not config.resource:
        die(f"{args.config}: no [[resource.config]] entries: the scheduler would have "
            "nothing to allocate")
    try:
        resources = recorded_table(config.resource)
        nranks = len(Inventory.from_table(resources))
    except ConfigError as exc:
        die(f"{args.config}: {exc}")
    if not 1 <= args.partitions <= 1024:
        die("--partitions: expected 1..1024")
    owner = current_user()
    if args.owner is not None:
        uid = args.owner_uid
        if uid is None:
            found = _local_user(args.owner)
            if found is None:
                die(f"--owner {args.owner}: no such local user; give --owner-uid")
            uid = found.pw_uid
        owner = (args.owner, uid)
    elif args.owner_uid is not None:
        die("--owner-uid needs --owner")
    text_uri, _user = apply_credentials(getattr(args, "uri", None))
    uri = InstanceURI.from_env(text_uri)
    client = connect(uri.redis_url, client_name="fluxes-admin-init")
    try:
        new = record_instance(client, uri.ns, args.partitions, config,
                              resources, owner)
    except NoPermissionError:
        die("recording an instance needs full Redis access")
    except StoreConnectionError as exc:
        die(f"cannot reach Redis: {exc}")
    if args.json:
        print_json({"uri": strip_password(str(uri)), "new": new, "partitions": args.partitions,
                    "owner": owner[0], "owner_uid": owner[1], "ranks": nranks})
    else:
        what = "recorded" if new else "updated the configuration of"
        print(f"{what} instance {uri.ns!r}: {args.partitions} partition(s), {nranks} "
              f"rank(s), owner {owner[0]} ({owner[1]})")
    return 0


def _local_user(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _check_name(inst: Instance, name: str) -> str:
    from fluxes.store.security import check_user_name

    check_user_name(name)
    owner, _uid = inst.owner()
    if name == owner:
        die(f"{name} is the instance owner, who has full access already")
    return name


def credentials_target(name: str, credentials_dir: str | None) -> Path:
    """Where ``adduser`` writes ``name``'s credentials file."""
    from fluxes.store.security import DEFAULT_CREDENTIALS

    if credentials_dir is not None:
        return Path(credentials_dir) / f"{name}.json"
    local = _local_user(name)
    if local is None:
        die(f"{name} is not a user on this machine: give --credentials-dir DIR "
            "(and --uid UID)")
    return Path(local.pw_dir) / DEFAULT_CREDENTIALS


def _adduser(args: argparse.Namespace) -> int:
    """Create or renew a user: ACL user, users-hash entry, credentials file."""
    from fluxes.store import acl
    from fluxes.store.security import (
        Credentials,
        check_uid,
        generate_password,
        strip_password,
        user_acl_rules,
        with_userinfo,
        write_credentials,
    )

    inst = instance(args)
    name = _check_name(inst, args.name)
    local = _local_user(name)
    if args.uid is not None:
        uid = check_uid(args.uid)
    elif local is not None:
        uid = local.pw_uid
    else:
        die(f"{name} is not a user on this machine: give --uid UID")
    if uid == 0:
        # a root exec worker runs each job as its owner: never as root for a user
        die(f"{name}: uid 0 (root) cannot be a fluxes user, whose jobs would run as root")
    path = credentials_target(name, args.credentials_dir)
    password = generate_password()
    rules = user_acl_rules(inst.keys, name, uid, password)
    uri = with_userinfo(strip_password(str(inst.uri)), name, password)
    gid = local.pw_gid if local is not None and local.pw_uid == uid else None
    try:
        write_credentials(path, Credentials(uri, name), uid, gid)
    except PermissionError:
        die(f"cannot write {path} (permission denied): run as root, or use --credentials-dir")
    try:
        acl.set_user(inst.redis, name, rules)
        UserTable(inst.redis, inst.keys).add(name, uid)
    except BaseException:
        path.unlink(missing_ok=True)  # its password works nowhere
        raise
    _warn_if_open(inst)
    _persist(inst)
    print(f"user {name} (uid {uid}) can use the instance; credentials in {path}")
    return 0


def _deluser(args: argparse.Namespace) -> int:
    """Remove the ACL user and the users-hash entry."""
    from fluxes.store import acl

    inst = instance(args)
    name = _check_name(inst, args.name)
    had_acl = acl.delete_user(inst.redis, name)
    had_entry = UserTable(inst.redis, inst.keys).remove(name)
    if not had_acl and not had_entry:
        die(f"no user {name!r}")
    if had_acl:
        _persist(inst)
    print(f"user {name} removed")
    return 0


def _users(args: argparse.Namespace) -> int:
    """List users: name, uid, ACL user or not."""
    from fluxes.store import acl

    inst = instance(args)
    entries = UserTable(inst.redis, inst.keys).entries()
    acl_users = acl.users(inst.redis)
    owner, owner_uid = inst.owner()
    rows = [{"name": owner, "uid": owner_uid, "acl": False, "owner": True}]
    rows += [{"name": n, "uid": entries[n], "acl": n in acl_users, "owner": False}
             for n in sorted(entries) if n != owner]
    if args.json:
        print_json({"users": rows})
        return 0
    print(f"{'NAME':<16} {'UID':>8} ACL")
    for row in rows:
        acl_text = "owner" if row["owner"] else "yes" if row["acl"] else "no"
        print(f"{row['name']:<16} {row['uid']:>8} {acl_text}")
    return 0


def _rebuild_joblist(args: argparse.Namespace) -> int:
    """Refold every partition's read model from its journal."""
    from fluxes.store.joblist_rebuild import rebuild

    inst = instance(args)
    done = rebuild(inst.redis, inst.keys)
    if args.json:
        print_json({"partitions": [vars(r) for r in done]})
        return 0
    for r in done:
        print(f"partition {r.partition}: folded {r.entries} journal entries into {r.jobs} "
              f"jobs, up to {r.position}")
        if r.skipped:
            print(f"partition {r.partition}: passed over {r.skipped} entries that cannot be "
                  "folded (see 'fluxes eventlog dead-letters')")
        if r.took_over_from:
            print(f"partition {r.partition}: took the job list over from {r.took_over_from}; "
                  "a running job-list worker takes it back within a second")
    return 0


def _rebuild_accounting(args: argparse.Namespace) -> int:
    """Refold every partition's usage model from its journal."""
    from fluxes.store.accounting import rebuild

    inst = instance(args)
    done = rebuild(inst.redis, inst.keys, inst.config().accounting.half_life)
    if args.json:
        print_json({"partitions": [vars(r) for r in done]})
        return 0
    for r in done:
        print(f"partition {r.partition}: folded {r.entries} journal entries, usage of "
              f"{r.associations} associations, up to {r.position}")
        if r.skipped:
            print(f"partition {r.partition}: passed over {r.skipped} entries that cannot be "
                  "folded")
        if r.took_over_from:
            print(f"partition {r.partition}: took accounting over from {r.took_over_from}")
    return 0


def _owner_only(handler: Callable[[argparse.Namespace], int]
                ) -> Callable[[argparse.Namespace], int]:
    """``handler``, with Redis's refusal turned into a one-line explanation."""

    def run(args: argparse.Namespace) -> int:
        from fluxes.store.errors import NoPermissionError

        try:
            return handler(args)
        except NoPermissionError:
            die("only the instance owner (full Redis access) can do this")

    run.__doc__ = handler.__doc__
    return run


def _persist(inst: Instance) -> None:
    from fluxes.store import acl

    warning = acl.persist(inst.redis)
    if warning:
        print(f"fluxes: warning: {warning}", file=sys.stderr)


def _warn_if_open(inst: Instance) -> None:
    """Say so when users are pointless: anyone can connect as the all-powerful default user."""
    from fluxes.store import acl

    if acl.default_user_is_open(inst.redis):
        print("fluxes: warning: Redis's default user needs no password, so anyone who can "
              "connect has full access; start the instance with --require-auth or give "
              "the default user a password", file=sys.stderr)
