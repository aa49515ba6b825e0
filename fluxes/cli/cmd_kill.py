"""``fluxes job kill`` and ``fluxes job killall``: signal running jobs' tasks, as flux's."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from fluxes.cli.util import die, help_with_example, instance, job_id_arg


def register(sub: Any) -> None:
    """Add ``job kill`` and ``job killall`` under ``fluxes job``."""
    kp = sub.add_parser("kill", **help_with_example(
        "Send a signal to the tasks of running jobs (default SIGTERM); the jobs are not\n"
        "ended by it (a task may trap it). Your jobs, or any as the instance owner.",
        ["fluxes job kill ƒ2t6V2H", "fluxes job kill -s USR1 ƒ2t6V2H ƒ2t6V2J"]))
    kp.add_argument("-s", "--signal", type=parse_signal, default=signal.SIGTERM,
                    metavar="SIG", help="signal name or number (default SIGTERM)")
    kp.add_argument("ids", nargs="+", type=job_id_arg, metavar="ID")
    kp.set_defaults(func=_kill)

    ap = sub.add_parser("killall", **help_with_example(
        "Send a signal to the tasks of all your running jobs. Without -f it only says\n"
        "how many jobs would get it; --user=all (instance owner) means every user's.",
        ["fluxes job killall", "fluxes job killall -f -s USR1",
         "fluxes job killall -f --user=all"]))
    ap.add_argument("-s", "--signal", type=parse_signal, default=signal.SIGTERM,
                    metavar="SIG", help="signal name or number (default SIGTERM)")
    ap.add_argument("-u", "--user", metavar="USER",
                    help="this user's jobs (name or uid); 'all' for everyone's")
    ap.add_argument("-f", "--force", action="store_true", help="confirm the command")
    ap.set_defaults(func=_killall)


def parse_signal(text: str) -> int:
    """A signal number from a name (``USR1``, ``SIGUSR1``, any case) or a number."""
    word = text.strip()
    if word.isdigit():
        number = int(word)
        if not 0 < number < signal.NSIG:
            raise argparse.ArgumentTypeError(f"signal {number} is out of range "
                                             f"(1-{signal.NSIG - 1})")
        return number
    name = word.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        found = signal.Signals[name]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown signal {text!r}") from None
    return int(found)


def _kill(args: argparse.Namespace) -> int:
    from fluxes.cli.cmd_submit import as_typed
    from fluxes.store.client import Client

    answer = Client(instance(args)).signal([int(i) for i in args.ids], args.signal)
    for line in answer["errors"]:
        print(f"fluxes: {as_typed(line, args.ids)}", file=sys.stderr)
    return 1 if answer["errors"] else 0


def _killall(args: argparse.Namespace) -> int:
    from fluxes.service.jobs import user_id
    from fluxes.store.client import Client

    inst = instance(args)
    everyone = args.user == "all"
    uid = user_id(inst, args.user) if args.user is not None and not everyone else None
    answer = Client(inst).killall(args.signal, user=uid, all_users=everyone,
                                  dry_run=not args.force)
    if answer["errors"]:
        die(str(answer["errors"][0]))
    count = len(answer["ok"])
    if args.force:
        print(f"fluxes: signaled {count} job{'s' if count != 1 else ''}", file=sys.stderr)
    else:
        print(f"fluxes: command matched {count} job{'s' if count != 1 else ''} "
              "(-f to confirm)", file=sys.stderr)
    return 0
